"""One suite, two implementations of what the gateway's consumer core needs from its
backend: the in-memory ``FakeBackend`` (fake_backend.py, which test_consumer_core.py runs
on) and the real ``txmq_gateway.backend.Backend`` over the session's store, pull and
txcheck processes. As nats-server runs one store suite against every store: the fake may
only be used for what this suite shows it does like the real thing.

The real side is marked slow (it needs the session cluster); the fake side is part of
the fast loop. Time: the fake's held pulls wait on a ManualClock that the suite moves
(``Side.elapse``); the real side's pulls hold in real time (short holds only)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from support.clock import ManualClock, settle

from txmq.errors import TxmqError
from txmq.protocol import PERM_READ
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, store_pb2
from txmq_gateway.backend import Backend
from txmq_runtime.etcd import close_client, etcd_client
from txmq_runtime.registry import ClusterView, EtcdKeys

from .fake_backend import FakeBackend

GROUP = "contract-group"
ALL = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="*")
GUARD_S = 30  # a hang guard, not a timing claim
ROUTE_WAIT_S = 10


@dataclass
class Side:
    """One implementation under test and how the suite drives it."""

    name: str
    backend: Any  # Backend or FakeBackend
    store_id: str
    clock: ManualClock | None  # the fake's; None: real time

    async def elapse(self, ms: int) -> None:
        """Let ``ms`` of the backend's time pass for the calls in flight (the fake: once
        they all wait, move its clock; the real one: its holds end by themselves)."""
        if self.clock is not None:
            await settle()
            self.clock.advance(ms)

    async def in_flight(self) -> None:
        """Let calls started as tasks reach the backend (the real one: the pull service)."""
        if self.clock is not None:
            await settle()
        else:
            await asyncio.sleep(0.3)  # a real pull reaching the pull service; not asserted on

    async def new_topic(self, queue_nums: int = 1) -> str:
        topic = f"contract-{uuid.uuid4().hex[:10]}"
        await self.backend.ensure_topic(self.store_id, topic, queue_nums=queue_nums)
        await self.routed(topic)
        return topic

    async def routed(self, topic: str) -> None:
        """Until ``queues(topic)`` answers (the real cluster view learns routes from etcd)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + ROUTE_WAIT_S
        while True:
            try:
                await self.backend.queues(topic)
                return
            except TxmqError:
                if self.clock is not None or loop.time() > give_up:
                    raise
            await asyncio.sleep(0.05)

    async def send(self, topic: str, body: str, *, queue_id: int = 0, tags: str = "") -> int:
        message = common_pb2.Message(
            topic=topic, body=body.encode(), tags=tags, queue_id=queue_id, unique_id=uuid.uuid4().hex.upper()
        )
        result = await self.backend.send(self.store_id, message)
        return result.queue_offset

    async def pull(
        self,
        topic: str,
        offset: int,
        *,
        queue_id: int = 0,
        max_messages: int = 32,
        filter: common_pb2.FilterExpression = ALL,
        hold_ms: int = 0,
    ) -> pull_pb2.PullMessageResponse:
        request = pull_pb2.PullMessageRequest(
            consumer_group=GROUP,
            queue=common_pb2.MessageQueue(topic=topic, store_id=self.store_id, queue_id=queue_id),
            queue_offset=offset,
            max_messages=max_messages,
            filter=filter,
            suspend=hold_ms > 0,
            suspend_timeout_ms=hold_ms,
            client_id="contract-client",
        )
        return await asyncio.wait_for(self.backend.pull(request), GUARD_S)


async def _real_side(request: pytest.FixtureRequest) -> AsyncIterator[Side]:
    cluster = request.getfixturevalue("txmq_cluster")
    client = etcd_client(cluster.etcd_endpoints)
    view = ClusterView(client, EtcdKeys("/txmq"))
    await view.start(timeout_s=10)
    backend = Backend(view, timeout_ms=5_000)
    try:
        stores = view.endpoints(common_pb2.SERVICE_KIND_STORE)
        assert stores, "the session cluster has no live store"
        yield Side("real", backend, stores[0].instance_id, None)
    finally:
        await backend.close()
        await view.close()
        await close_client(client)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.slow)])
async def side(request: pytest.FixtureRequest) -> AsyncIterator[Side]:
    if request.param == "fake":
        clock = ManualClock()
        yield Side("fake", FakeBackend(clock), "s1", clock)
        return
    async for real in _real_side(request):
        yield real


def offsets_of(reply: pull_pb2.PullMessageResponse) -> list[int]:
    return [v.queue_offset for v in reply.messages]


def bodies_of(reply: pull_pb2.PullMessageResponse) -> list[str]:
    return [v.message.body.decode() for v in reply.messages]


async def expect_code(code: int, call: Callable[[], Awaitable[object]]) -> None:
    with pytest.raises(TxmqError) as info:
        await call()
    assert info.value.code == code, info.value


# -- routes and topics -------------------------------------------------------------------


async def test_an_unknown_topic_has_no_route(side: Side) -> None:
    await expect_code(errors_pb2.CODE_TOPIC_NOT_FOUND, lambda: side.backend.queues(f"nope-{uuid.uuid4().hex[:8]}"))


async def test_a_created_topic_is_routed_readable_and_empty(side: Side) -> None:
    topic = await side.new_topic(queue_nums=2)
    queues = [q for q in await side.backend.queues(topic) if q.store_id == side.store_id]
    assert len(queues) == 1
    assert queues[0].read_queue_nums == 2 and queues[0].perm & PERM_READ
    assert await side.backend.queue_offsets(side.store_id, topic) == {0: (0, 0), 1: (0, 0)}
    await side.backend.ensure_topic(side.store_id, topic, queue_nums=2)  # again: nothing changes
    assert await side.backend.queue_offsets(side.store_id, topic) == {0: (0, 0), 1: (0, 0)}


async def test_search_offset_by_store_time(side: Side) -> None:
    """SearchOffset (the gateway's QueryOffset TIMESTAMP): the first offset stored at or
    after a time; the end of the queue when none is; a queue that is not there refused."""
    topic = await side.new_topic(queue_nums=2)
    for i in range(3):
        await side.send(topic, f"t{i}", queue_id=1)
    assert await side.backend.search_offset(side.store_id, topic, 1, 0) == 0
    assert await side.backend.search_offset(side.store_id, topic, 1, 2**62) == 3
    assert await side.backend.search_offset(side.store_id, topic, 0, 0) == 0
    await expect_code(errors_pb2.CODE_ILLEGAL_QUEUE_ID, lambda: side.backend.search_offset(side.store_id, topic, 7, 0))


async def test_offsets_of_an_unknown_topic(side: Side) -> None:
    topic = f"nope-{uuid.uuid4().hex[:8]}"
    await expect_code(errors_pb2.CODE_TOPIC_NOT_FOUND, lambda: side.backend.queue_offsets(side.store_id, topic))


# -- send and pull -----------------------------------------------------------------------


async def test_sent_messages_are_pulled_in_order_from_their_queue(side: Side) -> None:
    topic = await side.new_topic(queue_nums=2)
    assert [await side.send(topic, f"m{i}", queue_id=1) for i in range(3)] == [0, 1, 2]
    assert await side.backend.queue_offsets(side.store_id, topic) == {0: (0, 0), 1: (0, 3)}

    first = await side.pull(topic, 0, queue_id=1, max_messages=2)
    assert first.status == pull_pb2.PULL_STATUS_FOUND
    assert (offsets_of(first), bodies_of(first)) == ([0, 1], ["m0", "m1"])
    assert (first.next_begin_offset, first.min_offset, first.max_offset) == (2, 0, 3)
    assert all(v.store_id == side.store_id and v.message.topic == topic for v in first.messages)

    rest = await side.pull(topic, 2, queue_id=1)
    assert (rest.status, offsets_of(rest), rest.next_begin_offset) == (pull_pb2.PULL_STATUS_FOUND, [2], 3)


async def test_a_pull_at_the_end_finds_nothing_new(side: Side) -> None:
    topic = await side.new_topic()
    await side.send(topic, "m0")
    reply = await side.pull(topic, 1)
    assert (reply.status, list(reply.messages), reply.next_begin_offset) == (pull_pb2.PULL_STATUS_NO_NEW_MSG, [], 1)


async def test_a_pull_past_the_end_is_an_illegal_offset(side: Side) -> None:
    topic = await side.new_topic()
    for i in range(2):
        await side.send(topic, f"m{i}")
    reply = await side.pull(topic, 5)
    assert reply.status == pull_pb2.PULL_STATUS_OFFSET_ILLEGAL
    # back to the min offset while it is 0 (RocketMQ's OFFSET_OVERFLOW_BADLY correction)
    assert (list(reply.messages), reply.next_begin_offset, reply.min_offset, reply.max_offset) == ([], 0, 0, 2)


async def test_a_tag_filter_skips_other_tags(side: Side) -> None:
    topic = await side.new_topic()
    for i, tag in enumerate(["A", "B", "B", "A"]):
        await side.send(topic, f"m{i}", tags=tag)
    only_a = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="A")
    reply = await side.pull(topic, 0, filter=only_a)
    assert reply.status == pull_pb2.PULL_STATUS_FOUND
    assert offsets_of(reply) == [0, 3] and reply.next_begin_offset == 4


async def test_only_non_matching_messages_is_no_matched_msg_past_them(side: Side) -> None:
    topic = await side.new_topic()
    for i in range(3):
        await side.send(topic, f"m{i}", tags="B")
    only_a = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="A")
    reply = await side.pull(topic, 0, filter=only_a)
    assert reply.status == pull_pb2.PULL_STATUS_NO_MATCHED_MSG
    assert (list(reply.messages), reply.next_begin_offset) == ([], 3)


async def test_a_pull_of_an_unknown_topic_or_queue_is_refused(side: Side) -> None:
    topic = await side.new_topic(queue_nums=1)
    await expect_code(errors_pb2.CODE_ILLEGAL_QUEUE_ID, lambda: side.pull(topic, 0, queue_id=1))
    await expect_code(errors_pb2.CODE_TOPIC_NOT_FOUND, lambda: side.pull(f"nope-{uuid.uuid4().hex[:8]}", 0))


async def test_a_send_answers_where_the_message_is(side: Side) -> None:
    topic = await side.new_topic(queue_nums=2)
    message = common_pb2.Message(topic=topic, body=b"m0", queue_id=1, unique_id=uuid.uuid4().hex.upper())
    first = await side.backend.send(side.store_id, message)
    assert first.status == store_pb2.SEND_STATUS_OK and first.msg_id == message.unique_id
    assert (first.queue.topic, first.queue.store_id, first.queue.queue_id, first.queue_offset) == (
        topic, side.store_id, 1, 0
    )  # fmt: skip
    message.unique_id = uuid.uuid4().hex.upper()
    second = await side.backend.send(side.store_id, message)
    assert second.queue_offset == 1 and second.commit_log_offset > first.commit_log_offset


async def test_a_send_without_a_queue_goes_to_one_the_store_picks(side: Side) -> None:
    topic = await side.new_topic(queue_nums=2)
    result = await side.backend.send(side.store_id, common_pb2.Message(topic=topic, body=b"anywhere"))
    assert result.queue.queue_id in (0, 1) and result.msg_id
    reply = await side.pull(topic, result.queue_offset, queue_id=result.queue.queue_id)
    assert bodies_of(reply) == ["anywhere"] and reply.messages[0].message.unique_id == result.msg_id


async def test_a_send_to_an_unknown_topic_is_refused(side: Side) -> None:
    message = common_pb2.Message(topic=f"nope-{uuid.uuid4().hex[:8]}", body=b"x", queue_id=0)
    await expect_code(errors_pb2.CODE_TOPIC_NOT_FOUND, lambda: side.backend.send(side.store_id, message))


async def test_normal_sends_answer_as_sends_do_and_share_the_store(side: Side) -> None:
    """``send_normal`` (coalesced over the store's send stream by the real backend)
    answers each send as ``send`` does, also when many go at once."""
    topic = await side.new_topic(queue_nums=2)
    messages = [
        common_pb2.Message(topic=topic, body=f"n{i}".encode(), queue_id=1, unique_id=uuid.uuid4().hex.upper())
        for i in range(20)
    ]
    results = await asyncio.gather(*(side.backend.send_normal(side.store_id, m) for m in messages))
    assert [r.msg_id for r in results] == [m.unique_id for m in messages]
    assert all(r.status == store_pb2.SEND_STATUS_OK and r.queue.store_id == side.store_id for r in results)
    assert sorted(r.queue_offset for r in results) == list(range(20))
    assert len({r.commit_log_offset for r in results}) == 20
    reply = await side.pull(topic, 0, queue_id=1)
    by_offset = {r.queue_offset: m.body.decode() for r, m in zip(results, messages, strict=True)}
    assert bodies_of(reply) == [by_offset[i] for i in range(len(reply.messages))]
    anywhere = await side.backend.send_normal(side.store_id, common_pb2.Message(topic=topic, body=b"anywhere"))
    assert anywhere.queue.queue_id in (0, 1) and anywhere.msg_id
    unknown = common_pb2.Message(topic=f"nope-{uuid.uuid4().hex[:8]}", body=b"x", queue_id=0, unique_id="U1")
    await expect_code(errors_pb2.CODE_TOPIC_NOT_FOUND, lambda: side.backend.send_normal(side.store_id, unknown))


async def test_a_batch_is_stored_in_order(side: Side) -> None:
    topic = await side.new_topic()
    messages = [
        common_pb2.Message(topic=topic, body=f"b{i}".encode(), queue_id=0, unique_id=uuid.uuid4().hex.upper())
        for i in range(3)
    ]
    results = await side.backend.send_batch(side.store_id, messages)
    assert [r.msg_id for r in results] == [m.unique_id for m in messages]
    assert [r.queue_offset for r in results] == [0, 1, 2]
    assert bodies_of(await side.pull(topic, 0)) == ["b0", "b1", "b2"]


async def test_a_prepared_send_is_not_visible(side: Side) -> None:
    topic = await side.new_topic()
    message = common_pb2.Message(topic=topic, body=b"half", queue_id=0, unique_id=uuid.uuid4().hex.upper())
    result = await side.backend.send(side.store_id, message, producer_group="contract-producers", prepared=True)
    assert result.status == store_pb2.SEND_STATUS_OK and result.transaction_id == result.msg_id == message.unique_id
    assert await side.backend.queue_offsets(side.store_id, topic) == {0: (0, 0)}
    assert (await side.pull(topic, 0)).status == pull_pb2.PULL_STATUS_NO_NEW_MSG


# -- long polling ------------------------------------------------------------------------


async def test_a_held_pull_is_answered_by_an_arrival(side: Side) -> None:
    topic = await side.new_topic()
    held = asyncio.ensure_future(side.pull(topic, 0, hold_ms=20_000))
    await side.in_flight()
    await side.send(topic, "late")
    reply = await held
    assert (reply.status, bodies_of(reply), reply.next_begin_offset) == (pull_pb2.PULL_STATUS_FOUND, ["late"], 1)


async def test_a_held_pull_with_no_arrival_ends_with_no_new_msg(side: Side) -> None:
    topic = await side.new_topic()
    held = asyncio.ensure_future(side.pull(topic, 0, hold_ms=300))
    await side.elapse(300)
    reply = await held
    assert (reply.status, list(reply.messages), reply.next_begin_offset) == (pull_pb2.PULL_STATUS_NO_NEW_MSG, [], 0)


# -- consume offsets ---------------------------------------------------------------------


async def test_consume_offsets_are_kept_per_group_and_queue(side: Side) -> None:
    topic = await side.new_topic(queue_nums=2)
    query = side.backend.query_consume_offset
    assert await query(side.store_id, group=GROUP, topic=topic, queue_id=0) is None
    await side.backend.commit_consume_offset(side.store_id, group=GROUP, topic=topic, queue_id=0, offset=0)
    await side.backend.commit_consume_offset(side.store_id, group=GROUP, topic=topic, queue_id=1, offset=0)
    for i in range(3):
        await side.send(topic, f"m{i}", queue_id=1)
    await side.backend.commit_consume_offset(side.store_id, group=GROUP, topic=topic, queue_id=1, offset=2)
    assert await query(side.store_id, group=GROUP, topic=topic, queue_id=0) == 0
    assert await query(side.store_id, group=GROUP, topic=topic, queue_id=1) == 2
    assert await query(side.store_id, group="another-group", topic=topic, queue_id=1) is None
