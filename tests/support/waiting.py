"""Names and waits shared by the tests that run against real processes.

Those tests share the session cluster, so every test names its topics and groups with
``unique_name``. What spreads through etcd watches or other processes is waited for with
``wait_until`` (threads, sync SDK) or ``eventually`` (asyncio): a liveness wait with a
generous guard, never a timing assertion. Tests of a core on a ManualClock do not need
these: they use ``support.clock``'s ``until`` and ``settle``, which take no time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: How long a wait for another process gives up after (a hang guard).
WAIT_S = 30.0


def unique_name(prefix: str, *, sep: str = "-") -> str:
    """``prefix`` and ten random hex digits: a topic or group no other test uses."""
    return f"{prefix}{sep}{uuid.uuid4().hex[:10]}"


def wait_until(predicate: Callable[[], T], *, timeout_s: float = WAIT_S, what: str = "condition") -> T:
    """``predicate()``'s first truthy value, polled every 50 ms; AssertionError naming
    ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s:.0f} s"
        time.sleep(0.05)


async def eventually(
    check: Callable[[], object | Awaitable[object]],
    *,
    timeout_s: float = 10.0,
    what: str = "condition",
    every_s: float = 0.01,
) -> None:
    """Until ``check()`` (awaited when it returns an awaitable) is truthy, polled every
    ``every_s`` on the running loop; AssertionError after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = check()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return
        assert loop.time() < deadline, f"{what} not reached within {timeout_s:.0f} s"
        await asyncio.sleep(every_s)
