"""What an operator (and Kubernetes) relies on, on real processes (docs/replication.md):
a replica is ready only while it is an in-sync copy of its group, a follower left behind
by the leader's retention reseeds itself, and a group whose every replica needs a resync
gets a leader when an operator picks one."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.waiting import wait_until

from txmq import Admin
from txmq.errors import TxmqError
from txmq.protocol import READY_HEALTH_SERVICE
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_cli.main import cli

from .group import GROUP, QUEUES, TOPIC, StoreGroupProcesses, Workload, damage_log

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _all_in_sync(group: StoreGroupProcesses) -> str:
    leader = group.leader()
    wait_until(lambda: len(group.in_sync(leader)) == len(group.replicas), what="every replica in sync")
    return leader


# -- readiness ---------------------------------------------------------------------------------


def test_a_store_alone_and_the_other_services_are_ready_as_soon_as_they_serve(txmq_cluster):
    for address in (txmq_cluster.store_address, txmq_cluster.pull_address):
        stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(address))
        for service in ("", READY_HEALTH_SERVICE):
            assert stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status == SERVING


@pytest.mark.timeout(180)
def test_a_follower_out_of_the_in_sync_set_is_not_ready_until_it_is_back(service_factory, tmp_path):
    """SIGSTOP a follower past replica_lag_max_ms: the leader drops it from the in-sync
    set. After SIGCONT it answers NOT_SERVING on the readiness name (its liveness, "",
    stays SERVING: a long catch-up must not get the pod killed) until it is back in the
    set, then SERVING. Watched through grpc.health.v1 Watch, which sees every change."""
    group = StoreGroupProcesses(service_factory, tmp_path)
    leader = _all_in_sync(group)
    follower = next(r for r in group.replicas if r != leader)
    for rid in group.replicas:
        wait_until(lambda rid=rid: group.health(rid, READY_HEALTH_SERVICE) == SERVING, what=f"{rid} ready")

    seen: list[int] = []
    watch = health_pb2_grpc.HealthStub(group.channel(follower)).Watch(
        health_pb2.HealthCheckRequest(service=READY_HEALTH_SERVICE)
    )

    def collect() -> None:
        try:
            for response in watch:
                seen.append(response.status)
        except grpc.RpcError:
            pass  # cancelled at the end

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    wait_until(lambda: seen == [SERVING], what="the watch's first answer")
    work = Workload(group, transaction_every=1_000_000)
    work.start()
    proc = group.replicas[follower].process
    proc.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: follower not in group.in_sync(leader), what=f"{follower} out of the in-sync set")
        work_before = work.acked_count()
        wait_until(lambda: work.acked_count() > work_before + 20, what="writes going on without it")
    finally:
        proc.signal(signal.SIGCONT)
    checked: list[int] = []

    def back() -> bool:
        status = group.health(follower, READY_HEALTH_SERVICE)
        checked.append(status)
        if status == NOT_SERVING:
            assert group.health(follower, "") == SERVING  # alive: liveness unaffected
        return status == SERVING and follower in group.in_sync(leader)

    wait_until(back, what=f"{follower} ready and in sync again")
    work.finish()
    watch.cancel()
    reader.join(timeout=10)
    assert not work.unexpected, work.unexpected[:5]
    # Before the stop SERVING; after SIGCONT NOT_SERVING (out of the set), then SERVING.
    assert seen[0] == SERVING and NOT_SERVING in seen[1:] and seen[-1] == SERVING, (seen, checked)
    assert seen.index(NOT_SERVING) < len(seen) - 1
    # The leader was ready throughout (it kept taking writes).
    assert group.health(leader, READY_HEALTH_SERVICE) == SERVING


# -- reseeding -----------------------------------------------------------------------------------


def _segments(data_dir: Path) -> dict[str, Path]:
    return {p.name: p for p in (data_dir / "commitlog").iterdir() if p.name.isdigit() and len(p.name) == 20}


def _messages_from(group: StoreGroupProcesses, rid: str, qid: int, offset: int) -> list[tuple[int, bytes]]:
    stub = store_pb2_grpc.StoreStub(group.channel(rid))
    rows: list[tuple[int, bytes]] = []
    while True:
        resp = stub.GetMessage(
            store_pb2.GetMessageRequest(topic=TOPIC, queue_id=qid, offset=offset, max_messages=256), timeout=10
        )
        if not resp.messages and resp.next_begin_offset <= offset:
            return rows
        # Below the queue's first offset (retention deleted it meanwhile) the answer has no
        # messages and points at that first offset: read on from there.
        rows += [(m.queue_offset, m.message.body) for m in resp.messages]
        offset = resp.next_begin_offset


@pytest.mark.timeout(240)
def test_a_follower_behind_the_leaders_oldest_segment_reseeds_itself(service_factory, tmp_path):
    """Small segments (64 KiB) and retention (1.5 s): while a follower is down the leader
    writes past several segments and deletes the old ones. Restarted, the follower is
    told CODE_REPLICA_BEHIND_LOG_START, sets its log aside, copies the leader's log from
    its oldest segment, and ends in sync with the same bytes and the same messages; the
    set-aside log is deleted once it is in sync."""
    retention = [
        "--commitlog_segment_bytes", "65536", "--file_reserved_time_ms", "1500", "--clean_files_interval_ms", "200",
    ]  # fmt: skip
    group = StoreGroupProcesses(service_factory, tmp_path, extra=retention)
    leader = _all_in_sync(group)
    follower = next(r for r in group.replicas if r != leader)
    assert group.store_status(leader).settings["commitlog_segment_bytes"] == "65536"
    work = Workload(group, transaction_every=1_000_000)
    work.start()
    wait_until(lambda: work.acked_count() >= 100, what="100 acknowledged sends")
    group.replicas[follower].kill()
    old_end = max(int(name) for name in _segments(group.data_dirs[follower])) + 65536
    wait_until(
        lambda: group.store_status(leader).commit_log_min_offset > old_end,
        timeout_s=120,
        what="the leader's retention past everything the follower holds",
    )
    group.replicas[follower].restart()
    log_path = group.replicas[follower].process.log_path
    wait_until(lambda: "reseeds: its log ends at" in log_path.read_text(), what="the follower reseeding")
    wait_until(lambda: follower in group.in_sync(leader), timeout_s=60, what=f"{follower} back in sync")
    work.finish()
    assert not work.unexpected, work.unexpected[:5]
    end = group.status(leader).log_end
    wait_until(lambda: group.status(follower).high_watermark >= end, what=f"{follower} holding everything")
    assert not group.status(follower).needs_resync
    # It did not keep its old log: its oldest segment starts past what it had.
    assert group.store_status(follower).commit_log_min_offset > old_end
    # The log set aside is gone once it is in sync again.
    wait_until(lambda: not list(group.data_dirs[follower].glob("reseeded-*")), what="the set-aside log deleted")
    assert "the log set aside by a reseed" in log_path.read_text()
    # The same bytes in every segment both hold (retention runs on both meanwhile).
    leader_segments, follower_segments = _segments(group.data_dirs[leader]), _segments(group.data_dirs[follower])
    compared = 0
    for name in sorted(set(leader_segments) & set(follower_segments)):
        try:
            same = leader_segments[name].read_bytes() == follower_segments[name].read_bytes()
        except FileNotFoundError:
            continue  # deleted by retention meanwhile
        assert same, name
        compared += 1
    assert compared >= 1
    # The same messages at the same queue offsets, where both still have them (retention
    # keeps running on both meanwhile, so each is read from its own first offset).
    common = 0
    for qid in range(QUEUES):
        theirs = dict(_messages_from(group, leader, qid, 0))
        ours = dict(_messages_from(group, follower, qid, 0))
        both = theirs.keys() & ours.keys()
        assert all(theirs[o] == ours[o] for o in both), qid
        common += len(both)
    assert common > 0


# -- an operator picks a leader --------------------------------------------------------------


@pytest.mark.timeout(240)
def test_a_group_whose_every_replica_needs_a_resync_elects_the_replica_an_operator_picks(service_factory, tmp_path):
    group = StoreGroupProcesses(service_factory, tmp_path)
    leader = _all_in_sync(group)
    work = Workload(group, transaction_every=1_000_000)
    work.start()
    wait_until(lambda: work.acked_count() >= 200, what="200 acknowledged sends")
    work.finish()
    end = group.status(leader).log_end
    for rid in group.replicas:
        wait_until(lambda rid=rid: group.status(rid).high_watermark >= end, what=f"{rid} holding everything")
    for rid, replica in group.replicas.items():  # every replica's log is damaged
        replica.kill()
        damage_log(group.data_dirs[rid], 0)
    for replica in group.replicas.values():
        replica.restart()
    for rid in group.replicas:
        wait_until(lambda rid=rid: (st := group.status(rid)) is not None and st.needs_resync, what=f"{rid} damaged")
    time.sleep(3 * 2.0)  # three leases (--replica_lease_ms 2000): nobody may stand
    assert not [rid for rid in group.replicas if group.status(rid).role == "leader"]
    endpoint = group.replicas["r0"].address

    # Without --force: it says what may be lost, and does nothing.
    dry = CliRunner().invoke(cli, ["store-group", "elect", GROUP, "--replica", "r1", "--endpoint", endpoint])
    assert dry.exit_code == 1, dry.output
    assert "Electing r1 to lead store group grp by hand" in dry.output and "--force" in dry.output
    assert "needs a resync" in dry.output
    assert group.status("r1").role != "leader"

    done = CliRunner().invoke(
        cli, ["store-group", "elect", GROUP, "--replica", "r1", "--force", "--endpoint", endpoint]
    )
    assert done.exit_code == 0, done.output
    assert "r1 is its only in-sync replica" in done.output
    assert group.leader(timeout_s=30) == "r1"  # leads, and takes writes (min_in_sync 2: a follower caught up)
    sent = store_pb2_grpc.StoreStub(group.channel("r1")).SendMessage(
        store_pb2.SendMessageRequest(message=common_pb2.Message(topic=TOPIC, body=b"after the pick")), timeout=10
    )
    assert sent.result.status == store_pb2.SEND_STATUS_OK
    wait_until(lambda: len(group.in_sync("r1")) == 3, what="every replica in sync with r1")
    assert not any(group.status(rid).needs_resync for rid in group.replicas)
    assert "picked to lead by an operator" in group.replicas["r1"].process.log_path.read_text()

    # Typed refusals: a live leader, an unknown replica, an unknown group.
    with Admin(endpoint) as admin:
        for args, code in (
            ((GROUP, "r2"), errors_pb2.CODE_GROUP_HAS_LEADER),
            ((GROUP, "r9"), errors_pb2.CODE_REPLICA_NOT_FOUND),
            (("nope", "r1"), errors_pb2.CODE_STORE_NOT_FOUND),
        ):
            with pytest.raises(TxmqError) as err:
                admin.elect_store_replica(*args, force=True)
            assert err.value.code == code, (args, err.value)
    # Without force the replica itself refuses.
    with pytest.raises(grpc.RpcError) as rpc_err:
        store_pb2_grpc.StoreReplicationStub(group.channel("r2")).ElectReplica(
            store_pb2.ElectReplicaRequest(store_id=GROUP, replica_id="r2"), timeout=5
        )
    assert TxmqError.from_rpc_error(rpc_err.value).code == errors_pb2.CODE_ILLEGAL_ARGUMENT
