"""The backoff helpers, as pure delay sequences (nothing sleeps): the services'
``txmq_runtime.backoff`` (tenacity) and the SDK's ``txmq._backoff``, which must agree."""

from __future__ import annotations

import asyncio

import pytest
from support.clock import ManualClock
from tenacity import retry_if_exception_type, stop_after_attempt

from txmq import _backoff as sdk
from txmq_runtime.backoff import Backoff, BackoffPolicy, retrying
from txmq_runtime.etcd import ETCD_BACKOFF


def test_delays_double_from_the_first_up_to_the_cap_and_reset() -> None:
    b = Backoff(BackoffPolicy(first_ms=100, max_ms=1_000))
    assert [b.next_delay_ms() for _ in range(7)] == [100, 200, 400, 800, 1_000, 1_000, 1_000]
    assert b.failures == 7
    b.reset()
    assert b.failures == 0 and b.next_delay_ms() == 100


def test_a_cap_that_is_not_a_power_of_two_of_the_first() -> None:
    policy = BackoffPolicy(first_ms=500, max_ms=5_000)  # pull's arrival streams: up to 10x
    assert [policy.delay_ms(n) for n in range(1, 7)] == [500, 1_000, 2_000, 4_000, 5_000, 5_000]
    assert policy.delay_ms(10_000) == 5_000  # no overflow however long it fails


def test_jitter_adds_at_most_its_bound_and_never_passes_the_cap() -> None:
    for n, base in enumerate([100, 200, 400, 800, 1_600, 2_000, 2_000], start=1):
        for _ in range(50):
            d = ETCD_BACKOFF.delay_ms(n)
            assert base <= d <= min(base + 100, 2_000)


def test_invalid_policies_are_refused() -> None:
    for bad in (
        {"first_ms": 0, "max_ms": 1},
        {"first_ms": 10, "max_ms": 5},
        {"first_ms": 1, "max_ms": 2, "jitter_ms": -1},
    ):
        with pytest.raises(ValueError):
            BackoffPolicy(**bad)


async def test_sleep_waits_on_the_clock_and_never_past_a_deadline() -> None:
    clock = ManualClock()
    b = Backoff(BackoffPolicy(first_ms=100, max_ms=1_000), clock=clock)
    sleeper = asyncio.create_task(b.sleep())
    await asyncio.sleep(0)
    assert clock.sleepers == 1 and not sleeper.done()
    clock.advance(99)
    await asyncio.sleep(0)
    assert not sleeper.done()
    clock.advance(1)
    await sleeper
    capped = asyncio.create_task(b.sleep(at_most_ms=30))  # 200 due, 30 left until the deadline
    await asyncio.sleep(0)
    clock.advance(30)
    await capped
    assert b.failures == 2


async def test_retrying_a_call_waits_by_the_policy_on_the_clock() -> None:
    clock, calls = ManualClock(), []

    async def flaky() -> str:
        calls.append(clock.now_ms())
        if len(calls) < 4:
            raise ConnectionError("not yet")
        return "ok"

    policy = BackoffPolicy(first_ms=100, max_ms=250)
    retry = retrying(policy, retry=retry_if_exception_type(ConnectionError), stop=stop_after_attempt(5), clock=clock)
    task: asyncio.Task[str] = asyncio.create_task(retry(flaky))
    while not task.done():  # time moves 1 ms at a time
        for _ in range(3):
            await asyncio.sleep(0)
        clock.advance(1)
    assert await task == "ok"
    assert [c - calls[0] for c in calls] == [0, 100, 300, 550]  # waited 100, 200, 250 (the cap)


async def test_retrying_gives_up_with_the_last_error() -> None:
    clock = ManualClock()

    async def broken() -> None:
        raise ConnectionError("down")

    retry = retrying(
        BackoffPolicy(first_ms=1, max_ms=1),
        retry=retry_if_exception_type(ConnectionError),
        stop=stop_after_attempt(2),
        clock=clock,
    )
    task: asyncio.Task[None] = asyncio.create_task(retry(broken))
    while not task.done():
        await asyncio.sleep(0)
        clock.advance(1)
    with pytest.raises(ConnectionError, match="down"):
        await task


# -- the SDK's backoff -------------------------------------------------------------------


def test_the_sdk_backoff_follows_the_same_formula() -> None:
    b = sdk.Backoff(first=0.1, maximum=2.0)
    assert [b.next_delay() for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    b.reset()
    assert b.next_delay() == 0.1
    policy = BackoffPolicy(first_ms=50, max_ms=1_000)  # the SDK's END_TRANSACTION retries
    assert [sdk.delay(n, first=0.05, maximum=1.0) * 1000 for n in range(1, 9)] == pytest.approx(
        [policy.delay_ms(n) for n in range(1, 9)]
    )
    assert sdk.delay(10_000, first=1.0, maximum=60.0) == 60.0
    assert sdk.delay(3, first=0.05, maximum=-1.0) == -1.0  # a deadline already passed: callers clamp
    with pytest.raises(ValueError):
        sdk.Backoff(first=0, maximum=1)
