"""Check-loop leadership: exactly one txcheck replica runs the check loop of a store and
decides its transactions.

    <prefix>/txcheck/leaders/<store_id> -> instance id of the leader

Each replica holds its own election lease (``--leader_ttl_ms``) and, every third of the
TTL (one ``tick``), refreshes it, reads the leader keys and tries to create the key of
every live store that has no leader (an etcd transaction: create only if absent, under
its lease). The holder runs the loop while its lease lives; when it stops cleanly it
revokes the lease (immediate handover); when it dies the key expires after the TTL and
another replica takes it. A replica that cannot refresh its lease stops its loops.

``leads(store_id)`` is what END_TRANSACTION trusts before deciding: the key was ours at
the last tick **and** the lease cannot have expired yet by this replica's monotonic
clock. The lease was last refreshed at the moment ``sent`` the refresh left this
process, so etcd keeps it until at least ``sent + TTL``; ``leads`` stops answering True
at ``sent + TTL * VALID_FRACTION``, well before, so a replica whose refreshes stall
(etcd slow or unreachable, its event loop blocked) stops deciding before another
replica can take the key. The margin (a third of the TTL) also covers the one store
write a decision makes after its last ``leads`` check (ledger ``fence``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable

from txmq_runtime.etcd import RETRYABLE

log = logging.getLogger("txmq.txcheck.leader")

#: ``leads`` holds for this fraction of the TTL after the refresh was sent.
VALID_FRACTION = 2 / 3
#: Between ticks, how often the (in-memory) cluster view is looked at for new stores.
NEW_STORE_POLL_S = 0.1


def leaders_prefix(etcd_prefix: str) -> str:
    return f"{etcd_prefix}/txcheck/leaders/"


class LeaderDirectory:
    """The mirrored ``leaders`` prefix: store id -> instance id of its leader (a
    MirrorSink). Only used to find where to forward; never to decide."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._by_store: dict[str, str] = {}

    def reset(self, items: Iterable[tuple[str, bytes]]) -> None:
        self._by_store.clear()
        for k, v in items:
            self.put(k, v)

    def put(self, key: str, value: bytes) -> None:
        store_id = key.removeprefix(self._prefix)
        if store_id and "/" not in store_id:
            self._by_store[store_id] = value.decode("utf-8", "replace")

    def delete(self, key: str) -> None:
        self._by_store.pop(key.removeprefix(self._prefix), None)

    def holder(self, store_id: str) -> str | None:
        return self._by_store.get(store_id)


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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._etcd = etcd
        self._prefix = leaders_prefix(etcd_prefix)
        self.instance_id = instance_id
        self._ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self._stores = stores
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._monotonic = monotonic
        self.led: set[str] = set()
        self._lease = None
        self._valid_until = 0.0
        self._task: asyncio.Task[None] | None = None

    def key(self, store_id: str) -> str:
        return self._prefix + store_id

    @property
    def ttl_s(self) -> int:
        return self._ttl_s

    def leads(self, store_id: str) -> bool:
        """Whether this replica may decide transactions of ``store_id`` right now."""
        return store_id in self.led and self._monotonic() < self._valid_until

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
        self._valid_until = 0.0
        for sid in sorted(self.led):
            await self._lose(sid)

    async def _lose(self, sid: str) -> None:
        self.led.discard(sid)
        await self._on_lost(sid)

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("leader election failed")
            await self._until_next_tick()

    async def _until_next_tick(self) -> None:
        """A third of the TTL, or less when a store appears: a new store must not wait a
        whole tick for a leader (END_TRANSACTION of its transactions needs one)."""
        deadline = self._monotonic() + self._ttl_s / 3
        known = set(self._stores())
        while (left := deadline - self._monotonic()) > 0:
            await asyncio.sleep(min(left, NEW_STORE_POLL_S))
            if not known.issuperset(self._stores()):
                return

    async def tick(self) -> None:
        """One election step: keep (or get) the lease, then campaign."""
        try:
            sent = self._monotonic()
            if self._lease is None:
                self._lease = await self._etcd.lease(self._ttl_s)
            else:
                reply = await self._etcd.refresh_lease(self._lease.id)
                if reply is None or reply.TTL <= 0:
                    log.warning("leader lease %x lost", self._lease.id)
                    self._lease = None
                    await self._lose_all()
                    return
            self._valid_until = sent + self._ttl_s * VALID_FRACTION
            await self._campaign()
        except RETRYABLE as exc:
            log.warning("leader election: etcd failed (%s); giving up leadership", exc)
            self._lease = None
            await self._lose_all()

    async def _campaign(self) -> None:
        live = set(self._stores())
        held = {
            kv.key.decode().removeprefix(self._prefix): kv
            for kv in await self._etcd.get_prefix(self._prefix.encode())
        }
        for sid in sorted(self.led):
            kv = held.get(sid)
            if kv is None or kv.value != self.instance_id.encode() or kv.lease != self._lease.id:
                log.warning("%s no longer holds the leader key of store %s", self.instance_id, sid)
                await self._lose(sid)
        for sid in sorted(self.led - live):
            await self._lose(sid)
            await self._etcd.transaction(
                compare=[self._etcd.transactions.value(self.key(sid).encode()) == self.instance_id.encode()],
                success=[self._etcd.transactions.delete(self.key(sid).encode())],
                failure=[],
            )
        for sid in sorted(live - self.led):
            if sid in held:
                continue
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
