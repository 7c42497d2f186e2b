"""The store's gRPC surface over a real grpc.aio server on a loopback port."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.ids import decode_offset_msg_id
from txmq.v1 import common_pb2, errors_pb2, store_pb2
from txmq_runtime.tags import tag_hash_code

from .conftest import ADDRESS, GrpcStore

pytestmark = pytest.mark.asyncio(loop_scope="session")


def pb_msg(body: bytes = b"hello", *, topic: str = "TopicA", **kw: object) -> common_pb2.Message:
    return common_pb2.Message(topic=topic, body=body, **kw)  # type: ignore[arg-type]


async def expect_error(call: object, code: int) -> TxmqError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    err = TxmqError.from_rpc_error(info.value)
    assert err.code == code, err
    return err


async def test_send_get_view_query(grpc_store: GrpcStore) -> None:
    stub = grpc_store.stub
    sent = await stub.SendMessage(
        store_pb2.SendMessageRequest(
            message=pb_msg(b"order-1", tags="TagA", keys=["order-1", "cust-9"], properties={"a": "1"}, queue_id=2)
        )
    )
    r = sent.result
    assert r.status == store_pb2.SEND_STATUS_OK
    assert (r.queue.topic, r.queue.queue_id, r.queue.store_id, r.queue_offset) == ("TopicA", 2, "store-0", 0)
    assert decode_offset_msg_id(r.offset_msg_id) == ("127.0.0.1", 10911, r.commit_log_offset)
    assert len(r.msg_id) == 32

    got = await stub.GetMessage(store_pb2.GetMessageRequest(topic="TopicA", queue_id=2, offset=0))
    assert got.status == store_pb2.GET_MESSAGE_STATUS_FOUND
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (1, 0, 1)
    (view,) = got.messages
    assert view.message.body == b"order-1"
    assert view.message.tags == "TagA"
    assert list(view.message.keys) == ["order-1", "cust-9"]
    assert dict(view.message.properties) == {"a": "1"}
    assert view.message.unique_id == r.msg_id
    assert view.offset_msg_id == r.offset_msg_id
    assert view.store_host == ADDRESS
    assert view.born_host.startswith("127.0.0.1:")
    assert view.store_id == "store-0"

    by_id = await stub.ViewMessage(store_pb2.ViewMessageRequest(offset_msg_id=r.offset_msg_id))
    by_offset = await stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=r.commit_log_offset))
    assert by_id.message == by_offset.message == view

    q = await stub.QueryMessages(store_pb2.QueryMessagesRequest(topic="TopicA", key="cust-9"))
    assert [m.message.unique_id for m in q.messages] == [r.msg_id]
    q = await stub.QueryMessages(store_pb2.QueryMessagesRequest(unique_id=r.msg_id))
    assert [m.commit_log_offset for m in q.messages] == [r.commit_log_offset]

    offsets = await stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic="TopicA"))
    assert [(q.queue_id, q.min_offset, q.max_offset) for q in offsets.queues] == [
        (0, 0, 0), (1, 0, 0), (2, 0, 1), (3, 0, 0)
    ]  # fmt: skip
    assert offsets.queues[2].last_store_timestamp_ms == view.store_timestamp_ms


async def test_send_batch_and_tag_filter(grpc_store: GrpcStore) -> None:
    stub = grpc_store.stub
    msgs = [pb_msg(b"%d" % i, tags="even" if i % 2 == 0 else "odd", queue_id=1) for i in range(6)]
    resp = await stub.SendBatch(store_pb2.SendBatchRequest(messages=msgs))
    assert [r.queue_offset for r in resp.results] == list(range(6))
    got = await stub.GetMessage(
        store_pb2.GetMessageRequest(
            topic="TopicA", queue_id=1, offset=0,
            filter=common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="odd"),
        )
    )  # fmt: skip
    assert [m.message.body for m in got.messages] == [b"1", b"3", b"5"]
    assert got.next_begin_offset == 6
    got = await stub.GetMessage(
        store_pb2.GetMessageRequest(
            topic="TopicA", queue_id=1, offset=0,
            filter=common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression="a = 'x'"),
        )
    )  # fmt: skip
    assert got.status == store_pb2.GET_MESSAGE_STATUS_NO_MATCHED_MESSAGE and got.next_begin_offset == 6


async def test_half_message(grpc_store: GrpcStore) -> None:
    resp = await grpc_store.stub.SendMessage(
        store_pb2.SendMessageRequest(
            message=pb_msg(b"tx", queue_id=3, unique_id="ID-1"), producer_group="pg", transaction_prepared=True
        )
    )
    r = resp.result
    assert r.transaction_id == r.msg_id == "ID-1"
    assert (r.queue.topic, r.queue.queue_id) == ("TopicA", 3)
    view = (
        await grpc_store.stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=r.commit_log_offset))
    ).message
    assert view.message.topic == "RMQ_SYS_TRANS_HALF_TOPIC"
    assert view.message.queue_id == 0 and view.queue_offset == r.queue_offset
    assert dict(view.message.properties) == {
        "REAL_TOPIC": "TopicA",
        "REAL_QID": "3",
        "PGROUP": "pg",
        "TRAN_MSG": "true",
    }
    none = await grpc_store.stub.GetMessage(store_pb2.GetMessageRequest(topic="TopicA", queue_id=3, offset=0))
    assert none.status == store_pb2.GET_MESSAGE_STATUS_NO_MESSAGE_IN_QUEUE
    await expect_error(
        grpc_store.stub.SendMessage(store_pb2.SendMessageRequest(message=pb_msg(), transaction_prepared=True)),
        errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP,
    )


async def test_errors_carry_detail(grpc_store: GrpcStore) -> None:
    stub = grpc_store.stub
    err = await expect_error(
        stub.SendBatch(store_pb2.SendBatchRequest(messages=[pb_msg(), pb_msg(topic="Nope")])),
        errors_pb2.CODE_TOPIC_NOT_FOUND,
    )
    assert err.metadata["index"] == "1"
    await expect_error(
        stub.SendMessage(store_pb2.SendMessageRequest(message=pb_msg(topic="RMQ_SYS_TRANS_HALF_TOPIC"))),
        errors_pb2.CODE_SYSTEM_TOPIC,
    )
    await expect_error(
        stub.GetMessage(store_pb2.GetMessageRequest(topic="TopicA", queue_id=9, offset=0)),
        errors_pb2.CODE_ILLEGAL_QUEUE_ID,
    )
    await expect_error(
        stub.GetMessage(
            store_pb2.GetMessageRequest(
                topic="TopicA", queue_id=0, offset=0,
                filter=common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression="a = = 1"),
            )
        ),
        errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
    )  # fmt: skip
    await expect_error(
        stub.ViewMessage(store_pb2.ViewMessageRequest(offset_msg_id="zz")), errors_pb2.CODE_ILLEGAL_MESSAGE_ID
    )
    await expect_error(
        stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=12345)), errors_pb2.CODE_MESSAGE_NOT_FOUND
    )
    await expect_error(
        grpc_store.admin.GetTopic(store_pb2.GetTopicRequest(name="Nope")), errors_pb2.CODE_TOPIC_NOT_FOUND
    )


async def test_admin_topics_and_groups(grpc_store: GrpcStore) -> None:
    admin = grpc_store.admin
    created = await admin.CreateTopic(store_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(name="TopicB")))
    assert (created.topic.read_queue_nums, created.topic.write_queue_nums, created.topic.perm) == (8, 8, 6)
    await expect_error(
        admin.CreateTopic(store_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(name="TopicB"))),
        errors_pb2.CODE_TOPIC_ALREADY_EXISTS,
    )
    updated = await admin.UpdateTopic(
        store_pb2.UpdateTopicRequest(topic=common_pb2.TopicConfig(name="TopicB", write_queue_nums=2, perm=4))
    )
    assert (updated.topic.read_queue_nums, updated.topic.write_queue_nums, updated.topic.perm) == (8, 2, 4)
    await expect_error(
        grpc_store.stub.SendMessage(store_pb2.SendMessageRequest(message=pb_msg(topic="TopicB"))),
        errors_pb2.CODE_TOPIC_NOT_WRITABLE,
    )
    names = {t.name for t in (await admin.ListTopics(store_pb2.ListTopicsRequest())).topics}
    assert names == {"TopicA", "TopicB"}
    all_names = {t.name for t in (await admin.ListTopics(store_pb2.ListTopicsRequest(include_system=True))).topics}
    assert {"RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"} <= all_names
    await admin.DeleteTopic(store_pb2.DeleteTopicRequest(name="TopicB"))
    await expect_error(admin.GetTopic(store_pb2.GetTopicRequest(name="TopicB")), errors_pb2.CODE_TOPIC_NOT_FOUND)

    g = await admin.CreateSubscriptionGroup(
        store_pb2.CreateSubscriptionGroupRequest(group=common_pb2.SubscriptionGroupConfig(group_name="cg"))
    )
    assert (g.group.consume_enable, g.group.retry_max_times, g.group.retry_queue_nums) == (True, 16, 1)
    g = await admin.UpdateSubscriptionGroup(
        store_pb2.UpdateSubscriptionGroupRequest(
            group=common_pb2.SubscriptionGroupConfig(group_name="cg", consume_enable=False)
        )
    )
    assert not g.group.consume_enable
    groups = (await admin.ListSubscriptionGroups(store_pb2.ListSubscriptionGroupsRequest())).groups
    assert "cg" in {x.group_name for x in groups}
    await admin.DeleteSubscriptionGroup(store_pb2.DeleteSubscriptionGroupRequest(group_name="cg"))
    await expect_error(
        admin.GetSubscriptionGroup(store_pb2.GetSubscriptionGroupRequest(group_name="cg")),
        errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND,
    )
    status = await admin.GetStoreStatus(store_pb2.GetStoreStatusRequest())
    assert status.store_id == "store-0" and status.flush_mode == "async" and not status.recovered_from_crash
    assert status.settings["flush_mode"] == "async"


async def test_consume_offsets(grpc_store: GrpcStore) -> None:
    stub = grpc_store.stub
    await stub.SendMessage(store_pb2.SendMessageRequest(message=pb_msg(queue_id=0)))
    q = await stub.QueryConsumeOffset(
        store_pb2.QueryConsumeOffsetRequest(consumer_group="cg", topic="TopicA", queue_id=0)
    )
    assert not q.found
    await stub.CommitConsumeOffset(
        store_pb2.CommitConsumeOffsetRequest(consumer_group="cg", topic="TopicA", queue_id=0, offset=1)
    )
    q = await stub.QueryConsumeOffset(
        store_pb2.QueryConsumeOffsetRequest(consumer_group="cg", topic="TopicA", queue_id=0)
    )
    assert (q.found, q.offset) == (True, 1)
    listed = await stub.ListConsumeOffsets(store_pb2.ListConsumeOffsetsRequest(topic="TopicA"))
    (row,) = listed.offsets
    assert (row.consumer_group, row.queue_id, row.offset, row.min_offset, row.max_offset) == ("cg", 0, 1, 0, 1)
    await expect_error(
        stub.CommitConsumeOffset(
            store_pb2.CommitConsumeOffsetRequest(consumer_group="cg", topic="TopicA", queue_id=0, offset=-1)
        ),
        errors_pb2.CODE_ILLEGAL_OFFSET,
    )


async def test_watch_arrivals(grpc_store: GrpcStore) -> None:
    stream = grpc_store.stub.WatchArrivals(store_pb2.WatchArrivalsRequest(topics=["TopicA"]))
    # Initial metadata comes once the watch is in place, before any arrival.
    await asyncio.wait_for(stream.initial_metadata(), 10)
    assert grpc_store.store._hub.active
    await grpc_store.stub.SendMessage(store_pb2.SendMessageRequest(message=pb_msg(tags="TagZ", queue_id=1)))
    batch = await asyncio.wait_for(stream.read(), 10)
    (a,) = batch.arrivals
    assert (a.topic, a.queue_id, a.queue_offset, a.max_offset) == ("TopicA", 1, 0, 1)
    assert a.tag_code == tag_hash_code("TagZ")
    assert a.properties["TAGS"] == "TagZ"
    assert batch.store_id == "store-0" and not batch.overflowed
    stream.cancel()
    for _ in range(200):
        if not grpc_store.store._hub.active:
            break
        await asyncio.sleep(0.01)
    assert not grpc_store.store._hub.active


async def test_service_names(grpc_store: GrpcStore) -> None:
    assert grpc_store.service_names == ["txmq.v1.Store", "txmq.v1.StoreAdmin", "txmq.v1.ConsumerControl"]


async def test_put_system_messages_writes_system_topics_with_system_fields(grpc_store: GrpcStore) -> None:
    stub = grpc_store.stub
    op = store_pb2.SystemMessage(
        message=pb_msg(b"0,1", topic="RMQ_SYS_TRANS_OP_HALF_TOPIC", tags="d", queue_id=0),
        sys_flag=0,
    )
    commit = store_pb2.SystemMessage(
        message=pb_msg(b"real", topic="TopicA", queue_id=1, unique_id="AB" * 16),
        sys_flag=8,  # TRANSACTION_COMMIT_TYPE
        reconsume_times=2,
        prepared_transaction_offset=1234,
    )
    resp = await stub.PutSystemMessages(store_pb2.PutSystemMessagesRequest(messages=[op, commit]))
    assert [r.queue.topic for r in resp.results] == ["RMQ_SYS_TRANS_OP_HALF_TOPIC", "TopicA"]
    view = (
        await stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=resp.results[1].commit_log_offset))
    ).message
    assert (view.sys_flag, view.reconsume_times, view.prepared_transaction_offset) == (8, 2, 1234)
    assert view.message.unique_id == "AB" * 16

    # The producer-facing RPCs still refuse system topics and ignore nothing silently.
    await expect_error(
        stub.SendMessage(store_pb2.SendMessageRequest(message=pb_msg(topic="RMQ_SYS_TRANS_OP_HALF_TOPIC"))),
        errors_pb2.CODE_SYSTEM_TOPIC,
    )
