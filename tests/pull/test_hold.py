"""The hold service on a manual clock: timeouts, wake-ups by matching arrivals only, the
lost-wake-up race, re-checks, the backstop sweep, the bound, cancellation, idleness."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2
from txmq_pull.filters import PullFilter, parse_filter
from txmq_pull.hold import READ_WATCH_BUFFER, ArrivalEvent, HoldService, QueueKey, WakeReason
from txmq_runtime.tags import tag_hash_code

KEY = QueueKey("s1", "Topic", 0)
OTHER_QUEUE = QueueKey("s1", "Topic", 1)
OTHER_STORE = QueueKey("s2", "Topic", 0)
CHECK_MS = 5_000
GUARD_S = 5  # a hang guard, not a timing claim


def tags(expr: str) -> PullFilter:
    return parse_filter(
        common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=expr), property_filter_enable=True
    )


def sql(expr: str) -> PullFilter:
    return parse_filter(
        common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression=expr), property_filter_enable=True
    )


EVERYTHING = tags("*")


def arrival(key: QueueKey, queue_offset: int, tag: str = "", **properties: str) -> ArrivalEvent:
    return ArrivalEvent(key, queue_offset, queue_offset + 1, tag_hash_code(tag), properties)


@dataclass
class Env:
    clock: ManualClock
    hold: HoldService
    max_offsets: dict[QueueKey, int] = field(default_factory=dict)

    def park(
        self, key: QueueKey = KEY, *, offset: int = 0, matcher: PullFilter = EVERYTHING, timeout_ms: int = 15_000
    ) -> asyncio.Task[WakeReason]:
        """A pull that read nothing at ``offset`` and parks (its watch opened just now)."""
        watch = self.hold.watch(key)
        deadline = self.clock.now_ms() + timeout_ms
        return asyncio.ensure_future(self.hold.park(watch, offset=offset, matcher=matcher, deadline_ms=deadline))


async def settle() -> None:
    """Let every ready callback run (the timer task, woken parks)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def result(task: asyncio.Task[WakeReason]) -> WakeReason:
    return await asyncio.wait_for(task, GUARD_S)


def make_env(*, max_held: int = 1_000) -> Env:
    clock = ManualClock()
    env = Env(clock, None)  # type: ignore[arg-type]

    async def max_offsets(keys):
        return {k: env.max_offsets[k] for k in keys if k in env.max_offsets}

    env.hold = HoldService(clock=clock, check_interval_ms=CHECK_MS, max_held=max_held, max_offsets=max_offsets)
    env.hold.start()
    return env


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    e = make_env()
    try:
        yield e
    finally:
        await e.hold.close()


async def test_held_pull_times_out_at_its_deadline(env: Env) -> None:
    task = env.park(timeout_ms=15_000)
    await settle()
    assert env.hold.held_count == 1
    env.clock.advance(14_999)
    await settle()
    assert not task.done()
    env.clock.advance(1)
    assert await result(task) is WakeReason.TIMEOUT
    assert env.hold.held_count == 0


async def test_an_earlier_deadline_parked_later_is_not_missed(env: Env) -> None:
    slow = env.park(timeout_ms=10_000)
    await settle()
    fast = env.park(timeout_ms=1_000)
    env.clock.advance(1_000)
    assert await result(fast) is WakeReason.TIMEOUT
    assert not slow.done()
    env.clock.advance(9_000)
    assert await result(slow) is WakeReason.TIMEOUT


async def test_matching_arrival_wakes_the_pull(env: Env) -> None:
    task = env.park(offset=3, matcher=tags("A || B"))
    await settle()
    env.hold.on_arrivals([arrival(KEY, 3, "B")])
    assert await result(task) is WakeReason.ARRIVAL
    assert env.hold.held_count == 0


async def test_non_matching_tag_other_queue_and_old_offset_do_not_wake(env: Env) -> None:
    task = env.park(offset=3, matcher=tags("A"))
    await settle()
    env.hold.on_arrivals(
        [
            arrival(KEY, 3, "B"),  # other tag
            arrival(KEY, 4, ""),  # no tag
            arrival(OTHER_QUEUE, 9, "A"),  # other queue
            arrival(OTHER_STORE, 9, "A"),  # same topic/queue on another store
            arrival(KEY, 2, "A"),  # behind the pull's offset (max offset 3)
        ]
    )
    await settle()
    assert not task.done()
    assert env.hold.held_on(KEY) == 1
    env.hold.on_arrivals([arrival(KEY, 5, "A")])
    assert await result(task) is WakeReason.ARRIVAL


async def test_sql92_filter_decides_the_wake_up(env: Env) -> None:
    task = env.park(offset=0, matcher=sql("a > 5"))
    await settle()
    env.hold.on_arrivals([arrival(KEY, 0, a="1"), arrival(KEY, 1, b="9"), arrival(KEY, 2, a="oops")])
    await settle()
    assert not task.done()
    env.hold.on_arrivals([arrival(KEY, 3, a="6")])
    assert await result(task) is WakeReason.ARRIVAL


async def test_only_the_pulls_an_arrival_matches_wake(env: Env) -> None:
    a = env.park(matcher=tags("A"))
    b = env.park(matcher=tags("B"))
    every = env.park(matcher=EVERYTHING)
    await settle()
    env.hold.on_arrivals([arrival(KEY, 0, "A")])
    assert await result(a) is WakeReason.ARRIVAL
    assert await result(every) is WakeReason.ARRIVAL
    assert not b.done()
    assert env.hold.held_on(KEY) == 1


async def test_arrival_between_read_and_park_wakes_at_once(env: Env) -> None:
    """The lost-wake-up race (RocketMQ #7358): the watch opened before the read records the
    arrival, so park does not wait at all."""
    watch = env.hold.watch(KEY)
    # ... the read runs and finds nothing at offset 4; meanwhile the message arrives:
    env.hold.on_arrivals([arrival(KEY, 4, "A")])
    deadline = env.clock.now_ms() + 15_000
    reason = await asyncio.wait_for(env.hold.park(watch, offset=4, matcher=tags("A"), deadline_ms=deadline), GUARD_S)
    assert reason is WakeReason.ARRIVAL
    assert env.hold.held_count == 0
    assert not env.hold.interested(KEY)  # the watch is closed


async def test_non_matching_arrival_during_the_read_does_not_wake(env: Env) -> None:
    watch = env.hold.watch(KEY)
    env.hold.on_arrivals([arrival(KEY, 4, "B"), arrival(KEY, 3, "A")])  # wrong tag; before the offset
    deadline = env.clock.now_ms() + 15_000
    task = asyncio.ensure_future(env.hold.park(watch, offset=4, matcher=tags("A"), deadline_ms=deadline))
    await settle()
    assert not task.done()
    env.hold.on_arrivals([arrival(KEY, 5, "A")])
    assert await result(task) is WakeReason.ARRIVAL


async def test_arrivals_before_the_watch_are_not_counted(env: Env) -> None:
    env.hold.on_arrivals([arrival(KEY, 4, "A")])  # the read would have seen it
    task = env.park(offset=5, matcher=tags("A"))
    await settle()
    assert not task.done()
    env.clock.advance(15_000)
    assert await result(task) is WakeReason.TIMEOUT


async def test_overflow_rechecks_the_pulls_of_that_store_only(env: Env) -> None:
    here = env.park(KEY)
    there = env.park(OTHER_STORE)
    await settle()
    reading = env.hold.watch(OTHER_QUEUE)  # a read in flight on the overflowed store
    env.hold.recheck_store("s1")
    assert await result(here) is WakeReason.RECHECK
    await settle()
    assert not there.done()
    deadline = env.clock.now_ms() + 15_000
    assert await env.hold.park(reading, offset=0, matcher=EVERYTHING, deadline_ms=deadline) is WakeReason.RECHECK
    env.hold.recheck_all()
    assert await result(there) is WakeReason.RECHECK


async def test_recheck_asks_the_store_first_so_pulls_that_are_level_stay_held(env: Env) -> None:
    """An overflow / re-opened stream does not make every held pull re-read: only those
    the store's max offset is past (one offsets look-up per topic)."""
    level = env.park(KEY, offset=5)
    behind = env.park(OTHER_QUEUE, offset=5)
    await settle()
    env.max_offsets.update({KEY: 5, OTHER_QUEUE: 7})
    env.hold.recheck_store("s1")
    assert await result(behind) is WakeReason.RECHECK
    await settle()
    assert not level.done()


async def test_recheck_rereads_everything_when_the_store_cannot_say() -> None:
    clock = ManualClock()

    async def broken(keys):
        raise ConnectionError("store down")

    hold = HoldService(clock=clock, check_interval_ms=CHECK_MS, max_held=10, max_offsets=broken)
    hold.start()
    try:
        watch = hold.watch(KEY)
        task = asyncio.ensure_future(hold.park(watch, offset=0, matcher=EVERYTHING, deadline_ms=clock.now_ms() + 1))
        await settle()
        hold.recheck_store("s1")
        assert await result(task) is WakeReason.RECHECK
    finally:
        await hold.close()


async def test_a_read_that_saw_too_many_arrivals_rechecks(env: Env) -> None:
    watch = env.hold.watch(KEY)
    env.hold.on_arrivals([arrival(KEY, i, "B") for i in range(READ_WATCH_BUFFER + 1)])
    deadline = env.clock.now_ms() + 15_000
    assert await env.hold.park(watch, offset=0, matcher=tags("A"), deadline_ms=deadline) is WakeReason.RECHECK


async def test_backstop_rechecks_pulls_behind_the_max_offset(env: Env) -> None:
    behind = env.park(KEY, offset=5, timeout_ms=60_000)
    level = env.park(OTHER_QUEUE, offset=5, timeout_ms=60_000)
    await settle()
    env.max_offsets.update({KEY: 6, OTHER_QUEUE: 5})
    env.clock.advance(CHECK_MS - 1)
    await settle()
    assert env.hold.sweeps == 0
    env.clock.advance(1)
    assert await result(behind) is WakeReason.RECHECK
    assert env.hold.sweeps == 1
    assert not level.done()
    env.clock.advance(CHECK_MS)
    await settle()
    assert env.hold.sweeps == 2
    assert not level.done()


async def test_backstop_failure_keeps_the_pulls_held() -> None:
    clock = ManualClock()

    async def broken(keys):
        raise ConnectionError("store down")

    hold = HoldService(clock=clock, check_interval_ms=CHECK_MS, max_held=10, max_offsets=broken)
    hold.start()
    try:
        watch = hold.watch(KEY)
        task = asyncio.ensure_future(
            hold.park(watch, offset=0, matcher=EVERYTHING, deadline_ms=clock.now_ms() + 60_000)
        )
        await settle()
        clock.advance(CHECK_MS)
        await settle()
        assert hold.sweeps == 1
        assert not task.done()
    finally:
        await hold.close()
    assert await result(task) is WakeReason.TIMEOUT  # close answers held pulls


async def test_idle_hold_service_has_no_timer(env: Env) -> None:
    await settle()
    assert env.clock.sleepers == 0  # nothing held: the timer waits without a deadline
    task = env.park(timeout_ms=1_000)
    await settle()
    assert env.clock.sleepers == 1
    env.hold.on_arrivals([arrival(KEY, 0)])
    assert await result(task) is WakeReason.ARRIVAL
    env.clock.advance(CHECK_MS)  # the sweep that was due finds nothing held and stops
    await settle()
    assert env.hold.sweeps == 0
    assert env.clock.sleepers == 0


async def test_admission_is_bounded() -> None:
    env = make_env(max_held=2)
    try:
        with env.hold.admit(), env.hold.admit():
            assert env.hold.admitted_count == 2
            with pytest.raises(TxmqError) as info, env.hold.admit():
                pass
            assert info.value.code == errors_pb2.CODE_TOO_MANY_REQUESTS
            assert info.value.retriable
        assert env.hold.admitted_count == 0
        with env.hold.admit():
            pass
    finally:
        await env.hold.close()


async def test_cancelled_pull_leaves_nothing_behind(env: Env) -> None:
    task = env.park(offset=0, matcher=tags("A"))
    await settle()
    assert env.hold.held_on(KEY) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.hold.held_count == 0
    assert env.hold.held_on(KEY) == 0
    assert not env.hold.interested(KEY)
    env.hold.on_arrivals([arrival(KEY, 0, "A")])  # nobody to wake, nothing breaks
    other = env.park(timeout_ms=1_000)
    env.clock.advance(1_000)
    assert await result(other) is WakeReason.TIMEOUT


async def test_deadline_already_passed_times_out_at_once(env: Env) -> None:
    watch = env.hold.watch(KEY)
    assert (
        await env.hold.park(watch, offset=0, matcher=EVERYTHING, deadline_ms=env.clock.now_ms()) is WakeReason.TIMEOUT
    )
    assert env.hold.held_count == 0


async def test_many_pulls_woken_early_do_not_pile_up_in_the_timer(env: Env) -> None:
    for round_ in range(3):
        tasks = [env.park(offset=0, timeout_ms=60_000) for _ in range(100)]
        await settle()
        env.hold.on_arrivals([arrival(KEY, 0)])
        assert {await result(t) for t in tasks} == {WakeReason.ARRIVAL}
        env.clock.advance(1)
        await settle()
    assert len(env.hold._heap) <= 64 + 100
    last = env.park(timeout_ms=10)
    env.clock.advance(10)
    assert await result(last) is WakeReason.TIMEOUT
