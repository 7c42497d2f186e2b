"""Long polling: where empty pulls wait (RocketMQ's PullRequestHoldService, redone).

A pull that found nothing *parks* here, keyed by (store, topic, queue), until one of:

- ARRIVAL: the store reported a message on that queue at or past the pull's offset whose
  tag code and properties pass the pull's filter. The pull re-reads once, without
  suspension, and answers whatever it finds.
- RECHECK: something may have arrived unseen (the arrival stream overflowed or was
  re-opened, or it is time for the backstop sweep) and the store's max offset of the
  queue is past the pull's offset. The pull re-reads; if nothing matched it parks again.
- TIMEOUT: its deadline passed. The pull re-reads once and answers.

No lost wake-ups: a pull registers a ``ReadWatch`` on its queue *before* it reads; every
arrival on the queue while the read is in flight is recorded there, and ``park`` checks
them before it waits (RocketMQ #7358 leaves such a pull waiting for the next 5 s sweep).

Idle costs nothing: parked pulls are futures; one timer task sleeps until the earliest
deadline or the next backstop sweep, and sleeps without a deadline while nothing is held
(RocketMQ #6350 / #8592: no polling loop). Everything runs on the event loop, so a
check followed by a registration with no ``await`` between them is atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, Self

from txmq.errors import error
from txmq.v1 import errors_pb2
from txmq_pull.metrics import long_poll_ended
from txmq_runtime.clock import Clock

log = logging.getLogger("txmq.pull.hold")

# Arrivals one in-flight read remembers before it gives up and re-checks instead.
READ_WATCH_BUFFER = 256
# What a held pull keeps of the arrivals on its queue (to be answered from their records):
# at most this many record bytes; past them it keeps nothing more (it then reads).
HELD_ARRIVAL_BYTES = 65_536
# Rebuild the timer heap when dead entries (answered before their deadline) dominate it.
_HEAP_COMPACT_MIN = 64


class WakeReason(enum.Enum):
    ARRIVAL = "arrival"
    RECHECK = "recheck"
    TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class QueueKey:
    store_id: str
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class ArrivalEvent:
    """One message dispatched to a consume queue, as the hold service needs it."""

    key: QueueKey
    queue_offset: int
    max_offset: int  # the queue's max offset after this message
    tag_code: int
    properties: Mapping[str, str]
    min_offset: int = 0  # the queue's min offset at dispatch
    record: bytes = b""  # the stored record, when the store attached it


class ArrivalMatcher(Protocol):
    def matches_arrival(self, tag_code: int, properties: Mapping[str, str]) -> bool: ...


#: The backstop's view of the store: the max offset of each queue asked for (queues it
#: could not learn may be left out).
MaxOffsets = Callable[[Collection[QueueKey]], Awaitable[Mapping[QueueKey, int]]]


class ReadWatch:
    """Arrivals on one queue while a read of it is in flight. Open it before the read,
    hand it to ``park`` (which closes it) or close it (``with`` does)."""

    __slots__ = ("_hold", "_open", "arrivals", "key", "overflowed")

    def __init__(self, hold: HoldService, key: QueueKey) -> None:
        self.key = key
        self.arrivals: list[ArrivalEvent] = []
        self.overflowed = False
        self._hold = hold
        self._open = True

    def _add(self, arrival: ArrivalEvent) -> None:
        if self.overflowed:
            return
        if len(self.arrivals) >= READ_WATCH_BUFFER:
            self.arrivals.clear()
            self.overflowed = True
        else:
            self.arrivals.append(arrival)

    def _overflow(self) -> None:
        self.arrivals.clear()
        self.overflowed = True

    def close(self) -> None:
        if self._open:
            self._open = False
            self._hold._unwatch(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Held:
    __slots__ = ("arrival_bytes", "arrivals", "deadline_ms", "done", "future", "key", "matcher", "offset")

    def __init__(
        self, key: QueueKey, offset: int, matcher: ArrivalMatcher, deadline_ms: int, future: asyncio.Future[WakeReason]
    ) -> None:
        self.key = key
        self.offset = offset
        self.matcher = matcher
        self.deadline_ms = deadline_ms
        self.future = future
        self.done = False
        # The arrivals on its queue since its read (those that did not wake it, then the
        # batch that did), while they fit HELD_ARRIVAL_BYTES; None once they did not.
        self.arrivals: list[ArrivalEvent] | None = []
        self.arrival_bytes = 0

    def keep(self, events: list[ArrivalEvent]) -> None:
        if self.arrivals is None:
            return
        self.arrival_bytes += sum(len(a.record) for a in events)
        if self.arrival_bytes > HELD_ARRIVAL_BYTES or len(self.arrivals) + len(events) > READ_WATCH_BUFFER:
            self.arrivals = None
        else:
            self.arrivals.extend(events)


class HoldService:
    def __init__(
        self,
        *,
        clock: Clock,
        check_interval_ms: int,
        max_held: int,
        max_offsets: MaxOffsets | None = None,
    ) -> None:
        self._clock = clock
        self._check_interval_ms = check_interval_ms
        self._max_held = max_held
        self._max_offsets = max_offsets
        self._held: dict[QueueKey, set[_Held]] = {}
        self._held_count = 0
        self._admitted = 0
        self._reading: dict[QueueKey, set[ReadWatch]] = {}
        self._heap: list[tuple[int, int, _Held]] = []
        self._seq = itertools.count()
        self._next_sweep_ms: int | None = None
        self._waiting_until: int | None = None  # the timer task's current deadline
        self._poke = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        self._rechecks: set[asyncio.Task[None]] = set()
        self._closed = False
        #: Completed backstop sweeps (for tests and metrics).
        self.sweeps = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="pull-hold-timer")

    async def close(self) -> None:
        """Stop the timer and answer every held pull (as timed out)."""
        self._closed = True
        tasks = [t for t in (self._task, self._sweep_task, *self._rechecks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = self._sweep_task = None
        for bucket in list(self._held.values()):
            for held in list(bucket):
                self._resolve(held, WakeReason.TIMEOUT)

    # -- state (tests, metrics) ----------------------------------------------------------

    @property
    def held_count(self) -> int:
        """Pulls parked right now."""
        return self._held_count

    @property
    def admitted_count(self) -> int:
        """Pulls in their hold phase (parked, or re-reading between two parks)."""
        return self._admitted

    def held_on(self, key: QueueKey) -> int:
        return len(self._held.get(key, ()))

    def interested(self, key: QueueKey) -> bool:
        """Whether an arrival on ``key`` matters to anyone (a held pull or a read)."""
        return key in self._held or key in self._reading

    # -- the pull side ---------------------------------------------------------------------

    def watch(self, key: QueueKey) -> ReadWatch:
        """Start recording arrivals on ``key``; call before reading it."""
        w = ReadWatch(self, key)
        self._reading.setdefault(key, set()).add(w)
        return w

    def _unwatch(self, w: ReadWatch) -> None:
        watches = self._reading.get(w.key)
        if watches is not None:
            watches.discard(w)
            if not watches:
                del self._reading[w.key]

    @contextlib.contextmanager
    def admit(self) -> Iterator[None]:
        """One pull's hold phase; raises CODE_TOO_MANY_REQUESTS past ``max_held``."""
        if self._closed:
            raise error(errors_pb2.CODE_SERVICE_NOT_READY, "the pull service is stopping")
        if self._admitted >= self._max_held:
            raise error(
                errors_pb2.CODE_TOO_MANY_REQUESTS,
                f"{self._admitted} pulls are held already (max_held_requests); retry later",
            )
        self._admitted += 1
        try:
            yield
        finally:
            self._admitted -= 1

    async def park(
        self,
        watch: ReadWatch,
        *,
        offset: int,
        matcher: ArrivalMatcher,
        deadline_ms: int,
        woken_by: list[ArrivalEvent] | None = None,
    ) -> WakeReason:
        """Wait until a matching arrival, a re-check or the deadline. ``watch`` (opened
        before the read that found nothing at ``offset``) is consumed: an arrival it saw
        wakes the pull at once. Cancelling the caller removes the held pull. On ARRIVAL,
        ``woken_by`` receives the arrivals on the queue since the read, the waking one
        included, unless there were too many to keep (their records may answer the pull
        without another read)."""
        watch.close()
        if self._closed:
            return WakeReason.TIMEOUT
        if watch.overflowed:
            return WakeReason.RECHECK
        if any(_wakes(a, offset, matcher) for a in watch.arrivals):
            if woken_by is not None:
                woken_by.extend(watch.arrivals)
            return WakeReason.ARRIVAL
        if self._clock.now_ms() >= deadline_ms:
            return WakeReason.TIMEOUT
        future: asyncio.Future[WakeReason] = asyncio.get_running_loop().create_future()
        held = _Held(watch.key, offset, matcher, deadline_ms, future)
        held.keep(watch.arrivals)  # none woke it, but they precede what will
        self._held.setdefault(held.key, set()).add(held)
        self._held_count += 1
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), held))
        if self._next_sweep_ms is None and self._max_offsets is not None:
            self._next_sweep_ms = self._clock.now_ms() + self._check_interval_ms
        next_wake = self._next_wake()
        if self._waiting_until is None or (next_wake is not None and next_wake < self._waiting_until):
            self._poke.set()
        try:
            reason = await future
        finally:
            if not held.done:  # cancelled: the client went away
                self._remove(held)
        if reason is WakeReason.ARRIVAL and woken_by is not None and held.arrivals is not None:
            woken_by.extend(held.arrivals)
        return reason

    # -- the arrival side ------------------------------------------------------------------

    def on_arrivals(self, arrivals: Iterable[ArrivalEvent]) -> None:
        """Wake the held pulls each arrival matches; record it for reads in flight."""
        by_key: dict[QueueKey, list[ArrivalEvent]] = {}
        for a in arrivals:
            by_key.setdefault(a.key, []).append(a)
        for key, events in by_key.items():
            for w in self._reading.get(key, ()):
                for a in events:
                    w._add(a)
            bucket = self._held.get(key)
            if bucket:
                for held in list(bucket):
                    held.keep(events)
                    if any(_wakes(a, held.offset, held.matcher) for a in events):
                        self._resolve(held, WakeReason.ARRIVAL)

    def recheck_store(self, store_id: str) -> None:
        """Arrivals of ``store_id`` may have been missed (overflow, stream re-opened):
        reads in flight on it will re-check; held pulls re-check if the store's max
        offset of their queue is past them (one look-up per topic, not a read per pull)."""
        self._recheck(lambda key: key.store_id == store_id)

    def recheck_all(self) -> None:
        self._recheck(lambda key: True)

    def _recheck(self, which: Callable[[QueueKey], bool]) -> None:
        for key, watches in self._reading.items():
            if which(key):
                for w in watches:
                    w._overflow()
        keys = [k for k in self._held if which(k)]
        if not keys:
            return
        if self._max_offsets is None:
            for key in keys:
                for held in list(self._held.get(key, ())):
                    self._resolve(held, WakeReason.RECHECK)
            return
        task = asyncio.create_task(self._recheck_behind(keys, fail_safe=True), name="pull-hold-recheck")
        self._rechecks.add(task)
        task.add_done_callback(self._rechecks.discard)

    async def _recheck_behind(self, keys: list[QueueKey], *, fail_safe: bool) -> None:
        """Re-check the held pulls on ``keys`` that the store's max offset is past. When the
        store cannot say: all of them (``fail_safe``), or none (the periodic sweep)."""
        assert self._max_offsets is not None
        try:
            max_offsets = await self._max_offsets(keys)
        except Exception as exc:  # noqa: BLE001
            log.warning("hold: could not read max offsets of %d queue(s): %s", len(keys), exc)
            max_offsets = {}
        for key in keys:
            max_offset = max_offsets.get(key)
            if max_offset is None and not fail_safe:
                continue
            for held in [h for h in self._held.get(key, ()) if max_offset is None or max_offset > h.offset]:
                self._resolve(held, WakeReason.RECHECK)

    # -- timer and backstop ----------------------------------------------------------------

    async def sweep(self) -> None:
        """The backstop: ask the store for the max offset of every queue with held pulls;
        those behind it re-check (RocketMQ's checkHoldRequest, but without a read per pull).
        A store that cannot answer is asked again at the next sweep."""
        if self._max_offsets is None or not self._held:
            return
        try:
            await self._recheck_behind(list(self._held), fail_safe=False)
        finally:
            self.sweeps += 1

    async def _run(self) -> None:
        while True:
            self._poke.clear()
            now = self._clock.now_ms()
            self._expire(now)
            if self._next_sweep_ms is not None and now >= self._next_sweep_ms:
                if self._held:
                    self._next_sweep_ms = now + self._check_interval_ms
                    if self._sweep_task is None or self._sweep_task.done():
                        self._sweep_task = asyncio.create_task(self.sweep(), name="pull-hold-sweep")
                else:
                    self._next_sweep_ms = None  # nothing held: no sweeps until something is
            self._waiting_until = self._next_wake()
            await self._clock.wait(self._poke, self._waiting_until)

    def _expire(self, now: int) -> None:
        heap = self._heap
        while heap and (heap[0][2].done or heap[0][0] <= now):
            _, _, held = heapq.heappop(heap)
            if not held.done:
                self._resolve(held, WakeReason.TIMEOUT)
        if len(heap) > _HEAP_COMPACT_MIN and len(heap) > 4 * self._held_count:
            self._heap = [e for e in heap if not e[2].done]
            heapq.heapify(self._heap)

    def _next_wake(self) -> int | None:
        heap = self._heap
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        candidates = [heap[0][0]] if heap else []
        if self._next_sweep_ms is not None:
            candidates.append(self._next_sweep_ms)
        return min(candidates) if candidates else None

    def _resolve(self, held: _Held, reason: WakeReason) -> None:
        if not held.done:
            long_poll_ended(reason)
        self._remove(held)
        if not held.future.done():
            held.future.set_result(reason)

    def _remove(self, held: _Held) -> None:
        if held.done:
            return
        held.done = True
        self._held_count -= 1
        bucket = self._held.get(held.key)
        if bucket is not None:
            bucket.discard(held)
            if not bucket:
                del self._held[held.key]


def _wakes(arrival: ArrivalEvent, offset: int, matcher: ArrivalMatcher) -> bool:
    return arrival.max_offset > offset and matcher.matches_arrival(arrival.tag_code, arrival.properties)
