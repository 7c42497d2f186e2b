"""protos/STATUS_CODES.md, held to its word for bad input (issue 16: "replies differ from
STATUS_CODES.md for empty topics and negative queue ids"): every RPC of txmq.v1.Store and
StoreAdmin that takes a topic, a group, a queue id, an offset or a count, called through
a real gRPC server with an empty topic / group, queue id -1 and other negative numbers,
answers exactly the documented gRPC status and ErrorDetail code (or, where the document
says the error travels in the response, that code there)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.protocol import TRANS_CHECK_GROUP
from txmq.records import ANY_QUEUE, encode_for_send
from txmq.v1 import common_pb2, errors_pb2, store_pb2
from txmq_store.configs import SubscriptionGroupConfig

from .conftest import GrpcStore

pytestmark = pytest.mark.asyncio(loop_scope="session")

E = errors_pb2
TOPIC = "TopicA"  # the fixture's topic: 4 read and write queues
GROUP = "CG_TABLE"


def message(topic: str = TOPIC, queue_id: int | None = 0) -> common_pb2.Message:
    m = common_pb2.Message(topic=topic, body=b"x", unique_id="U1")
    if queue_id is not None:
        m.queue_id = queue_id
    return m


def records(topic: str = TOPIC, queue_id: int | None = 0) -> bytes:
    return encode_for_send(topic, queue_id, b"x", "U1")


@dataclass(frozen=True)
class Case:
    rpc: str
    what: str
    call: Callable[[GrpcStore], Awaitable[object]]
    code: int
    # Where the error travels: the call's status ("status") or the response ("item").
    where: str = "status"


def _item_error(response: object) -> errors_pb2.ErrorDetail | None:
    if isinstance(response, store_pb2.RecordAck):
        return response.error if response.HasField("error") else None
    results = response.results  # type: ignore[attr-defined]
    assert len(results) == 1
    return results[0].error if results[0].HasField("error") else None


CASES = [
    # -- Store ---------------------------------------------------------------------------
    Case("SendMessage", "empty topic",
         lambda g: g.stub.SendMessage(store_pb2.SendMessageRequest(message=message(""))), E.CODE_ILLEGAL_TOPIC),
    Case("SendMessage", "queue id -1",
         lambda g: g.stub.SendMessage(store_pb2.SendMessageRequest(message=message(queue_id=-1))),
         E.CODE_ILLEGAL_QUEUE_ID),
    Case("SendBatch", "empty topic",
         lambda g: g.stub.SendBatch(store_pb2.SendBatchRequest(messages=[message("")])), E.CODE_ILLEGAL_TOPIC),
    Case("SendBatch", "queue id -1",
         lambda g: g.stub.SendBatch(store_pb2.SendBatchRequest(messages=[message(queue_id=-1)])),
         E.CODE_ILLEGAL_QUEUE_ID),
    Case("SendRecords", "empty topic",
         lambda g: g.stub.SendRecords(store_pb2.RecordFrame(records=records(""))), E.CODE_ILLEGAL_TOPIC, "item"),
    Case("SendRecords", "queue id 0xFFFFFFFE (unsigned on the wire; 0xFFFFFFFF is ANY_QUEUE)",
         lambda g: g.stub.SendRecords(store_pb2.RecordFrame(records=records(queue_id=ANY_QUEUE - 1))),
         E.CODE_ILLEGAL_QUEUE_ID, "item"),
    Case("PutSystemMessages", "empty topic",
         lambda g: g.stub.PutSystemMessages(
             store_pb2.PutSystemMessagesRequest(messages=[store_pb2.SystemMessage(message=message(""))])),
         E.CODE_ILLEGAL_TOPIC),
    Case("PutSystemMessages", "queue id -1",
         lambda g: g.stub.PutSystemMessages(
             store_pb2.PutSystemMessagesRequest(messages=[store_pb2.SystemMessage(message=message(queue_id=-1))])),
         E.CODE_ILLEGAL_QUEUE_ID),
    Case("DecideTransactions", "commit-log offset -1",
         lambda g: g.stub.DecideTransactions(store_pb2.DecideTransactionsRequest(decisions=[
             store_pb2.TransactionDecision(commit_log_offset=-1, transaction_id="T", producer_group="PG",
                                           decision=store_pb2.DECISION_COMMIT)])),
         E.CODE_TRANSACTION_NOT_FOUND, "item"),
    Case("RequeueHalves", "commit-log offset -1",
         lambda g: g.stub.RequeueHalves(store_pb2.RequeueHalvesRequest(actions=[
             store_pb2.HalfAction(commit_log_offset=-1, action=store_pb2.REQUEUE_ACTION_CHECK)])),
         E.CODE_TRANSACTION_NOT_FOUND, "item"),
    Case("GetMessage", "empty topic",
         lambda g: g.stub.GetMessage(store_pb2.GetMessageRequest(topic="")), E.CODE_ILLEGAL_TOPIC),
    Case("GetMessage", "queue id -1",
         lambda g: g.stub.GetMessage(store_pb2.GetMessageRequest(topic=TOPIC, queue_id=-1)), E.CODE_ILLEGAL_QUEUE_ID),
    Case("GetMessage", "queue id -1 of an unknown topic",
         lambda g: g.stub.GetMessage(store_pb2.GetMessageRequest(topic="Unknown", queue_id=-1)),
         E.CODE_ILLEGAL_QUEUE_ID),
    Case("GetMessage", "offset -1",
         lambda g: g.stub.GetMessage(store_pb2.GetMessageRequest(topic=TOPIC, offset=-1)), E.CODE_ILLEGAL_OFFSET),
    Case("GetMessage", "max_messages -1",
         lambda g: g.stub.GetMessage(store_pb2.GetMessageRequest(topic=TOPIC, max_messages=-1)),
         E.CODE_ILLEGAL_ARGUMENT),
    Case("ViewMessage", "commit-log offset -1",
         lambda g: g.stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=-1)), E.CODE_ILLEGAL_OFFSET),
    Case("ViewMessage", "neither key",
         lambda g: g.stub.ViewMessage(store_pb2.ViewMessageRequest()), E.CODE_ILLEGAL_ARGUMENT),
    Case("QueryMessages", "key without a topic",
         lambda g: g.stub.QueryMessages(store_pb2.QueryMessagesRequest(key="k")), E.CODE_ILLEGAL_ARGUMENT),
    Case("QueryMessages", "max_results -1",
         lambda g: g.stub.QueryMessages(store_pb2.QueryMessagesRequest(unique_id="U", max_results=-1)),
         E.CODE_ILLEGAL_ARGUMENT),
    Case("GetQueueOffsets", "empty topic",
         lambda g: g.stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic="")), E.CODE_ILLEGAL_TOPIC),
    Case("GetQueueOffsets", "queue id -1",
         lambda g: g.stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=TOPIC, queue_id=-1)),
         E.CODE_ILLEGAL_QUEUE_ID),
    Case("SearchOffset", "empty topic",
         lambda g: g.stub.SearchOffset(store_pb2.SearchOffsetRequest(topic="")), E.CODE_ILLEGAL_TOPIC),
    Case("SearchOffset", "queue id -1",
         lambda g: g.stub.SearchOffset(store_pb2.SearchOffsetRequest(topic=TOPIC, queue_id=-1)),
         E.CODE_ILLEGAL_QUEUE_ID),
    Case("CommitConsumeOffset", "empty topic",
         lambda g: g.stub.CommitConsumeOffset(store_pb2.CommitConsumeOffsetRequest(consumer_group=GROUP, topic="")),
         E.CODE_ILLEGAL_TOPIC),
    Case("CommitConsumeOffset", "empty group",
         lambda g: g.stub.CommitConsumeOffset(store_pb2.CommitConsumeOffsetRequest(topic=TOPIC)),
         E.CODE_ILLEGAL_CONSUMER_GROUP),
    Case("CommitConsumeOffset", "queue id -1",
         lambda g: g.stub.CommitConsumeOffset(
             store_pb2.CommitConsumeOffsetRequest(consumer_group=GROUP, topic=TOPIC, queue_id=-1)),
         E.CODE_ILLEGAL_QUEUE_ID),
    Case("CommitConsumeOffset", "offset -1",
         lambda g: g.stub.CommitConsumeOffset(
             store_pb2.CommitConsumeOffsetRequest(consumer_group=GROUP, topic=TOPIC, offset=-1)),
         E.CODE_ILLEGAL_OFFSET),
    Case("QueryConsumeOffset", "empty topic",
         lambda g: g.stub.QueryConsumeOffset(store_pb2.QueryConsumeOffsetRequest(consumer_group=GROUP, topic="")),
         E.CODE_ILLEGAL_TOPIC),
    Case("QueryConsumeOffset", "empty group",
         lambda g: g.stub.QueryConsumeOffset(store_pb2.QueryConsumeOffsetRequest(topic=TOPIC)),
         E.CODE_ILLEGAL_CONSUMER_GROUP),
    Case("QueryConsumeOffset", "queue id -1",
         lambda g: g.stub.QueryConsumeOffset(
             store_pb2.QueryConsumeOffsetRequest(consumer_group=GROUP, topic=TOPIC, queue_id=-1)),
         E.CODE_ILLEGAL_QUEUE_ID),
    # -- StoreAdmin ----------------------------------------------------------------------
    Case("CreateTopic", "empty name",
         lambda g: g.admin.CreateTopic(store_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(name=""))),
         E.CODE_ILLEGAL_TOPIC),
    Case("CreateTopic", "read queue nums -1",
         lambda g: g.admin.CreateTopic(
             store_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(name="TopicNew", read_queue_nums=-1))),
         E.CODE_ILLEGAL_ARGUMENT),
    Case("CreateTopic", "perm -1",
         lambda g: g.admin.CreateTopic(store_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(name="TopicNew",
                                                                                                 perm=-1))),
         E.CODE_ILLEGAL_ARGUMENT),
    Case("UpdateTopic", "empty name",
         lambda g: g.admin.UpdateTopic(store_pb2.UpdateTopicRequest(topic=common_pb2.TopicConfig(name=""))),
         E.CODE_ILLEGAL_TOPIC),
    Case("UpdateTopic", "write queue nums -1",
         lambda g: g.admin.UpdateTopic(
             store_pb2.UpdateTopicRequest(topic=common_pb2.TopicConfig(name=TOPIC, write_queue_nums=-1))),
         E.CODE_ILLEGAL_ARGUMENT),
    Case("DeleteTopic", "empty name",
         lambda g: g.admin.DeleteTopic(store_pb2.DeleteTopicRequest(name="")), E.CODE_ILLEGAL_TOPIC),
    Case("GetTopic", "empty name",
         lambda g: g.admin.GetTopic(store_pb2.GetTopicRequest(name="")), E.CODE_ILLEGAL_TOPIC),
    Case("CreateSubscriptionGroup", "empty name",
         lambda g: g.admin.CreateSubscriptionGroup(
             store_pb2.CreateSubscriptionGroupRequest(group=common_pb2.SubscriptionGroupConfig(group_name=""))),
         E.CODE_ILLEGAL_CONSUMER_GROUP),
    Case("CreateSubscriptionGroup", "retry max times -1",
         lambda g: g.admin.CreateSubscriptionGroup(store_pb2.CreateSubscriptionGroupRequest(
             group=common_pb2.SubscriptionGroupConfig(group_name="CG_NEW", retry_max_times=-1))),
         E.CODE_ILLEGAL_ARGUMENT),
    Case("UpdateSubscriptionGroup", "empty name",
         lambda g: g.admin.UpdateSubscriptionGroup(
             store_pb2.UpdateSubscriptionGroupRequest(group=common_pb2.SubscriptionGroupConfig(group_name=""))),
         E.CODE_ILLEGAL_CONSUMER_GROUP),
    Case("UpdateSubscriptionGroup", "retry queue nums -1",
         lambda g: g.admin.UpdateSubscriptionGroup(store_pb2.UpdateSubscriptionGroupRequest(
             group=common_pb2.SubscriptionGroupConfig(group_name=GROUP, retry_queue_nums=-1))),
         E.CODE_ILLEGAL_ARGUMENT),
    Case("UpdateSubscriptionGroup", "a system group",
         lambda g: g.admin.UpdateSubscriptionGroup(store_pb2.UpdateSubscriptionGroupRequest(
             group=common_pb2.SubscriptionGroupConfig(group_name=TRANS_CHECK_GROUP))),
         E.CODE_FORBIDDEN),
    Case("DeleteSubscriptionGroup", "empty name",
         lambda g: g.admin.DeleteSubscriptionGroup(store_pb2.DeleteSubscriptionGroupRequest(group_name="")),
         E.CODE_ILLEGAL_CONSUMER_GROUP),
    Case("GetSubscriptionGroup", "empty name",
         lambda g: g.admin.GetSubscriptionGroup(store_pb2.GetSubscriptionGroupRequest(group_name="")),
         E.CODE_ILLEGAL_CONSUMER_GROUP),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rpc}: {c.what}" for c in CASES])
async def test_bad_input_gets_the_documented_code(grpc_store: GrpcStore, case: Case) -> None:
    g = grpc_store
    g.store.admin.create_subscription_group(SubscriptionGroupConfig(GROUP))
    end = g.store.commitlog.write_offset
    if case.where == "item":
        response = await case.call(g)
        detail = _item_error(response)
        assert detail is not None, response
        assert detail.code == case.code, (E.Code.Name(detail.code), detail.message)
    else:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await case.call(g)
        err = TxmqError.from_rpc_error(info.value)
        assert not err.transport, info.value
        assert err.code == case.code, (err.code_name, err.message)
        assert info.value.code() == TxmqError.for_code(case.code).grpc_status
    assert g.store.commitlog.write_offset == end  # nothing written
    assert g.store.admin.topics.get("TopicNew") is None and g.store.admin.groups.get("CG_NEW") is None


async def test_unknown_topics_and_the_any_queue_are_not_errors(grpc_store: GrpcStore) -> None:
    """What the document calls statuses, or a choice, stays one."""
    g = grpc_store
    r = await g.stub.GetMessage(store_pb2.GetMessageRequest(topic="Unknown"))
    assert r.status == store_pb2.GET_MESSAGE_STATUS_NO_MATCHED_LOGIC_QUEUE
    ack = await g.stub.SendRecords(store_pb2.RecordFrame(records=records(queue_id=None)))  # ANY_QUEUE
    assert not ack.HasField("error") and 0 <= ack.queue_ids[0] < 4
    r2 = await g.stub.QueryConsumeOffset(store_pb2.QueryConsumeOffsetRequest(consumer_group=GROUP, topic=TOPIC))
    assert not r2.found
