"""`txmq up` as a user runs it: a subprocess with its own ports and data dir."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import grpc
from support import ChildProcess, child_pids, free_port, wait_serving
from txmq.v1 import store_pb2, store_pb2_grpc


def start_up(tmp_path: Path, *extra: str) -> tuple[ChildProcess, dict[str, str]]:
    ports = {name: free_port() for name in ("store", "pull", "txcheck", "gateway", "etcd_client", "etcd_peer")}
    up = ChildProcess(
        name="txmq up",
        argv=[
            sys.executable, "-m", "txmq_cli.main", "up",
            "--data_dir", str(tmp_path / "data"),
            *[a for name, port in ports.items() for a in (f"--{name}_port", str(port))],
            *extra,
        ],
        log_path=tmp_path / "up.log",
    )
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
    assert str(tmp_path / "data" / "logs") in log
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}"), f"stray process {pid}"
    for name in ("etcd", "store", "pull", "txcheck", "gateway"):
        assert (tmp_path / "data" / "logs" / f"{name}.log").stat().st_size > 0


def test_up_stops_the_rest_when_a_child_dies(tmp_path: Path) -> None:
    up, _ = start_up(tmp_path)
    try:
        children = child_pids(up.pid)
        pull = next(pid for pid in children if "txmq_pull" in cmdline(pid))
        os.kill(pull, signal.SIGKILL)
        assert up.wait(timeout_s=60) == 1
    finally:
        up.terminate(timeout_s=30)
    assert "pull exited with code -9; stopping the rest" in up.log_tail(100)
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}"), f"stray process {pid}"
