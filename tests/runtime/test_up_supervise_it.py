"""`txmq up` keeps its cluster running when a child dies, as a user sees it: the CLI as a
subprocess (its own session, so SIGINT to its group is a terminal's Ctrl-C), ports
chosen free. kill -9 of the store group's leader: `txmq up` says it restarts it, sends
through the SDK keep succeeding (via the new leader) and the replica rejoins in sync;
kill -9 of the pull service: back on its port; Ctrl-C: everything stops, exit 0. And
what stops it: a service that cannot start at all (first start, or a crash loop)."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from support import ChildProcess, child_pids, free_port, wait_serving
from support.waiting import wait_until

from txmq import Admin, Message, Producer, SendStatus, StoreGroupStatus, TxmqError

TOPIC = "UpSuperviseTopic"
PORTS = ["--store-port", "0", "--pull-port", "0", "--txcheck-port", "0", "--gateway-port", "0"]


def start_up(tmp_path: Path, *extra: str, sigint_ignored: bool = False) -> ChildProcess:
    """`txmq up` on free ports, once it has said the cluster is up. ``sigint_ignored``:
    started with SIGINT ignored, as a script's background job is."""
    up = ChildProcess(
        name="txmq up",
        argv=[
            sys.executable, "-m", "txmq_cli.main", "up", "--data-dir", str(tmp_path / "data"), *PORTS,
            "--etcd-client-port", str(free_port()), "--etcd-peer-port", str(free_port()), *extra,
        ],
        log_path=tmp_path / "up.out",
        own_session=True,
    )  # fmt: skip
    before = signal.signal(signal.SIGINT, signal.SIG_IGN) if sigint_ignored else None
    try:
        up.spawn()  # inherits SIG_IGN
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)
    try:
        wait_output(up, "(Ctrl-C to stop)", timeout_s=120)
    except BaseException:
        up.terminate(timeout_s=30)
        raise
    return up


def output(up: ChildProcess) -> str:
    return up.log_path.read_text(errors="replace")


def wait_output(up: ChildProcess, pattern: str, *, timeout_s: float = 60) -> re.Match[str]:
    """The first match of ``pattern`` (a regex if it starts with ``^``, else plain text)
    in what `txmq up` printed; fails at once if `txmq up` ends first."""
    regex = re.compile(pattern if pattern.startswith("^") else re.escape(pattern), re.M)
    deadline = time.monotonic() + timeout_s
    while True:
        running = up.running()  # before reading: what it printed before it ended is seen
        if found := regex.search(output(up)):
            return found
        assert running, f"txmq up ended before printing {pattern!r}:\n{output(up)}"
        assert time.monotonic() < deadline, f"{pattern!r} not printed within {timeout_s} s:\n{output(up)}"
        time.sleep(0.1)


def addresses(up: ChildProcess) -> dict[str, str]:
    """name -> address, as `txmq up` listed them."""
    return dict(re.findall(r"^  (\S+)\s+(\d+\.\d+\.\d+\.\d+:\d+)$", output(up), re.M))


def cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")


def child_pid(up: ChildProcess, *marks: str) -> int:
    """The pid of up's child whose command line holds every one of ``marks`` in order."""
    pids = [pid for pid in child_pids(up.pid) if " ".join(marks) in " ".join(cmdline(pid))]  # type: ignore[arg-type]
    assert len(pids) == 1, (marks, pids)
    return pids[0]


def group_status(admin: Admin) -> StoreGroupStatus | None:
    try:
        [status] = admin.store_group_status()
    except (TxmqError, ValueError):
        return None
    return status


@pytest.mark.timeout(400)
def test_up_restarts_a_killed_leader_replica_and_the_pull_service_then_stops_on_ctrl_c(tmp_path: Path) -> None:
    up = start_up(
        tmp_path, "--store-replicas", "3", "--flush_mode", "sync", "--replica_lease_ms", "2000",
        "--replica_lag_max_ms", "2000", sigint_ignored=True,
    )  # fmt: skip
    children: list[int] = []
    try:
        where = addresses(up)
        assert {"store", "store-r1", "store-r2", "pull", "txcheck", "gateway", "etcd"} <= set(where), where
        bootstrap = where["txcheck"]  # answers route look-ups, and is never killed here
        with Admin(bootstrap) as admin:

            def created() -> bool:  # the group takes writes once two replicas are in sync
                try:
                    admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
                except TxmqError as exc:
                    assert exc.retriable, exc
                    return False
                return True

            wait_until(created, timeout_s=60, what="the topic created on the group's leader")
            acked: list[str] = []
            errors: list[str] = []
            stop = threading.Event()

            def produce() -> None:
                with Producer("up-supervise-producer", bootstrap, send_timeout=10.0) as producer:
                    i = 0
                    while not stop.is_set():
                        try:
                            result = producer.send(Message(TOPIC, f"m{i}".encode()))
                        except TxmqError as exc:
                            errors.append(str(exc))
                            continue
                        i += 1
                        if result.status is SendStatus.OK:
                            acked.append(result.msg_id)

            thread = threading.Thread(target=produce, daemon=True)
            thread.start()
            try:
                wait_until(lambda: len(acked) >= 100, what="100 sends acknowledged")
                status = wait_until(lambda: group_status(admin), what="the group's status")
                assert status.leader, status
                rid = status.leader
                name = "store" if rid == "r0" else f"store-{rid}"
                leader = child_pid(up, "--replica_id", rid)
                children = child_pids(up.pid)  # type: ignore[arg-type]
                os.kill(leader, signal.SIGKILL)
                count = len(acked)
                log = tmp_path / "data" / "logs" / f"{name}.log"
                wait_output(up, f"{name} (pid {leader}) was killed by SIGKILL; restarting it in 1 s; log {log}")
                restarted = wait_output(up, rf"^{name} restarted \(pid (\d+)\) and is ready again$")
                new_pid = int(restarted[1])
                assert new_pid != leader and child_pid(up, "--replica_id", rid) == new_pid
                # same port (the restarted one on the address listed at start) and same data
                argv = cmdline(new_pid)
                assert argv[argv.index("--port") + 1] == where[name].rsplit(":", 1)[1]
                assert argv[argv.index("--data_dir") + 1] == str(tmp_path / "data" / "store" / rid)

                wait_until(lambda: len(acked) >= count + 200, timeout_s=60, what="200 more sends after the kill")

                def rejoined() -> bool:
                    # A new term, with the restarted replica in sync again. It may lead that
                    # term itself: restarted within the lease, it held everything acknowledged
                    # and is as eligible as the others (it won about half the time here).
                    st = group_status(admin)
                    if st is None or not st.leader or st.epoch <= status.epoch or rid not in st.in_sync:
                        return False
                    mine = next(r for r in st.replicas if r.replica_id == rid)
                    return mine.in_sync is True or mine.role == "leader"

                wait_until(rejoined, timeout_s=90, what=f"{rid} back in sync in a new term")
            finally:
                stop.set()
                thread.join(timeout=30)
            assert not errors, errors[:3]

        # The pull service: back on its port.
        pull = child_pid(up, "txmq_pull")
        os.kill(pull, signal.SIGKILL)
        wait_output(up, f"pull (pid {pull}) was killed by SIGKILL; restarting it in 1 s")
        back = int(wait_output(up, r"^pull restarted \(pid (\d+)\) and is ready again$")[1])
        assert child_pid(up, "txmq_pull") == back
        wait_serving(where["pull"], process=up, timeout_s=30)
        assert up.running()

        children = sorted(set(children) | set(child_pids(up.pid)))  # type: ignore[arg-type]
        # Ctrl-C: up and its group. It stops even though it was started with SIGINT
        # ignored (its services stop on SIGINT anyway: they must not be restarted).
        os.killpg(up.pid, signal.SIGINT)  # type: ignore[arg-type]
        assert up.wait(timeout_s=90) == 0, output(up)
    finally:
        up.terminate(timeout_s=30)
    text = output(up)
    assert "Traceback" not in text, text
    assert "cannot start" not in text and "restarting it" in text
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}"), f"stray process {pid}: {cmdline(pid)}"


@pytest.mark.timeout(300)
def test_a_crash_loop_stops_up_with_one_line_and_exit_1(tmp_path: Path) -> None:
    """The pull service killed, and its port taken before it comes back: every restart
    dies before its ready line; after 5 in a row `txmq up` gives up and stops the rest."""
    up = start_up(tmp_path, "--restart-backoff-max-ms", "1000")
    try:
        pull_port = int(addresses(up)["pull"].rsplit(":", 1)[1])
        children = child_pids(up.pid)  # type: ignore[arg-type]
        pull = child_pid(up, "txmq_pull")
        with socket.socket() as taken:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            os.kill(pull, signal.SIGKILL)
            # Its port is free once its last thread is gone; it is started again 1 s after.
            wait_until(lambda: _bound(taken, pull_port), timeout_s=5, what="the killed pull's port taken")
            taken.listen()
            assert up.wait(timeout_s=120) == 1, output(up)
    finally:
        up.terminate(timeout_s=30)
    text = output(up)
    assert "Traceback" not in text, text
    for n in ("1 failed start", "2 failed starts", "3 failed starts", "4 failed starts"):
        assert f"exited with code 1 before it was ready ({n} in a row); restarting it in 1 s" in text
    [line] = [line for line in text.splitlines() if "cannot start" in line]
    assert line.startswith(
        "stopping the cluster: pull cannot start (5 failed starts in a row; the last exited with code 1 "
    ), line
    assert f"log {tmp_path / 'data' / 'logs' / 'pull.log'}" in line
    assert line.endswith(f"its last line: {_last_line(tmp_path / 'data' / 'logs' / 'pull.log')}"), line
    assert f"pull did not start: cannot listen on 127.0.0.1:{pull_port}" in line  # the service's own words
    for pid in children:
        assert not os.path.exists(f"/proc/{pid}"), f"stray process {pid}"


def _last_line(log: Path) -> str:
    return log.read_text().splitlines()[-1].strip()


def _bound(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def test_a_service_that_cannot_start_at_all_stops_up_with_one_line(tmp_path: Path) -> None:
    up = ChildProcess(
        name="txmq up",
        argv=[
            sys.executable, "-m", "txmq_cli.main", "up", "--data-dir", str(tmp_path / "data"), *PORTS,
            "--etcd-client-port", str(free_port()), "--etcd-peer-port", str(free_port()),
            "--store-replicas", "3", "--no-such-store-flag", "1",
        ],
        log_path=tmp_path / "up.out",
    )  # fmt: skip
    up.spawn()
    try:
        assert up.wait(timeout_s=120) == 1
    finally:
        up.terminate(timeout_s=30)
    text = output(up)
    assert "Traceback" not in text and "txmq is up" not in text, text
    [line] = [line for line in text.splitlines() if not line.startswith("--- ")]  # not the log's own header
    assert re.fullmatch(
        r"start-up failed: store(-r\d)? \(pid \d+\) exited with code 2 before it was ready; log \S+\.log; "
        r"its last line: txmq-store: error: unrecognized arguments: --no-such-store-flag 1",
        line,
    ), line
