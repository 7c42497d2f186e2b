"""A replicated store group on real processes: election, copying, the high watermark,
follower reads and refusals (docs/replication.md)."""

from __future__ import annotations

import grpc
from support.waiting import wait_until

from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc

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
