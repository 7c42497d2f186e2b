"""Check-loop leadership: exactly one txcheck replica runs the check loop of a store
(decisions are the store's: any replica has the store decide END_TRANSACTION).

    <prefix>/txcheck/leaders/<store_id> -> instance id of the leader

Each replica holds one election lease (``--leader_ttl_ms``), a
``txmq_runtime.lease.FencedLease``: the keys, validity, loss and epoch rules, and why
they are safe, are written down once in docs/leases.md. Every third of the TTL (one
``tick``) a replica refreshes the lease, confirms the keys it holds, and campaigns for
every live store that has no leader (create the key only if absent, under its lease).
The holder runs the loop while it holds the key; a clean stop revokes the lease
(immediate handover); when a replica dies the key expires after the TTL and another
replica takes it. A replica whose lease lapses (not refreshed for ``VALID_FRACTION`` of
the TTL) loses every store at once and stops their loops; it campaigns again at its
next tick.

``leads(store_id)``: the replica holds the key and the lease's validity has not lapsed
on this replica's monotonic clock. ``epoch(store_id)`` is the fencing token of that
leadership: the check loop's every write carries it, and the store refuses a write under
an older epoch than one it has seen (CODE_FENCED), so a leader paused past its lease
cannot land anything once its successor has written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.etcd import RETRYABLE
from txmq_runtime.lease import VALID_FRACTION, FencedLease, Holding, LeaseLapsed

log = logging.getLogger("txmq.txcheck.leader")

__all__ = ["NEW_STORE_POLL_MS", "VALID_FRACTION", "LeaderElector", "leaders_prefix"]

#: Between ticks, how often the (in-memory) cluster view is looked at for new stores.
NEW_STORE_POLL_MS = 100


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
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._etcd = etcd
        self._prefix = leaders_prefix(etcd_prefix)
        self.instance_id = instance_id
        self._stores = stores
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._clock = clock
        self.lease = FencedLease(etcd, name=f"{instance_id} leadership", ttl_ms=ttl_ms, on_lost=self._lost, clock=clock)
        self._task: asyncio.Task[None] | None = None

    def key(self, store_id: str) -> str:
        return self._prefix + store_id

    @property
    def ttl_s(self) -> int:
        return self.lease.ttl_s

    @property
    def led(self) -> set[str]:
        """The stores this replica holds the leader key of (valid at the last check)."""
        return {k.removeprefix(self._prefix) for k in self.lease.holdings}

    def leads(self, store_id: str) -> bool:
        """Whether this replica may decide transactions of ``store_id`` right now."""
        return self.lease.holds(self.key(store_id)) is not None

    def epoch(self, store_id: str) -> int | None:
        """The fencing token of this replica's leadership of ``store_id`` (None: it does
        not lead it now): greater for every later leader."""
        held = self.lease.holds(self.key(store_id))
        return None if held is None else held.epoch

    async def leader_of(self, store_id: str) -> str | None:
        got = await self._etcd.get(self.key(store_id).encode())
        return None if got is None else got.value.decode()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="txcheck-leader")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for sid in sorted(self.led):  # stop the loops first, then let the keys go
            await self._on_lost(sid)
        await self.lease.close()  # revoked: the keys go at once

    async def _lost(self, holding: Holding, reason: str) -> None:
        await self._on_lost(holding.key.removeprefix(self._prefix))

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
        deadline = self._clock.now_ms() + self.ttl_s * 1000 / 3
        known = set(self._stores())
        while (left := deadline - self._clock.now_ms()) > 0:
            await self._clock.sleep_ms(min(left, NEW_STORE_POLL_MS))
            if not known.issuperset(self._stores()):
                return

    async def tick(self) -> None:
        """One election step: keep (or get) the lease, confirm what it holds, campaign."""
        if not await self.lease.keep_alive():
            return  # the lease lapsed: its stores are lost already (FencedLease)
        try:
            await self.lease.confirm()
            await self._campaign()
        except (LeaseLapsed, *RETRYABLE) as exc:
            log.warning("leader election: %s; campaigning again at the next tick", exc)

    async def _campaign(self) -> None:
        live = set(self._stores())
        for sid in sorted(self.led - live):
            # The store is gone: stop its loop and give its key up.
            await self._on_lost(sid)
            await self.lease.release(self.key(sid))
        held = {kv.key.decode(): kv for kv in await self._etcd.get_prefix(self._prefix.encode())}
        for sid in sorted(live - self.led):
            kv = held.get(self.key(sid))
            if kv is not None and kv.lease != self.lease.lease_id:
                continue  # another replica (or a previous life of this one) leads it
            won = await self.lease.campaign(self.key(sid), self.instance_id.encode())
            if won.holding is not None:
                log.info("%s leads the check loop of store %s (epoch %d)", self.instance_id, sid, won.holding.epoch)
                await self._on_elected(sid)
