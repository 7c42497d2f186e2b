"""Check-loop leader fences in the store: a write under an epoch older than one the store
has seen for the half queue is refused (CODE_FENCED) and writes nothing, on every fenced
RPC; a higher epoch raises the mark; the mark survives a restart; unfenced calls pass.
Through a real gRPC server: item errors travel in the results, FENCED as the call's
typed error."""

from __future__ import annotations

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.protocol import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
from txmq.v1 import common_pb2, errors_pb2, store_pb2
from txmq_store.message_store import MessageStore
from txmq_store.transactions import CHECK, HalfAction

from .conftest import GrpcStore, StoreFactory, msg


async def _half(store: MessageStore):
    [r] = await store.send([msg(b"tx")], producer_group="PG_F", transaction_prepared=True)
    return r


async def test_older_epoch_refused_newer_raises_the_mark(store: MessageStore) -> None:
    r = await _half(store)
    fences = store.transactions.fences
    await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)], epoch=7)
    assert fences.mark() == 7
    end = store.commitlog.write_offset
    with pytest.raises(TxmqError) as info:
        await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)], epoch=6)
    assert info.value.code == errors_pb2.CODE_FENCED
    assert info.value.metadata["current_epoch"] == "7" and info.value.metadata["epoch"] == "6"
    with pytest.raises(TxmqError):
        await store.transactions.decide([], epoch=3)
    assert store.commitlog.write_offset == end
    await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)], epoch=7)  # same epoch: fine
    await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)])  # unfenced: fine
    await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)], epoch=9)
    assert fences.mark() == 9
    # Another half queue has its own mark.
    fences.admit(2, half_queue_id=1)
    assert fences.mark(1) == 2 and fences.mark() == 9


async def test_the_mark_survives_a_restart(stores: StoreFactory) -> None:
    store = await stores.open()
    store.transactions.fences.admit(42)
    await store.close()
    stores.opened.remove(store)
    again = await stores.open()
    assert again.transactions.fences.mark() == 42
    with pytest.raises(TxmqError) as info:
        again.transactions.fences.admit(41)
    assert info.value.code == errors_pb2.CODE_FENCED


def _fence(epoch: int) -> store_pb2.Fence:
    return store_pb2.Fence(epoch=epoch, half_queue_id=0)


async def test_every_fenced_rpc_refuses_an_old_epoch(grpc_store: GrpcStore) -> None:
    stub = grpc_store.stub
    store = grpc_store.store
    r = await _half(store)
    store.transactions.fences.admit(10)
    end = store.commitlog.write_offset
    progress = store.admin.query_consume_offset(group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=0)
    calls = [
        stub.RequeueHalves(
            store_pb2.RequeueHalvesRequest(
                actions=[
                    store_pb2.HalfAction(commit_log_offset=r.commit_log_offset, action=store_pb2.REQUEUE_ACTION_CHECK)
                ],
                fence=_fence(9),
            )
        ),
        stub.DecideTransactions(
            store_pb2.DecideTransactionsRequest(
                decisions=[
                    store_pb2.TransactionDecision(
                        commit_log_offset=r.commit_log_offset,
                        tran_state_table_offset=r.queue_offset,
                        transaction_id=r.transaction_id,
                        producer_group="PG_F",
                        decision=store_pb2.DECISION_COMMIT,
                    )
                ],
                fence=_fence(9),
            )
        ),
        stub.PutSystemMessages(
            store_pb2.PutSystemMessagesRequest(
                messages=[store_pb2.SystemMessage(message=common_pb2.Message(topic=TRANS_HALF_TOPIC, body=b"x"))],
                fence=_fence(9),
            )
        ),
        stub.CommitConsumeOffset(
            store_pb2.CommitConsumeOffsetRequest(
                consumer_group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=0, offset=5, fence=_fence(9)
            )
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        err = TxmqError.from_rpc_error(info.value)
        assert err.code == errors_pb2.CODE_FENCED and not err.retriable
    assert store.commitlog.write_offset == end
    assert store.admin.query_consume_offset(group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=0) == progress


async def test_item_errors_travel_in_the_results(grpc_store: GrpcStore) -> None:
    stub = grpc_store.stub
    r = await _half(grpc_store.store)
    resp = await stub.DecideTransactions(
        store_pb2.DecideTransactionsRequest(
            decisions=[
                store_pb2.TransactionDecision(
                    commit_log_offset=r.commit_log_offset, tran_state_table_offset=r.queue_offset,
                    transaction_id=r.transaction_id, producer_group="PG_F", decision=store_pb2.DECISION_COMMIT,
                ),
                store_pb2.TransactionDecision(
                    commit_log_offset=r.commit_log_offset, tran_state_table_offset=r.queue_offset,
                    transaction_id=r.transaction_id, producer_group="PG_F", decision=store_pb2.DECISION_ROLLBACK,
                ),
                store_pb2.TransactionDecision(
                    commit_log_offset=10**9, tran_state_table_offset=0,
                    transaction_id=r.transaction_id, producer_group="PG_F", decision=store_pb2.DECISION_COMMIT,
                ),
            ],
            fence=_fence(3),
        )
    )  # fmt: skip
    ok, opposite, missing = resp.results
    assert not ok.HasField("error") and ok.first and ok.decision == store_pb2.DECISION_COMMIT
    assert ok.committed.message.topic == "TopicA" and ok.committed.store_id == grpc_store.store.store_id
    assert ok.committed.offset_msg_id and not ok.committed.message.body
    assert opposite.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert missing.error.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND
    viewed = await stub.ViewMessage(store_pb2.ViewMessageRequest(offset_msg_id=ok.committed.offset_msg_id))
    assert viewed.message.message.body == b"tx"


async def test_send_batch_of_half_messages(grpc_store: GrpcStore) -> None:
    """SendBatch with transaction_prepared stores half messages as SendMessage does: each
    result names its real queue and carries its transaction id (and the store decides
    them like any other half)."""
    resp = await grpc_store.stub.SendBatch(
        store_pb2.SendBatchRequest(
            messages=[common_pb2.Message(topic="TopicA", body=b"h%d" % i, queue_id=i % 4) for i in range(6)],
            producer_group="PG_F",
            transaction_prepared=True,
        )
    )
    assert [r.queue.topic for r in resp.results] == ["TopicA"] * 6
    assert [r.queue.queue_id for r in resp.results] == [i % 4 for i in range(6)]
    assert all(r.transaction_id and r.transaction_id == r.msg_id for r in resp.results)
    halves = grpc_store.store.reader.get_message(topic=TRANS_HALF_TOPIC, queue_id=0, offset=0).messages
    assert [m.queue_offset for m in halves] == [r.queue_offset for r in resp.results]
    missing_group = store_pb2.SendBatchRequest(
        messages=[common_pb2.Message(topic="TopicA", body=b"x")], transaction_prepared=True
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await grpc_store.stub.SendBatch(missing_group)
    assert TxmqError.from_rpc_error(info.value).code == errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP
