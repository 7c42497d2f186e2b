"""Fenced ownership of etcd keys: the one lease primitive of txmq (safety argument:
docs/leases.md; read it before changing this file).

A ``FencedLease`` is one etcd lease of this process and the keys it holds under it:

- **campaign**: create a key iff it is absent (an etcd transaction), under the lease. The
  winner's ``Holding`` carries an **epoch**: the revision at which its value was written
  (the key's mod revision; its create revision when it was created). Revisions only grow,
  so every later holder of the key has a greater epoch: writes that ownership allows
  carry it, and a receiver that remembers the greatest epoch it saw refuses older ones.
- **keep-alive**: ``keep_alive`` refreshes the lease (``start`` runs it every third of
  the TTL). A refresh is measured from the moment it was *sent*: etcd keeps the lease at
  least until ``sent + TTL``.
- **loss detection**: the holdings are valid until ``sent + TTL * VALID_FRACTION`` of
  the last successful refresh, on the injected clock's monotonic ``now_ms``. Past that,
  every holding is lost: the first of a timer (armed at each refresh) and any check
  (``holds``, ``check``) drops them and calls ``on_lost`` once per holding. A holding is
  also lost when ``confirm`` finds its key deleted or rewritten, and when a refresh finds
  the lease expired.
- **re-campaign** (one behaviour): an expired lease is replaced at once by a new one (in
  the same ``keep_alive``); holdings are never carried over by themselves: the owner
  campaigns again. A campaign for a key that is still under this process's current lease
  (validity lapsed but the lease lived, or a mirror lagging behind a claim) adopts it
  again with its old epoch: nobody else can have held it meanwhile.
- **release**: ``release`` deletes one key if it is still ours; ``close`` revokes the
  lease (one try; the TTL is the fallback), so every key goes at once and others can
  campaign immediately.

All etcd calls raise ``txmq_runtime.etcd.RETRYABLE`` errors to the caller except those of
``keep_alive`` (logged: validity lapses by itself) and ``close``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.etcd import RETRYABLE

log = logging.getLogger("txmq.lease")

#: A holding is valid for this fraction of the TTL after its last refresh was sent
#: (docs/leases.md: the remaining third is the margin for a paused process, a write in
#: flight and clock rate differences).
VALID_FRACTION = 2 / 3


@dataclass(frozen=True, slots=True)
class Holding:
    """A key this process holds: its value, the lease it lives under, and its epoch (the
    revision that wrote the value: a fencing token, greater for every later holder)."""

    key: str
    value: bytes
    lease_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Campaign:
    """The outcome of ``FencedLease.campaign``: ``holding`` when the key is ours (won now
    or adopted again), otherwise ``holder``: the value of whoever holds it (None when it
    changed hands while we looked: campaign again)."""

    holding: Holding | None
    holder: bytes | None = None


class LeaseLapsed(Exception):
    """The lease cannot vouch for a holding right now (no lease, validity lapsed, or the
    lease was replaced or closed during the call): nothing was claimed."""


#: ``on_lost(holding, reason)``; may be a coroutine function (run as a task, awaited by
#: the next ``keep_alive``, ``confirm`` or ``campaign``).
LossCallback = Callable[[Holding, str], Awaitable[None] | None]


class FencedLease:
    def __init__(
        self,
        etcd: Any,
        *,
        name: str,
        ttl_ms: int,
        on_lost: LossCallback | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._etcd = etcd
        self.name = name
        #: etcd TTLs are whole seconds: rounded up, never below 1 s.
        self.ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self._on_lost = on_lost
        self._clock = clock
        self._lease: Any = None  # aetcd Lease
        self._valid_until_ms = 0
        self._held: dict[str, Holding] = {}
        self._keep_alive_task: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._callbacks: set[asyncio.Future[None]] = set()
        self._closed = False

    # -- state -----------------------------------------------------------------------

    @property
    def lease_id(self) -> int | None:
        return None if self._lease is None else self._lease.id

    @property
    def valid_until_ms(self) -> int:
        """When (``clock.now_ms``) the holdings stop being valid unless refreshed."""
        return self._valid_until_ms

    def valid(self) -> bool:
        """Whether the lease vouches for holdings right now (checks nothing else)."""
        return self._lease is not None and not self._closed and self._clock.now_ms() < self._valid_until_ms

    def check(self) -> bool:
        """Lose every holding if the validity lapsed; whether the lease is valid."""
        if self.valid():
            return True
        if self._held:
            self._lose_all("the lease was not refreshed in time")
        return False

    def holds(self, key: str) -> Holding | None:
        """Our valid holding of ``key``, or None. What every action that ownership allows
        asks right before it acts (and then carries the epoch)."""
        if key not in self._held or not self.check():
            return None
        return self._held.get(key)

    @property
    def holdings(self) -> dict[str, Holding]:
        """The keys held (valid at the last check; ``holds`` checks)."""
        return dict(self._held)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Refresh the lease every third of the TTL until ``close`` (the first refresh at
        once)."""
        if self._keep_alive_task is None:
            self._keep_alive_task = asyncio.create_task(self._keep_alive_loop(), name=f"lease-{self.name}")

    async def _keep_alive_loop(self) -> None:
        while True:
            try:
                await self.keep_alive()
            except Exception:
                log.exception("%s: lease keep-alive failed", self.name)
            await self._clock.sleep_ms(self.ttl_s * 1000 / 3)

    async def keep_alive(self) -> bool:
        """One keep-alive step: grant a lease if there is none, else refresh it; a lease
        found expired loses every holding and is replaced at once. An etcd failure is
        logged (the validity lapses by itself). Whether the lease is valid after it."""
        await self._drain()
        if self._closed:
            return False
        try:
            sent = self._clock.now_ms()
            if self._lease is None:
                await self._grant()
            else:
                reply = await self._etcd.refresh_lease(self._lease.id)
                if reply is None or reply.TTL <= 0:
                    log.warning("%s: lease %x expired", self.name, self._lease.id)
                    self._lease = None
                    self._lose_all("the lease expired")
                    sent = self._clock.now_ms()
                    await self._grant()
            self._refreshed(sent)
        except RETRYABLE as exc:
            log.warning("%s: lease refresh failed (%s)", self.name, exc)
        await self._drain()
        return self.valid()

    async def _grant(self) -> None:
        self._lease = await self._etcd.lease(self.ttl_s)
        log.info("%s: lease %x (ttl %d s)", self.name, self._lease.id, self.ttl_s)

    def _refreshed(self, sent_ms: int) -> None:
        if self._closed:
            return
        self._valid_until_ms = sent_ms + math.floor(self.ttl_s * 1000 * VALID_FRACTION)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().create_task(self._expire_at(self._valid_until_ms))

    async def _expire_at(self, deadline_ms: int) -> None:
        """The timer: lose the holdings at ``deadline_ms`` unless a refresh re-armed it."""
        while (left := deadline_ms - self._clock.now_ms()) > 0:
            await self._clock.sleep_ms(left)
        self.check()

    async def close(self) -> None:
        """Stop refreshing and revoke the lease (one try: the TTL is the fallback). The
        holdings end without ``on_lost``: the owner is stopping anyway."""
        if self._closed:
            return
        self._closed = True
        self._valid_until_ms = 0
        self._held.clear()
        for task in (self._keep_alive_task, self._timer):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._keep_alive_task, self._timer) if t is not None), return_exceptions=True
        )
        await self._drain()
        if self._lease is not None:
            lease, self._lease = self._lease, None
            try:
                await self._etcd.revoke_lease(lease.id)
            except RETRYABLE as exc:
                log.warning(
                    "%s: could not revoke lease %x (its keys go in %d s): %s", self.name, lease.id, self.ttl_s, exc
                )

    # -- holding keys ----------------------------------------------------------------

    async def campaign(self, key: str, value: bytes, *, take_over: Callable[[bytes], bool] | None = None) -> Campaign:
        """Hold ``key`` = ``value`` if nobody does (module docstring). ``take_over(v)``:
        a key whose value ``v`` it accepts is replaced under our lease (a previous
        incarnation of this owner, known dead), with a new epoch. LeaseLapsed when the
        lease cannot vouch for a holding; etcd errors (RETRYABLE) are raised."""
        await self._drain()
        lease = self._lease
        if lease is None or not self.check():
            raise LeaseLapsed(f"{self.name}: no valid lease to hold {key}")
        tx = self._etcd.transactions
        k = key.encode()
        won, responses = await self._etcd.transaction(
            compare=[tx.version(k) == 0],
            success=[tx.put(k, value, lease=lease.id), tx.get(k)],
            failure=[tx.get(k)],
        )
        kv = _kv(responses[-1] if responses else None)
        if not won and kv is not None and kv.lease != lease.id and take_over is not None and take_over(kv.value):
            won, responses = await self._etcd.transaction(
                compare=[tx.mod(k) == kv.mod_revision],
                success=[tx.put(k, value, lease=lease.id), tx.get(k)],
                failure=[],
            )
            if not won:
                return Campaign(None)
            log.info("%s: took %s over from lease %x", self.name, key, kv.lease)
            kv = _kv(responses[-1])
        if self._lease is not lease or not self.check():
            # The lease was replaced (it expired) or closed while we asked: whatever we
            # wrote lives under a dead lease.
            raise LeaseLapsed(f"{self.name}: the lease lapsed while campaigning for {key}")
        if kv is None:
            return Campaign(None)
        if kv.lease != lease.id:
            return Campaign(None, kv.value)
        holding = Holding(key, kv.value, lease.id, kv.mod_revision)
        if self._held.get(key) != holding:
            self._held[key] = holding
            log.info("%s: holds %s (epoch %d)", self.name, key, holding.epoch)
        return Campaign(holding)

    async def confirm(self, keys: Iterable[str] | None = None) -> None:
        """Read ``keys`` (default: every held key) from etcd in one transaction and lose
        each holding whose key is gone or no longer the one we wrote. Raises RETRYABLE
        (nothing is lost then: validity covers an unreachable etcd)."""
        await self._drain()
        wanted = [k for k in (self._held if keys is None else keys) if k in self._held]
        if not wanted:
            return
        tx = self._etcd.transactions
        _, responses = await self._etcd.transaction(
            compare=[], success=[tx.get(k.encode()) for k in wanted], failure=[]
        )
        for key, response in zip(wanted, responses, strict=True):
            held = self._held.get(key)
            kv = _kv(response)
            if held is None or (kv is not None and kv.lease == held.lease_id and kv.mod_revision == held.epoch):
                continue
            self._lose(key, "its key was deleted" if kv is None else "its key was taken or rewritten")
        await self._drain()

    async def release(self, key: str) -> None:
        """Stop holding ``key`` (without ``on_lost``) and delete it if it is still ours.
        Raises RETRYABLE (then the key goes with the lease)."""
        held = self._held.pop(key, None)
        if held is None:
            return
        tx = self._etcd.transactions
        k = key.encode()
        await self._etcd.transaction(compare=[tx.mod(k) == held.epoch], success=[tx.delete(k)], failure=[])

    # -- losing ----------------------------------------------------------------------

    def lose(self, key: str, reason: str) -> None:
        """Give the holding of ``key`` up now (``on_lost`` is called); its key stays in
        etcd until released or the lease ends, so a campaign adopts it again."""
        self._lose(key, reason)

    def _lose_all(self, reason: str) -> None:
        for key in sorted(self._held):
            self._lose(key, reason)

    def _lose(self, key: str, reason: str) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        log.warning("%s: lost %s (epoch %d): %s", self.name, key, held.epoch, reason)
        if self._on_lost is None:
            return
        try:
            result = self._on_lost(held, reason)
        except Exception:
            log.exception("%s: the loss handler of %s failed", self.name, key)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._callbacks.add(task)
            task.add_done_callback(self._callback_done)

    def _callback_done(self, task: asyncio.Future[None]) -> None:
        self._callbacks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: a loss handler failed", self.name, exc_info=task.exception())

    async def _drain(self) -> None:
        """Wait for the loss handlers still running, so a new holding never races the
        handler of the old one."""
        while self._callbacks:
            await asyncio.gather(*list(self._callbacks), return_exceptions=True)


def _kv(response: Any) -> Any:
    """The key-value of a transaction's range response (a list of (value, KeyValue)), or
    None when the key does not exist."""
    return response[0][1] if response else None
