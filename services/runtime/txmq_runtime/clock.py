"""The one clock abstraction of txmq's services.

Every core that measures time takes a ``Clock`` and never reads ``time.time()``,
``time.monotonic()`` or ``loop.time()`` itself, so its tests move time by hand
(``tests/support/clock.py``: ``ManualClock``) instead of sleeping.

Two kinds of time, never mixed:

- ``now_ms()``: a monotonic clock, for timeouts, deadlines, TTL margins and rates. It
  never goes back; its origin means nothing.
- ``wall_ms()``: milliseconds since the Unix epoch, for what is stored or shown
  (store timestamps, check-immunity ages measured against a stored born time, reports).

Waiting goes through the clock too (``sleep_ms``, ``wait``), so a manual clock can wake
sleepers when a test advances it.

The rule (one convention for every service):

- A core that measures intervals, keeps deadlines or waits takes a ``Clock``
  (``clock: Clock = SYSTEM_CLOCK``): the pull hold, the gateway consumer core, the leases.
- A core that only stamps or compares wall times (the store's record and offset
  timestamps, txcheck's ledger and check loop, which age half messages against their
  stored born time as RocketMQ does) takes a ``WallClock``: a bare callable returning
  ``wall_ms``, taken from a Clock (``clock.wall_ms``; ``wall_clock_ms`` is
  ``SYSTEM_CLOCK.wall_ms``). Tests pass their ``ManualClock`` itself (it is callable).
- Nothing else reads ``time.time()``, ``time.monotonic()`` or ``loop.time()``; outside
  the cores (process wiring, CLI, benchmarks) real time is fine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

#: Milliseconds since the Unix epoch, as a bare callable (``Clock.wall_ms``).
WallClock = Callable[[], int]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds on a clock that never goes back."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    async def sleep_ms(self, ms: float) -> None:
        """Return after ``ms`` milliseconds of this clock's monotonic time."""
        ...

    async def wait(self, event: asyncio.Event, deadline_ms: int | None) -> None:
        """Return once ``event`` is set or ``now_ms()`` reached ``deadline_ms`` (None: no
        deadline), whichever comes first."""
        ...


class SystemClock:
    """The clock services run on: ``time.monotonic_ns`` and ``time.time_ns``."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_ms(self, ms: float) -> None:
        await asyncio.sleep(max(0.0, ms) / 1000)

    async def wait(self, event: asyncio.Event, deadline_ms: int | None) -> None:
        if deadline_ms is None:
            await event.wait()
            return
        delay_s = (deadline_ms - self.now_ms()) / 1000
        if delay_s <= 0 or event.is_set():
            return
        try:
            await asyncio.wait_for(event.wait(), delay_s)
        except TimeoutError:
            pass


#: The process-wide system clock (stateless; share it).
SYSTEM_CLOCK = SystemClock()


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (``SYSTEM_CLOCK.wall_ms``), for the places that
    take a bare ``Callable[[], int]`` wall clock."""
    return SYSTEM_CLOCK.wall_ms()
