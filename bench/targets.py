"""The interface every benchmarked system implements."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import procs


class Target:
    """One system under test: ``start`` brings up a fresh server and a client,
    ``send_one`` / ``send_batch`` return once the server acknowledged, ``stored_count``
    reads back how many messages the server holds (a sanity check), ``stop`` tears down."""

    child: procs.Child | None = None
    #: A blocking client (the SDK's sync Producer): the driver calls ``blocking_send_one``
    #: / ``blocking_send_batch`` from plain threads instead of awaiting the async ones.
    blocking = False

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    @property
    def client_info(self) -> str:
        return ""

    def server_pids(self) -> list[int]:
        return [self.child.pid] if self.child is not None and self.child.proc is not None else []

    def server_cpu_s(self) -> float:
        return sum(procs.proc_cpu_s(p) for p in self.server_pids())

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

    async def stored_count(self) -> int:
        raise NotImplementedError

    async def stop(self) -> None:
        if self.child is not None:
            await asyncio.to_thread(self.child.stop)
