"""The one clock abstraction (txmq_runtime.clock) and the suite's manual clock
(tests/support/clock.py): sleepers and waiters wake exactly when time reaches them."""

from __future__ import annotations

import asyncio

import pytest
from support.clock import ManualClock, settle, until

from txmq_runtime.clock import SYSTEM_CLOCK, Clock, wall_clock_ms


def test_manual_wall_and_monotonic_time_move_together_and_wall_may_step() -> None:
    clock = ManualClock(5_000, wall_ms=1_700_000_000_000)
    clock.advance(250)
    assert (clock.now_ms(), clock.wall_ms(), clock()) == (5_250, 1_700_000_000_250, 1_700_000_000_250)
    clock.set_wall_ms(1_600_000_000_000)  # NTP steps the wall clock back: monotonic time stays
    assert (clock.now_ms(), clock.wall_ms()) == (5_250, 1_600_000_000_000)
    with pytest.raises(ValueError):
        clock.advance(-1)


async def test_manual_sleep_ends_exactly_when_time_reaches_it() -> None:
    clock = ManualClock()
    sleeper = asyncio.ensure_future(clock.sleep_ms(100))
    await until(lambda: clock.sleepers == 1)
    clock.advance(99)
    await settle()
    assert not sleeper.done()
    clock.advance(1)
    await asyncio.wait_for(sleeper, 5)
    assert clock.sleepers == 0


async def test_manual_wait_returns_on_the_event_or_the_deadline() -> None:
    clock = ManualClock()
    event = asyncio.Event()
    by_event = asyncio.ensure_future(clock.wait(event, clock.now_ms() + 1_000))
    await settle()
    event.set()
    await asyncio.wait_for(by_event, 5)  # the clock did not move

    by_deadline = asyncio.ensure_future(clock.wait(asyncio.Event(), clock.now_ms() + 1_000))
    await settle()
    assert not by_deadline.done()
    clock.advance(1_000)
    await asyncio.wait_for(by_deadline, 5)
    await clock.wait(asyncio.Event(), clock.now_ms())  # a deadline already reached: at once


async def test_the_system_clock_is_a_clock() -> None:
    clock: Clock = SYSTEM_CLOCK
    before = clock.now_ms()
    await clock.sleep_ms(0)
    await clock.wait(asyncio.Event(), clock.now_ms())  # the deadline is now: no waiting
    assert clock.now_ms() >= before
    assert abs(wall_clock_ms() - clock.wall_ms()) < 60_000
