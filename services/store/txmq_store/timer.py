"""Delayed messages: when a send is due, the timer wheel, delivery (docs/store.md,
"Delayed messages").

A delayed message is stored as a record of ``TIMER_TOPIC`` queue 0 (the timer queue)
carrying its real topic and queue (REAL_TOPIC / REAL_QID) and its absolute delivery time
(TIMER_DELIVER_MS); the consume-queue unit's tag-hash field holds that time, so the
wheel is rebuilt from the timer queue's units alone. ``Timer`` runs on the writable
store only (the leader of a replicated group): it reads new units of the timer queue
(``ingest``), files each under its delivery second, and at each ``tick`` appends the
real messages of every due second through the store's normal append path, in batches.

Persistence (``timer/checkpoint``, JSON, tmp + fsync + rename): ``ingested`` (Q: units
below it were read into the wheel), ``delivered_through_sec`` (T: every unit below Q due
at or before second T is delivered) and ``delivered_below`` (L: every unit below L is
delivered). It is written only after the commit log holds the delivered copies durably
and they are settled (fsynced under sync flush, held by the in-sync replicas of a
replicated group). A restart re-reads units from L: those below Q due by T are skipped,
every other one is filed again, and each of those re-filed units is checked before its
delivery: when the real topic already holds a copy carrying TXMQ_TIMER_OFFSET = its
timer-queue offset (found through the unique-id index), it was delivered after the last
checkpoint and is not delivered again. The same holds for a replica that becomes leader
(it reads from its own checkpoint, or from the start of its timer queue).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from array import array
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from txmq.codec_native import fields as record_fields
from txmq.errors import TxmqError, error
from txmq.protocol import (
    DELAY_PROPERTIES,
    PROPERTY_DELAY_LEVEL,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OFFSET,
    PROPERTY_TIMER_RECALL,
    TIMER_QUEUE_ID,
    TIMER_RECALL_QUEUE_ID,
    TIMER_TOPIC,
)
from txmq.records import decode_properties, encode_properties_text, pop_field_properties
from txmq.v1 import errors_pb2

from . import metrics as store_metrics
from .codec import HEADER_SIZE, UNKNOWN_HOST, CorruptRecord, PreparedRecord, encode_tail, verify_record
from .commitlog import CommitLog
from .configs import TopicConfigTable, WriteQueues
from .consumequeue import UNIT
from .dispatch import Dispatcher
from .fileio import read_json, write_json_atomically
from .index import unique_id_hash
from .integrity import CorruptionLog, DiskFullLog, is_disk_full
from .model import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, SendStatus, StoredMessage, is_indexed, takes_queue_slot
from .settings import StoreSettings
from .validation import cached_tag_code

log = logging.getLogger("txmq.store.timer")

#: The timer's precision: a delivery time at most this far ahead is stored at once, and
#: a timer is due at the first whole second at or after its delivery time.
PRECISION_MS = 1_000
#: How often the delivery task looks for due timers.
TICK_MS = 100
#: The copies of the next second's timers are built ahead (read, checked, encoded), at
#: most PREPARE_PER_TICK per tick and PREPARE_MAX in all, once it is this close: at
#: the second itself only the appends remain.
PREPARE_AHEAD_MS = 2_000
PREPARE_PER_TICK = 8_192
PREPARE_MAX = 200_000
#: Units read per ingest step (the timer queue is read in chunks of this many).
INGEST_CHUNK = 4_096
#: Delay values have at most this many digits (ms since the epoch need 13).
MAX_DIGITS = 18
#: A delivery the store keeps refusing for one reason (a full disk: every tick) is
#: logged again after this long.
PAUSE_LOG_INTERVAL_MS = 60_000
#: The records of due timers that lie back to back are read up to this many bytes at once.
READ_BYTES = 4 * 1024 * 1024
#: The end of time for an index look-up (every record).
END_OF_TIME_MS = 2**63 - 1


def delivery_time(
    properties: Mapping[str, str], *, now_ms: int, levels_ms: Sequence[int], max_delay_ms: int, index: int
) -> int:
    """When a message with these properties becomes visible: 0 when it is not delayed
    (no delay property, DELAY=0, or a time at most PRECISION_MS ahead of ``now_ms``,
    a delay level's too: it is stored at once).
    CODE_ILLEGAL_DELIVERY_TIME for more than one delay property, a value that is not a
    non-negative integer, an unknown level or a time later than ``now_ms + max_delay_ms``."""
    names = [name for name in properties if name in DELAY_PROPERTIES]
    if not names:
        return 0
    if len(names) > 1:
        raise error(
            errors_pb2.CODE_ILLEGAL_DELIVERY_TIME,
            f"a message may carry one delay property, this one has {len(names)}: {', '.join(sorted(names))}",
            index=str(index),
        )
    (name,) = names
    text = properties[name]
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS):
        raise error(
            errors_pb2.CODE_ILLEGAL_DELIVERY_TIME,
            f"{name}={text[:40]!r} is not a non-negative integer of at most {MAX_DIGITS} digits",
            index=str(index), property=name,
        )  # fmt: skip
    value = int(text)
    if name == PROPERTY_TIMER_DELIVER_MS:
        at = value
    elif name == PROPERTY_TIMER_DELAY_MS:
        at = now_ms + value
    elif name == PROPERTY_TIMER_DELAY_SEC:
        at = now_ms + value * 1000
    else:
        assert name == PROPERTY_DELAY_LEVEL
        if value == 0:
            return 0  # RocketMQ: level 0 is "not delayed"
        if value > len(levels_ms):
            raise error(
                errors_pb2.CODE_ILLEGAL_DELIVERY_TIME,
                f"delay level {value} is unknown: this store has levels 1..{len(levels_ms)}",
                index=str(index), property=name, levels=str(len(levels_ms)),
            )  # fmt: skip
        at = now_ms + levels_ms[value - 1]
    if at > now_ms + max_delay_ms:
        raise error(
            errors_pb2.CODE_ILLEGAL_DELIVERY_TIME,
            f"delivery time {at} is more than {max_delay_ms} ms after the store's time {now_ms}",
            index=str(index), property=name, max_delay_ms=str(max_delay_ms), deliver_at_ms=str(at),
        )  # fmt: skip
    return at if at > now_ms + PRECISION_MS else 0


def due_second(deliver_ms: int) -> int:
    """The wheel slot of a delivery time: the first whole second at or after it (a
    timer is never delivered early)."""
    return -(-deliver_ms // 1000)


def pending_timer(msg: StoredMessage, topic: str, unique_id: str) -> tuple[int, int]:
    """(timer-queue offset, delivery ms) of ``msg`` when it is the timer record of a
    delayed message of ``topic`` with ``unique_id`` (what a recall names); otherwise
    CODE_MESSAGE_NOT_FOUND."""
    props = msg.properties
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if (
        msg.topic != TIMER_TOPIC
        or msg.queue_id != TIMER_QUEUE_ID
        or msg.unique_id != unique_id
        or props.get(PROPERTY_REAL_TOPIC) != topic
        or not deliver.isdigit()
    ):
        raise error(
            errors_pb2.CODE_MESSAGE_NOT_FOUND,
            f"no delayed message {unique_id} of topic {topic} at commit-log offset {msg.commit_log_offset}",
            unique_id=unique_id, commit_log_offset=str(msg.commit_log_offset),
        )  # fmt: skip
    return msg.queue_offset, int(deliver)


class TimerWheel:
    """Pending timers: per delivery second an array of timer-queue offsets (8 bytes per
    timer, plus about 150 bytes per distinct second), and a heap of the seconds."""

    __slots__ = ("_seconds", "_slots", "pending")

    def __init__(self) -> None:
        self._slots: dict[int, array] = {}
        self._seconds: list[int] = []
        self.pending = 0

    def add(self, second: int, offset: int) -> None:
        slot = self._slots.get(second)
        if slot is None:
            slot = self._slots[second] = array("q")
            heapq.heappush(self._seconds, second)
        slot.append(offset)
        self.pending += 1

    def first_second(self) -> int | None:
        return self._seconds[0] if self._seconds else None

    def peek(self, second: int) -> array | None:
        return self._slots.get(second)

    def pop_due(self, now_ms: int) -> tuple[int, array] | None:
        """The earliest second that is due at ``now_ms`` and its offsets, taken out."""
        if not self._seconds or self._seconds[0] * 1000 > now_ms:
            return None
        second = heapq.heappop(self._seconds)
        slot = self._slots.pop(second)
        self.pending -= len(slot)
        return second, slot

    def put_back(self, second: int, offsets: Sequence[int]) -> None:
        for offset in offsets:
            self.add(second, offset)

    def min_offset(self) -> int | None:
        return min((min(s) for s in self._slots.values() if s), default=None)

    def remove(self, second: int, offset: int) -> bool:
        """Take one pending timer out (a recall); False when it is not pending."""
        slot = self._slots.get(second)
        if slot is None or offset not in slot:
            return False
        slot.remove(offset)  # an emptied second stays in the heap: its delivery is empty
        self.pending -= 1
        return True

    def clear(self) -> None:
        self._slots.clear()
        self._seconds.clear()
        self.pending = 0


@dataclass(slots=True, frozen=True)
class TimerCheckpoint:
    ingested: int  # Q
    delivered_through_sec: int  # T
    delivered_below: int  # L

    @classmethod
    def load(cls, path: Path) -> TimerCheckpoint | None:
        try:
            data = read_json(path)
            if data is None:
                return None
            return cls(int(data["ingested"]), int(data["delivered_through_sec"]), int(data["delivered_below"]))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("timer checkpoint %s is unreadable (%s); the timer queue is read from its start", path, exc)
            return None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomically(
            path,
            {
                "ingested": self.ingested,
                "delivered_through_sec": self.delivered_through_sec,
                "delivered_below": self.delivered_below,
            },
        )


class TimerHost(Protocol):
    """What the timer needs of the store (``Timers`` implements it)."""

    def timer_queue_bounds(self) -> tuple[int, int]:
        """(min offset, max offset) of the timer queue."""
        ...

    def timer_units(self, offset: int, max_units: int) -> list[tuple[int, int, int]]:
        """(commit-log offset, size, delivery ms) of the units from ``offset``."""
        ...

    def timer_units_at(self, offsets: Sequence[int]) -> list[tuple[int, int, int] | None]:
        """The unit at each of ``offsets`` (ascending), None where there is none."""
        ...

    def timer_copies(self, entries: Sequence[tuple[int, int, int]], check_below: int) -> list[Any]:
        """For each (timer-queue offset, commit-log offset, size): the real message to
        append (an object with ``body``), or ``DUPLICATE`` (an entry below
        ``check_below`` whose copy the real topic already holds) or ``DROPPED``
        (unreadable, no such topic any more: logged)."""
        ...

    def timer_append(self, copies: list[Any]) -> Any:
        """Append copies (all or nothing); the result has ``end``, the log's end after it."""
        ...

    async def timer_settle(self, appended: Any) -> SendStatus: ...

    async def timer_flush(self, upto: int) -> None: ...

    def timer_batch_limits(self) -> tuple[int, int]:
        """(messages, body bytes) one append may take."""
        ...

    def timer_recalls(self) -> list[int]:
        """The timer-queue offsets the recall queue names (recalled timers)."""
        ...

    def timer_delivered(self, offset: int) -> bool:
        """Whether the real topic holds a delivered copy of the timer at ``offset``."""
        ...

    def timer_recall_record(self, offset: int, deliver_ms: int, unique_id: str) -> Any:
        """The recall queue's record cancelling the timer at ``offset``."""
        ...


#: ``TimerHost.timer_copies`` outcomes that deliver nothing.
DUPLICATE = "duplicate"
DROPPED = "dropped"


class Timer:
    """The wheel and its delivery. ``activate`` (the store became writable: at start,
    or as a new leader) rebuilds the wheel from the checkpoint; ``tick`` ingests new
    units and delivers what is due; ``checkpoint`` persists progress; ``deactivate``
    (leadership lost) forgets the wheel."""

    def __init__(self, host: TimerHost, *, path: Path, clock) -> None:
        self._host = host
        self.path = path
        self._clock = clock
        self.wheel = TimerWheel()
        self.active = False
        self.ingested = 0  # Q
        self._through = -1  # every due second up to this one was delivered (and settled)
        self._busy: tuple[int, array] | None = None  # the second being delivered
        self._progress = 0  # offsets of ``_busy`` done
        self._lock = asyncio.Lock()  # one tick at a time
        # Copies built ahead for ``_ready_second``: offset -> (unit, copy or outcome).
        self._ready: dict[int, tuple[tuple[int, int, int], Any]] = {}
        self._ready_second: int | None = None
        self._ready_from = 0
        self._check_below = 0  # units below this are re-filed: check for a copy first
        self._skip: TimerCheckpoint | None = None  # the checkpoint a rebuild honours
        self._saved: TimerCheckpoint | None = None  # what the checkpoint file holds (as read or written)
        self._delivered_end = 0  # commit-log end after the last settled delivery
        self.delivered_total = 0
        self.duplicates_skipped = 0
        self._duplicates_logged = 0
        self.dropped_total = 0
        self.last_lag_ms = 0
        self.recalled: set[int] = set()  # timer-queue offsets of recalled timers
        self.recalled_total = 0
        self._pause_logged: tuple[str, int] | None = None  # (the refusal, when) last logged

    # -- lifecycle -------------------------------------------------------------------

    def activate(self) -> None:
        """Rebuild the wheel: units from the checkpoint's L on, minus those the
        checkpoint says are delivered; every unit filed now that lies below the timer
        queue's current end is checked for a delivered copy before its delivery."""
        self.wheel.clear()
        lo, hi = self._host.timer_queue_bounds()
        cp = TimerCheckpoint.load(self.path)
        self._skip = self._saved = cp
        self.ingested = max(lo, cp.delivered_below if cp else 0)
        self._through = cp.delivered_through_sec if cp else -1
        self._check_below = hi
        self._busy = None
        self.recalled = set(self._host.timer_recalls())
        self.active = True
        self.ingest()
        self._skip = None
        log.info("timer active: %d pending timers (timer queue %d..%d, checkpoint %s)", self.wheel.pending, lo, hi, cp)

    def deactivate(self) -> None:
        if self.active:
            log.info("timer inactive (%d pending timers are left to the next leader)", self.wheel.pending)
        self.active = False
        self.wheel.clear()
        self._busy = None
        self._forget_ready()

    def _forget_ready(self) -> None:
        self._ready.clear()
        self._ready_second = None
        self._ready_from = 0

    # -- ingest and delivery ---------------------------------------------------------

    def ingest(self) -> int:
        """File the timer queue's new units in the wheel; returns how many."""
        _, hi = self._host.timer_queue_bounds()
        skip = self._skip
        added = 0
        while self.ingested < hi:
            units = self._host.timer_units(self.ingested, min(INGEST_CHUNK, hi - self.ingested))
            if not units:
                break
            for i, (_, size, deliver_ms) in enumerate(units):
                offset = self.ingested + i
                if size == 0 or offset in self.recalled:
                    continue  # a gap (a record recovery found damaged), or recalled
                second = due_second(deliver_ms)
                if skip is not None and offset < skip.ingested and second <= skip.delivered_through_sec:
                    continue
                self.wheel.add(second, offset)
                added += 1
            self.ingested += len(units)
        return added

    async def tick(self) -> int:
        """Ingest, then deliver every due second; returns the messages delivered. A
        refusal by the store (leadership lost, storage refusing writes) puts the rest of
        the second back and ends the tick: the next one tries again."""
        async with self._lock:
            return await self._tick()

    async def _tick(self) -> int:
        if not self.active:
            return 0
        self.ingest()
        delivered = 0
        while self.active and (due := self.wheel.pop_due(self._clock())) is not None:
            second, offsets = due
            self._busy = due
            self._progress = 0
            paused = False
            try:
                await self._deliver(offsets)
            except TxmqError as exc:
                self._log_paused(exc.message)
                paused = True
                # The batch may be in the log (refused while settling): whatever is put
                # back is checked for a copy before it is delivered again.
                self._check_below = max(self._check_below, self.ingested)
            finally:
                self._busy = None
                done = self._progress
                delivered += done
                if done < len(offsets) and self.active:
                    self.wheel.put_back(second, offsets[done:])
            if paused:
                break
            if self._pause_logged is not None:
                log.info("timer delivery resumed")
                self._pause_logged = None
            self._through = max(self._through, second)
        if self.duplicates_skipped > self._duplicates_logged:
            log.info(
                "timer: %d timers were delivered before the last restart or failover; not delivered again",
                self.duplicates_skipped - self._duplicates_logged,
            )
            self._duplicates_logged = self.duplicates_skipped
        if self.active:
            self._prepare_ahead()
        return delivered

    async def recall(self, offset: int, deliver_ms: int, unique_id: str) -> SendStatus:
        """Cancel the pending timer at timer-queue offset ``offset`` (due at
        ``deliver_ms``): a recall record naming it is appended to the recall queue and
        the timer leaves the wheel, under the delivery lock, so a timer is delivered or
        recalled, never both. A recalled timer is recalled again at once (OK, nothing
        appended); one delivered (here, or before a restart or failover) is
        CODE_MESSAGE_ALREADY_DELIVERED. Returns how the recall record settled: other than
        OK, it is written here but not yet durable or held by the in-sync replicas (it
        holds on this store; a retry confirms it)."""
        async with self._lock:
            if not self.active:
                raise error(errors_pb2.CODE_SERVICE_NOT_READY, "this store's timer is not active yet; retry")
            if offset in self.recalled:
                return SendStatus.OK
            self.ingest()
            second = due_second(deliver_ms)
            slot = self.wheel.peek(second)
            pending = slot is not None and offset in slot
            if pending and offset < self._check_below and self._host.timer_delivered(offset):
                pending = False  # delivered before a restart or a failover (its re-filed unit is skipped)
            if not pending:
                raise error(
                    errors_pb2.CODE_MESSAGE_ALREADY_DELIVERED,
                    f"the delayed message {unique_id} was delivered (due at {deliver_ms} ms): too late to recall it",
                    unique_id=unique_id,
                )
            appended = self._host.timer_append([self._host.timer_recall_record(offset, deliver_ms, unique_id)])
            self.wheel.remove(second, offset)
            self._ready.pop(offset, None)
            self.recalled.add(offset)
            self.recalled_total += 1
            store_metrics.TIMER_RECALLED.inc()
            return await self._host.timer_settle(appended)

    def _log_paused(self, reason: str) -> None:
        """One line per refusal: again only when the reason changes or after
        PAUSE_LOG_INTERVAL_MS (a full disk refuses every tick)."""
        now = self._clock()
        last = self._pause_logged
        if last is None or last[0] != reason or now - last[1] >= PAUSE_LOG_INTERVAL_MS:
            log.warning("timer delivery paused: %s", reason)
            self._pause_logged = (reason, now)

    def _prepare_ahead(self) -> None:
        """Build some copies of the next due second's timers ahead of it."""
        first = self.wheel.first_second()
        if first is None or first * 1000 - self._clock() > PREPARE_AHEAD_MS:
            return
        if self._ready_second != first:
            self._forget_ready()
            self._ready_second = first
        slot = self.wheel.peek(first)
        if slot is None or self._ready_from >= min(len(slot), PREPARE_MAX):
            return
        part = slot[self._ready_from : self._ready_from + PREPARE_PER_TICK]
        self._ready_from += len(part)
        host = self._host
        units = host.timer_units_at(part)
        entries = [(o, u) for o, u in zip(part, units, strict=True) if u is not None and u[1]]
        copies = host.timer_copies([(o, u[0], u[1]) for o, u in entries], self._check_below)
        ready = self._ready
        for (offset, unit), copy in zip(entries, copies, strict=True):
            ready[offset] = (unit, copy)

    async def _deliver(self, offsets: array) -> None:
        """Deliver the offsets of one second in batches, in order; ``_progress`` says
        how many are done (delivered, or found to need no delivery). A refusal by the
        store propagates; the caller puts back the offsets from ``_progress`` on. Units
        and records are read in bulk (the records of one send lie back to back)."""
        host = self._host
        max_messages, max_bytes = host.timer_batch_limits()
        n = len(offsets)
        i = 0
        while i < n:
            chunk = offsets[i : i + max_messages]
            units: list[tuple[int, int, int] | None] = [None] * len(chunk)
            built: list[Any] = [None] * len(chunk)
            ready = self._ready
            missing = list(range(len(chunk)))
            if ready:  # built ahead
                missing = []
                for k, offset in enumerate(chunk):
                    got = ready.pop(offset, None)
                    if got is None:
                        missing.append(k)
                    else:
                        units[k], built[k] = got
            if missing:
                looked_up = host.timer_units_at([chunk[k] for k in missing])
                at = [k for k, u in zip(missing, looked_up, strict=True) if u is not None and u[1]]
                for k, u in zip(missing, looked_up, strict=True):
                    units[k] = u
                entries = [(chunk[k], units[k][0], units[k][1]) for k in at]  # type: ignore[index]
                for k, copy in zip(at, host.timer_copies(entries, self._check_below), strict=True):
                    built[k] = copy
            found: list[Any] = [None] * len(chunk)
            for k, copy in enumerate(built):
                if copy is None:
                    continue
                if copy is DUPLICATE:
                    self.duplicates_skipped += 1
                elif copy is DROPPED:
                    self.dropped_total += 1
                else:
                    found[k] = copy
            batch: list[Any] = []
            first_due: int | None = None
            body_bytes = 0
            taken = 0
            for k, copy in enumerate(found):
                if copy is not None:
                    if batch and body_bytes + len(copy.body) > max_bytes:
                        break
                    batch.append(copy)
                    due = units[k][2]  # type: ignore[index]
                    first_due = due if first_due is None else min(first_due, due)
                    body_bytes += len(copy.body)
                taken = k + 1
            if batch:
                await self._append(batch)
                self.delivered_total += len(batch)
                store_metrics.TIMER_DELIVERED.inc(len(batch))
                self.last_lag_ms = max(0, self._clock() - (first_due or 0))
            i += taken
            self._progress = i

    async def _append(self, batch: list[Any]) -> None:
        """Append a batch and wait until it is settled (durable per the flush mode, held
        by the in-sync replicas of a replicated group)."""
        host = self._host
        appended = host.timer_append(batch)
        while (status := await host.timer_settle(appended)) != SendStatus.OK:
            log.warning("timer delivery waits for its batch to settle (%s)", status.name)
            await asyncio.sleep(TICK_MS / 1000)
        self._delivered_end = max(self._delivered_end, appended.end)

    # -- persistence -----------------------------------------------------------------

    def snapshot(self) -> TimerCheckpoint:
        """(Q, T, L) as of now: what is pending (in the wheel or being delivered) is
        neither below L nor covered by T."""
        q = self.ingested
        first = self.wheel.first_second()
        through = self._through
        low = self.wheel.min_offset()
        busy = self._busy
        if busy is not None:
            through = min(through, busy[0] - 1)
            if busy[1]:
                low = min(busy[1]) if low is None else min(low, min(busy[1]))
        if first is not None:
            through = min(through, first - 1)
        return TimerCheckpoint(q, through, q if low is None else min(low, q))

    async def checkpoint(self) -> TimerCheckpoint | None:
        """Write the checkpoint (active timers only), after the delivered copies it
        covers are flushed. A checkpoint equal to the one the file holds (nothing
        ingested or delivered since: a store without timers) is not written again: the
        file already holds it durably, so the write and its two fsyncs are skipped."""
        if not self.active:
            return None
        snap = self.snapshot()
        if snap == self._saved and self.path.exists():
            return snap
        end = self._delivered_end
        await self._host.timer_flush(end)
        await asyncio.to_thread(snap.save, self.path)
        self._saved = snap
        return snap

    def keep_from(self) -> int | None:
        """The lowest timer-queue offset still pending (its record must not expire)."""
        snap = self.snapshot() if self.active else TimerCheckpoint.load(self.path)
        return None if snap is None else snap.delivered_below


class Timers:
    """The store's side of its timer: what ``Timer`` reads and appends through (it
    implements ``TimerHost`` on the timer queue, the commit log and the store's append
    path), the delivery task, and the oldest record retention must keep for it.
    ``may_run()``: whether this store delivers timers now (the writable store only: a
    replicated group's leader once it took writes; never a follower). ``append``
    appends copies (all or nothing, refused while the store takes no writes),
    ``settle`` waits for them per the flush mode, ``read_record(offset, boundary=)``
    reads a record with damage reported and raised as CODE_DATA_CORRUPTED."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        path: Path,
        clock: Callable[[], int],
        commitlog: CommitLog,
        dispatcher: Dispatcher,
        topics: TopicConfigTable,
        queues: WriteQueues,
        corruption: CorruptionLog,
        append: Callable[[list[PreparedRecord]], Any],
        settle: Callable[[Any], Awaitable[SendStatus]],
        read_record: Callable[..., StoredMessage | None],
        may_run: Callable[[], bool],
        disk_full: DiskFullLog,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._commitlog = commitlog
        self._dispatcher = dispatcher
        self._topics = topics
        self._queues = queues
        self._corruption = corruption
        self._append = append
        self._settle = settle
        self._read_record = read_record
        self._may_run = may_run
        self._disk_full = disk_full
        self.timer = Timer(self, path=path, clock=clock)

    # -- the delivery task -----------------------------------------------------------

    def start(self) -> None:
        if self._may_run():
            self.timer.activate()  # a store that is writable at once: pending timers filed now

    async def run(self, stop: asyncio.Event) -> None:
        """Every TICK_MS: (de)activate the timer as the store becomes (un)writable,
        deliver what is due; write the timer checkpoint every
        flush_consume_queue_interval_ms."""
        timer = self.timer
        loop = asyncio.get_running_loop()
        next_checkpoint = loop.time() + self._settings.flush_consume_queue_interval_ms / 1000
        while not stop.is_set():
            try:
                if self._may_run():
                    if not timer.active:
                        timer.activate()
                    await timer.tick()
                    if loop.time() >= next_checkpoint:
                        next_checkpoint = loop.time() + self._settings.flush_consume_queue_interval_ms / 1000
                        await self._checkpoint()
                elif timer.active:
                    timer.deactivate()
            except Exception:
                log.exception("the timer's delivery failed; it starts again from its checkpoint")
                timer.deactivate()
            delay = TICK_MS / 1000
            first = timer.wheel.first_second() if timer.active else None
            if first is not None:  # wake at the second a timer is due, not up to a tick later
                delay = min(delay, max(0.0, (first * 1000 - self._clock()) / 1000))
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass

    async def _checkpoint(self, *, then: str = "tried again as scheduled") -> None:
        """The timer checkpoint. A full disk refusing it is logged, not raised: delivery
        goes on, and a restart checks what was delivered since the last checkpoint."""
        try:
            await self.timer.checkpoint()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self._disk_full.failed("the timer checkpoint", exc, then=then)
        else:
            self._disk_full.succeeded("the timer checkpoint")

    async def checkpoint_quietly(self) -> None:
        try:
            await self._checkpoint(then="a restart checks what was delivered since the last one")
        except Exception:
            log.exception("writing the timer checkpoint failed")

    def keep_from_offset(self) -> int | None:
        """The commit-log offset of the oldest pending timer record (retention keeps it)."""
        cq = self._dispatcher.consume_queue(TIMER_TOPIC, TIMER_QUEUE_ID)
        if cq is None or cq.max_offset == cq.min_offset:
            return None
        low = self.timer.keep_from()
        low = cq.min_offset if low is None else max(low, cq.min_offset)
        if not self.timer.active:
            # A follower (or a store whose timer has not started): keep from the first
            # timer not yet due, for a leader to come.
            now = self._clock()
            stop = min(cq.max_offset, low + 100_000)  # bounded: at worst it keeps more
            while low < stop:
                unit = cq.unit(low)
                if unit is None or (unit[1] and unit[2] > now):
                    break
                low += 1
        unit = cq.unit(low)
        return None if unit is None else unit[0]

    # -- TimerHost ----------------------------------------------------------------------

    def timer_queue_bounds(self) -> tuple[int, int]:
        cq = self._dispatcher.consume_queue(TIMER_TOPIC, TIMER_QUEUE_ID)
        return (0, 0) if cq is None else (cq.min_offset, cq.max_offset)

    def timer_units(self, offset: int, max_units: int, queue_id: int = TIMER_QUEUE_ID) -> list[tuple[int, int, int]]:
        cq = self._dispatcher.consume_queue(TIMER_TOPIC, queue_id)
        if cq is None:
            return []
        out: list[tuple[int, int, int]] = []
        while len(out) < max_units and offset < cq.max_offset:
            units = cq.read_units(offset, max_units - len(out))
            if units is None:  # expired: its file is gone
                return out
            got = list(UNIT.iter_unpack(units))
            if not got:
                break
            out.extend(got)
            offset += len(got)
        return out

    def timer_units_at(self, offsets: Sequence[int]) -> list[tuple[int, int, int] | None]:
        cq = self._dispatcher.consume_queue(TIMER_TOPIC, TIMER_QUEUE_ID)
        if cq is None:
            return [None] * len(offsets)
        out: list[tuple[int, int, int] | None] = []
        i, n = 0, len(offsets)
        while i < n:
            j = i + 1
            while j < n and offsets[j] == offsets[j - 1] + 1:
                j += 1  # a run of consecutive offsets: one read
            units = cq.read_units(offsets[i], j - i)
            got = list(UNIT.iter_unpack(units)) if units else []
            out.extend(got)
            out.extend(cq.unit(offsets[k]) for k in range(i + len(got), j))  # past a file's end
            i = j
        return out

    def timer_copies(self, entries: Sequence[tuple[int, int, int]], check_below: int) -> list[PreparedRecord | str]:
        """The real messages of timer records (timer-queue offset, commit-log offset,
        size), built from the records' bytes: records that lie back to back are read
        with one pread, each is CRC-checked, and its copy keeps body (and body CRC),
        flag, born time and host, reconsume times, unique id, tags, keys and user
        properties; REAL_TOPIC / REAL_QID go, TXMQ_TIMER_OFFSET comes. An entry below
        ``check_below`` whose copy the real topic already holds is DUPLICATE."""
        out: list[PreparedRecord | str] = []
        cl = self._commitlog
        i, n = 0, len(entries)
        while i < n:
            start = entries[i][1]
            j, end = i + 1, start + entries[i][2]
            while j < n and entries[j][1] == end and end - start < READ_BYTES:
                end += entries[j][2]  # records back to back: one read
                j += 1
            span = cl.read(start, end - start)
            for timer_offset, phys, size in entries[i:j]:
                buf, pos = (cl.read(phys, size), 0) if span is None else (span, phys - start)
                if buf is None:  # its segment is gone (retention keeps pending timers' segments)
                    log.error("timer %d: no record at %d any more; not delivered", timer_offset, phys)
                    out.append(DROPPED)
                    continue
                try:
                    verify_record(buf, pos, phys)
                    out.append(self._timer_copy(buf, pos, timer_offset, check_below))
                except CorruptRecord as exc:
                    self._corruption.report(phys, str(exc))
                    log.error("timer %d: its record at %d cannot be read (%s); not delivered", timer_offset, phys, exc)
                    out.append(DROPPED)
            i = j
        return out

    def _timer_copy(self, buf: bytes, pos: int, timer_offset: int, check_below: int) -> PreparedRecord | str:
        (_, body_crc, _, flag, _, phys, _, born_ts, born_host, _, _, reconsume, _, body, _, text) = record_fields(
            buf, pos
        )
        props = decode_properties(text)
        tags, keys, unique_id = pop_field_properties(props)
        topic = props.pop(PROPERTY_REAL_TOPIC, "")
        real_queue = props.pop(PROPERTY_REAL_QUEUE_ID, "")
        cfg = self._topics.get(topic)
        if cfg is None:
            log.warning("timer %d: topic %r is gone; its delayed message %s is not delivered", timer_offset, topic,
                        unique_id)  # fmt: skip
            return DROPPED
        if timer_offset < check_below and self._timer_copy_exists(topic, unique_id, timer_offset, phys, body_crc):
            return DUPLICATE
        queue_id = int(real_queue) if real_queue.isdigit() else -1
        if not 0 <= queue_id < cfg.write_queue_nums:
            queue_id = self._queues.queue_for_send(cfg, None, 0) if cfg.write_queue_nums else 0
        props[PROPERTY_TIMER_OFFSET] = str(timer_offset)
        tail = encode_tail(topic, encode_properties_text(unique_id, tags, keys, props))
        return PreparedRecord(
            topic, queue_id, flag, 0, born_ts, born_host, reconsume, 0, body, body_crc, tail,
            HEADER_SIZE + len(body) + len(tail), cached_tag_code(tags) if tags else 0, tags, keys, unique_id,
            props, None, True, True,
        )  # fmt: skip

    def _timer_copy_exists(self, topic: str, unique_id: str, timer_offset: int, after: int, body_crc: int) -> bool:
        """Whether ``topic`` holds a delivered copy of a timer record (at ``after``): a
        record after it with its unique id, carrying its timer-queue offset
        (TXMQ_TIMER_OFFSET) and its body."""
        want = str(timer_offset)
        dispatched = self._dispatcher.dispatched_offset
        for offset in self._dispatcher.index.lookup(unique_id_hash(unique_id), begin_ms=0, end_ms=END_OF_TIME_MS):
            if not after < offset < dispatched:
                continue
            try:
                msg = self._read_record(offset, boundary=True)
            except TxmqError:
                continue
            if (
                msg is not None
                and msg.topic == topic
                and msg.properties.get(PROPERTY_TIMER_OFFSET) == want
                and msg.body_crc == body_crc
            ):
                return True
        return False

    def timer_append(self, copies: list[PreparedRecord]) -> Any:
        return self._append(copies)

    async def timer_settle(self, appended: Any) -> SendStatus:
        return await self._settle(appended)

    async def timer_flush(self, upto: int) -> None:
        if upto > self._commitlog.flushed_offset:
            await asyncio.to_thread(self._commitlog.flush, upto)

    def timer_batch_limits(self) -> tuple[int, int]:
        return self._settings.max_batch_messages, self._settings.max_batch_bytes

    def timer_recalls(self) -> list[int]:
        cq = self._dispatcher.consume_queue(TIMER_TOPIC, TIMER_RECALL_QUEUE_ID)
        if cq is None:
            return []
        units = self.timer_units(cq.min_offset, cq.max_offset - cq.min_offset, TIMER_RECALL_QUEUE_ID)
        return [recalled for _, size, recalled in units if size]

    def timer_delivered(self, offset: int) -> bool:
        unit = self.timer_units_at([offset])[0]
        if unit is None or not unit[1]:
            return False
        return self.timer_copies([(offset, unit[0], unit[1])], offset + 1)[0] is DUPLICATE

    def timer_recall_record(self, offset: int, deliver_ms: int, unique_id: str) -> PreparedRecord:
        """A record of the recall queue: no body, the recalled timer-queue offset in
        TXMQ_TIMER_RECALL and in its unit's tag-hash field. Indexed under the message's
        unique id as any record of sysflag 0 (``model.is_indexed``): a replica's and a
        recovery's dispatch decide from the sysflag, so the leader's must agree."""
        props = {PROPERTY_TIMER_RECALL: str(offset), PROPERTY_TIMER_DELIVER_MS: str(deliver_ms)}
        tail = encode_tail(TIMER_TOPIC, encode_properties_text(unique_id, "", (), props))
        return PreparedRecord(
            TIMER_TOPIC, TIMER_RECALL_QUEUE_ID, 0, 0, self._clock(), UNKNOWN_HOST, 0, 0, b"", 0, tail,
            HEADER_SIZE + len(tail), offset, "", (), unique_id, props, None, takes_queue_slot(0), is_indexed(0),
        )  # fmt: skip
