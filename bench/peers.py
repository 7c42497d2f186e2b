"""The peers: Redis Streams (XADD) and NATS JetStream (file storage), each behind the same
small target interface as txmq (see ``bench/targets.py``), each driven by the fastest
Python client path measured for the scenario's shape (``BEST_PEER_CLIENT``), and Redis
also by its own C tool, ``redis-benchmark``, as the ceiling a client can get out of it."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import queue
import random
import re
import shutil
import string
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench import procs
from bench.targets import LoopThread, Target

STREAM_KEY = "bench"
NATS_STREAM = "BENCH"
NATS_SUBJECT = "bench.produce"

# peer -> client path -> what it is
PEER_PATHS = {
    "redis": {
        "asyncio": "redis-py asyncio, one connection per in-flight request, XADD / pipeline",
        "sync": "redis-py sync client, one thread per in-flight request, XADD / pipeline",
        "conn": "redis-py sync Connection per thread: the request's XADDs packed in one write, replies read back",
    },
    "nats": {
        "asyncio": "nats-py on the harness's asyncio loop",
        "uvloop": "nats-py on a uvloop loop of its own (a thread)",
    },
}


@dataclass(frozen=True)
class ClientPath:
    """How a peer is driven: a path of ``PEER_PATHS`` and the requests in flight
    (None: the run's ``--concurrency``). Written ``name`` or ``name@in_flight``."""

    name: str
    in_flight: int | None = None

    def label(self, concurrency: int) -> str:
        return f"{self.name}@{self.in_flight or concurrency}"


# The fastest path per peer and shape, measured on the 2-core machine (docs/benchmarks.md,
# "Produce", "Peer client paths"); redis-aof uses redis's (the client side is the same).
BEST_PEER_CLIENT = {
    "redis:single": ClientPath("conn"),
    "redis:batch": ClientPath("conn"),
    "nats:single": ClientPath("uvloop", 64),
    "nats:batch": ClientPath("uvloop"),
}


def peer_of(system: str) -> str:
    """``redis-aof`` -> ``redis``: the peer whose client paths a system uses."""
    return "redis" if system.startswith("redis") else system


def parse_path(text: str) -> ClientPath:
    m = re.fullmatch(r"([a-z]+)(?:@(\d+))?", text.strip())
    if not m or not any(m[1] in p for p in PEER_PATHS.values()) or (m[2] is not None and not 1 <= int(m[2]) <= 1024):
        known = sorted({p for ps in PEER_PATHS.values() for p in ps})
        raise ValueError(f"{text!r}: a client path is one of {', '.join(known)}, optionally @<in flight 1..1024>")
    return ClientPath(m[1], int(m[2]) if m[2] else None)


def parse_peer_clients(spec: str) -> list[tuple[str, ClientPath | None]]:
    """``"best,redis:batch=sync,nats=uvloop@64"`` -> ``[(pattern, path or None = best)]``;
    an item without ``=`` applies to every peer that has that path."""
    out: list[tuple[str, ClientPath | None]] = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        pat, sep, path = item.rpartition("=")
        pat = pat.strip() if sep else "*"
        if ":" not in pat:
            pat += ":*"
        out.append((pat, None if path.strip() == "best" else parse_path(path)))
    return out


def peer_client(items: list[tuple[str, ClientPath | None]], scenario: str) -> ClientPath:
    """The client path for a peer scenario (``redis-aof:batch``): the best one, then each
    item whose pattern matches it, in order. A path the peer lacks is an error when the
    pattern names the peer, else the item is skipped."""
    system, mode = scenario.split(":")
    peer = peer_of(system)
    path = BEST_PEER_CLIENT[f"{peer}:{mode}"]
    for pat, p in items:
        if not fnmatch.fnmatch(scenario, pat):
            continue
        if p is None:
            path = BEST_PEER_CLIENT[f"{peer}:{mode}"]
        elif p.name in PEER_PATHS[peer]:
            path = p
        elif not pat.startswith("*"):
            raise ValueError(f"{scenario}: {peer} has no client path {p.name!r} (known: {', '.join(PEER_PATHS[peer])})")
    return path


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


def _redis_parser() -> str:
    try:
        import hiredis  # noqa: F401

        return "hiredis"
    except ImportError:
        return "pure-python parser"


class RedisTarget(Target):
    """``XADD bench * d <body>``; a batch is one pipeline (no MULTI) of XADDs, sent by the
    client path's means: redis-py asyncio, the sync client from threads, or one sync
    ``Connection`` per thread with the batch's commands packed into one write."""

    def __init__(self, workdir: Path, *, aof_always: bool, path: ClientPath, concurrency: int) -> None:
        super().__init__(workdir)
        self.aof_always = aof_always
        self.path = path
        self.in_flight = path.in_flight
        self.concurrency = path.in_flight or concurrency
        self.blocking = path.name != "asyncio"
        self.r = None
        self._idle: queue.SimpleQueue = queue.SimpleQueue()  # ``conn`` path: connections not in use
        self._conns: list = []

    @property
    def client_info(self) -> str:
        from importlib.metadata import version

        how = PEER_PATHS["redis"][self.path.name]
        return f"redis-py {version('redis')} ({_redis_parser()}): {how}; {self.concurrency} in flight"

    @property
    def client_path(self) -> str:
        return self.path.label(self.concurrency)

    async def start(self) -> None:
        self.child = await asyncio.to_thread(procs.start_redis, self.workdir, aof_always=self.aof_always)
        opts = {"host": "127.0.0.1", "port": self.child.port, "socket_timeout": 30, "socket_connect_timeout": 5}
        # sync: a pipeline takes a pooled connection per execute, so one per thread + spare.
        if self.blocking:
            import redis

            self.r = redis.Redis(max_connections=self.concurrency + 2, **opts)
            await asyncio.to_thread(self.r.ping)
            await asyncio.to_thread(self.r.delete, STREAM_KEY)
        else:
            import redis.asyncio as aredis

            self.r = aredis.Redis(max_connections=self.concurrency + 2, **opts)
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

    def _take(self):
        """A connection for one request (``conn`` path): an idle one, or a new one, kept
        for the whole run (so at most one per request in flight)."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            c = self.r.connection_pool.get_connection()
            self._conns.append(c)
            return c

    def blocking_send_one(self, body: bytes) -> None:
        if self.path.name == "sync":
            self.r.xadd(STREAM_KEY, {b"d": body})
            return
        c = self._take()
        c.send_packed_command(c.pack_command("XADD", STREAM_KEY, "*", "d", body), check_health=False)
        c.read_response()  # raises on an error reply
        self._idle.put(c)

    def blocking_send_batch(self, bodies: list[bytes]) -> None:
        if self.path.name == "sync":
            pipe = self.r.pipeline(transaction=False)
            for b in bodies:
                pipe.xadd(STREAM_KEY, {b"d": b})
            ids = pipe.execute()
            if len(ids) != len(bodies):
                raise RuntimeError(f"pipeline returned {len(ids)} replies for {len(bodies)} XADDs")
            return
        c = self._take()
        c.send_packed_command(c.pack_commands([("XADD", STREAM_KEY, "*", "d", b) for b in bodies]), check_health=False)
        for _ in bodies:
            c.read_response()  # one reply per XADD, raises on an error reply
        self._idle.put(c)

    async def stored_count(self) -> int:
        if self.blocking:
            return int(await asyncio.to_thread(self.r.xlen, STREAM_KEY))
        return int(await self.r.xlen(STREAM_KEY))

    async def stop(self) -> None:
        if self.r is not None:
            try:
                if self.blocking:
                    for c in self._conns:
                        c.disconnect()
                    await asyncio.to_thread(self.r.close)
                else:
                    await self.r.aclose()
            except Exception:  # noqa: BLE001
                pass
        await super().stop()


class RedisBenchTarget(RedisTarget):
    """``redis-benchmark`` (C, ships with Redis) sending the same XADDs: ``-c`` connections
    = requests in flight, ``-P`` = the batch size (1 for singles), a body of the same
    size (printable, as it travels on the command line). The ceiling a client gets out of
    this server on this machine; the harness's own client only reads back XLEN. The tool
    runs to its count: ``--max-seconds`` does not cut it short."""

    native = True

    def __init__(self, workdir: Path, *, aof_always: bool, concurrency: int, body_bytes: int) -> None:
        super().__init__(workdir, aof_always=aof_always, path=ClientPath("sync"), concurrency=concurrency)
        self.body_bytes = body_bytes

    @property
    def client_info(self) -> str:
        out = subprocess.run(
            [shutil.which("redis-benchmark") or "redis-benchmark", "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        return f"{out or 'redis-benchmark'} (C, one process, one thread), {self.concurrency} connections"

    @property
    def client_path(self) -> str:
        return f"native@{self.concurrency}"

    def run_native(self, mode: str, total: int, batch_size: int, in_flight: int) -> dict:
        exe = shutil.which("redis-benchmark")
        if not exe:
            raise RuntimeError("redis-benchmark not found: run bench/setup_peers.sh")
        body = "".join(random.choices(string.ascii_letters + string.digits, k=self.body_bytes))
        pipeline = 1 if mode == "single" else batch_size
        argv = [exe, "-h", "127.0.0.1", "-p", str(self.child.port), "-c", str(in_flight)]
        argv += ["-n", str(total), "-P", str(pipeline), "--csv", "XADD", STREAM_KEY, "*", "d", body]
        before = self.r.xlen(STREAM_KEY)
        t0 = time.perf_counter()
        out_path, err_path = self.workdir / "redis-benchmark.csv", self.workdir / "redis-benchmark.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            p = subprocess.Popen(argv, stdout=out, stderr=err)
            # wait4: the tool's own CPU time, which is the client's CPU here.
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"redis-benchmark exited {p.returncode}: {err_path.read_text(errors='replace')[-500:]}")
        # -P rounds the count up to whole pipelines: the stream says what was sent.
        messages = int(self.r.xlen(STREAM_KEY)) - int(before)
        row = out_path.read_text().strip().splitlines()[-1].split('","')
        return {
            "messages": messages,
            "requests": -(-messages // pipeline),
            "seconds": seconds,
            "lat": [],
            "stopped_by": "count",
            "tool_cpu_s": usage.ru_utime + usage.ru_stime,
            "p50_ms": float(row[4]),
            "p99_ms": float(row[6]),
        }


class NatsTarget(Target):
    """JetStream publish with file storage, each message waited for its ack. Single:
    ``js.publish_async`` of the one message, then its ack (cheaper per message than
    ``js.publish``'s request-reply, the same semantics). Batch: ``js.publish_async`` for each
    message of the batch, then wait for all acks (window = batch size per in-flight worker).
    The ``uvloop`` path runs the client on a uvloop loop of its own."""

    def __init__(self, workdir: Path, *, path: ClientPath, concurrency: int, batch_size: int) -> None:
        super().__init__(workdir)
        self.path = path
        self.in_flight = path.in_flight
        self.concurrency = path.in_flight or concurrency
        self.batch_size = batch_size
        self.nc = None
        self.js = None
        self._loop_thread: LoopThread | None = None

    @property
    def client_info(self) -> str:
        from importlib.metadata import version

        how = PEER_PATHS["nats"][self.path.name]
        return f"nats-py {version('nats-py')}: {how}; {self.concurrency} in flight"

    @property
    def client_path(self) -> str:
        return self.path.label(self.concurrency)

    async def start(self) -> None:
        self.child = await asyncio.to_thread(procs.start_nats, self.workdir)
        if self.path.name == "uvloop":
            import uvloop

            self._loop_thread = LoopThread(uvloop.new_event_loop)
            self.loop = self._loop_thread.loop
        await self.on_loop(self._connect())

    async def _connect(self) -> None:
        import nats
        from nats.js.api import StorageType

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
        await asyncio.wait_for(await self.js.publish_async(NATS_SUBJECT, body), timeout=30)

    async def send_batch(self, bodies: list[bytes]) -> None:
        futs = [await self.js.publish_async(NATS_SUBJECT, b) for b in bodies]
        await asyncio.wait_for(asyncio.gather(*futs), timeout=30)

    async def _stream_messages(self) -> int:
        info = await self.js.stream_info(NATS_STREAM)
        return int(info.state.messages)

    async def stored_count(self) -> int:
        return await self.on_loop(self._stream_messages())

    async def stop(self) -> None:
        if self.nc is not None:
            try:
                await asyncio.wait_for(self.on_loop(self.nc.close()), timeout=5)
            except Exception:  # noqa: BLE001
                pass
        if self._loop_thread is not None:
            await asyncio.to_thread(self._loop_thread.close)
            self._loop_thread, self.loop = None, None
        await super().stop()
