"""Clocks for the pull service: the monotonic one it runs on, and a manual one tests move
by hand (so timeouts and backstop sweeps are tested without sleeping)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds on a clock that never goes back."""
        ...

    async def wait(self, event: asyncio.Event, deadline_ms: int | None) -> None:
        """Return once ``event`` is set or the clock reached ``deadline_ms`` (None: no
        deadline), whichever comes first."""
        ...


class MonotonicClock:
    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

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


class ManualClock:
    """Time moves only when ``advance`` is called; waiters whose deadline passed wake up."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self._now_ms = now_ms
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("time does not go back")
        self._now_ms += ms
        while self._sleepers and self._sleepers[0][0] <= self._now_ms:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    @property
    def sleepers(self) -> int:
        """Waiters with a deadline that are still waiting."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def wait(self, event: asyncio.Event, deadline_ms: int | None) -> None:
        if event.is_set() or (deadline_ms is not None and deadline_ms <= self._now_ms):
            return
        waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(event.wait())]
        if deadline_ms is not None:
            timer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._sleepers, (deadline_ms, next(self._seq), timer))
            waiters.append(timer)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
