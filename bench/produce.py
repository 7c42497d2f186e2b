"""The produce benchmark: txmq's store against Redis Streams and NATS JetStream, in one run.

    .venv/bin/python -m bench.produce            # full run (see docs/benchmarks.md)
    .venv/bin/python -m bench.produce --quick    # a short run

One client process, ``--concurrency`` requests in flight (a peer's client path may set its
own, ``--peer-client``). A request is one message (``single``) or ``--batch-size`` messages
(``batch``: txmq SendBatch, a Redis pipeline of XADDs, JetStream async publishes awaited
together). Each peer is driven by its fastest Python client path for the shape
(``bench.peers.BEST_PEER_CLIENT``); ``redis-bench`` rows are Redis's own C tool, the ceiling.
Every scenario starts a fresh server in a temp dir on free loopback ports, warms up,
measures, reads back the stored count, and stops the server. Each scenario stops after its
message count or ``--max-seconds``, whichever comes first.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import datetime as dt
import fnmatch
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from bench import procs
from bench.peers import (
    NatsTarget,
    RedisBenchTarget,
    RedisTarget,
    nats_version,
    parse_peer_clients,
    peer_client,
    redis_version,
)
from bench.targets import Target
from bench.txmq_target import Etcd, TxmqTarget, store_available

RESULTS_DIR = procs.ROOT / "bench" / "results"
NOISY_OTHER_CPU_PCT = 25.0
MIB = 1024 * 1024

# system -> (description, flush)
SYSTEMS = {
    "txmq-async": ("txmq store, flush_mode=async", "async"),
    "txmq-sync": ("txmq store, flush_mode=sync (fsync before ack, group commit)", "sync"),
    "txmq3-sync": ("txmq store group of 3 replicas, min_in_sync 2, flush_mode=sync on each", "sync"),
    "txmq3-async": ("txmq store group of 3 replicas, min_in_sync 2, flush_mode=async on each", "async"),
    "txmqauth-sync": ("txmq store, flush_mode=sync, auth_enabled: every call signed, ACL-checked", "sync"),
    "txmqauth-async": ("txmq store, flush_mode=async, auth_enabled: every call signed, ACL-checked", "async"),
    "txmqnoidem-sync": ("txmq store, flush_mode=sync, idempotence_window_ms=0 (idempotent sends off)", "sync"),
    "txmqnoidem-async": ("txmq store, flush_mode=async, idempotence_window_ms=0 (idempotent sends off)", "async"),
    "redis": ("Redis Streams XADD, no AOF, no RDB", "none"),
    "redis-aof": ("Redis Streams XADD, appendonly yes + appendfsync always", "sync"),
    "nats": ("NATS JetStream, file storage (default sync_interval)", "async"),
    # Redis's own C benchmark tool against the same servers: what a client can get out of them.
    "redis-bench": ("redis-benchmark (C) XADD against Redis without AOF: the client ceiling", "none"),
    "redis-aof-bench": ("redis-benchmark (C) XADD against Redis, appendfsync always", "sync"),
    # Not in "all": a no-op grpc.aio store (bench/null_store.py), the gRPC + client ceiling.
    "grpc-null": ("no-op gRPC store (bench/null_store.py): the gRPC + Python client ceiling", "none"),
}
MODES = ("single", "batch")
KNOWN_SCENARIOS = [f"{s}:{m}" for s in SYSTEMS for m in MODES]
ALL_SCENARIOS = [s for s in KNOWN_SCENARIOS if not s.startswith(("grpc-null", "txmq3-", "txmqauth-", "txmqnoidem-"))]

# (numerator, denominator, target or None, what it means)
RATIOS = [
    ("txmq-async:batch", "redis:batch", 1.5, "batched async-flush txmq vs Redis pipelined XADD (no AOF)"),
    ("txmq-sync:batch", "redis-aof:batch", 1.0, "batched sync-flush txmq vs Redis pipelined XADD (appendfsync always)"),
    ("txmq-async:single", "redis:single", None, "single-send async txmq vs Redis XADD (no AOF)"),
    ("txmq-sync:single", "redis-aof:single", None, "single-send sync txmq vs Redis XADD (appendfsync always)"),
    ("txmq-async:batch", "nats:batch", None, "batched async txmq vs JetStream async publish"),
    ("txmq-async:single", "nats:single", None, "single-send async txmq vs JetStream publish"),
    # How close the Python client gets to what redis-benchmark (C) gets from the same server.
    ("redis:batch", "redis-bench:batch", None, "Redis, best Python client path vs redis-benchmark, batches"),
    ("redis:single", "redis-bench:single", None, "Redis, best Python client path vs redis-benchmark, singles"),
    ("redis-aof:batch", "redis-aof-bench:batch", None, "Redis AOF, best Python path vs redis-benchmark, batches"),
    (
        "txmq-async:batch",
        "grpc-null:batch",
        None,
        "batched async txmq vs a no-op gRPC store (share of the gRPC + client ceiling)",
    ),
    ("txmq-async:single", "grpc-null:single", None, "single-send async txmq vs a no-op gRPC store"),
    # Replicated store groups (docs/replication.md): what copying to the followers costs.
    ("txmq3-sync:batch", "txmq-sync:batch", None, "3 replicas (min_in_sync 2) vs one store, sync flush, batches"),
    ("txmq3-sync:single", "txmq-sync:single", None, "3 replicas vs one store, sync flush, single sends"),
    ("txmq3-async:batch", "txmq-async:batch", None, "3 replicas vs one store, async flush, batches"),
    ("txmq3-sync:batch", "redis-aof:batch", None, "3 replicas, sync flush vs Redis appendfsync always"),
    # Authentication and permissions (docs/security.md): what signing + checking every call costs.
    ("txmqauth-sync:batch", "txmq-sync:batch", None, "auth on vs off, sync flush, batches"),
    ("txmqauth-async:batch", "txmq-async:batch", None, "auth on vs off, async flush, batches"),
    ("txmqauth-async:single", "txmq-async:single", None, "auth on vs off, async flush, single sends"),
    # Idempotent sends (docs/store.md): the look-up every producer message pays (on by default).
    ("txmq-async:batch", "txmqnoidem-async:batch", None, "idempotence on vs off, async flush, batches"),
    ("txmq-async:single", "txmqnoidem-async:single", None, "idempotence on vs off, async flush, single sends"),
    ("txmq-sync:batch", "txmqnoidem-sync:batch", None, "idempotence on vs off, sync flush, batches"),
]


@dataclass
class Config:
    messages: int
    single_messages: int
    batch_size: int
    concurrency: int
    body_bytes: int
    max_seconds: float
    warmup_messages: int
    rounds: int
    scenarios: list[str]
    txmq_client: str
    peer_client: str = "best"
    store_args: list[str] = field(default_factory=list)
    sdk_options: dict[str, object] = field(default_factory=dict)
    profile: bool = False
    profile_native: bool = False
    wait_quiet_s: float = 0.0


@dataclass
class Result:
    scenario: str
    system: str
    mode: str
    round: int
    description: str = ""
    client: str = ""
    # Short name of the client path (txmq: sdk / stubs; peers: path@in-flight; native@N).
    client_path: str = ""
    messages: int = 0
    requests: int = 0
    seconds: float = 0.0
    msgs_per_s: float = 0.0
    mib_per_s: float = 0.0
    lat_p50_ms: float = 0.0
    lat_p99_ms: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    # CPU used by everything else on the machine during the measured phase (100 = one
    # core): other people's processes, etcd, the kernel. High values mean a noisy figure.
    other_cpu_pct: float = 0.0
    # Of the above: kernel threads (writeback, journal) and irq/softirq time; the rest
    # (foreign_cpu_pct) is other processes, which is what makes a figure noisy.
    kernel_cpu_pct: float = 0.0
    foreign_cpu_pct: float = 0.0
    busy_before_pct: float = 0.0
    stored: int = -1
    expected_stored: int = 0
    stopped_by: str = ""
    profile: str = ""
    error: str = ""


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[k]


class _Tally:
    """A drive's shared count: messages claimed and done, each request's latency
    (thread-safe, so plain threads and asyncio tasks use it alike)."""

    def __init__(self, unit: int, total: int, bar=None) -> None:
        self.unit, self.total, self.bar = unit, total, bar
        self.claimed = self.done = self.requests = 0
        self.lat: list[float] = []
        self._lock = threading.Lock()

    def claim(self) -> int:
        """How many messages the next request sends (0: the count is reached)."""
        with self._lock:
            n = min(self.unit, self.total - self.claimed)
            if n > 0:
                self.claimed += n
            return n

    def finish(self, n: int, took_s: float) -> None:
        with self._lock:
            self.lat.append(took_s)
            self.done += n
            self.requests += 1
        if self.bar is not None:
            self.bar.update(n)

    def result(self, seconds: float) -> dict:
        return {
            "messages": self.done,
            "requests": self.requests,
            "seconds": seconds,
            "lat": self.lat,
            "stopped_by": "count" if self.done >= self.total else "time",
        }


def in_flight(target: Target, cfg: Config) -> int:
    """Requests in flight: the target's client path's own count, else ``--concurrency``."""
    return target.in_flight or cfg.concurrency


def drive_threads(target: Target, mode: str, tally: _Tally, cfg: Config, body: bytes) -> dict:
    """``drive`` for a blocking client (the SDK's sync Producer, Redis's sync paths): one
    plain thread per request in flight, each calling it in a loop, as an application
    would; no event loop between the application and the client."""
    deadline = time.monotonic() + cfg.max_seconds
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            while time.monotonic() < deadline and (n := tally.claim()) > 0:
                t0 = time.perf_counter()
                if mode == "single":
                    target.blocking_send_one(body)
                else:
                    target.blocking_send_batch([body] * n)
                tally.finish(n, time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, name=f"bench-client-{i}") for i in range(in_flight(target, cfg))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(cfg.max_seconds + 60)
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return tally.result(elapsed)


async def drive(target: Target, mode: str, total: int, cfg: Config, body: bytes, bar=None) -> dict:
    """Send ``total`` messages with ``in_flight`` requests in flight; stop early at
    ``cfg.max_seconds``. Returns counts, elapsed time and request latencies."""
    if target.native:
        return await asyncio.to_thread(target.run_native, mode, total, cfg.batch_size, in_flight(target, cfg))
    tally = _Tally(1 if mode == "single" else cfg.batch_size, total, bar)
    if target.blocking:
        return await asyncio.to_thread(drive_threads, target, mode, tally, cfg, body)
    # On the client's own loop when it has one (its connections live there).
    return await target.on_loop(drive_tasks(target, mode, tally, cfg, body))


async def drive_tasks(target: Target, mode: str, tally: _Tally, cfg: Config, body: bytes) -> dict:
    """``drive`` for an asyncio client: one task per request in flight, on this loop."""
    deadline = time.monotonic() + cfg.max_seconds

    async def worker() -> None:
        while time.monotonic() < deadline and (n := tally.claim()) > 0:
            t0 = time.perf_counter()
            if mode == "single":
                await target.send_one(body)
            else:
                await target.send_batch([body] * n)
            tally.finish(n, time.perf_counter() - t0)

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(in_flight(target, cfg))]
    gathered = asyncio.gather(*tasks)
    try:
        # Hard bound: the soft deadline plus time for the last in-flight requests.
        await asyncio.wait_for(gathered, timeout=cfg.max_seconds + 60)
    finally:
        for t in tasks:
            t.cancel()
        if gathered.done():  # retrieved, so a cancelled run logs no "never retrieved"
            with contextlib.suppress(BaseException):
                gathered.exception()
    return tally.result(time.perf_counter() - t0)


def parse_sdk_options(items: tuple[str, ...]) -> dict[str, object]:
    """``("a=1", "b=False")`` -> ``{"a": 1, "b": False}``."""
    out: dict[str, object] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise click.BadParameter(f"{item!r} is not name=value", param_hint="--sdk-option")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise click.BadParameter(f"{value!r} is not a Python literal", param_hint="--sdk-option") from None
    return out


def make_target(scenario: str, cfg: Config, workdir: Path, etcd: Etcd) -> Target:
    system = scenario.split(":")[0]
    if system.startswith(("txmq-", "txmq3-", "txmqauth-", "txmqnoidem-")):
        return TxmqTarget(
            workdir,
            flush_mode=SYSTEMS[system][1],
            etcd=etcd,
            client=cfg.txmq_client,
            concurrency=cfg.concurrency,
            store_args=[
                *cfg.store_args,
                *(["--idempotence_window_ms", "0"] if system.startswith("txmqnoidem-") else []),
            ],
            sdk_options=cfg.sdk_options,
            replicas=3 if system.startswith("txmq3-") else 1,
            auth=system.startswith("txmqauth-"),
        )
    if system == "grpc-null":
        return TxmqTarget(
            workdir,
            flush_mode="async",
            etcd=etcd,
            client=cfg.txmq_client,
            concurrency=cfg.concurrency,
            store_module="bench.null_store",
        )
    if system in ("redis-bench", "redis-aof-bench"):
        aof = system == "redis-aof-bench"
        return RedisBenchTarget(workdir, aof_always=aof, concurrency=cfg.concurrency, body_bytes=cfg.body_bytes)
    path = peer_client(parse_peer_clients(cfg.peer_client), scenario)
    if system in ("redis", "redis-aof"):
        return RedisTarget(workdir, aof_always=system == "redis-aof", path=path, concurrency=cfg.concurrency)
    if system == "nats":
        return NatsTarget(workdir, path=path, concurrency=cfg.concurrency, batch_size=cfg.batch_size)
    raise ValueError(system)


def start_profiler(pid: int, out: Path, native: bool = False) -> subprocess.Popen | None:
    exe = procs.ROOT / ".venv" / "bin" / "py-spy"
    if not exe.exists():
        click.echo("  (py-spy not installed: .venv/bin/pip install py-spy)", err=True)
        return None
    return subprocess.Popen(
        [
            str(exe),
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "200",
            "--output",
            str(out),
            # --gil: sample only the thread holding the GIL, i.e. where the Python CPU goes
            # (a thread blocked in C with the GIL released is not "work" for a GIL-bound
            # process). --native instead shows C frames but must pause the process per sample.
            *(["--native"] if native else ["--nonblocking", "--gil"]),
            "--threads",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(out.with_suffix(".log"), "wb"),
        start_new_session=True,
    )


def stop_profiler(p: subprocess.Popen | None) -> None:
    if p is None:
        return
    try:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=5)


def summarize_profile(path: Path, top: int = 25) -> str:
    """Top frames by self and by inclusive samples from py-spy's collapsed-stack output
    (``--threads``: each stack starts with ``thread (tid): <name>``)."""
    import re
    from collections import Counter

    self_c: Counter[str] = Counter()
    self_fn: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    threads: Counter[str] = Counter()

    # "func (file.py:123)" -> "func (file.py)": inclusive time per function, not per line
    def fn(frame: str) -> str:
        return re.sub(r":\d+\)$", ")", frame)

    total = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return "(no profile)"
    for line in lines:
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        n = int(n)
        frames = stack.split(";")
        m = re.match(r"thread \(\d+\): (.*)", frames[0])
        if m:
            threads[m.group(1)] += n
            frames = frames[1:] or [m.group(1)]
        total += n
        self_c[frames[-1]] += n
        self_fn[fn(frames[-1])] += n
        for f in {fn(f) for f in frames}:
            incl_c[f] += n
    if not total:
        return "(empty profile)"

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    out = [f"{total} samples"]
    if threads:
        out.append("threads:")
        out += [f"  {pct(n)}  {t}" for t, n in threads.most_common(8)]
    out.append("self, per function:")
    out += [f"  {pct(n)}  {f}" for f, n in self_fn.most_common(top)]
    out.append("self, per line:")
    out += [f"  {pct(n)}  {f}" for f, n in self_c.most_common(top // 2)]
    own = [(f, n) for f, n in incl_c.most_common() if "txmq_" in f][:top]
    out.append("inclusive per function, txmq code only:")
    out += [f"  {pct(n)}  {f}" for f, n in own]
    return "\n".join(out)


async def run_scenario(
    scenario: str, rnd: int, cfg: Config, tmp: procs.TempRoot, etcd: Etcd, progress: bool, run_id: str
) -> Result:
    system, mode = scenario.split(":")
    res = Result(scenario=scenario, system=system, mode=mode, round=rnd, description=SYSTEMS[system][0])
    total = cfg.messages if mode == "batch" else cfg.single_messages
    body = os.urandom(cfg.body_bytes)
    workdir = tmp.sub(f"{scenario.replace(':', '-')}-r{rnd}")
    target = make_target(scenario, cfg, workdir, etcd)
    prof = None
    try:
        await asyncio.wait_for(target.start(), timeout=90)
        res.client, res.client_path = target.client_info, target.client_path
        warm = min(cfg.warmup_messages, total)
        if warm:
            wcfg = Config(**{**asdict(cfg), "max_seconds": min(cfg.max_seconds, 30)})
            w = await drive(target, mode, warm, wcfg, body)
            warm = w["messages"]
        if cfg.wait_quiet_s > 0:
            res.busy_before_pct = await asyncio.to_thread(procs.wait_quiet, cfg.wait_quiet_s)
        if cfg.profile and isinstance(target, TxmqTarget):
            ppath = RESULTS_DIR / f"profile-{run_id}-{scenario.replace(':', '-')}-r{rnd}.txt"
            prof = start_profiler(target.child.pid, ppath, native=cfg.profile_native)
            res.profile = str(ppath)
            await asyncio.sleep(0.5)
        srv0, cli0, sys0 = target.server_cpu_s(), time.process_time(), procs.system_busy_s()
        us0, kt0 = procs.user_system_s(), procs.kernel_threads_cpu_s()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(
                total=total, desc=f"{scenario:<18}", unit="msg", unit_scale=True, leave=False, dynamic_ncols=True
            )
        try:
            r = await drive(target, mode, total, cfg, body, bar)
        finally:
            if bar is not None:
                bar.close()
        res.server_cpu_s = target.server_cpu_s() - srv0
        # A native tool is the client: its CPU, not the harness's (which only waits).
        res.client_cpu_s = time.process_time() - cli0 + r.get("tool_cpu_s", 0.0)
        # py-spy's own CPU is ours too (it is not someone else's noise).
        ours = res.server_cpu_s + res.client_cpu_s + (procs.proc_cpu_s(prof.pid) if prof else 0.0)
        other = procs.system_busy_s() - sys0 - ours
        kthreads = procs.kernel_threads_cpu_s() - kt0
        foreign = procs.user_system_s() - us0 - ours - kthreads
        if prof is not None:
            await asyncio.to_thread(stop_profiler, prof)
            prof = None
        res.messages, res.requests, res.seconds = r["messages"], r["requests"], r["seconds"]
        res.stopped_by = r["stopped_by"]
        if res.seconds:
            res.other_cpu_pct = max(0.0, 100 * other / res.seconds)
            res.foreign_cpu_pct = max(0.0, 100 * foreign / res.seconds)
            res.kernel_cpu_pct = max(0.0, res.other_cpu_pct - res.foreign_cpu_pct)
        res.msgs_per_s = res.messages / res.seconds if res.seconds else 0.0
        res.mib_per_s = res.msgs_per_s * cfg.body_bytes / MIB
        res.lat_p50_ms = r.get("p50_ms", percentile(r["lat"], 0.50) * 1000)
        res.lat_p99_ms = r.get("p99_ms", percentile(r["lat"], 0.99) * 1000)
        res.expected_stored = getattr(target, "probe_messages", 0) + warm + res.messages
        res.stored = await asyncio.wait_for(target.stored_count(), timeout=30)
        if res.stored != res.expected_stored:
            res.error = f"stored {res.stored} != acknowledged {res.expected_stored}"
    except Exception as e:  # noqa: BLE001 - one failed scenario must not stop the others
        res.client = res.client or target.client_info
        res.client_path = res.client_path or target.client_path
        res.error = f"{type(e).__name__}: {e}".strip()[:2000]
    finally:
        if prof is not None:
            await asyncio.to_thread(stop_profiler, prof)
        try:
            await asyncio.wait_for(target.stop(), timeout=30)
        except Exception as e:  # noqa: BLE001
            res.error = res.error or f"stop failed: {e}"
    return res


def pick_scenarios(spec: str) -> list[str]:
    if spec.strip() in ("", "all"):
        return list(ALL_SCENARIOS)
    out: list[str] = []
    for pat in (p.strip() for p in spec.split(",")):
        if not pat:
            continue
        if pat == "all":
            out += [s for s in ALL_SCENARIOS if s not in out]
            continue
        if ":" not in pat:
            pat += ":*"
        hits = [s for s in KNOWN_SCENARIOS if fnmatch.fnmatch(s, pat)]
        if not hits:
            raise click.BadParameter(f"{pat!r} matches none of {', '.join(KNOWN_SCENARIOS)}")
        out += [h for h in hits if h not in out]
    return [s for s in KNOWN_SCENARIOS if s in out]  # canonical order


def check_peer_clients(spec: str, scenarios: list[str]) -> None:
    """Resolve ``--peer-client`` for every picked peer scenario now, not mid-run."""
    try:
        items = parse_peer_clients(spec)
        for sc in scenarios:
            if sc.split(":")[0] in ("redis", "redis-aof", "nats"):
                peer_client(items, sc)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--peer-client") from None


def machine_info() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = 0
    try:  # read-only; the working tree may hold uncommitted changes
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=procs.ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "git_head": commit,
        "cores": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "redis_server": redis_version(),
        "nats_server": nats_version(),
    }


def best_of_rounds(results: list[Result]) -> dict[str, Result]:
    """Per scenario, the round with the median throughput (lower median), taken over the
    rounds without errors and, when there are any, without noise (other processes using
    more than NOISY_OTHER_CPU_PCT of a core)."""
    by: dict[str, list[Result]] = {}
    for r in results:
        if not r.error or r.messages:
            by.setdefault(r.scenario, []).append(r)
    out = {}
    for sc, rs in by.items():
        ok = [r for r in rs if not r.error] or rs
        ok = [r for r in ok if r.foreign_cpu_pct <= NOISY_OTHER_CPU_PCT] or ok
        ok.sort(key=lambda r: r.msgs_per_s)
        out[sc] = ok[(len(ok) - 1) // 2]
    # failed-only scenarios
    for r in results:
        out.setdefault(r.scenario, r)
    return out


def format_table(rows: dict[str, Result]) -> str:
    hdr = (
        f"{'scenario':<22} {'client':<11} {'msgs/s':>9} {'MiB/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'srv us/m':>8} {'cli us/m':>8} "
        f"{'srv cpu%':>8} {'cli cpu%':>8} {'krn cpu%':>8} {'oth cpu%':>8} {'msgs':>8}  note"
    )
    lines = [hdr, "-" * len(hdr)]
    for sc in KNOWN_SCENARIOS:
        r = rows.get(sc)
        if r is None:
            continue
        if r.error and not r.messages:
            lines.append(f"{sc:<22} {r.client_path:<11} {'FAILED':>9}  {r.error.splitlines()[0][:100]}")
            continue
        srv = 100 * r.server_cpu_s / r.seconds if r.seconds else 0
        cli = 100 * r.client_cpu_s / r.seconds if r.seconds else 0
        notes = []
        if r.error:
            notes.append(r.error.splitlines()[0][:60])
        if r.stopped_by == "time":
            notes.append("time cap")
        if r.foreign_cpu_pct > NOISY_OTHER_CPU_PCT:
            notes.append("NOISY (machine busy)")
        lines.append(
            f"{sc:<22} {r.client_path:<11} {r.msgs_per_s:>9,.0f} {r.mib_per_s:>7.1f} {r.lat_p50_ms:>7.2f} "
            f"{r.lat_p99_ms:>7.2f} {1e6 * r.server_cpu_s / r.messages:>8.1f} "
            f"{1e6 * r.client_cpu_s / r.messages:>8.1f} "
            f"{srv:>8.0f} {cli:>8.0f} {r.kernel_cpu_pct:>8.0f} "
            f"{r.foreign_cpu_pct:>8.0f} "
            f"{r.messages:>8}  {'; '.join(notes)}"
        )
    return "\n".join(lines)


def format_clients(rows: dict[str, Result]) -> str:
    """One line per client: per system, or per scenario where single and batch differ."""
    by_system: dict[str, set[str]] = {}
    for r in rows.values():
        by_system.setdefault(r.system, set()).add(r.client)
    lines, seen = [], set()
    for sc in KNOWN_SCENARIOS:
        r = rows.get(sc)
        if r is None or not r.client:
            continue
        if len(by_system[r.system]) > 1:
            lines.append(f"  {sc}: {r.client}")
        elif r.system not in seen:
            seen.add(r.system)
            lines.append(f"  {r.system}: {r.client}")
    return "\n".join(lines)


def compute_ratios(rows: dict[str, Result]) -> list[dict]:
    out = []
    for num, den, target, what in RATIOS:
        a, b = rows.get(num), rows.get(den)
        if a is None or b is None:
            continue
        ok = not a.error and not b.error and b.msgs_per_s > 0
        ratio = a.msgs_per_s / b.msgs_per_s if ok else None
        out.append(
            {
                "numerator": num,
                "denominator": den,
                "what": what,
                "ratio": ratio,
                "target": target,
                "meets_target": (ratio >= target) if (ratio is not None and target) else None,
                "noisy": max(a.foreign_cpu_pct, b.foreign_cpu_pct) > NOISY_OTHER_CPU_PCT,
            }
        )
    return out


def format_ratios(ratios: list[dict]) -> str:
    lines = []
    for x in ratios:
        r = "n/a" if x["ratio"] is None else f"{x['ratio']:.2f}x"
        t = ""
        if x["target"]:
            verdict = "n/a" if x["meets_target"] is None else ("MET" if x["meets_target"] else "MISSED")
            t = f"  (target >= {x['target']:.1f}x: {verdict})"
        if x.get("noisy"):
            t += "  [NOISY: a side ran on a busy machine]"
        lines.append(f"{x['numerator']:>22} / {x['denominator']:<22} {r:>7}{t}")
    return "\n".join(lines)


async def run_all(cfg: Config, progress: bool, keep: bool, run_id: str) -> list[Result]:
    # SIGTERM cancels the run like Ctrl-C does: every server started so far is stopped.
    main_task = asyncio.current_task()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    tmp = procs.TempRoot(keep=keep)
    etcd = Etcd(tmp.sub("etcd"))
    results: list[Result] = []
    try:
        for rnd in range(cfg.rounds):
            for sc in cfg.scenarios:
                r = await run_scenario(sc, rnd, cfg, tmp, etcd, progress, run_id)
                results.append(r)
                status = f"{r.msgs_per_s:,.0f} msgs/s, {r.mib_per_s:.1f} MiB/s" if r.messages else ""
                err = f"  ERROR: {r.error.splitlines()[0][:200]}" if r.error else ""
                click.echo(f"[round {rnd + 1}/{cfg.rounds}] {sc:<18} {status}{err}", err=True)
    finally:
        await asyncio.to_thread(etcd.stop)
        if keep:
            click.echo(f"kept data under {tmp.path}", err=True)
        tmp.close()
    return results


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--messages", type=click.IntRange(1), default=200_000, show_default=True, help="Messages per batch scenario."
)
@click.option(
    "--single-messages",
    type=click.IntRange(1),
    default=20_000,
    show_default=True,
    help="Messages per single-send scenario.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 4096),
    default=64,
    show_default=True,
    help="Messages per batch / pipeline / async-publish window.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=4,
    show_default=True,
    help="Requests in flight from the one client process (every system).",
)
@click.option("--body-bytes", type=click.IntRange(1), default=1024, show_default=True)
@click.option(
    "--max-seconds",
    type=click.FloatRange(1),
    default=60.0,
    show_default=True,
    help="Per-scenario cap on the measured phase.",
)
@click.option(
    "--warmup",
    "warmup_messages",
    type=click.IntRange(0),
    default=None,
    help="Warm-up messages per scenario (not measured). Default: 5% of the count, at most 5000.",
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 20),
    default=1,
    show_default=True,
    help="Run every scenario this many times (interleaved); report the median.",
)
@click.option(
    "--scenarios",
    default="all",
    show_default=True,
    help="Comma-separated list or globs of system:mode, e.g. 'txmq-*:batch,redis*'. "
    f"Known: {', '.join(KNOWN_SCENARIOS)} ('all' leaves out grpc-null).",
)
@click.option(
    "--txmq-client",
    type=click.Choice(["auto", "sdk", "stubs"]),
    default="auto",
    show_default=True,
    help="SDK (txmq.Producer) or raw gRPC stubs.",
)
@click.option(
    "--peer-client",
    default="best",
    show_default=True,
    help="Client path per peer scenario: comma list of [system[:mode]=]path[@in-flight], later items "
    "win; 'best' = the fastest measured per shape. Paths: redis asyncio|sync|conn, nats asyncio|uvloop. "
    "E.g. 'redis*=asyncio' (the old client), 'best,nats:single=asyncio@4'.",
)
@click.option(
    "--store-arg",
    "store_args",
    multiple=True,
    help="Extra flag for the store process, e.g. --store-arg=--log_level=WARNING.",
)
@click.option(
    "--sdk-option",
    "sdk_options",
    multiple=True,
    help="A txmq.Producer keyword for the SDK client, name=value (Python literal), e.g. "
    "--sdk-option send_stream=False --sdk-option max_in_flight_frames=4.",
)
@click.option(
    "--profile",
    is_flag=True,
    help="py-spy the store process during each txmq scenario (only the thread "
    "holding the GIL is sampled); write collapsed stacks and a top-frames "
    "summary to bench/results/.",
)
@click.option(
    "--profile-native", is_flag=True, help="With --profile: include native (C) frames (py-spy --native; slower)."
)
@click.option(
    "--wait-quiet",
    "wait_quiet_s",
    type=click.FloatRange(0, 600),
    default=30.0,
    show_default=True,
    help="Before each measured phase, wait up to this long for the machine to be "
    "quiet (< 15% of a core busy): other processes skew the figures.",
)
@click.option("--quick", is_flag=True, help="Short run: 10k batch / 2k single messages, 15 s cap, 500 warm-up.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="JSON output (default bench/results/produce-<time>.json).",
)
@click.option("--keep-data", is_flag=True, help="Keep the temp dirs (logs, data).")
@click.option("--progress/--no-progress", default=None, help="tqdm bars (default: on a tty).")
def main(
    messages,
    single_messages,
    batch_size,
    concurrency,
    body_bytes,
    max_seconds,
    warmup_messages,
    rounds,
    scenarios,
    txmq_client,
    peer_client,
    store_args,
    sdk_options,
    profile,
    profile_native,
    wait_quiet_s,
    quick,
    out,
    keep_data,
    progress,
):
    """Produce throughput: txmq store vs Redis Streams vs NATS JetStream."""
    if quick:
        messages, single_messages = min(messages, 10_000), min(single_messages, 2_000)
        max_seconds, wait_quiet_s = min(max_seconds, 15), min(wait_quiet_s, 5)
        if warmup_messages is None:
            warmup_messages = 500
    if warmup_messages is None:
        warmup_messages = min(5000, max(messages, single_messages) // 20)
    picked = pick_scenarios(scenarios)
    check_peer_clients(peer_client, picked)
    wants_txmq = any(s.startswith("txmq") for s in picked)
    if wants_txmq and not store_available() and not os.environ.get("TXMQ_BENCH_STORE_MODULE"):
        click.echo("txmq store not found (services/store/txmq_store/__main__.py); txmq scenarios will fail", err=True)
    cfg = Config(
        messages=messages,
        single_messages=single_messages,
        batch_size=batch_size,
        concurrency=concurrency,
        body_bytes=body_bytes,
        max_seconds=max_seconds,
        warmup_messages=warmup_messages,
        rounds=rounds,
        scenarios=picked,
        txmq_client=txmq_client,
        peer_client=peer_client,
        store_args=list(store_args),
        sdk_options=parse_sdk_options(sdk_options),
        profile=profile or profile_native,
        profile_native=profile_native,
        wait_quiet_s=wait_quiet_s,
    )
    if progress is None:
        progress = sys.stderr.isatty()
    run_id = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    try:
        results = asyncio.run(run_all(cfg, progress, keep_data, run_id))
    except (KeyboardInterrupt, asyncio.CancelledError):
        click.echo("interrupted: the servers it started are stopped, nothing written", err=True)
        sys.exit(130)
    path = report_and_save(cfg, results, started, out or RESULTS_DIR / f"produce-{run_id}.json")
    click.echo(f"\nJSON: {path}")
    if any(r.error for r in results):
        sys.exit(1)


def report_and_save(cfg: Config, results: list[Result], started: dt.datetime, path: Path) -> Path:
    """Print the table, ratios and profiles of a finished run; write its JSON to ``path``."""
    rows = best_of_rounds(results)
    info = machine_info()
    click.echo("")
    click.echo(f"produce benchmark  {started:%Y-%m-%d %H:%M} UTC  {info['cores']} cores  {info['cpu']}")
    click.echo(
        f"body {cfg.body_bytes} B, batch {cfg.batch_size}, {cfg.concurrency} requests in flight "
        f"(unless the client column says otherwise), one client process; rounds: {cfg.rounds}"
        + (" (median of the quiet ones)" if cfg.rounds > 1 else "")
    )
    click.echo("")
    print_report(rows)
    if cfg.profile:
        for r in results:
            if r.profile:
                click.echo(f"\nprofile of the store during {r.scenario} (round {r.round + 1}): {r.profile}")
                summary = summarize_profile(Path(r.profile))
                Path(r.profile).with_suffix(".summary.txt").write_text(summary + "\n")
                click.echo("\n".join(summary.splitlines()[:40]))

    doc = {
        "benchmark": "produce",
        "started_at": started.isoformat(),
        "machine": info,
        "config": asdict(cfg),
        "clients": {r.scenario: r.client for r in rows.values()},
        "results": [asdict(r) for r in results],
        "summary": {sc: asdict(r) for sc, r in rows.items()},
        "ratios": compute_ratios(rows),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def print_report(rows: dict[str, Result]) -> None:
    """The table, its legend, the clients and the ratios."""
    click.echo(format_table(rows))
    click.echo("")
    click.echo(
        "us/m = CPU microseconds per message (server process / this client); "
        "cpu% over the measured phase,\n  100% = one core: srv = the server process, "
        "cli = this client, krn = kernel threads + irq/softirq (writeback, journal, "
        "loopback), oth = other processes (NOISY above 25%)"
    )
    click.echo("clients (client column: path@requests in flight):")
    click.echo(format_clients(rows))
    ratios = compute_ratios(rows)
    if ratios:
        click.echo("")
        click.echo("ratios (msgs/s):")
        click.echo(format_ratios(ratios))


if __name__ == "__main__":
    main()
