"""The peers: Redis Streams (XADD) and NATS JetStream (file storage), each behind the same
small target interface as txmq (see ``bench/targets.py``)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

from bench import procs
from bench.targets import Target

STREAM_KEY = "bench"
NATS_STREAM = "BENCH"
NATS_SUBJECT = "bench.produce"


def redis_version() -> str:
    exe = shutil.which("redis-server")
    if not exe:
        return "absent"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


def nats_version() -> str:
    exe = shutil.which("nats-server")
    if not exe:
        return "absent"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10, check=False)
    return (out.stdout or out.stderr).strip().rsplit(" ", 1)[-1]


class RedisTarget(Target):
    """``XADD bench * d <body>``; a batch is one pipeline (no MULTI) of XADDs."""

    def __init__(self, workdir: Path, *, aof_always: bool, concurrency: int) -> None:
        super().__init__(workdir)
        self.aof_always = aof_always
        self.concurrency = concurrency
        self.r = None

    @property
    def client_info(self) -> str:
        from importlib.metadata import version

        try:
            import hiredis  # noqa: F401

            parser = "hiredis"
        except ImportError:
            parser = "pure-python parser"
        return f"redis-py {version('redis')} asyncio ({parser})"

    async def start(self) -> None:
        import redis.asyncio as aredis

        self.child = await asyncio.to_thread(procs.start_redis, self.workdir, aof_always=self.aof_always)
        self.r = aredis.Redis(
            host="127.0.0.1",
            port=self.child.port,
            max_connections=self.concurrency + 2,
            socket_timeout=30,
            socket_connect_timeout=5,
        )
        await self.r.ping()
        await self.r.delete(STREAM_KEY)

    async def send_one(self, body: bytes) -> None:
        await self.r.xadd(STREAM_KEY, {b"d": body})

    async def send_batch(self, bodies: list[bytes]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for b in bodies:
            pipe.xadd(STREAM_KEY, {b"d": b})
        ids = await pipe.execute()
        if len(ids) != len(bodies):
            raise RuntimeError(f"pipeline returned {len(ids)} replies for {len(bodies)} XADDs")

    async def stored_count(self) -> int:
        return int(await self.r.xlen(STREAM_KEY))

    async def stop(self) -> None:
        if self.r is not None:
            try:
                await self.r.aclose()
            except Exception:  # noqa: BLE001
                pass
        await super().stop()


class NatsTarget(Target):
    """JetStream publish with file storage. Single: ``js.publish`` (wait for the ack).
    Batch: ``js.publish_async`` for each message of the batch, then wait for all acks
    (window = batch size per in-flight worker)."""

    def __init__(self, workdir: Path, *, concurrency: int, batch_size: int) -> None:
        super().__init__(workdir)
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.nc = None
        self.js = None

    @property
    def client_info(self) -> str:
        from importlib.metadata import version

        return f"nats-py {version('nats-py')} asyncio"

    async def start(self) -> None:
        import nats
        from nats.js.api import StorageType

        self.child = await asyncio.to_thread(procs.start_nats, self.workdir)
        self.nc = await nats.connect(
            f"nats://127.0.0.1:{self.child.port}",
            connect_timeout=5,
            max_reconnect_attempts=0,
            allow_reconnect=False,
        )
        self.js = self.nc.jetstream(
            timeout=30,
            publish_async_max_pending=max(4000, 2 * self.concurrency * self.batch_size),
        )
        await self.js.add_stream(name=NATS_STREAM, subjects=[NATS_SUBJECT], storage=StorageType.FILE)

    async def send_one(self, body: bytes) -> None:
        await self.js.publish(NATS_SUBJECT, body)

    async def send_batch(self, bodies: list[bytes]) -> None:
        futs = [await self.js.publish_async(NATS_SUBJECT, b) for b in bodies]
        await asyncio.wait_for(asyncio.gather(*futs), timeout=30)

    async def stored_count(self) -> int:
        info = await self.js.stream_info(NATS_STREAM)
        return int(info.state.messages)

    async def stop(self) -> None:
        if self.nc is not None:
            try:
                await asyncio.wait_for(self.nc.close(), timeout=5)
            except Exception:  # noqa: BLE001
                pass
        await super().stop()
