"""Running client programs in processes of their own (the official RocketMQ clients,
which must not share a process with txmq's copy of their protos), reading their
one-JSON-object-per-line output, and explaining a failure with every program's output
and the services' logs.

A subclass of ``ScriptRunner`` says how to start a script (``argv``, ``child_env``, ``cwd``)
and which logs explain a failure (``logs``)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TIMEOUT_S = 60.0


def records(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of ``stdout``'s lines that start with ``{``."""
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"event": "unparsable", "line": line})
    return out


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])


def file_tail(path: Path, lines: int = 40) -> str:
    try:
        return tail(path.read_text(errors="replace"), lines)
    except FileNotFoundError:
        return f"(no {path})"


@dataclass
class Run:
    """One script process, finished or running."""

    name: str
    argv: list[str]
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    records: list[dict[str, Any]] = field(default_factory=list)

    def events(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == event]

    def errors(self) -> list[dict[str, Any]]:
        return self.events("error")

    def received(self) -> list[dict[str, Any]]:
        """The messages of every ``received`` line."""
        return [m for r in self.events("received") for m in r["messages"]]

    def describe(self) -> str:
        return (
            f"--- {self.name}: exit {self.returncode}\n"
            f"argv: {' '.join(self.argv[1:])}\n"
            f"stdout (last lines):\n{tail(self.stdout, 15)}\n"
            f"stderr (last lines):\n{tail(self.stderr)}"
        )


class Background:
    """A script left running: its stdout and stderr are read line by line meanwhile;
    its stdin is a pipe (closing it tells some scripts to stop)."""

    def __init__(self, run: Run, env: dict[str, str], cwd: Path | None = None) -> None:
        self.run = run
        self._proc = subprocess.Popen(
            run.argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self._out: list[str] = []
        self._err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self._proc.stdout, self._out), daemon=True),
            threading.Thread(target=self._read, args=(self._proc.stderr, self._err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def _sync(self) -> None:
        self.run.stdout = "".join(self._out)
        self.run.stderr = "".join(self._err)
        self.run.records = records(self.run.stdout)
        self.run.returncode = self._proc.poll()

    def wait_event(self, event: str, timeout_s: float, explain: Callable[[str], str]) -> dict[str, Any]:
        """The first ``event`` line, waiting for it (the process must not end first)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._sync()
            if found := self.run.events(event):
                return found[0]
            if self.run.returncode is not None:
                time.sleep(0.1)  # let the readers drain what is left
                self._sync()
                if found := self.run.events(event):
                    return found[0]
                raise AssertionError(explain(f"{self.run.name} exited before printing {event!r}"))
            if time.monotonic() > deadline:
                raise AssertionError(explain(f"{self.run.name} printed no {event!r} within {timeout_s:.0f} s"))
            time.sleep(0.05)

    def finish(self, timeout_s: float, explain: Callable[[str], str], *, close_stdin: bool = False) -> Run:
        """Wait for the exit (closing stdin first if asked); kill it after ``timeout_s``."""
        if close_stdin and self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(explain(f"{self.run.name} did not finish within {timeout_s:.0f} s (killed)")) from None
        for reader in self._readers:
            reader.join(5)
        self._sync()
        return self.run

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        for reader in self._readers:
            reader.join(5)
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._sync()


class ScriptRunner:
    """Runs one test's scripts; every failure message carries every script's output and
    the tails of ``logs``. Subclasses define ``argv`` and ``child_env`` (and ``cwd``)."""

    timeout_s = DEFAULT_TIMEOUT_S
    cwd: Path | None = None

    def __init__(self, logs: list[Path]) -> None:
        self.logs = logs
        self.runs: list[Run] = []
        self.background: list[Background] = []

    def argv(self, script: str, args: tuple[str, ...], endpoint: str | None) -> list[str]:
        raise NotImplementedError

    def child_env(self) -> dict[str, str]:
        """The environment of every script process."""
        raise NotImplementedError

    def run(self, script: str, *args: str, endpoint: str | None = None, timeout_s: float | None = None) -> Run:
        """Run a script to its end; it must exit 0 (its error lines are results)."""
        timeout_s = timeout_s or self.timeout_s
        run = Run(script, self.argv(script, args, endpoint))
        self.runs.append(run)
        try:
            proc = subprocess.run(
                run.argv,
                cwd=self.cwd,
                check=False,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=self.child_env(),
            )
        except subprocess.TimeoutExpired as exc:
            run.stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            run.stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            run.records = records(run.stdout)
            raise AssertionError(self.explain(f"{script} did not finish within {timeout_s:.0f} s")) from None
        run.stdout, run.stderr, run.returncode = proc.stdout, proc.stderr, proc.returncode
        run.records = records(run.stdout)
        assert proc.returncode == 0, self.explain(f"{script} exited with {proc.returncode}")
        return run

    def start(self, script: str, *args: str, endpoint: str | None = None) -> Background:
        run = Run(script, self.argv(script, args, endpoint))
        self.runs.append(run)
        bg = Background(run, self.child_env(), self.cwd)
        self.background.append(bg)
        return bg

    def finish(self, bg: Background, timeout_s: float | None = None, *, close_stdin: bool = False) -> Run:
        run = bg.finish(timeout_s or self.timeout_s, self.explain, close_stdin=close_stdin)
        assert run.returncode == 0, self.explain(f"{run.name} exited with {run.returncode}")
        return run

    def explain(self, what: str) -> str:
        parts = [what, *(run.describe() for run in self.runs)]
        parts += [f"--- {log.name} (last lines):\n{file_tail(log)}" for log in self.logs]
        return "\n".join(parts)

    def close(self) -> None:
        for bg in self.background:
            bg.kill()


# -- a private cluster for client programs ----------------------------------------------

# txcheck checks every 500 ms on transactions older than 500 ms (an orphan is recovered
# within seconds); the gateway allows 1 s invisible durations (redelivery tests).
TXCHECK_FAST = (
    "--transaction_check_interval_ms", "500",
    "--transaction_timeout_ms", "500",
    "--transaction_check_max", "40",
)  # fmt: skip
GATEWAY_FAST = ("--min_invisible_duration_ms", "1000")
#: The store applies the late-decision rule with its own transaction_timeout_ms: the same
#: value as txcheck's (a store that differs says so in a WARNING).
STORE_FAST = ("--transaction_timeout_ms", "500")


@dataclass
class ClientEnv:
    """A private cluster (own etcd prefix) that client programs talk to through its
    gateway, a HOME for their logs, and an Admin for the txmq-side checks."""

    cluster: Any  # LocalCluster
    etcd_endpoint: str
    etcd_prefix: str
    home: Path
    admin: Any  # txmq.Admin


@contextmanager
def client_env(etcd_endpoint: str, base: Path) -> Iterator[ClientEnv]:
    from support.processes import new_local_cluster, private_prefix
    from txmq import Admin

    prefix = private_prefix()
    cluster = new_local_cluster(
        base,
        etcd_endpoints=etcd_endpoint,
        etcd_prefix=prefix,
        txcheck_args=list(TXCHECK_FAST),
        store_args=list(STORE_FAST),
        gateway_args=list(GATEWAY_FAST),
    )
    cluster.start()
    home = base / "client-home"
    home.mkdir()
    try:
        with Admin(cluster.bootstrap) as admin:
            yield ClientEnv(cluster, etcd_endpoint, prefix, home, admin)
    finally:
        cluster.stop()


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(what: str, predicate: Callable[[], Any], explain: Callable[[str], str], timeout_s: float = 20.0) -> Any:
    """``predicate()``'s first truthy value, polled every 0.1 s; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if value := predicate():
            return value
        if time.monotonic() > deadline:
            raise AssertionError(explain(f"timed out after {timeout_s:.0f} s waiting for {what}"))
        time.sleep(0.1)


def by_key(env: ClientEnv, topic: str, key: str) -> list[Any]:
    """The stored messages of ``topic`` with ``key`` (txmq's index, not the gateway)."""
    return env.admin.query_messages_by_key(topic, key, max_results=64)


def stored_count(env: ClientEnv, topic: str) -> int:
    return sum(q.max_offset - q.min_offset for q in env.admin.queue_offsets(topic))


def query_transaction(env: ClientEnv, transaction_id: str) -> Any:
    """txcheck's QueryTransaction answer (state and timeline of a transaction)."""
    import grpc

    from txmq.v1 import txcheck_pb2, txcheck_pb2_grpc

    with grpc.insecure_channel(env.cluster.txcheck_address) as channel:
        stub = txcheck_pb2_grpc.TransactionStub(channel)
        return stub.QueryTransaction(txcheck_pb2.QueryTransactionRequest(transaction_id=transaction_id), timeout=5)


def script_args(topic: str, group: str, **options: Any) -> list[str]:
    """``--topic T --group G --name-with-dashes value ...``"""
    args = ["--topic", topic, "--group", group]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args
