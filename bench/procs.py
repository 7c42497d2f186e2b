"""Child processes for the benchmark: start on free loopback ports in temp dirs, wait until
ready, stop (SIGTERM, then SIGKILL) by pid. Every wait is bounded in time."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PY = ROOT / ".venv" / "bin" / "python"
ETCD_BIN = ROOT / ".venv" / "bin" / "etcd"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_tcp(port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (and its reaped children), in seconds; 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is state (field 3); utime=14, stime=15, cutime=16, cstime=17 (1-based)
        ticks = sum(int(x) for x in fields[11:15])
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def system_busy_s() -> float:
    """CPU time all cores spent busy since boot (user+nice+system+irq+softirq+steal), in
    seconds: compared with our own processes' CPU time it shows what else ran meanwhile."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in parts[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


def kernel_threads_cpu_s() -> float:
    """CPU time of kernel threads (children of kthreadd, pid 2: jbd2, kworkers doing
    writeback, ...): fsync-heavy scenarios make them busy on our behalf."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == "2" or d == "2":  # ppid (field 4) is kthreadd
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def user_system_s() -> float:
    """user+nice+system time of all cores since boot (no irq/softirq/steal), in seconds."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
        return sum(int(x) for x in parts[1:4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


def wait_quiet(max_wait_s: float, threshold_pct: float = 15.0, window_s: float = 1.0) -> float:
    """Wait (at most ``max_wait_s``) until the whole machine's busy CPU stays below
    ``threshold_pct`` of one core for ``window_s``. Returns the last measured busy %."""
    deadline = time.monotonic() + max_wait_s
    while True:
        b0, t0 = system_busy_s(), time.monotonic()
        time.sleep(window_s)
        pct = 100 * (system_busy_s() - b0) / (time.monotonic() - t0)
        if pct < threshold_pct or time.monotonic() >= deadline:
            return pct


_live: set[Child] = set()


@atexit.register
def _stop_leftovers() -> None:
    """Safety net (e.g. after Ctrl-C): stop every child this process started."""
    for c in list(_live):
        c.stop(timeout_s=3)


@dataclass(eq=False)
class Child:
    """One child process with its own temp dir and log file."""

    name: str
    argv: list[str]
    workdir: Path
    port: int
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / f"{self.name}.log"

    def start(self) -> Child:
        log = open(self.log_path, "wb")
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        log.close()
        _live.add(self)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid) if self.proc is not None else 0.0

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        _live.discard(self)
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
        except ProcessLookupError:
            pass


class TempRoot:
    """A temp dir for one benchmark run; removed on close unless keep=True."""

    def __init__(self, keep: bool = False, base: str | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="txmq-bench-", dir=base))
        self.keep = keep

    def sub(self, name: str) -> Path:
        p = self.path / name
        if p.exists():
            shutil.rmtree(p)
        p.mkdir(parents=True)
        return p

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


# --- the peers -------------------------------------------------------------------------


def start_redis(workdir: Path, *, aof_always: bool) -> Child:
    """redis-server on loopback; no RDB snapshots; AOF off, or on with appendfsync always."""
    exe = shutil.which("redis-server")
    if not exe:
        raise RuntimeError("redis-server not found: run bench/setup_peers.sh")
    port = free_port()
    argv = [
        exe,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--protected-mode",
        "yes",
        "--daemonize",
        "no",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--logfile",
        "",
    ]
    if aof_always:
        argv += ["--appendonly", "yes", "--appendfsync", "always"]
    else:
        argv += ["--appendonly", "no"]
    c = Child("redis", argv, workdir, port).start()
    try:
        wait_tcp(port, 10, c.proc)
    except Exception:  # noqa: BLE001
        c.stop()
        raise RuntimeError(f"redis did not start:\n{c.log_tail()}")
    return c


def start_nats(workdir: Path) -> Child:
    """nats-server with JetStream (file storage under workdir) on loopback."""
    exe = shutil.which("nats-server")
    if not exe:
        raise RuntimeError("nats-server not found: run bench/setup_peers.sh")
    port = free_port()
    store = workdir / "js"
    store.mkdir(exist_ok=True)
    argv = [exe, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)]
    c = Child("nats", argv, workdir, port).start()
    try:
        wait_tcp(port, 10, c.proc)
    except Exception:  # noqa: BLE001
        c.stop()
        raise RuntimeError(f"nats-server did not start:\n{c.log_tail()}")
    return c


def start_etcd(workdir: Path) -> Child:
    """A single-member etcd on free loopback ports (fast heartbeat / election)."""
    if not ETCD_BIN.exists():
        raise RuntimeError(f"{ETCD_BIN} not found: run scripts/setup.sh")
    cport, pport = free_port(), free_port()
    argv = [
        str(ETCD_BIN),
        "--name",
        "bench",
        "--data-dir",
        str(workdir / "etcd-data"),
        "--listen-client-urls",
        f"http://127.0.0.1:{cport}",
        "--advertise-client-urls",
        f"http://127.0.0.1:{cport}",
        "--listen-peer-urls",
        f"http://127.0.0.1:{pport}",
        "--initial-advertise-peer-urls",
        f"http://127.0.0.1:{pport}",
        "--initial-cluster",
        f"bench=http://127.0.0.1:{pport}",
        "--heartbeat-interval",
        "10",
        "--election-timeout",
        "100",
        "--log-level",
        "warn",
    ]
    c = Child("etcd", argv, workdir, cport).start()
    try:
        wait_tcp(cport, 15, c.proc)
    except Exception:  # noqa: BLE001
        c.stop()
        raise RuntimeError(f"etcd did not start:\n{c.log_tail()}")
    return c


def start_store(
    workdir: Path, *, flush_mode: str, etcd_port: int, extra_args: list[str] | None = None, module: str | None = None
) -> Child:
    """A txmq store process (``python -m txmq_store``); readiness is checked by the caller
    through the gRPC health service. ``TXMQ_BENCH_STORE_MODULE`` names another module to run
    (for testing the harness against a stand-in)."""
    port = free_port()
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    argv = [
        str(VENV_PY),
        "-m",
        module or os.environ.get("TXMQ_BENCH_STORE_MODULE", "txmq_store"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data_dir",
        str(data),
        "--flush_mode",
        flush_mode,
        "--etcd_endpoints",
        f"127.0.0.1:{etcd_port}",
        *(extra_args or []),
    ]
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return Child("store", argv, workdir, port, env={"PYTHONPATH": pythonpath}).start()
