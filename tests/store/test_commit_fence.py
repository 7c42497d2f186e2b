"""Offset commits fenced by the queue locks of orderly consumption: CommitConsumeOffset
naming a client_id is refused with QUEUE_LOCKED on a queue another client of the group
holds under a live lease, and nothing is committed; the holder, a queue nobody holds and
a commit naming no client go through (docs/consumers.md "Orderly consumption"). Through a
real gRPC server whose Store and ConsumerControl servicers share the lock table, on a
manual clock."""

from __future__ import annotations

import grpc
import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_store.consumer_control import ConsumerControlServicer
from txmq_store.servicer import StoreServicer

from .conftest import StoreFactory

G, A, B = "CG_ORDER", "client-a", "client-b"


@pytest.mark.asyncio
async def test_a_commit_on_a_queue_another_client_holds_is_refused(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=2, write_queue_nums=2)
    clock = ManualClock()
    server = grpc.aio.server()
    control = ConsumerControlServicer(store, clock=clock)
    store_pb2_grpc.add_ConsumerControlServicer_to_server(control, server)
    store_pb2_grpc.add_StoreServicer_to_server(StoreServicer(store, queue_locks=control.queue_locks), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        locks = store_pb2_grpc.ConsumerControlStub(channel)
        stub = store_pb2_grpc.StoreStub(channel)
        clock.advance(control.queue_locks.locks.grace_ms)
        q0 = common_pb2.MessageQueue(topic="TopicA", store_id=store.store_id, queue_id=0)
        answer = await locks.LockQueues(store_pb2.LockQueuesRequest(group=G, client_id=A, queues=[q0]))
        assert len(answer.locked) == 1

        def commit(offset: int, client_id: str, queue_id: int = 0):  # type: ignore[no-untyped-def]
            return stub.CommitConsumeOffset(
                store_pb2.CommitConsumeOffsetRequest(
                    consumer_group=G, topic="TopicA", queue_id=queue_id, offset=offset, client_id=client_id
                )
            )

        await commit(5, A)  # the holder
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await commit(3, B)  # its lock lapsed, or it never had one
        err = TxmqError.from_rpc_error(info.value)
        assert err.code == errors_pb2.CODE_QUEUE_LOCKED and not err.retriable
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert err.metadata["topic"] == "TopicA" and err.metadata["queue_id"] == "0"
        assert store.admin.query_consume_offset(group=G, topic="TopicA", queue_id=0) == 5
        await commit(7, B, queue_id=1)  # a queue nobody holds
        await commit(9, "")  # a commit naming no client is not fenced (tools, pull consumers)
        assert store.admin.query_consume_offset(group=G, topic="TopicA", queue_id=0) == 9
        # Once A's lease ended, B may commit (and lock) it.
        clock.advance(control.queue_locks.locks.lease_ms)
        await commit(4, B)
        assert store.admin.query_consume_offset(group=G, topic="TopicA", queue_id=0) == 4
    finally:
        await channel.close()
        await server.stop(None)
