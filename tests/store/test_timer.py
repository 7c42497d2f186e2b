"""The timer core (txmq_store/timer.py) on a fake store: when a send is due, the wheel,
due order and batching, the checkpoint and the rebuild rules, the duplicate check. The
clock is a ManualClock: nothing sleeps."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError, error
from txmq.protocol import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_OFFSET
from txmq.v1 import errors_pb2 as E
from txmq_store.model import OutgoingMessage, SendStatus, StoredMessage
from txmq_store.timer import DROPPED, DUPLICATE, Timer, TimerCheckpoint, TimerWheel, delivery_time, due_second

ASYNC = pytest.mark.asyncio(loop_scope="session")

NOW = 1_700_000_000_000
LEVELS = (1_000, 5_000, 10_000)
DAY = 86_400_000


def when(props: dict[str, str], *, now: int = NOW, max_delay: int = DAY) -> int:
    return delivery_time(props, now_ms=now, levels_ms=LEVELS, max_delay_ms=max_delay, index=3)


# -- when a message is due -------------------------------------------------------------


def test_each_delay_property_gives_an_absolute_time() -> None:
    assert when({"TIMER_DELIVER_MS": str(NOW + 60_000)}) == NOW + 60_000
    assert when({"TIMER_DELAY_MS": "60000"}) == NOW + 60_000
    assert when({"TIMER_DELAY_SEC": "60"}) == NOW + 60_000
    assert when({"DELAY": "3"}) == NOW + 10_000
    assert when({"other": "x"}) == 0


def test_a_time_within_the_precision_is_not_delayed() -> None:
    assert when({"TIMER_DELAY_MS": "1000"}) == 0  # <= now + 1 s: stored at once
    assert when({"TIMER_DELAY_MS": "1001"}) == NOW + 1_001
    assert when({"TIMER_DELIVER_MS": "5"}) == 0  # in the past
    assert when({"DELAY": "1"}) == 0  # level 1 is 1 s: within the precision
    assert when({"DELAY": "0"}) == 0  # RocketMQ: level 0 is no delay


@pytest.mark.parametrize(
    "props",
    [
        {"TIMER_DELAY_MS": "-5"},
        {"TIMER_DELAY_MS": "abc"},
        {"TIMER_DELAY_MS": ""},
        {"TIMER_DELAY_SEC": "1.5"},
        {"TIMER_DELIVER_MS": "9" * 30},
        {"DELAY": "4"},
        {"DELAY": "-1"},
        {"TIMER_DELAY_MS": "5000", "DELAY": "2"},
        {"TIMER_DELAY_MS": str(DAY + 1)},
        {"TIMER_DELIVER_MS": str(NOW + DAY + 1)},
        {"TIMER_DELAY_SEC": str(DAY // 1000 + 1)},
    ],
)
def test_a_bad_delay_is_an_illegal_delivery_time(props: dict[str, str]) -> None:
    with pytest.raises(TxmqError) as info:
        when(props)
    assert info.value.code == E.CODE_ILLEGAL_DELIVERY_TIME
    assert info.value.metadata["index"] == "3"


def test_the_refusal_past_the_maximum_names_it() -> None:
    with pytest.raises(TxmqError) as info:
        when({"TIMER_DELAY_MS": str(DAY + 1)})
    assert info.value.metadata["max_delay_ms"] == str(DAY)
    assert when({"TIMER_DELAY_MS": str(DAY)}) == NOW + DAY  # the maximum itself is accepted


def test_a_timer_is_due_at_the_first_whole_second_at_or_after_its_time() -> None:
    assert due_second(5_000) == 5
    assert due_second(5_001) == 6
    assert due_second(5_999) == 6


# -- the wheel -------------------------------------------------------------------------


def test_the_wheel_gives_due_seconds_in_order_and_nothing_early() -> None:
    wheel = TimerWheel()
    for second, offset in [(30, 0), (10, 1), (20, 2), (10, 3)]:
        wheel.add(second, offset)
    assert wheel.pending == 4
    assert wheel.pop_due(9_999) is None
    second, offsets = wheel.pop_due(30_000)  # type: ignore[misc]
    assert (second, list(offsets)) == (10, [1, 3])
    assert wheel.pop_due(30_000)[0] == 20  # type: ignore[index]
    assert wheel.min_offset() == 0
    assert wheel.pop_due(30_000)[0] == 30  # type: ignore[index]
    assert wheel.pending == 0 and wheel.min_offset() is None


# -- a fake store ----------------------------------------------------------------------


@dataclass
class Appended:
    end: int


@dataclass
class Recall:
    offset: int


class FakeHost:
    """The timer queue as a list of (delivery ms, record); appends go to ``delivered``
    (an append is ``end`` += 1); ``fail_next`` refuses appends."""

    def __init__(self) -> None:
        self.timers: list[tuple[int, StoredMessage]] = []
        self.delivered: list[OutgoingMessage] = []
        self.appends = 0
        self.fail_next: TxmqError | None = None
        self.flushed = 0
        self.topics = {"T": 4}
        self.copy_checks = 0
        self.recall_log: list[int] = []  # the recall queue: recalled timer-queue offsets
        self.settle_status = SendStatus.OK

    def schedule(self, deliver_ms: int, *, topic: str = "T", queue_id: int = 1) -> int:
        offset = len(self.timers)
        record = StoredMessage(
            topic="rmq_sys_wheel_timer", body=b"b%d" % offset, tags="tag", keys=("k",),
            properties={PROPERTY_REAL_TOPIC: topic, PROPERTY_REAL_QUEUE_ID: str(queue_id),
                        PROPERTY_TIMER_DELIVER_MS: str(deliver_ms), "user": "v"},
            unique_id=f"U{offset}", flag=0, queue_id=0, queue_offset=offset, commit_log_offset=1000 + offset,
            store_size=100, body_crc=0, sys_flag=0, born_timestamp_ms=42, born_host="", born_port=0,
            store_timestamp_ms=0, store_host="", store_port=0, reconsume_times=0, prepared_transaction_offset=0,
        )  # fmt: skip
        self.timers.append((deliver_ms, record))
        return offset

    def timer_queue_bounds(self) -> tuple[int, int]:
        return 0, len(self.timers)

    def timer_units(self, offset: int, max_units: int) -> list[tuple[int, int, int]]:
        return [(1000 + o, 100, self.timers[o][0]) for o in range(offset, min(offset + max_units, len(self.timers)))]

    def timer_units_at(self, offsets: Sequence[int]) -> list[tuple[int, int, int] | None]:
        return [(1000 + o, 100, self.timers[o][0]) if o < len(self.timers) else None for o in offsets]

    def timer_copies(self, entries: Sequence[tuple[int, int, int]], check_below: int) -> list[Any]:
        out: list[Any] = []
        for offset, phys, _ in entries:
            record = self.timers[phys - 1000][1]
            props = dict(record.properties)
            topic = props.pop(PROPERTY_REAL_TOPIC)
            queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID))
            if topic not in self.topics:
                out.append(DROPPED)
            elif offset < check_below and self.copy_exists(record.unique_id, offset):
                out.append(DUPLICATE)
            else:
                props[PROPERTY_TIMER_OFFSET] = str(offset)
                queue = queue_id if queue_id < self.topics[topic] else None
                copy = OutgoingMessage(topic, record.body, record.tags, record.keys, props, record.unique_id)
                copy.queue_id, copy.born_timestamp_ms = queue, record.born_timestamp_ms
                out.append(copy)
        return out

    def copy_exists(self, unique_id: str, offset: int) -> bool:
        self.copy_checks += 1
        return any(
            m.unique_id == unique_id and m.properties[PROPERTY_TIMER_OFFSET] == str(offset) for m in self.delivered
        )

    def timer_append(self, messages: list[Any]) -> Appended:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        if isinstance(messages[0], Recall):
            self.recall_log.extend(r.offset for r in messages)
            return Appended(len(self.delivered))
        self.appends += 1
        self.delivered.extend(messages)
        return Appended(len(self.delivered))

    async def timer_settle(self, appended: Appended) -> SendStatus:
        return self.settle_status

    async def timer_flush(self, upto: int) -> None:
        self.flushed = max(self.flushed, upto)

    def timer_batch_limits(self) -> tuple[int, int]:
        return 3, 1 << 20

    def timer_recalls(self) -> list[int]:
        return list(self.recall_log)

    def timer_delivered(self, offset: int) -> bool:
        return self.copy_exists(self.timers[offset][1].unique_id, offset)

    def timer_recall_record(self, offset: int, deliver_ms: int, unique_id: str) -> Recall:
        assert (deliver_ms, unique_id) == (self.timers[offset][0], f"U{offset}")
        return Recall(offset)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(wall_ms=NOW)


def new_timer(host: FakeHost, tmp_path: Path, clock: ManualClock) -> Timer:
    timer = Timer(host, path=tmp_path / "timer" / "checkpoint", clock=clock)
    timer.activate()
    return timer


def uids(host: FakeHost) -> list[str]:
    return [m.unique_id for m in host.delivered]


@ASYNC
async def test_due_timers_are_delivered_in_time_order_restored_and_batched(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 3_000)
    host.schedule(NOW + 2_000)
    for _ in range(5):
        host.schedule(NOW + 2_500)
    assert await timer.tick() == 0 and timer.wheel.pending == 7
    clock.advance(2_000)
    assert await timer.tick() == 1 and uids(host) == ["U1"]
    clock.advance(999)
    assert await timer.tick() == 0  # 2.5 s is due at 3 s: never early
    clock.advance(1)
    assert await timer.tick() == 6
    assert uids(host) == ["U1", "U0", "U2", "U3", "U4", "U5", "U6"]  # 2.5 s and 3 s share second 3
    assert host.appends == 1 + 2  # batches of at most 3: second 3's six timers in 2 appends
    first = host.delivered[0]
    assert (first.topic, first.queue_id, first.tags, first.keys, first.born_timestamp_ms) == ("T", 1, "tag", ("k",), 42)
    assert first.properties == {"user": "v", PROPERTY_TIMER_DELIVER_MS: str(NOW + 2_000), PROPERTY_TIMER_OFFSET: "1"}
    assert timer.delivered_total == 7 and timer.wheel.pending == 0


@ASYNC
async def test_a_gone_topic_or_queue_does_not_stop_the_others(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000, topic="Gone")
    host.schedule(NOW + 2_000, queue_id=9)  # the topic has 4 queues now: any queue
    host.schedule(NOW + 2_000)
    clock.advance(2_000)
    await timer.tick()
    assert [(m.unique_id, m.queue_id) for m in host.delivered] == [("U1", None), ("U2", 1)]
    assert timer.dropped_total == 1


@ASYNC
async def test_a_refused_append_puts_the_rest_back_and_the_next_tick_delivers_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    for _ in range(5):
        host.schedule(NOW + 2_000)
    clock.advance(2_000)
    timer.ingest()
    original = host.timer_append
    calls = 0

    def second_fails(messages: list[OutgoingMessage]) -> Appended:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise error(E.CODE_DISK_FULL, "full")
        return original(messages)

    host.timer_append = second_fails  # type: ignore[method-assign]
    await timer.tick()
    assert uids(host) == ["U0", "U1", "U2"] and timer.wheel.pending == 2
    snap = timer.snapshot()
    assert snap.delivered_below == 3 and snap.delivered_through_sec < due_second(NOW + 2_000)
    await timer.tick()
    assert uids(host) == ["U0", "U1", "U2", "U3", "U4"]  # nothing twice


@ASYNC
async def test_a_delivery_refused_every_tick_is_logged_once_a_minute(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="txmq.store.timer")
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000)
    clock.advance(2_000)
    for _ in range(50):  # a full disk: every tick is refused
        host.fail_next = error(E.CODE_DISK_FULL, "the store's disk is full")
        await timer.tick()
        clock.advance(100)
    clock.advance(60_000)
    host.fail_next = error(E.CODE_DISK_FULL, "the store's disk is full")
    await timer.tick()
    await timer.tick()  # space again
    assert uids(host) == ["U0"]
    lines = [r.getMessage() for r in caplog.records if "delivery" in r.getMessage()]
    assert lines == ["timer delivery paused: the store's disk is full"] * 2 + ["timer delivery resumed"]


@ASYNC
async def test_checkpoint_and_rebuild_skip_what_was_delivered(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 5_000)  # 0: pending at the checkpoint
    host.schedule(NOW + 2_000)  # 1: delivered before it
    host.schedule(NOW + 2_000)  # 2: delivered before it
    clock.advance(2_000)
    await timer.tick()
    cp = await timer.checkpoint()
    assert cp == TimerCheckpoint(ingested=3, delivered_through_sec=due_second(NOW + 2_000), delivered_below=0)
    assert TimerCheckpoint.load(timer.path) == cp
    assert host.flushed == 2  # the delivered copies were flushed before the checkpoint
    # A restart: only the pending timer comes back.
    again = new_timer(host, tmp_path, clock)
    assert again.wheel.pending == 1
    clock.advance(3_000)
    await again.tick()
    assert uids(host) == ["U1", "U2", "U0"]


@ASYNC
async def test_a_crash_after_delivery_before_the_checkpoint_delivers_nothing_twice(
    tmp_path: Path, clock: ManualClock
) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    for _ in range(4):
        host.schedule(NOW + 2_000)
    host.schedule(NOW + 4_000)
    await timer.checkpoint()  # nothing delivered yet
    clock.advance(2_000)
    await timer.tick()  # 4 delivered; the process dies before the next checkpoint
    assert len(host.delivered) == 4
    restarted = new_timer(host, tmp_path, clock)
    assert restarted.wheel.pending == 5  # all filed again, each checked before delivery
    clock.advance(2_000)
    await restarted.tick()
    assert uids(host) == ["U0", "U1", "U2", "U3", "U4"]
    assert restarted.duplicates_skipped == 4


@ASYNC
async def test_timers_filed_after_the_rebuild_are_not_checked(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000)
    clock.advance(2_000)
    await timer.tick()
    assert host.copy_checks == 0  # ingested by this run: it cannot have been delivered before


@ASYNC
async def test_a_timer_filed_late_for_a_delivered_second_holds_the_checkpoint_back(
    tmp_path: Path, clock: ManualClock
) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000)
    clock.advance(5_000)
    await timer.tick()
    host.schedule(NOW + 3_000)  # dispatched late (e.g. a sync flush): due, not yet delivered
    timer.ingest()
    snap = timer.snapshot()
    assert snap.delivered_through_sec < due_second(NOW + 3_000) and snap.delivered_below == 1
    await timer.tick()
    assert uids(host) == ["U0", "U1"]


@ASYNC
async def test_a_new_leader_without_a_checkpoint_checks_every_timer(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    old = new_timer(host, tmp_path / "old", clock)
    for _ in range(3):
        host.schedule(NOW + 2_000)
    host.schedule(NOW + 9_000)
    clock.advance(2_000)
    await old.tick()
    old.deactivate()
    new = new_timer(host, tmp_path / "new", clock)  # its own (no) checkpoint
    clock.advance(8_000)
    await new.tick()
    assert uids(host) == ["U0", "U1", "U2", "U3"] and new.duplicates_skipped == 3


@ASYNC
async def test_an_unreadable_checkpoint_is_a_missing_one(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    path = tmp_path / "timer" / "checkpoint"
    path.parent.mkdir()
    path.write_text("{torn")
    host.schedule(NOW + 2_000)
    timer = new_timer(host, tmp_path, clock)
    assert timer.wheel.pending == 1


@ASYNC
async def test_the_next_seconds_copies_are_built_ahead_and_late_ones_still_go(
    tmp_path: Path, clock: ManualClock
) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    for _ in range(4):
        host.schedule(NOW + 3_000)
    built = 0
    real = host.timer_copies

    def counting(entries: Sequence[tuple[int, int, int]], check_below: int) -> list[Any]:
        nonlocal built
        built += len(entries)
        return real(entries, check_below)

    host.timer_copies = counting  # type: ignore[method-assign]
    clock.advance(500)
    await timer.tick()
    assert built == 0  # 2.5 s ahead: not yet
    clock.advance(1_000)
    await timer.tick()
    assert built == 4 and host.delivered == []  # built, not delivered: 1.5 s early
    host.schedule(NOW + 3_000)  # a late one for the same second
    clock.advance(1_500)
    await timer.tick()
    assert uids(host) == ["U0", "U1", "U2", "U3", "U4"] and built == 5


# -- recall ------------------------------------------------------------------------------


async def recall(timer: Timer, host: FakeHost, offset: int) -> SendStatus:
    return await timer.recall(offset, host.timers[offset][0], f"U{offset}")


@ASYNC
async def test_a_recalled_timer_is_never_delivered_also_after_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    for _ in range(3):
        host.schedule(NOW + 2_000)
    assert await recall(timer, host, 1) == SendStatus.OK  # not ingested yet: the recall reads it first
    assert host.recall_log == [1] and timer.wheel.pending == 2
    assert await recall(timer, host, 1) == SendStatus.OK and host.recall_log == [1]  # again: nothing appended
    restarted = new_timer(host, tmp_path, clock)  # no checkpoint: every unit filed again, minus the recalled
    assert restarted.wheel.pending == 2 and restarted.recalled == {1}
    clock.advance(2_000)
    await restarted.tick()
    assert uids(host) == ["U0", "U2"]


@ASYNC
async def test_a_delivered_timer_cannot_be_recalled(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000)
    clock.advance(2_000)
    await timer.tick()
    with pytest.raises(TxmqError) as caught:
        await recall(timer, host, 0)
    assert caught.value.code == E.CODE_MESSAGE_ALREADY_DELIVERED and caught.value.metadata == {"unique_id": "U0"}
    assert host.recall_log == []


@ASYNC
async def test_a_timer_delivered_before_a_crash_and_filed_again_cannot_be_recalled(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Delivered, then the process died before its checkpoint: the rebuild files it
    again (its copy is found only at delivery); a recall finds the copy first."""
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000)
    host.schedule(NOW + 5_000)
    await timer.checkpoint()
    clock.advance(2_000)
    await timer.tick()
    restarted = new_timer(host, tmp_path, clock)
    assert restarted.wheel.pending == 2
    with pytest.raises(TxmqError) as caught:
        await recall(restarted, host, 0)
    assert caught.value.code == E.CODE_MESSAGE_ALREADY_DELIVERED
    assert await recall(restarted, host, 1) == SendStatus.OK
    clock.advance(5_000)
    await restarted.tick()
    assert uids(host) == ["U0"] and restarted.duplicates_skipped == 1


@ASYNC
async def test_a_recall_drops_a_copy_built_ahead_and_the_checkpoint_passes_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000)
    clock.advance(1_000)
    await timer.tick()  # its copy is built ahead
    assert 0 in timer._ready
    host.settle_status = SendStatus.FLUSH_REPLICA_TIMEOUT
    assert await recall(timer, host, 0) == SendStatus.FLUSH_REPLICA_TIMEOUT  # written here: it holds here
    clock.advance(1_000)
    assert await timer.tick() == 0 and host.delivered == []
    cp = await timer.checkpoint()  # the emptied second is passed
    assert cp == TimerCheckpoint(ingested=1, delivered_through_sec=due_second(NOW + 2_000), delivered_below=1)


@ASYNC
async def test_a_recall_on_an_inactive_timer_is_refused_as_not_ready(tmp_path: Path, clock: ManualClock) -> None:
    host = FakeHost()
    timer = new_timer(host, tmp_path, clock)
    host.schedule(NOW + 2_000)
    timer.deactivate()
    with pytest.raises(TxmqError) as caught:
        await recall(timer, host, 0)
    assert caught.value.code == E.CODE_SERVICE_NOT_READY and host.recall_log == []
