"""Check-loop leadership: exactly one txcheck replica runs the check loop of a store.

    <prefix>/txcheck/leaders/<store_id> -> instance id of the leader

Each replica holds its own election lease (``--leader_ttl_ms``) and, every third of the
TTL, refreshes it and tries to create the key of every live store that has no leader
(an etcd transaction: create only if absent, under its lease). The holder runs the loop
while its lease lives; when it stops cleanly it revokes the lease (immediate handover);
when it dies the key expires after the TTL and another replica takes it. A replica that
cannot refresh its lease stops its loops at once, before the key can expire.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from txmq_runtime.etcd import RETRYABLE

log = logging.getLogger("txmq.txcheck.leader")


def leaders_prefix(etcd_prefix: str) -> str:
    return f"{etcd_prefix}/txcheck/leaders/"


class LeaderElector:
    def __init__(
        self,
        etcd,
        *,
        etcd_prefix: str,
        instance_id: str,
        ttl_ms: int,
        stores: Callable[[], list[str]],
        on_elected: Callable[[str], Awaitable[None]],
        on_lost: Callable[[str], Awaitable[None]],
    ) -> None:
        self._etcd = etcd
        self._prefix = leaders_prefix(etcd_prefix)
        self.instance_id = instance_id
        self._ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self._stores = stores
        self._on_elected = on_elected
        self._on_lost = on_lost
        self.led: set[str] = set()
        self._lease = None
        self._task: asyncio.Task[None] | None = None

    def key(self, store_id: str) -> str:
        return self._prefix + store_id

    async def leader_of(self, store_id: str) -> str | None:
        got = await self._etcd.get(self.key(store_id).encode())
        return None if got is None else got.value.decode()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="txcheck-leader")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._lose_all()
        if self._lease is not None:
            try:
                await self._etcd.revoke_lease(self._lease.id)
            except RETRYABLE:
                pass
            self._lease = None

    async def _lose_all(self) -> None:
        for sid in sorted(self.led):
            self.led.discard(sid)
            await self._on_lost(sid)

    async def _run(self) -> None:
        while True:
            try:
                if self._lease is None:
                    self._lease = await self._etcd.lease(self._ttl_s)
                else:
                    reply = await self._etcd.refresh_lease(self._lease.id)
                    if reply is None or reply.TTL <= 0:
                        log.warning("leader lease %x lost", self._lease.id)
                        self._lease = None
                        await self._lose_all()
                        continue
                await self._campaign()
            except RETRYABLE as exc:
                log.warning("leader election: etcd failed (%s); giving up leadership", exc)
                await self._lose_all()
                self._lease = None
            except Exception:
                log.exception("leader election failed")
            await asyncio.sleep(self._ttl_s / 3)

    async def _campaign(self) -> None:
        live = set(self._stores())
        for sid in sorted(self.led - live):
            self.led.discard(sid)
            await self._on_lost(sid)
            await self._etcd.transaction(
                compare=[self._etcd.transactions.value(self.key(sid).encode()) == self.instance_id.encode()],
                success=[self._etcd.transactions.delete(self.key(sid).encode())],
                failure=[],
            )
        for sid in sorted(live - self.led):
            key = self.key(sid).encode()
            won, _ = await self._etcd.transaction(
                compare=[self._etcd.transactions.version(key) == 0],
                success=[self._etcd.transactions.put(key, self.instance_id.encode(), lease=self._lease.id)],
                failure=[],
            )
            if won:
                log.info("%s leads the check loop of store %s", self.instance_id, sid)
                self.led.add(sid)
                await self._on_elected(sid)
