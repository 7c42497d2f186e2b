"""Priority messages in the store (services/store/txmq_store/priority.py; docs/store.md
"Priority messages"): a priority topic's queue N holds priority N, on every producer
path; typed refusals that store nothing; the priority survives a restart; a retried
message keeps its priority and its place by it (through the timer too)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.protocol import (
    MESSAGE_TYPE_PRIORITY,
    PROPERTY_PRIORITY,
    PROPERTY_SHARDING_KEY,
    TOPIC_ATTRIBUTE_MESSAGE_TYPE,
    dlq_topic,
    is_priority_topic,
    retry_topic,
)
from txmq.records import decode_messages, encode_for_send
from txmq.v1 import common_pb2, store_pb2
from txmq.v1 import errors_pb2 as E
from txmq_store.configs import TopicConfig
from txmq_store.message_store import MessageStore
from txmq_store.model import SendStatus
from txmq_store.priority import priority_queue
from txmq_store.sendback import SendBack

from .conftest import GrpcStore, StoreFactory, grpc_server_for, msg
from .test_replication import _ship

pytestmark = pytest.mark.asyncio(loop_scope="session")

PRIORITY = {TOPIC_ATTRIBUTE_MESSAGE_TYPE: MESSAGE_TYPE_PRIORITY}
GROUP = "CG_PRIO"


def prio(value: int | str, **props: str) -> dict[str, str]:
    return {PROPERTY_PRIORITY: str(value), **props}


async def _open(stores: StoreFactory, **overrides: object) -> MessageStore:
    store = await stores.open(**overrides)
    if store.admin.topics.get("Prio") is None:
        store.create_topic("Prio", read_queue_nums=4, write_queue_nums=4, attributes=PRIORITY)
        store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    return store


def queue_lengths(store: MessageStore, topic: str) -> list[int]:
    return [q.max_offset for q in store.queue_offsets(topic)]


# -- the core ------------------------------------------------------------------------------


async def test_the_core_maps_a_priority_to_its_queue_and_refuses_the_rest() -> None:
    cfg = TopicConfig("Prio", 4, 4, attributes=dict(PRIORITY))
    assert is_priority_topic(cfg.attributes) and not is_priority_topic({})
    assert [priority_queue(cfg, prio(p), 0) for p in range(4)] == [0, 1, 2, 3]
    assert priority_queue(cfg, {}, 0) == 0  # no priority: the lowest
    assert priority_queue(cfg, {"u": "v"}, 0) == 0
    for bad in ("4", "-1", "x", "", "1.5", "٣", "99999999999"):
        with pytest.raises(TxmqError) as err:
            priority_queue(cfg, prio(bad), 7)
        assert err.value.code == E.CODE_ILLEGAL_PRIORITY, bad
        assert err.value.metadata["index"] == "7" and err.value.metadata["max_priority"] == "3"
    for props, prepared in (
        (prio(1, DELAY="3"), False),
        (prio(1, TIMER_DELAY_SEC="5"), False),
        (prio(1, **{PROPERTY_SHARDING_KEY: "g"}), False),
        (prio(1), True),
    ):
        with pytest.raises(TxmqError) as err:
            priority_queue(cfg, props, 0, prepared=prepared)
        assert err.value.code == E.CODE_MESSAGE_TYPE_CONFLICT
    # system sends (retry copies, committed copies) are placed, never refused: clamped
    assert priority_queue(cfg, prio(9, DELAY="3"), 0, system=True) == 3
    assert priority_queue(cfg, prio("junk"), 0, system=True) == 0


# -- the send paths ----------------------------------------------------------------------


async def test_each_priority_goes_to_its_queue_whatever_queue_was_named(stores: StoreFactory) -> None:
    store = await _open(stores)
    results = await store.send(
        [
            msg(b"p3", topic="Prio", properties=prio(3), queue_id=0),
            msg(b"p0", topic="Prio", properties=prio(0), queue_id=2),
            msg(b"none", topic="Prio"),
            msg(b"p3b", topic="Prio", properties=prio(3)),
            msg(b"p1", topic="Prio", properties=prio(1), queue_id=1),
        ]
    )
    assert [r.queue_id for r in results] == [3, 0, 0, 3, 1]
    assert queue_lengths(store, "Prio") == [2, 1, 0, 2]
    got = store.reader.get_message(topic="Prio", queue_id=3, offset=0, max_messages=10).messages
    assert [(m.body, m.properties[PROPERTY_PRIORITY]) for m in got] == [(b"p3", "3"), (b"p3b", "3")]


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (msg(b"x", topic="Prio", properties=prio(4)), E.CODE_ILLEGAL_PRIORITY),
        (msg(b"x", topic="Prio", properties=prio("high")), E.CODE_ILLEGAL_PRIORITY),
        (msg(b"x", topic="TopicA", properties=prio(1)), E.CODE_MESSAGE_TYPE_CONFLICT),
        (msg(b"x", topic="Prio", properties=prio(1, TIMER_DELAY_SEC="30")), E.CODE_MESSAGE_TYPE_CONFLICT),
        (msg(b"x", topic="Prio", properties=prio(1, **{PROPERTY_SHARDING_KEY: "g"})), E.CODE_MESSAGE_TYPE_CONFLICT),
    ],
)
async def test_refusals_are_typed_and_store_nothing(stores: StoreFactory, message: object, code: int) -> None:
    store = await _open(stores)
    before = store.commitlog.max_offset
    with pytest.raises(TxmqError) as err:
        await store.send([msg(b"fine", topic="Prio", properties=prio(2)), message])  # type: ignore[list-item]
    assert err.value.code == code
    assert err.value.metadata["index"] == "1"
    assert store.commitlog.max_offset == before


async def test_a_transactional_message_cannot_have_a_priority(stores: StoreFactory) -> None:
    store = await _open(stores)
    with pytest.raises(TxmqError) as err:
        await store.send([msg(b"x", topic="Prio", properties=prio(1))], transaction_prepared=True, producer_group="PG")
    assert err.value.code == E.CODE_MESSAGE_TYPE_CONFLICT


async def test_retry_and_dead_letter_topics_take_a_priority(stores: StoreFactory) -> None:
    """The gateway sends dead-letter copies as a producer does, with the priority kept."""
    store = await _open(stores)
    store.create_topic(dlq_topic(GROUP), read_queue_nums=1, write_queue_nums=1)
    (r,) = await store.send([msg(b"x", topic=dlq_topic(GROUP), properties=prio(3))])
    assert r.queue_id == 0
    assert store.reader.view_message(r.commit_log_offset).properties[PROPERTY_PRIORITY] == "3"


async def test_packed_records_are_placed_by_priority_and_refused_typed(stores: StoreFactory) -> None:
    store = await _open(stores)
    async with grpc_server_for(store) as grpc_store:
        blob = b"".join(
            [
                encode_for_send("Prio", None, b"a", "U-A", properties=prio(2)),
                encode_for_send("Prio", 0, b"b", "U-B", properties=prio(3)),
                encode_for_send("Prio", 1, b"c", "U-C"),
            ]
        )
        (ack,) = [a async for a in grpc_store.stub.SendStream(_frames(blob))]
        assert not ack.HasField("error")
        assert list(ack.queue_ids) == [2, 3, 0]
        bad = encode_for_send("TopicA", None, b"d", "U-D", properties=prio(1))
        (ack,) = [a async for a in grpc_store.stub.SendStream(_frames(bad))]
        assert TxmqError.from_detail(ack.error).code == E.CODE_MESSAGE_TYPE_CONFLICT
        # a raw read hands the priority to the SDK's decoder
        got = await grpc_store.stub.GetMessage(
            store_pb2.GetMessageRequest(topic="Prio", queue_id=3, offset=0, max_messages=4, raw_records=True)
        )
        (m,) = decode_messages(got.records, got.store_id)
        assert m.priority == 3


async def test_over_grpc_a_bad_priority_is_invalid_argument_never_internal(stores: StoreFactory) -> None:
    store = await _open(stores)
    async with grpc_server_for(store) as grpc_store:
        request = store_pb2.SendMessageRequest(message=common_pb2.Message(topic="Prio", body=b"x", properties=prio(17)))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await grpc_store.stub.SendMessage(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert TxmqError.from_rpc_error(err.value).code == E.CODE_ILLEGAL_PRIORITY


async def _frames(blob: bytes):  # type: ignore[no-untyped-def]
    yield store_pb2.RecordFrame(sequence=1, records=blob)


# -- durability ----------------------------------------------------------------------------


async def test_the_priority_survives_a_restart(stores: StoreFactory) -> None:
    store = await _open(stores)
    await store.send([msg(b"p%d" % p, topic="Prio", properties=prio(p), unique_id=f"U{p}") for p in (1, 3, 2)])
    await store.close()
    stores.opened.remove(store)
    store = await _open(stores)
    assert queue_lengths(store, "Prio") == [0, 1, 1, 1]
    assert is_priority_topic(store.admin.get_topic("Prio").attributes)
    for p in (1, 2, 3):
        (m,) = store.reader.get_message(topic="Prio", queue_id=p, offset=0, max_messages=4).messages
        assert (m.body, m.properties[PROPERTY_PRIORITY]) == (b"p%d" % p, str(p))


# -- retries -------------------------------------------------------------------------------


async def test_a_retried_message_keeps_its_priority_and_its_place(stores: StoreFactory) -> None:
    store = await _open(stores, message_delay_levels="1s 1s 1s 1s")  # copies stored at once
    core = SendBack(store)
    # a plain message first: the group's retry topic is created plain, with one queue
    (plain,) = await store.send([msg(b"plain", unique_id="U-P")])
    await core.send_back(group=GROUP, commit_log_offset=plain.commit_log_offset, unique_id="U-P")
    assert not is_priority_topic(store.admin.get_topic(retry_topic(GROUP)).attributes)
    (high,) = await store.send([msg(b"high", topic="Prio", properties=prio(3), unique_id="U-H")])
    out = await core.send_back(group=GROUP, commit_log_offset=high.commit_log_offset, unique_id="U-H")
    retry = store.admin.get_topic(retry_topic(GROUP))
    assert is_priority_topic(retry.attributes) and retry.write_queue_nums == 4
    assert out.result.queue_id == 3
    copy = store.reader.view_message(out.result.commit_log_offset)
    assert copy.properties[PROPERTY_PRIORITY] == "3" and copy.queue_id == 3
    assert queue_lengths(store, retry_topic(GROUP)) == [1, 0, 0, 1]  # the plain copy: priority 0
    # a copy of the copy, then the dead-letter copy: the priority stays
    again = await core.send_back(group=GROUP, commit_log_offset=copy.commit_log_offset, unique_id="U-H")
    assert store.reader.view_message(again.result.commit_log_offset).queue_id == 3
    dead = await core.send_back(
        group=GROUP, commit_log_offset=again.result.commit_log_offset, unique_id="U-H", delay_level=-1
    )
    assert dead.dead_lettered
    assert store.reader.view_message(dead.result.commit_log_offset).properties[PROPERTY_PRIORITY] == "3"


async def test_a_retry_through_the_timer_lands_in_the_queue_of_its_priority(
    stores: StoreFactory, clock: ManualClock
) -> None:
    store = await _open(stores)  # the default levels: the first retry waits 10 s in the timer
    (high,) = await store.send([msg(b"high", topic="Prio", properties=prio(2), unique_id="U-H")])
    out = await SendBack(store).send_back(group=GROUP, commit_log_offset=high.commit_log_offset, unique_id="U-H")
    assert out.result.queue_offset == -1  # waiting in the timer
    clock.advance(10_000)
    await store.timers.timer.tick()
    assert queue_lengths(store, retry_topic(GROUP)) == [0, 0, 1, 0]
    (m,) = store.reader.get_message(topic=retry_topic(GROUP), queue_id=2, offset=0, max_messages=4).messages
    assert (m.body, m.properties[PROPERTY_PRIORITY], m.reconsume_times) == (b"high", "2", 1)


async def test_a_grpc_store_serves_priority_sends(grpc_store: GrpcStore) -> None:
    grpc_store.store.create_topic("Prio", read_queue_nums=2, write_queue_nums=2, attributes=PRIORITY)
    resp = await grpc_store.stub.SendBatch(
        store_pb2.SendBatchRequest(
            messages=[
                common_pb2.Message(topic="Prio", body=b"a", properties=prio(1), queue_id=0),
                common_pb2.Message(topic="Prio", body=b"b", queue_id=1),
            ]
        )
    )
    assert [r.queue.queue_id for r in resp.results] == [1, 0]


async def test_a_follower_holds_the_priority_and_the_topics_type(stores: StoreFactory) -> None:
    """Replication copies the record bytes (the property, the queue id) and ships the
    topic config (its type): a follower that takes over reads the topic as its leader did."""
    leader = await stores.open("leader", replica_id="a")
    follower = await stores.open("follower", replica_id="b")
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("ab"), min_in_sync=2)
    lead.reported(lead.attach("b"), 0)
    leader.create_topic("Prio", read_queue_nums=3, write_queue_nums=3, attributes=PRIORITY)
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    appended = leader.sender.append_records([msg(b"hi", topic="Prio", properties=prio(2), queue_id=0)])
    settle = asyncio.ensure_future(leader.sender.settle(appended))
    await asyncio.sleep(0)
    await _ship(leader, follower, lead)
    assert await settle == SendStatus.OK
    assert is_priority_topic(follower.admin.get_topic("Prio").attributes)
    (m,) = follower.reader.get_message(topic="Prio", queue_id=2, offset=0).messages
    assert (m.body, m.properties[PROPERTY_PRIORITY]) == (b"hi", "2")
