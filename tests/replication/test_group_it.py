"""A replicated store group on real processes: election, copying, the high watermark,
follower reads and refusals (docs/replication.md)."""

from __future__ import annotations

import grpc
from click.testing import CliRunner
from support.waiting import wait_until

from txmq import Admin
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_cli.main import cli

from .group import TOPIC, StoreGroupProcesses, Workload, check, error_detail, read_all


def test_three_replicas_elect_a_leader_and_every_replica_holds_every_acknowledged_send(service_factory, tmp_path):
    group = StoreGroupProcesses(service_factory, tmp_path)
    leader = group.leader()
    followers = [r for r in group.replicas if r != leader]
    wait_until(lambda: len(group.in_sync(leader)) == 3, what="all three in sync")

    work = Workload(group)
    work.start()
    wait_until(lambda: work.acked_count() >= 400, what="400 acknowledged sends")
    work.finish()
    assert not work.unexpected

    # A follower refuses writes, naming the leader.
    try:
        store_pb2_grpc.StoreStub(group.channel(followers[0])).SendMessage(
            store_pb2.SendMessageRequest(message=common_pb2.Message(topic=TOPIC, body=b"x")), timeout=5
        )
        raise AssertionError("a follower took a write")
    except grpc.RpcError as err:
        detail = error_detail(err)
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert detail is not None and detail.code == errors_pb2.CODE_NOT_LEADER
        assert detail.metadata["leader"] == leader

    leader_end = group.status(leader).log_end
    for rid in followers:
        wait_until(lambda rid=rid: group.status(rid).high_watermark >= leader_end, what=f"{rid} caught up")
    for rid in group.replicas:  # every replica serves every acknowledged message, at its offset
        verdict = check(work.acked, read_all(group, rid))
        assert verdict == {"acked": len(work.acked), "lost": 0, "duplicated": 0, "moved": 0}, (rid, verdict)


def test_store_group_status_shows_leader_epoch_in_sync_set_and_lag(service_factory, tmp_path):
    group = StoreGroupProcesses(service_factory, tmp_path)
    leader = group.leader()
    wait_until(lambda: len(group.in_sync(leader)) == 3, what="all three in sync")
    endpoint = group.replicas[leader].address
    with Admin(endpoint) as admin:
        [status] = admin.store_group_status()
    assert status.store_id == "grp" and status.leader == leader and status.epoch >= 1
    assert set(status.in_sync) == {"r0", "r1", "r2"} and status.min_in_sync == 2
    assert {r.replica_id: r.role for r in status.replicas} == {
        rid: "leader" if rid == leader else "follower" for rid in group.replicas
    }
    assert all(r.lag_bytes == 0 and r.in_sync for r in status.replicas)

    killed = next(r for r in group.replicas if r != leader)
    group.replicas[killed].kill()  # still registered (its etcd lease lives 10 s): unreachable
    result = CliRunner().invoke(cli, ["store-group", "status", "--endpoint", endpoint], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"store group grp: leader {leader}, epoch {status.epoch}" in result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines()[2:]}
    assert sorted(lines) == ["r0", "r1", "r2"], result.output
    assert lines[leader][1] == "leader" and lines[killed][1] == "unreachable", result.output
