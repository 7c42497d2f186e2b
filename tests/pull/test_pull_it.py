"""The Pull RPCs of real pull processes over real store processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.protocol import MAX_CLIENT_ID_BYTES, MAX_FILTER_EXPRESSION_BYTES
from txmq.records import decode_messages
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, pull_pb2_grpc, store_pb2_grpc

from .conftest import StoreAccess, pull_request, unique

P = pull_pb2


@dataclass
class Pulling:
    pull: pull_pb2_grpc.PullStub
    store: StoreAccess


@pytest.fixture(scope="session")
async def shared(txmq_cluster, store_access: StoreAccess) -> AsyncIterator[Pulling]:
    """The session cluster's pull process."""
    channel = grpc.aio.insecure_channel(txmq_cluster.pull_address)
    try:
        yield Pulling(pull_pb2_grpc.PullStub(channel), store_access)
    finally:
        await channel.close()


@pytest.fixture
async def private(service_factory) -> AsyncIterator[Pulling]:
    """A store and a pull process of their own; the pull's backstop sweep is 10 minutes
    away, so only an arrival can answer a held pull before its timeout."""
    store = service_factory.store()
    pull = service_factory.start("pull", "--hold_check_interval_ms", "600000")
    store_channel = grpc.aio.insecure_channel(store.address)
    pull_channel = grpc.aio.insecure_channel(pull.address)
    try:
        access = StoreAccess(
            store.address,
            store_pb2_grpc.StoreStub(store_channel),
            store_pb2_grpc.StoreAdminStub(store_channel),
            "store-0",
        )
        yield Pulling(pull_pb2_grpc.PullStub(pull_channel), access)
    finally:
        await pull_channel.close()
        await store_channel.close()


async def test_found_no_new_msg_and_offset_illegal(shared: Pulling) -> None:
    topic = unique("PullIt")
    await shared.store.create_topic(topic)
    q = shared.store.queue(topic, 1)
    empty = await shared.pull.PullMessage(pull_request(q), timeout=10)
    assert (empty.status, empty.next_begin_offset) == (P.PULL_STATUS_NO_NEW_MSG, 0)
    for i in range(3):
        await shared.store.send(topic, f"m{i}".encode(), queue_id=1, tags="A")
    found = await shared.pull.PullMessage(pull_request(q, offset=1), timeout=10)
    assert found.status == P.PULL_STATUS_FOUND
    assert [(m.message.body, m.queue_offset) for m in found.messages] == [(b"m1", 1), (b"m2", 2)]
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (3, 0, 3)
    badly = await shared.pull.PullMessage(pull_request(q, offset=7), timeout=10)
    assert (badly.status, badly.next_begin_offset) == (P.PULL_STATUS_OFFSET_ILLEGAL, 0)
    at_end = await shared.pull.PullMessage(pull_request(q, offset=3), timeout=10)
    assert at_end.status == P.PULL_STATUS_NO_NEW_MSG


async def test_validation_errors_are_typed(shared: Pulling) -> None:
    topic = unique("PullIt")
    await shared.store.create_topic(topic, queues=2)
    unknown_filter_type = pull_request(shared.store.queue(topic))
    unknown_filter_type.filter.type = 5  # type: ignore[assignment]
    unknown_filter_type.filter.expression = "A"
    for req, code in [
        (pull_request(shared.store.queue(topic, 2)), errors_pb2.CODE_ILLEGAL_QUEUE_ID),
        (pull_request(shared.store.queue(unique("Missing"))), errors_pb2.CODE_TOPIC_NOT_FOUND),
        (pull_request(shared.store.queue(topic), sql="a = "), errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION),
        (
            pull_request(shared.store.queue(topic), sql="a = '" + "x" * MAX_FILTER_EXPRESSION_BYTES + "'"),
            errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
        ),
        (pull_request(shared.store.queue(topic), tag="A" * 1_000_000), errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION),
        (unknown_filter_type, errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await shared.pull.PullMessage(req, timeout=10)
        err = TxmqError.from_rpc_error(info.value)
        assert err.code == code
        assert info.value.code() == err.grpc_status  # INVALID_ARGUMENT for a filter, never INTERNAL
        assert len(err.message) < 500  # at most the start of the expression is echoed


async def test_commit_offset_is_stored(shared: Pulling) -> None:
    topic = unique("PullIt")
    group = unique("ItGroup")
    await shared.store.create_topic(topic)
    await shared.store.send(topic, b"a")
    q = shared.store.queue(topic)
    await shared.pull.PullMessage(pull_request(q, group=group, offset=1, commit_offset=1), timeout=10)
    assert await shared.store.committed(group, topic, 0) == 1
    reply = await shared.pull.QueryConsumerOffset(
        pull_pb2.QueryConsumerOffsetRequest(consumer_group=group, queue=q), timeout=10
    )
    assert (reply.found, reply.offset) == (True, 1)
    await shared.pull.UpdateConsumerOffset(
        pull_pb2.UpdateConsumerOffsetRequest(consumer_group=group, queue=q, offset=0), timeout=10
    )
    assert await shared.store.committed(group, topic, 0) == 0


async def test_consumer_heartbeat_lists_the_live_group(shared: Pulling) -> None:
    group = unique("Members")
    first = await shared.pull.ConsumerHeartbeat(
        pull_pb2.ConsumerHeartbeatRequest(consumer_group=group, client_id="c-2", topics=["T"]), timeout=10
    )
    assert list(first.consumer_ids) == ["c-2"]
    second = await shared.pull.ConsumerHeartbeat(
        pull_pb2.ConsumerHeartbeatRequest(consumer_group=group, client_id="c-1"), timeout=10
    )
    assert list(second.consumer_ids) == ["c-1", "c-2"]
    for client_id in ("", "c" * (MAX_CLIENT_ID_BYTES + 1), "c" * 1_000_000):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await shared.pull.ConsumerHeartbeat(
                pull_pb2.ConsumerHeartbeatRequest(consumer_group=group, client_id=client_id), timeout=10
            )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert TxmqError.from_rpc_error(info.value).code == errors_pb2.CODE_ILLEGAL_ARGUMENT


async def test_consumer_heartbeat_refuses_a_conflicting_subscription(shared: Pulling) -> None:
    group = unique("Conflict")

    def beat(client_id: str, expression: str | None) -> pull_pb2.ConsumerHeartbeatRequest:
        subs = []
        if expression is not None:
            subs = [
                P.Subscription(
                    topic="T",
                    filter=common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=expression),
                )
            ]
        return P.ConsumerHeartbeatRequest(consumer_group=group, client_id=client_id, topics=["T"], subscriptions=subs)

    assert list((await shared.pull.ConsumerHeartbeat(beat("c-a", "A"), timeout=10)).consumer_ids) == ["c-a"]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await shared.pull.ConsumerHeartbeat(beat("c-b", "B"), timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    err = TxmqError.from_rpc_error(info.value)
    assert err.code == errors_pb2.CODE_SUBSCRIPTION_CONFLICT
    assert err.metadata == {"topic": "T", "other_client_id": "c-a"}
    assert "TAG 'B'" in err.message and "TAG 'A'" in err.message
    # an old client (no subscriptions) is not checked; the same subscription joins
    assert list((await shared.pull.ConsumerHeartbeat(beat("c-old", None), timeout=10)).consumer_ids) == [
        "c-a",
        "c-old",
    ]
    reply = await shared.pull.ConsumerHeartbeat(beat("c-c", "A"), timeout=10)
    assert list(reply.consumer_ids) == ["c-a", "c-c", "c-old"]


async def test_long_poll_is_woken_by_a_matching_send(private: Pulling) -> None:
    topic = unique("LongPoll")
    await private.store.create_topic(topic)
    q = private.store.queue(topic)
    call = private.pull.PullMessage(pull_request(q, suspend=True, suspend_timeout_ms=20_000, tag="A"), timeout=60)
    await asyncio.sleep(0.3)  # let it park (if it has not, the read or its watch sees the send)
    assert not call.done()
    await private.store.send(topic, b"hello", tags="A")
    # A missed wake-up would wait the 20 s suspend timeout (the backstop is 10 min away).
    resp = await asyncio.wait_for(call, 10)
    assert resp.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in resp.messages] == [b"hello"]
    assert resp.next_begin_offset == 1


async def test_long_poll_is_woken_by_a_matching_sql92_send_only(private: Pulling) -> None:
    topic = unique("LongPollSql")
    await private.store.create_topic(topic)
    q = private.store.queue(topic)
    call = private.pull.PullMessage(
        pull_request(q, suspend=True, suspend_timeout_ms=20_000, sql="price > 100"), timeout=60
    )
    await asyncio.sleep(0.3)
    await private.store.send(topic, b"cheap", price="5")
    await asyncio.sleep(0.3)
    assert not call.done()  # a non-matching message does not answer it
    await private.store.send(topic, b"dear", price="500")
    resp = await asyncio.wait_for(call, 10)
    assert resp.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in resp.messages] == [b"dear"]


async def test_long_poll_is_not_woken_by_a_non_matching_send(private: Pulling) -> None:
    topic = unique("LongPollMiss")
    await private.store.create_topic(topic)
    q = private.store.queue(topic)
    call = private.pull.PullMessage(pull_request(q, suspend=True, suspend_timeout_ms=1_500, tag="A"), timeout=60)
    await asyncio.sleep(0.3)
    await private.store.send(topic, b"other", tags="B")
    resp = await asyncio.wait_for(call, 10)
    # Woken by the arrival it would re-read at once and answer NO_MATCHED_MSG; timed out,
    # it answers NO_NEW_MSG, past the message it does not want.
    assert (resp.status, len(resp.messages), resp.next_begin_offset) == (P.PULL_STATUS_NO_NEW_MSG, 0, 1)


async def test_held_pull_answers_before_the_callers_deadline(shared: Pulling) -> None:
    """Asked to hold 20 s under a 2 s gRPC deadline, the pull answers NO_NEW_MSG before
    the deadline (deadline_margin_ms) instead of letting the call fail."""
    topic = unique("Deadline")
    await shared.store.create_topic(topic)
    resp = await shared.pull.PullMessage(
        pull_request(shared.store.queue(topic), suspend=True, suspend_timeout_ms=20_000), timeout=2
    )
    assert (resp.status, resp.next_begin_offset) == (P.PULL_STATUS_NO_NEW_MSG, 0)


async def test_raw_long_polls_get_every_message_once_under_concurrent_sends(private: Pulling) -> None:
    """Four consumers long-poll their queues with raw records while four senders write
    to all queues at once (woken pulls are answered from the arrival stream's records or
    by a read): each consumer gets exactly its queue's messages, in order, none twice,
    none lost. A lost wake-up would wait the 60 s suspend timeout (the backstop is 10
    min away) and trip the 30 s guard."""
    topic = unique("RawExact")
    await private.store.create_topic(topic, queues=4)
    per_sender = 40

    async def consume(queue_id: int) -> list[bytes]:
        q = private.store.queue(topic)
        q.queue_id = queue_id
        got: list[bytes] = []
        offset = 0
        while len(got) < 4 * per_sender:
            request = pull_request(q, offset=offset, suspend=True, suspend_timeout_ms=60_000)
            request.raw_records = True
            resp = await private.pull.PullMessage(request, timeout=90)
            if resp.status == P.PULL_STATUS_FOUND:
                found = decode_messages(resp.records, resp.store_id)
                assert [m.queue_offset for m in found] == list(range(offset, offset + len(found)))
                got += [m.body for m in found]
            offset = resp.next_begin_offset
        return got

    async def send(sender: int) -> None:
        for i in range(per_sender):
            await asyncio.gather(
                *(private.store.send(topic, b"%d-%d-%d" % (q, sender, i), queue_id=q) for q in range(4))
            )

    consumers = [asyncio.ensure_future(consume(q)) for q in range(4)]
    await asyncio.sleep(0.3)  # parked, mostly; a pull that has not is answered by its read
    await asyncio.gather(*(send(s) for s in range(4)))
    results = await asyncio.wait_for(asyncio.gather(*consumers), 30)
    for q, got in enumerate(results):
        assert sorted(got) == sorted(b"%d-%d-%d" % (q, s, i) for s in range(4) for i in range(per_sender))
        for s in range(4):  # one sender's messages to a queue arrive in its order
            mine = [b for b in got if b.startswith(b"%d-%d-" % (q, s))]
            assert mine == [b"%d-%d-%d" % (q, s, i) for i in range(per_sender)]
