"""Idempotent sends across a failover, on real processes (docs/store.md "Idempotent
sends", docs/replication.md): a send acknowledged by a store group's leader, which is
then killed with SIGKILL, is sent again with the same unique id to the new leader (a
producer whose acknowledgement was lost with the old leader). The new leader answers it
from the idempotence window, with the first send's result, and stores nothing."""

from __future__ import annotations

import uuid

import grpc
from support.waiting import wait_until

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc

from .group import TOPIC, StoreGroupProcesses, read_all

#: What a write meets while leadership moves (docs/replication.md "What clients see").
_MOVING = (errors_pb2.CODE_NOT_LEADER, errors_pb2.CODE_NOT_ENOUGH_REPLICAS, errors_pb2.CODE_SERVICE_NOT_READY)


def _message(unique_id: str, body: bytes) -> common_pb2.Message:
    return common_pb2.Message(topic=TOPIC, body=body, unique_id=unique_id, queue_id=0)


def _send_batch(group: StoreGroupProcesses, rid: str, messages: list[common_pb2.Message]) -> list[store_pb2.SendResult]:
    """SendBatch at ``rid``, waiting out the refusals of a leadership move (as the SDK does)."""

    def attempt() -> list[store_pb2.SendResult] | None:
        try:
            response = store_pb2_grpc.StoreStub(group.channel(rid)).SendBatch(
                store_pb2.SendBatchRequest(messages=messages), timeout=10
            )
        except grpc.RpcError as err:
            if TxmqError.from_rpc_error(err).code in _MOVING:
                return None
            raise
        return list(response.results)

    return wait_until(attempt, timeout_s=30, what=f"a send accepted by {rid}")


def test_a_retry_on_the_new_leader_after_kill_9_is_answered_with_the_first_result(service_factory, tmp_path):
    group = StoreGroupProcesses(service_factory, tmp_path)
    old = group.leader()
    wait_until(lambda: len(group.in_sync(old)) == 3, what="all three in sync")
    ids = [f"idem-{uuid.uuid4().hex}-{i}" for i in range(3)]
    first = _send_batch(group, old, [_message(ids[0], b"one"), _message(ids[1], b"two")])
    assert [r.status for r in first] == [store_pb2.SEND_STATUS_OK] * 2
    assert not any(r.duplicate for r in first)

    group.replicas[old].kill()  # acknowledged, and the acknowledgement "lost" with it
    new = group.leader()
    assert new != old

    # The retry of both, plus a message never sent: only the new one is stored.
    again = _send_batch(group, new, [_message(ids[0], b"one"), _message(ids[1], b"two"), _message(ids[2], b"new")])
    assert [r.status for r in again] == [store_pb2.SEND_STATUS_OK] * 3
    assert [r.duplicate for r in again] == [True, True, False]
    for before, after in zip(first, again[:2], strict=True):
        assert (after.msg_id, after.queue_offset, after.commit_log_offset) == (
            before.msg_id,
            before.queue_offset,
            before.commit_log_offset,
        )
    assert again[2].queue_offset == first[1].queue_offset + 1
    assert [body for _, body in read_all(group, new)[0]] == [b"one", b"two", b"new"]
