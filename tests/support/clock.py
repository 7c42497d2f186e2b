"""The one manual clock of the test suite: time moves only when a test calls
``advance``; sleepers and waiters whose deadline passed wake up. Implements
``txmq_runtime.clock.Clock`` (monotonic ``now_ms`` and wall ``wall_ms`` move together).

Helpers for tests on it: ``settle`` (let the other tasks run), ``until`` (run them until a
condition holds, guarded by loop rounds, not time) and ``ticking`` (move the clock in the
background, for stress tests whose point is the interleaving)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator, Callable

#: Where the wall clock of a new ManualClock starts (2024-01-01T00:00:00Z).
DEFAULT_WALL_MS = 1_704_067_200_000


class ManualClock:
    def __init__(self, now_ms: int = 1_000_000, *, wall_ms: int = DEFAULT_WALL_MS) -> None:
        self._now_ms = now_ms
        self._wall_offset_ms = wall_ms - now_ms
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now_ms

    def wall_ms(self) -> int:
        return self._now_ms + self._wall_offset_ms

    def __call__(self) -> int:
        """A ManualClock also serves where a bare ``Callable[[], int]`` wall clock is taken."""
        return self.wall_ms()

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("time does not go back")
        self._now_ms += ms
        while self._sleepers and self._sleepers[0][0] <= self._now_ms:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    def set_wall_ms(self, wall_ms: int) -> None:
        """Step the wall clock (as NTP may); the monotonic clock does not move."""
        self._wall_offset_ms = wall_ms - self._now_ms

    @property
    def sleepers(self) -> int:
        """Sleepers and waiters with a deadline that are still waiting."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def _timer(self, deadline_ms: int) -> asyncio.Future[None]:
        timer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline_ms, next(self._seq), timer))
        return timer

    async def sleep_ms(self, ms: float) -> None:
        deadline = self._now_ms + max(0, int(ms))
        if deadline <= self._now_ms:
            await asyncio.sleep(0)
            return
        timer = self._timer(deadline)
        try:
            await timer
        finally:
            timer.cancel()

    async def wait(self, event: asyncio.Event, deadline_ms: int | None) -> None:
        if event.is_set() or (deadline_ms is not None and deadline_ms <= self._now_ms):
            return
        waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(event.wait())]
        if deadline_ms is not None:
            waiters.append(self._timer(deadline_ms))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()


async def settle(rounds: int = 100) -> None:
    """Let the other tasks of the loop run ``rounds`` times (until they block on the
    clock, an event or I/O); no time passes on any clock."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], *, rounds: int = 100_000) -> None:
    """Run the other tasks until ``condition()`` holds. The guard counts loop rounds, not
    time: a condition that never comes fails the test instead of hanging it."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


@contextlib.asynccontextmanager
async def ticking(clock: ManualClock, *, step_ms: int = 1, every_s: float = 0.001) -> AsyncIterator[ManualClock]:
    """Move ``clock`` by ``step_ms`` every ``every_s`` real seconds while the block runs:
    for stress tests where many tasks wait on timeouts and only their interleaving
    matters. With the defaults the manual clock never runs ahead of real time, so a
    deadline that real time would not reach is not reached either."""

    async def tick() -> None:
        while True:
            await asyncio.sleep(every_s)
            clock.advance(step_ms)

    task = asyncio.get_running_loop().create_task(tick())
    try:
        yield clock
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
