"""Private etcd prefixes, per-test service processes, and free ports for etcd.

txmq services start on port 0 and report the port they bound in their ready line
(txmq_cli.cluster.ServiceProcess reads it): no port is picked for them here. Only etcd
still gets ports from ``free_port`` (outside the ephemeral range, checked free): on port 0 it
would advertise ``:0`` to its members and its own gRPC gateway, which dials that address
and logs a warning every second."""

from __future__ import annotations

import os
import random
import signal
import socket
import uuid
from pathlib import Path

import aetcd

from txmq_cli.certs import TlsFiles
from txmq_cli.cluster import EtcdServer, LocalCluster, ServiceProcess

_PORTS_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out for outgoing connections and port 0."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (for etcd, and for tests that need a port
    before anything listens on it). Services refuse to share a port (no SO_REUSEPORT),
    so the rare clash fails loudly at start-up instead of misrouting.

    The port comes from below the kernel's ephemeral range: a port from port 0 lies
    inside it, where any outgoing connection (a gRPC channel of this or another test) or
    service bound to port 0 may take it between this check and etcd's bind. No port is
    given twice in one test run."""
    low = _ephemeral_low()
    first = 20000 if low > 21000 else 1024
    for _ in range(1000):
        port = random.randrange(first, low)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port on {host} in {first}..{low - 1}")


def new_etcd(base_dir: Path, *, tls: TlsFiles | None = None) -> EtcdServer:
    """An etcd (not started yet) on free ports with its data and log under ``base_dir``;
    with ``tls``, serving clients and peers over TLS and requiring client certificates."""
    return EtcdServer(
        data_dir=base_dir / "etcd",
        log_path=base_dir / "etcd.log",
        client_port=free_port(),
        peer_port=free_port(),
        tls=tls,
    )


def new_local_cluster(base_dir: Path, **options: object) -> LocalCluster:
    """A LocalCluster (not started yet) with its data under ``base_dir``: services on
    port 0 (their addresses are known once started), etcd on free ports."""
    ports = {
        "store_port": 0,
        "pull_port": 0,
        "txcheck_port": 0,
        "gateway_port": 0,
        "etcd_client_port": free_port(),
        "etcd_peer_port": free_port(),
    }
    return LocalCluster(data_dir=base_dir, **{**ports, **options})  # type: ignore[arg-type]


def private_prefix() -> str:
    """An etcd prefix no other test uses, so its instances stay out of other routes."""
    return f"/txmq-test-{uuid.uuid4().hex[:12]}"


class ServiceFactory:
    """Starts service processes for one test, all under one private etcd prefix, each
    store with its own data dir; ``close`` stops every one still running."""

    def __init__(self, *, etcd_endpoints: str, base_dir: Path) -> None:
        self.etcd_endpoints = etcd_endpoints
        self.etcd_prefix = private_prefix()
        self._base_dir = base_dir
        self._started: list[ServiceProcess] = []

    def start(self, service: str, *args: str, wait: bool = True) -> ServiceProcess:
        """Start ``python -m txmq_<service>`` with ``args`` (``--flag``, ``value`` ...)
        on port 0; with ``wait``, return once it is ready (``.address`` names the port
        it bound; before that it is unknown)."""
        n = len(self._started)
        process = ServiceProcess(
            service,
            port=0,
            etcd_endpoints=self.etcd_endpoints,
            etcd_prefix=self.etcd_prefix,
            log_path=self._base_dir / f"{service}-{n}.log",
            args=args,
        )
        self._started.append(process)
        if wait:
            process.start()
        else:
            process.spawn()
        return process

    def store(self, *args: str, wait: bool = True) -> ServiceProcess:
        """A fresh store with its own data dir and store id (restart it on the same data
        with ``.restart()``)."""
        n = len(self._started)
        data_dir = self._base_dir / f"store-{n}"
        return self.start("store", "--data_dir", str(data_dir), "--store_id", f"store-{n}", *args, wait=wait)

    def close(self) -> None:
        for process in self._started:  # all at once, then wait for each
            process.process.signal(signal.SIGTERM)
        for process in self._started:
            process.stop()


def child_pids(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(entry))
    return children


async def wait_key_deleted(client: aetcd.Client, key: str, *, timeout_s: float) -> None:
    """Return once ``key`` is absent from etcd: at once if it is, else on its DELETE
    event (watched from the revision read, so the deletion cannot slip past)."""
    current = await client.get(key.encode())
    if current is None:
        return
    event = await client.watch_once(
        key.encode(), timeout=timeout_s, start_revision=current.header.revision + 1, kind=aetcd.EventKind.DELETE
    )
    assert event.kv.key == key.encode()
