"""Queue locks of orderly consumption on a replicated store group (real processes): only
the writable leader answers LockQueues (a follower: NOT_LEADER), and after a failover
the new leader grants no lock for half a lease, so a consumer that locked on the old
leader has stopped trusting its lock (half a lease after asking) before anyone else
can get the queue (docs/consumers.md "Orderly consumption")."""

from __future__ import annotations

import time

import grpc
import pytest
from support.waiting import wait_until

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc

from .group import GROUP, QUEUES, TOPIC, StoreGroupProcesses

LEASE_MS = 10000  # half of it (5 s) well above the failover time (a 2 s replica lease)


@pytest.mark.slow
def test_locks_follow_the_leader_and_a_new_leader_waits_half_a_lease(service_factory, tmp_path):  # type: ignore[no-untyped-def]
    group = StoreGroupProcesses(service_factory, tmp_path, extra=("--queue_lock_lease_ms", str(LEASE_MS)))
    queues = [common_pb2.MessageQueue(topic=TOPIC, store_id=GROUP, queue_id=q) for q in range(QUEUES)]

    def lock(rid: str, client_id: str) -> list[int]:
        request = store_pb2.LockQueuesRequest(group="CG_ORDERLY", client_id=client_id, queues=queues)
        answer = store_pb2_grpc.ConsumerControlStub(group.channel(rid)).LockQueues(request, timeout=5)
        assert answer.lease_ms == LEASE_MS
        return [q.queue_id for q in answer.locked]

    try:
        leader = group.leader()
        wait_until(lambda: len(group.in_sync(leader)) == 3, what="all three in sync (the topic on every replica)")
        wait_until(lambda: len(lock(leader, "a")) == QUEUES, what="the leader locking every queue for a")
        assert lock(leader, "b") == []  # a holds them
        for follower in (r for r in group.replicas if r != leader):
            with pytest.raises(grpc.RpcError) as info:
                lock(follower, "a")
            assert TxmqError.from_rpc_error(info.value).code == errors_pb2.CODE_NOT_LEADER
        assert len(lock(leader, "a")) == QUEUES  # a's last renewal: a trusts it half a lease from its send
        renewed = time.monotonic()  # after that send
        group.replicas[leader].kill()
        new_leader = group.leader()
        assert new_leader != leader
        # b asks the new leader back to back: it gets the queues, but not before a's
        # trust in its lock ended (half a lease after a's last renewal was sent).
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the new leader never granted a lock"
            try:
                if lock(new_leader, "b"):
                    granted = time.monotonic()
                    break
            except grpc.RpcError as err:  # while it settles into leading
                assert TxmqError.from_rpc_error(err).retriable, err
        assert granted - renewed >= LEASE_MS / 2000
        assert len(lock(new_leader, "b")) == QUEUES and lock(new_leader, "a") == []
    finally:
        group.close()
