"""`txmq up` as a user runs it: a subprocess with its own ports and data dir."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import grpc
from support import ChildProcess, ServiceProcess, child_pids, free_port, wait_serving

from txmq.v1 import store_pb2, store_pb2_grpc

PORT_NAMES = ("store", "pull", "txcheck", "gateway", "etcd_client", "etcd_peer")


def up_process(tmp_path: Path, ports: dict[str, int], *extra: str, name: str = "up") -> ChildProcess:
    return ChildProcess(
        name=f"txmq {name}",
        argv=[
            sys.executable,
            "-m",
            "txmq_cli.main",
            "up",
            "--data_dir",
            str(tmp_path / name / "data"),
            *[a for name, port in ports.items() for a in (f"--{name}_port", str(port))],
            *extra,
        ],
        log_path=tmp_path / f"{name}.log",
    )


def start_up(tmp_path: Path, *extra: str) -> tuple[ChildProcess, dict[str, str]]:
    ports = {name: free_port() for name in PORT_NAMES}
    up = up_process(tmp_path, ports, *extra)
    up.spawn()
    addresses = {name: f"127.0.0.1:{ports[name]}" for name in ("store", "pull", "txcheck", "gateway")}
    addresses["etcd"] = f"127.0.0.1:{ports['etcd_client']}"
    try:
        for address in addresses.values():
            wait_serving(address, process=up, timeout_s=90)
        # Its own checks may finish a moment after ours: wait for what it tells the user.
        deadline = time.monotonic() + 30
        while "bootstrap address" not in up.log_tail():
            assert up.running() and time.monotonic() < deadline, up.log_tail()
            time.sleep(0.02)
    except BaseException:
        up.terminate(timeout_s=30)
        raise
    return up, addresses


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def test_up_runs_everything_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    up, addresses = start_up(tmp_path, "--flush_mode", "sync")
    try:
        children = child_pids(up.pid)
        commands = [cmdline(pid) for pid in children]
        assert len(children) == 5
        assert sum("etcd" in c and "txmq_" not in c for c in commands) == 1
        for service in ("txmq_store", "txmq_pull", "txmq_txcheck", "txmq_gateway"):
            assert sum(service in c for c in commands) == 1
        assert "--flush_mode sync" in next(c for c in commands if "txmq_store" in c)  # passed through
        with grpc.insecure_channel(addresses["store"]) as channel:
            admin = store_pb2_grpc.StoreAdminStub(channel)
            status = admin.GetStoreStatus(store_pb2.GetStoreStatusRequest(), timeout=10)
        assert status.flush_mode == "sync"

        up.signal(signal.SIGTERM)
        assert up.wait(timeout_s=60) == 0
    finally:
        up.terminate(timeout_s=30)
    log = up.log_tail(100)
    assert f"bootstrap address: {addresses['store']}" in log
    assert str(tmp_path / "up" / "data" / "logs") in log
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}"), f"stray process {pid}"
    for name in ("etcd", "store", "pull", "txcheck", "gateway"):
        assert (tmp_path / "up" / "data" / "logs" / f"{name}.log").stat().st_size > 0


def test_a_second_up_on_the_same_ports_starts_nothing_and_says_which_port_to_change(tmp_path: Path) -> None:
    """The first cluster answers on every port the second would use: the second must not
    take it for its own ("txmq is up"), nor start etcd (which dies with a Go stack trace)."""
    ports = {name: free_port() for name in PORT_NAMES}
    first = up_process(tmp_path, ports)
    first.spawn()
    try:
        deadline = time.monotonic() + 90
        while "bootstrap address" not in first.log_tail():
            assert first.running() and time.monotonic() < deadline, first.log_tail()
            time.sleep(0.05)
        second = up_process(tmp_path, ports, name="second")
        second.spawn()
        assert second.wait(timeout_s=60) == 1
        log = second.log_tail(100)
        assert "txmq is up" not in log
        assert "goroutine" not in log and "Traceback" not in log
        checked = [("store", "--store-port"), ("gateway", "--gateway-port"), ("etcd client", "--etcd-client-port")]
        for name, flag in checked:
            port = ports[name.replace(" ", "_")]
            assert f"{name} port {port} on 127.0.0.1 is in use (choose another with {flag})" in log, log
        assert not (tmp_path / "second" / "data" / "logs").exists()  # nothing was started
        assert first.running()
    finally:
        first.terminate(timeout_s=30)


def test_up_reports_a_taken_metrics_port_passed_to_the_store(tmp_path: Path) -> None:
    ports = {name: free_port() for name in PORT_NAMES}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics_port = taken.getsockname()[1]
        up = up_process(tmp_path, ports, "--metrics-port", str(metrics_port))
        up.spawn()
        assert up.wait(timeout_s=60) == 1
    assert f"store metrics port {metrics_port} on 127.0.0.1 is in use (choose another with --metrics-port)" in (
        up.log_tail()
    )


def test_a_service_without_etcd_ends_with_one_line(tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    service = ServiceProcess(
        "txcheck",
        port=0,
        etcd_endpoints=nowhere,
        log_path=tmp_path / "txcheck.log",
        args=["--etcd-startup-timeout-ms", "2000"],
    )
    service.spawn()
    assert service.process.wait(timeout_s=60) == 1
    log = service.process.log_path.read_text()
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if re.search(r" (ERROR|CRITICAL) ", line)]
    assert len(errors) == 1, log
    assert f"txcheck did not start: etcd at {nowhere} not reachable within 2 s" in errors[0]


def test_a_service_on_a_taken_port_ends_with_one_line(tmp_path: Path, etcd: object) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = etcd.endpoint  # type: ignore[attr-defined]
        service = ServiceProcess("pull", port=port, etcd_endpoints=endpoint, log_path=tmp_path / "pull.log")
        service.spawn()
        assert service.process.wait(timeout_s=60) == 1
    log = service.process.log_path.read_text()
    assert "Traceback" not in log
    assert f"pull did not start: cannot listen on 127.0.0.1:{port} (in use?); choose another with --port" in log
