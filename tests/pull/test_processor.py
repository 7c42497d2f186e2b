"""The pull core in-process against the session cluster's real store process: validation
in RocketMQ's order, reads and statuses, commit offsets, and the hold phase on a manual
clock (timeouts, wake-ups, the lost-wake-up race, the bound, cancellation)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, pull_pb2_grpc, store_pb2, store_pb2_grpc
from txmq_pull.hold import QueueKey
from txmq_pull.servicer import add_pull_servicer
from txmq_runtime.registry import ClusterView

from .conftest import MakeCore, StoreAccess, arrivals_live, eventually, open_cluster_view, pull_request, unique

P = pull_pb2
GUARD_S = 10  # hang guard for held pulls


async def code_of(awaitable) -> int:
    with pytest.raises(TxmqError) as info:
        await awaitable
    return info.value.code


@pytest.fixture
async def topic(store_access: StoreAccess) -> str:
    name = unique("PullProc")
    await store_access.create_topic(name, queues=2)
    return name


# -- validation ------------------------------------------------------------------------------


async def test_each_validation_error(make_core: MakeCore, store_access: StoreAccess, topic: str) -> None:
    core = await make_core()
    pull = core.processor.pull
    q = store_access.queue(topic)

    disabled = unique("Disabled")
    await store_access.create_group(disabled, consume_enable=False)
    assert await code_of(pull(pull_request(q, group=disabled))) == errors_pb2.CODE_CONSUME_DISABLED

    assert (
        await code_of(pull(pull_request(store_access.queue(unique("NoSuchTopic"))))) == errors_pb2.CODE_TOPIC_NOT_FOUND
    )

    write_only = unique("WriteOnly")
    await store_access.create_topic(write_only, perm=2)
    assert await code_of(pull(pull_request(store_access.queue(write_only)))) == errors_pb2.CODE_TOPIC_NOT_READABLE

    half = store_access.queue("RMQ_SYS_TRANS_HALF_TOPIC")
    assert await code_of(pull(pull_request(half))) == errors_pb2.CODE_SYSTEM_TOPIC

    assert await code_of(pull(pull_request(store_access.queue(topic, 2)))) == errors_pb2.CODE_ILLEGAL_QUEUE_ID
    assert await code_of(pull(pull_request(store_access.queue(topic, -1)))) == errors_pb2.CODE_ILLEGAL_QUEUE_ID

    with pytest.raises(TxmqError) as info:
        await pull(pull_request(q, sql="a >"))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    assert "SQL92 syntax error" in info.value.message
    assert await code_of(pull(pull_request(q, tag=" || "))) == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION

    wrong_store = common_pb2.MessageQueue(topic=topic, store_id="no-such-store", queue_id=0)
    assert await code_of(pull(pull_request(wrong_store))) == errors_pb2.CODE_STORE_NOT_FOUND

    # request shape
    assert await code_of(pull(pull_request(q, group=""))) == errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP
    assert await code_of(pull(pull_request(store_access.queue("bad topic")))) == errors_pb2.CODE_ILLEGAL_TOPIC
    assert await code_of(pull(pull_request(q, offset=-1))) == errors_pb2.CODE_ILLEGAL_OFFSET
    assert await code_of(pull(pull_request(q, commit_offset=-1))) == errors_pb2.CODE_ILLEGAL_OFFSET


async def test_service_not_readable_wins(make_core: MakeCore, store_access: StoreAccess) -> None:
    core = await make_core(service_readable=False)
    disabled = unique("Disabled")
    await store_access.create_group(disabled, consume_enable=False)
    # unknown topic, consume-disabled group, bad filter: the service check comes first
    req = pull_request(store_access.queue(unique("NoSuchTopic")), group=disabled, tag=" || ")
    assert await code_of(core.processor.pull(req)) == errors_pb2.CODE_SERVICE_NOT_READABLE


async def test_sql92_disabled_comes_after_parsing(make_core: MakeCore, store_access: StoreAccess, topic: str) -> None:
    core = await make_core(property_filter_enable=False)
    q = store_access.queue(topic)
    assert await code_of(core.processor.pull(pull_request(q, sql="a > 1"))) == errors_pb2.CODE_SQL92_NOT_ENABLED
    assert await code_of(core.processor.pull(pull_request(q, sql="a >"))) == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    # tags still work
    resp = await core.processor.pull(pull_request(q, tag="A"))
    assert resp.status == P.PULL_STATUS_NO_NEW_MSG


async def test_earlier_checks_win(make_core: MakeCore, store_access: StoreAccess, topic: str) -> None:
    core = await make_core()
    pull = core.processor.pull
    disabled = unique("Disabled")
    await store_access.create_group(disabled, consume_enable=False)
    write_only = unique("WriteOnly")
    await store_access.create_topic(write_only, perm=2, queues=1)

    # group may not consume < topic exists
    assert await code_of(pull(pull_request(store_access.queue(unique("Nope")), group=disabled))) == (
        errors_pb2.CODE_CONSUME_DISABLED
    )
    # topic readable < queue id < filter
    assert await code_of(pull(pull_request(store_access.queue(write_only, 5), tag=" || "))) == (
        errors_pb2.CODE_TOPIC_NOT_READABLE
    )
    # queue id < filter
    assert (
        await code_of(pull(pull_request(store_access.queue(topic, 5), sql="a >"))) == errors_pb2.CODE_ILLEGAL_QUEUE_ID
    )
    # topic exists < filter
    assert await code_of(pull(pull_request(store_access.queue(unique("Nope")), sql="a >"))) == (
        errors_pb2.CODE_TOPIC_NOT_FOUND
    )


async def test_unknown_group_is_created_when_the_store_allows(
    make_core: MakeCore, store_access: StoreAccess, topic: str
) -> None:
    core = await make_core()
    group = unique("AutoGroup")
    resp = await core.processor.pull(pull_request(store_access.queue(topic), group=group))
    assert resp.status == P.PULL_STATUS_NO_NEW_MSG
    found = await store_access.admin.GetSubscriptionGroup(
        store_pb2.GetSubscriptionGroupRequest(group_name=group), timeout=10
    )
    assert found.group.group_name == group


@dataclass
class PrivateStore:
    process: object  # support.ServiceProcess
    access: StoreAccess
    view: ClusterView


@pytest.fixture
async def private_stores(service_factory, etcd) -> AsyncIterator[Callable[..., Awaitable[PrivateStore]]]:
    """``await private_stores(*store_flags)``: a store process of its own under a private
    etcd prefix, with stubs and a cluster view of that prefix (request ``make_core`` after
    this fixture, so cores close before their view and store)."""
    view, close_view = await open_cluster_view(etcd.endpoint, service_factory.etcd_prefix)
    channels: list[grpc.aio.Channel] = []

    async def start(*flags: str) -> PrivateStore:
        n = len(channels)
        process = service_factory.store(*flags)
        store_id = f"store-{n}"
        await eventually(lambda: any(e.instance_id == store_id for e in view.endpoints(common_pb2.SERVICE_KIND_STORE)))
        channel = grpc.aio.insecure_channel(process.address)
        channels.append(channel)
        access = StoreAccess(
            process.address, store_pb2_grpc.StoreStub(channel), store_pb2_grpc.StoreAdminStub(channel), store_id
        )
        return PrivateStore(process, access, view)

    try:
        yield start
    finally:
        for channel in channels:
            await channel.close()
        await close_view()


async def test_unknown_group_is_refused_when_the_store_does_not_create_groups(
    private_stores, make_core: MakeCore
) -> None:
    private = await private_stores("--auto_create_subscription_group", "false")
    access = private.access
    await access.create_topic("T1")
    core = await make_core(view=private.view)
    # unknown group < unknown topic / bad filter
    bad = pull_request(access.queue("Missing"), group="NoGroup", tag=" || ")
    assert await code_of(core.processor.pull(bad)) == errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND
    await access.create_group("NoGroup")
    resp = await core.processor.pull(pull_request(access.queue("T1"), group="NoGroup"))
    assert resp.status == P.PULL_STATUS_NO_NEW_MSG


# -- reading ---------------------------------------------------------------------------------


async def test_found_no_new_and_offset_illegal(make_core: MakeCore, store_access: StoreAccess, topic: str) -> None:
    core = await make_core()
    pull = core.processor.pull
    q = store_access.queue(topic)
    empty = await pull(pull_request(q, offset=0))
    assert (empty.status, empty.next_begin_offset, empty.max_offset) == (P.PULL_STATUS_NO_NEW_MSG, 0, 0)
    moved = await pull(pull_request(q, offset=3))
    assert moved.status == P.PULL_STATUS_OFFSET_ILLEGAL  # empty queue, offset != 0

    for i in range(3):
        await store_access.send(topic, f"m{i}".encode(), tags="A" if i != 1 else "B")
    found = await pull(pull_request(q, offset=0, max_messages=2))
    assert found.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in found.messages] == [b"m0", b"m1"]
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (2, 0, 3)

    tagged = await pull(pull_request(q, offset=0, tag="A"))
    assert [m.message.body for m in tagged.messages] == [b"m0", b"m2"]

    nothing_matched = await pull(pull_request(q, offset=1, tag="C"))
    assert (nothing_matched.status, nothing_matched.next_begin_offset) == (P.PULL_STATUS_NO_MATCHED_MSG, 3)

    at_end = await pull(pull_request(q, offset=3))
    assert (at_end.status, at_end.next_begin_offset) == (P.PULL_STATUS_NO_NEW_MSG, 3)
    badly = await pull(pull_request(q, offset=10))
    assert (badly.status, badly.next_begin_offset) == (P.PULL_STATUS_OFFSET_ILLEGAL, 0)


async def test_commit_offset_is_stored_before_reading(
    make_core: MakeCore, store_access: StoreAccess, topic: str
) -> None:
    core = await make_core()
    group = unique("Committer")
    await store_access.send(topic, b"x")
    await store_access.send(topic, b"y")
    resp = await core.processor.pull(pull_request(store_access.queue(topic), group=group, offset=1, commit_offset=1))
    assert resp.status == P.PULL_STATUS_FOUND
    assert await store_access.committed(group, topic, 0) == 1
    # and through the Pull RPCs' core
    await core.processor.update_offset(
        pull_pb2.UpdateConsumerOffsetRequest(consumer_group=group, queue=store_access.queue(topic), offset=2)
    )
    got = await core.processor.query_offset(
        pull_pb2.QueryConsumerOffsetRequest(consumer_group=group, queue=store_access.queue(topic))
    )
    assert (got.found, got.offset) == (True, 2)
    other = await core.processor.query_offset(
        pull_pb2.QueryConsumerOffsetRequest(consumer_group=unique("Never"), queue=store_access.queue(topic))
    )
    assert not other.found


# -- holding ---------------------------------------------------------------------------------


async def test_held_pull_times_out_with_no_new_msg(make_core: MakeCore, store_access: StoreAccess, topic: str) -> None:
    core = await make_core(long_polling_enable=False, short_polling_time_ms=1_000)
    q = store_access.queue(topic)
    task = asyncio.ensure_future(core.processor.pull(pull_request(q, suspend=True, suspend_timeout_ms=60_000)))
    await eventually(lambda: core.hold.held_count == 1)
    core.clock.advance(1_000)  # short polling: held short_polling_time_ms, not the 60 s asked for
    resp = await asyncio.wait_for(task, GUARD_S)
    assert (resp.status, resp.next_begin_offset) == (P.PULL_STATUS_NO_NEW_MSG, 0)
    assert core.hold.admitted_count == 0


async def test_matching_arrival_wakes_and_non_matching_does_not(
    make_core: MakeCore, store_access: StoreAccess, topic: str
) -> None:
    core = await make_core()
    offset = await arrivals_live(core, store_access, topic)
    q = store_access.queue(topic)
    task = asyncio.ensure_future(
        core.processor.pull(pull_request(q, offset=offset, suspend=True, suspend_timeout_ms=15_000, sql="n > 5"))
    )
    await eventually(lambda: core.hold.held_on(QueueKey(store_access.store_id, topic, 0)) == 1)
    await store_access.send(topic, b"small", n="1")
    await store_access.send(topic, b"big", n="9")
    resp = await asyncio.wait_for(task, GUARD_S)  # the clock never moved: an arrival woke it
    assert resp.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in resp.messages] == [b"big"]
    assert resp.next_begin_offset == offset + 2
    assert core.hold.sweeps == 0


async def test_timeout_after_only_non_matching_arrivals_is_no_new_msg_past_them(
    make_core: MakeCore, store_access: StoreAccess, topic: str
) -> None:
    core = await make_core()
    offset = await arrivals_live(core, store_access, topic)
    q = store_access.queue(topic)
    task = asyncio.ensure_future(
        core.processor.pull(pull_request(q, offset=offset, suspend=True, suspend_timeout_ms=2_000, tag="A"))
    )
    await eventually(lambda: core.hold.held_count == 1)
    before = core.feed.batches[store_access.store_id]
    await store_access.send(topic, b"b", tags="B")
    await eventually(lambda: core.feed.batches[store_access.store_id] > before)  # it was seen, and ignored
    assert not task.done()
    core.clock.advance(2_000)
    resp = await asyncio.wait_for(task, GUARD_S)
    assert (resp.status, len(resp.messages), resp.next_begin_offset) == (P.PULL_STATUS_NO_NEW_MSG, 0, offset + 1)


async def test_arrival_between_read_and_suspend_is_not_lost(
    make_core: MakeCore, store_access: StoreAccess, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message lands after the store answered "nothing" and before the pull parks
    (RocketMQ #7358). The clock never moves, so neither a sweep nor the timeout can
    answer: only the no-lost-wake-up rule can."""
    core = await make_core()
    offset = await arrivals_live(core, store_access, topic)
    key = QueueKey(store_access.store_id, topic, 0)
    client = core.clients.client(store_access.store_id)
    real_get, real_on_arrivals = client.get_message, core.hold.on_arrivals
    delivered = asyncio.Event()
    raced = []

    def on_arrivals(events):
        events = list(events)
        real_on_arrivals(events)
        if any(e.key == key for e in events):
            delivered.set()

    async def get_message(request):
        reply = await real_get(request)
        if not raced:  # the first read: the message arrives now, before the pull parks
            raced.append(reply.status)
            await store_access.send(topic, b"raced", tags="A")
            await asyncio.wait_for(delivered.wait(), GUARD_S)
        return reply

    monkeypatch.setattr(core.hold, "on_arrivals", on_arrivals)
    monkeypatch.setattr(client, "get_message", get_message)
    resp = await asyncio.wait_for(
        core.processor.pull(pull_request(store_access.queue(topic), offset=offset, suspend=True, tag="A")), GUARD_S
    )
    assert raced and resp.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in resp.messages] == [b"raced"]
    assert core.hold.sweeps == 0


async def test_backstop_sweep_answers_a_pull_whose_arrival_was_missed(
    make_core: MakeCore, store_access: StoreAccess, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = await make_core(hold_check_interval_ms=5_000)
    offset = await arrivals_live(core, store_access, topic)
    monkeypatch.setattr(core.hold, "on_arrivals", lambda events: None)  # the stream loses everything
    task = asyncio.ensure_future(
        core.processor.pull(
            pull_request(store_access.queue(topic), offset=offset, suspend=True, suspend_timeout_ms=60_000)
        )
    )
    await eventually(lambda: core.hold.held_count == 1)
    await store_access.send(topic, b"missed")
    core.clock.advance(5_000)
    resp = await asyncio.wait_for(task, GUARD_S)
    assert resp.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in resp.messages] == [b"missed"]
    assert core.hold.sweeps >= 1


async def test_too_many_held_pulls(make_core: MakeCore, store_access: StoreAccess, topic: str) -> None:
    core = await make_core(max_held_requests=1)
    q = store_access.queue(topic)
    first = asyncio.ensure_future(core.processor.pull(pull_request(q, suspend=True, suspend_timeout_ms=5_000)))
    await eventually(lambda: core.hold.held_count == 1)
    assert await code_of(core.processor.pull(pull_request(q, suspend=True))) == errors_pb2.CODE_TOO_MANY_REQUESTS
    # a pull that does not ask to be held, or finds something, is not limited
    assert (await core.processor.pull(pull_request(q))).status == P.PULL_STATUS_NO_NEW_MSG
    core.clock.advance(5_000)
    assert (await asyncio.wait_for(first, GUARD_S)).status == P.PULL_STATUS_NO_NEW_MSG
    assert core.hold.admitted_count == 0


async def test_client_cancel_removes_the_held_pull(make_core: MakeCore, store_access: StoreAccess, topic: str) -> None:
    """Over a real gRPC server: the client cancels a held call; the server drops it."""
    core = await make_core()
    server = grpc.aio.server()
    add_pull_servicer(server, core.servicer)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = pull_pb2_grpc.PullStub(channel)
        call = stub.PullMessage(pull_request(store_access.queue(topic), suspend=True, suspend_timeout_ms=60_000))
        await eventually(lambda: core.hold.held_count == 1)
        call.cancel()
        await eventually(lambda: core.hold.held_count == 0 and core.hold.admitted_count == 0)
        assert not core.hold.interested(QueueKey(store_access.store_id, topic, 0))
        # errors come back typed through the servicer
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.PullMessage(pull_request(store_access.queue(topic, 9)), timeout=10)
        assert TxmqError.from_rpc_error(info.value).code == errors_pb2.CODE_ILLEGAL_QUEUE_ID
    finally:
        await channel.close()
        await server.stop(None)


async def test_held_pull_is_answered_before_the_callers_deadline(
    make_core: MakeCore, store_access: StoreAccess, topic: str
) -> None:
    core = await make_core(deadline_margin_ms=500)
    task = asyncio.ensure_future(
        core.processor.pull(
            pull_request(store_access.queue(topic), suspend=True, suspend_timeout_ms=60_000),
            answer_by_ms=core.clock.now_ms() + 3_000,
        )
    )
    await eventually(lambda: core.hold.held_count == 1)
    core.clock.advance(3_000)
    assert (await asyncio.wait_for(task, GUARD_S)).status == P.PULL_STATUS_NO_NEW_MSG
    # a caller that cannot wait at all is answered at once
    resp = await core.processor.pull(
        pull_request(store_access.queue(topic), suspend=True), answer_by_ms=core.clock.now_ms() - 1
    )
    assert resp.status == P.PULL_STATUS_NO_NEW_MSG
    assert core.hold.held_count == 0


async def test_overflowed_arrival_stream_rechecks_held_pulls(private_stores, make_core: MakeCore) -> None:
    """The store drops arrivals for a watcher that falls behind and flags the next batch
    ``overflowed``; held pulls re-check. (A buffer of 1 overflows on any batch of 2.)"""
    private = await private_stores("--arrival_watcher_buffer", "1")
    access = private.access
    await access.create_topic("Flood", queues=1)
    core = await make_core(view=private.view)
    offset = await arrivals_live(core, access, "Flood")
    task = asyncio.ensure_future(
        core.processor.pull(pull_request(access.queue("Flood"), offset=offset, suspend=True, tag="A"))
    )
    await eventually(lambda: core.hold.held_count == 1)
    batch = [common_pb2.Message(topic="Flood", body=b, tags=t, queue_id=0) for b, t in ((b"b", "B"), (b"a", "A"))]
    await access.store.SendBatch(store_pb2.SendBatchRequest(messages=batch), timeout=10)
    resp = await asyncio.wait_for(task, GUARD_S)  # no sweep, no timeout: only the re-check answers
    assert resp.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in resp.messages] == [b"a"]
    assert core.hold.sweeps == 0


async def test_reopened_arrival_stream_rechecks_held_pulls(private_stores, make_core: MakeCore) -> None:
    """The store dies and comes back; a message sent after the restart reaches the held
    pull, whether the stream was re-opened before the send (arrival) or after (re-check).
    Sync flush: what was acknowledged before the kill is still there after it."""
    private = await private_stores("--flush_mode", "sync")
    access = private.access
    await access.create_topic("Restarted", queues=1)
    core = await make_core(view=private.view, arrival_reconnect_backoff_ms=50)
    offset = await arrivals_live(core, access, "Restarted")
    task = asyncio.ensure_future(
        core.processor.pull(pull_request(access.queue("Restarted"), offset=offset, suspend=True))
    )
    await eventually(lambda: core.hold.held_count == 1)
    await asyncio.to_thread(private.process.kill)
    await asyncio.to_thread(private.process.restart)
    await access.send("Restarted", b"after restart")
    resp = await asyncio.wait_for(task, GUARD_S)
    assert resp.status == P.PULL_STATUS_FOUND
    assert [m.message.body for m in resp.messages] == [b"after restart"]
    assert core.hold.sweeps == 0
