"""The interface every benchmarked system implements."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench import procs


class Target:
    """One system under test: ``start`` brings up a fresh server and a client,
    ``send_one`` / ``send_batch`` return once the server acknowledged, ``stored_count``
    reads back how many messages the server holds (a sanity check), ``stop`` tears down."""

    child: procs.Child | None = None
    #: A blocking client (the SDK's sync Producer): the driver calls ``blocking_send_one``
    #: / ``blocking_send_batch`` from plain threads instead of awaiting the async ones.
    blocking = False
    #: The client's own event loop (e.g. uvloop in a thread), or None for the harness's:
    #: the driver runs its workers there, and the target's coroutines must run there too.
    loop: asyncio.AbstractEventLoop | None = None
    #: Requests in flight, when the client path sets its own (else the run's --concurrency).
    in_flight: int | None = None
    #: A native benchmark tool drives the server: the driver calls ``run_native`` instead.
    native = False

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    @property
    def client_info(self) -> str:
        return ""

    @property
    def client_path(self) -> str:
        """Short name of the client path, for the table (e.g. ``sdk``, ``sync@4``)."""
        return ""

    def server_pids(self) -> list[int]:
        return [self.child.pid] if self.child is not None and self.child.proc is not None else []

    def server_cpu_s(self) -> float:
        return sum(procs.proc_cpu_s(p) for p in self.server_pids())

    async def on_loop(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await ``coro`` on the client's own loop (or here, without one)."""
        if self.loop is None:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def start(self) -> None:
        raise NotImplementedError

    async def send_one(self, body: bytes) -> None:
        raise NotImplementedError

    async def send_batch(self, bodies: list[bytes]) -> None:
        raise NotImplementedError

    def blocking_send_one(self, body: bytes) -> None:
        raise NotImplementedError

    def blocking_send_batch(self, bodies: list[bytes]) -> None:
        raise NotImplementedError

    def run_native(self, mode: str, total: int, batch_size: int, in_flight: int) -> dict:
        """Send ``total`` messages with the native tool; the driver's result dict plus
        ``tool_cpu_s`` (the tool's CPU) and ``p50_ms`` / ``p99_ms`` (the tool's own)."""
        raise NotImplementedError

    async def stored_count(self) -> int:
        raise NotImplementedError

    async def stop(self) -> None:
        if self.child is not None:
            await asyncio.to_thread(self.child.stop)


class LoopThread:
    """An event loop of its own (``new_loop()``, e.g. uvloop's) running in a daemon thread,
    so one client can use another loop than the harness's."""

    def __init__(self, new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
        self.loop = new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="bench-client-loop", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()
