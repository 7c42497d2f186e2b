"""``txmq.aio.Admin``: the threaded ``txmq.Admin``'s calls awaited from coroutines.

Administration is rare and not on a message's path, so the asyncio front end shares the
threaded implementation whole (its routing to every store, its typed errors) instead of
a second copy of ~40 calls: each call runs the threaded method on a worker thread
(``asyncio.to_thread``), so the event loop never blocks on it. Every public method of
``txmq.Admin`` is here under the same name and arguments, as a coroutine function; a
cancelled await leaves its call running to its end on that thread (as a timeout would).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from txmq.admin import Admin as ThreadedAdmin


class Admin:
    """``async with txmq.aio.Admin(endpoint) as admin: await admin.create_topic(...)``;
    the constructor takes ``txmq.Admin``'s arguments (endpoint, tls, credentials, ...)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._admin = ThreadedAdmin(*args, **kwargs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._admin, name) if not name.startswith("_") else None
        if not callable(method):
            raise AttributeError(f"txmq.aio.Admin has no call {name!r}")

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call

    async def close(self) -> None:
        await asyncio.to_thread(self._admin.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
