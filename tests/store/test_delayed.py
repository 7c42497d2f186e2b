"""Delayed messages in the store (docs/store.md, "Delayed messages"): what a send
answers, invisibility until due, one delivery, typed refusals that store nothing,
batches mixing delayed and immediate messages, the packed and gRPC paths, a restart.
The store's clock is a ManualClock; the timer is ticked by the test."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.protocol import PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_OFFSET, TIMER_TOPIC
from txmq.records import encode_for_send
from txmq.v1 import common_pb2, store_pb2
from txmq.v1 import errors_pb2 as E
from txmq_store.message_store import MessageStore
from txmq_store.model import SendStatus, StoredMessage

from .conftest import T0_MS, GrpcStore, StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")


def visible(store: MessageStore, topic: str = "TopicA") -> list[StoredMessage]:
    out: list[StoredMessage] = []
    for q in store.queue_offsets(topic):
        offset = 0
        while offset < q.max_offset:
            got = store.reader.get_message(topic=topic, queue_id=q.queue_id, offset=offset, max_messages=1000)
            out.extend(got.messages)
            offset = got.next_begin_offset
    return out


def snapshot(store: MessageStore) -> tuple[Any, ...]:
    return (store.commitlog.max_offset, [(q.queue_id, q.max_offset) for q in store.queue_offsets("TopicA")])


async def deliver(store: MessageStore) -> int:
    return await store.timers.timer.tick()


async def test_a_delayed_message_is_invisible_until_due_then_visible_once(
    store: MessageStore, clock: ManualClock
) -> None:
    (r,) = await store.send([msg(b"later", tags="t", keys=("k1",), properties={"TIMER_DELAY_SEC": "10", "u": "v"})])
    assert (r.topic, r.queue_offset, r.deliver_at_ms) == ("TopicA", -1, T0_MS + 10_000)
    assert 0 <= r.queue_id < 4
    timer_record = store.reader.view_message(r.commit_log_offset)
    assert timer_record.topic == TIMER_TOPIC
    assert timer_record.properties[PROPERTY_TIMER_DELIVER_MS] == str(T0_MS + 10_000)
    assert "TIMER_DELAY_SEC" not in timer_record.properties
    await deliver(store)
    assert visible(store) == []
    clock.advance(9_999)
    await deliver(store)
    assert visible(store) == []  # not one ms early
    clock.advance(1)
    assert await deliver(store) == 1
    (m,) = visible(store)
    assert (m.body, m.tags, m.keys, m.unique_id, m.queue_id) == (b"later", "t", ("k1",), r.msg_id, r.queue_id)
    assert m.properties["u"] == "v" and m.properties[PROPERTY_TIMER_OFFSET] == "0"
    assert "REAL_TOPIC" not in m.properties and "REAL_QID" not in m.properties
    assert m.store_timestamp_ms >= T0_MS + 10_000
    assert m.born_timestamp_ms == timer_record.born_timestamp_ms
    clock.advance(60_000)
    await deliver(store)
    assert len(visible(store)) == 1
    # Found by unique id and by key in its real topic.
    assert any(x.topic == "TopicA" for x in store.query_messages(topic="TopicA", unique_id=r.msg_id))
    assert [x.body for x in store.query_messages(topic="TopicA", key="k1")] == [b"later"]


async def test_each_way_of_saying_when(store: MessageStore, clock: ManualClock) -> None:
    results = await store.send(
        [
            msg(properties={"TIMER_DELIVER_MS": str(T0_MS + 7_000)}),
            msg(properties={"TIMER_DELAY_MS": "7000"}),
            msg(properties={"TIMER_DELAY_SEC": "7"}),
            msg(properties={"DELAY": "2"}),  # 5 s
        ]
    )
    assert [r.deliver_at_ms for r in results] == [T0_MS + 7_000] * 3 + [T0_MS + 5_000]


async def test_a_time_within_a_second_is_stored_at_once(store: MessageStore) -> None:
    (r,) = await store.send([msg(properties={"TIMER_DELAY_MS": "1000"})])
    assert r.deliver_at_ms == 0 and r.queue_offset == 0
    assert len(visible(store)) == 1


@pytest.mark.parametrize(
    ("props", "code"),
    [
        ({"TIMER_DELAY_MS": "-1"}, E.CODE_ILLEGAL_DELIVERY_TIME),
        ({"TIMER_DELAY_MS": "soon"}, E.CODE_ILLEGAL_DELIVERY_TIME),
        ({"DELAY": "99"}, E.CODE_ILLEGAL_DELIVERY_TIME),
        ({"DELAY": "2", "TIMER_DELAY_SEC": "5"}, E.CODE_ILLEGAL_DELIVERY_TIME),
        ({"TIMER_DELAY_SEC": str(3 * 24 * 3600 + 1)}, E.CODE_ILLEGAL_DELIVERY_TIME),
        ({"TIMER_OUT_MS": "5"}, E.CODE_ILLEGAL_MESSAGE),  # other timer names stay reserved
    ],
)
async def test_a_bad_delay_is_refused_typed_and_stores_nothing(
    store: MessageStore, props: dict[str, str], code: int
) -> None:
    before = snapshot(store)
    with pytest.raises(TxmqError) as info:
        await store.send([msg(b"fine"), msg(properties=props)])
    assert info.value.code == code
    assert info.value.metadata["index"] == "1"
    assert snapshot(store) == before
    assert store.timers.timer_queue_bounds() == (0, 0)


async def test_a_delayed_transactional_message_is_a_type_conflict(store: MessageStore) -> None:
    before = snapshot(store)
    with pytest.raises(TxmqError) as info:
        await store.send(
            [msg(), msg(properties={"TIMER_DELAY_SEC": "30"})], transaction_prepared=True, producer_group="PG"
        )
    assert info.value.code == E.CODE_MESSAGE_TYPE_CONFLICT and info.value.metadata["index"] == "1"
    assert snapshot(store) == before
    with pytest.raises(TxmqError) as info:  # any delay property, even one that would not delay
        await store.send([msg(properties={"DELAY": "0"})], transaction_prepared=True, producer_group="PG")
    assert info.value.code == E.CODE_MESSAGE_TYPE_CONFLICT


async def test_a_batch_mixing_delayed_and_immediate(store: MessageStore, clock: ManualClock) -> None:
    later = msg(b"later", queue_id=2, properties={"TIMER_DELAY_SEC": "5"})
    results = await store.send([msg(b"now1", queue_id=2), later, msg(b"now2", queue_id=2)])
    assert [(r.queue_id, r.queue_offset, r.deliver_at_ms) for r in results] == [
        (2, 0, 0), (2, -1, T0_MS + 5_000), (2, 1, 0),
    ]  # fmt: skip
    assert [m.body for m in visible(store)] == [b"now1", b"now2"]
    clock.advance(5_000)
    await deliver(store)
    assert [(m.body, m.queue_offset) for m in visible(store)] == [(b"now1", 0), (b"now2", 1), (b"later", 2)]


async def test_a_delayed_message_to_an_unknown_topic_is_refused_as_any(store: MessageStore) -> None:
    with pytest.raises(TxmqError) as info:
        await store.send([msg(topic="Nope", properties={"TIMER_DELAY_SEC": "5"})])
    assert info.value.code == E.CODE_TOPIC_NOT_FOUND


async def test_many_timers_of_one_second_go_out_in_few_appends(stores: StoreFactory, clock: ManualClock) -> None:
    store = await stores.open(max_batch_messages=100, max_batch_bytes=1 << 20)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    for _ in range(5):
        await store.send([msg(b"x", properties={"TIMER_DELIVER_MS": str(T0_MS + 3_000)}) for _ in range(100)])
    clock.advance(3_000)
    end_before = store.commitlog.write_offset
    appends = 0
    real = store.timers.timer_append

    def counting(*args: Any, **kw: Any) -> Any:
        nonlocal appends
        appends += 1
        return real(*args, **kw)

    store.timers.timer_append = counting  # type: ignore[method-assign]
    assert await deliver(store) == 500
    assert appends == 5 and store.commitlog.write_offset > end_before
    assert len({m.unique_id for m in visible(store)}) == 500


async def test_pending_timers_survive_a_clean_restart(stores: StoreFactory, clock: ManualClock) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    await store.send([msg(b"a", properties={"TIMER_DELAY_SEC": "5"}), msg(b"b", properties={"TIMER_DELAY_SEC": "50"})])
    clock.advance(5_000)
    await deliver(store)
    await store.close()
    stores.opened.remove(store)
    again = await stores.open()
    assert again.timers.timer.active and again.timers.timer_queue_bounds() == (0, 2)
    assert again.timers.timer.wheel.pending == 1  # the checkpoint at close covers "a"
    clock.advance(45_000)
    await deliver(again)
    assert sorted(m.body for m in visible(again)) == [b"a", b"b"]


async def test_delayed_records_in_a_packed_frame(grpc_store: GrpcStore, clock: ManualClock) -> None:
    blob = encode_for_send("TopicA", 1, b"now", "U1") + encode_for_send(
        "TopicA", 1, b"later", "U2", properties={"TIMER_DELAY_SEC": "5"}
    )

    async def frames():  # type: ignore[no-untyped-def]
        yield store_pb2.RecordFrame(sequence=1, records=blob)

    (ack,) = [a async for a in grpc_store.stub.SendStream(frames())]
    assert not ack.HasField("error"), ack.error
    assert list(ack.queue_offsets) == [0, -1] and list(ack.queue_ids) == [1, 1]
    assert list(ack.deliver_at_ms) == [0, T0_MS + 5_000]
    bad = encode_for_send("TopicA", 1, b"x", "U3", properties={"DELAY": "77"})
    ack = await grpc_store.stub.SendRecords(store_pb2.RecordFrame(sequence=2, records=bad))
    assert TxmqError.from_detail(ack.error).code == E.CODE_ILLEGAL_DELIVERY_TIME
    clock.advance(5_000)
    await deliver(grpc_store.store)
    assert sorted(m.body for m in visible(grpc_store.store)) == [b"later", b"now"]


async def test_send_batch_over_grpc_answers_the_real_queue(grpc_store: GrpcStore) -> None:
    resp = await grpc_store.stub.SendBatch(
        store_pb2.SendBatchRequest(
            messages=[
                common_pb2.Message(topic="TopicA", body=b"a", queue_id=3),
                common_pb2.Message(topic="TopicA", body=b"b", queue_id=3, properties={"TIMER_DELAY_SEC": "9"}),
            ]
        )
    )
    now, later = resp.results
    assert (now.queue.queue_id, now.queue_offset, now.deliver_at_ms) == (3, 0, 0)
    assert (later.queue.topic, later.queue.queue_id, later.queue_offset) == ("TopicA", 3, -1)
    assert later.deliver_at_ms == T0_MS + 9_000
    one = await grpc_store.stub.SendMessage(
        store_pb2.SendMessageRequest(
            message=common_pb2.Message(topic="TopicA", body=b"c", properties={"TIMER_DELAY_MS": "4000"})
        )
    )
    assert one.result.queue_offset == -1 and one.result.deliver_at_ms == T0_MS + 4_000


async def test_a_restart_without_the_timer_checkpoint_finds_what_was_delivered(
    stores: StoreFactory, clock: ManualClock
) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    await store.send([msg(b"%d" % i, keys=(f"k{i}",), properties={"TIMER_DELAY_SEC": "5"}) for i in range(10)])
    await store.send([msg(b"late", properties={"TIMER_DELAY_SEC": "50"})])
    clock.advance(5_000)
    assert await deliver(store) == 10
    await store.close()
    stores.opened.remove(store)
    (store.timers.timer.path).unlink()  # as if the process died before its first timer checkpoint
    again = await stores.open()
    assert again.timers.timer.wheel.pending == 11  # filed again, each checked before delivery
    clock.advance(45_000)
    await deliver(again)
    assert again.timers.timer.duplicates_skipped == 10
    assert sorted(m.body for m in visible(again)) == sorted([b"%d" % i for i in range(10)] + [b"late"])


async def test_a_delayed_message_to_a_deleted_topic_is_dropped_the_others_delivered(
    store: MessageStore, clock: ManualClock
) -> None:
    store.create_topic("Other", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"gone", topic="Other", properties={"TIMER_DELAY_SEC": "5"})])
    await store.send([msg(b"kept", properties={"TIMER_DELAY_SEC": "5"})])
    store.admin.delete_topic("Other")
    clock.advance(5_000)
    await deliver(store)
    assert [m.body for m in visible(store)] == [b"kept"] and store.timers.timer.dropped_total == 1


async def test_retention_keeps_the_segment_of_a_pending_timer(stores: StoreFactory, clock: ManualClock) -> None:
    store = await stores.open(file_reserved_time_ms=1000)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"later", properties={"TIMER_DELAY_SEC": "60"})])
    for _ in range(4):  # ~4 segments of 64 KiB after it
        await store.send([msg(b"z" * 1000) for _ in range(60)])
    await store.flush()
    clock.advance(5_000)
    assert await store.clean_expired_files() == 0  # all expired, but the first holds a pending timer
    clock.advance(55_000)
    assert await deliver(store) == 1
    await store.flush()
    assert await store.clean_expired_files() > 0  # delivered: nothing holds them back
    assert [m.body for m in visible(store) if m.body == b"later"] == [b"later"]


# -- recall ------------------------------------------------------------------------------


async def test_a_recalled_message_is_never_delivered_after_a_restart_without_checkpoint(
    stores: StoreFactory, clock: ManualClock
) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    kept, gone = await store.send([msg(b"kept", properties={"TIMER_DELAY_SEC": "5"}),
                                   msg(b"gone", properties={"TIMER_DELAY_SEC": "5"})])  # fmt: skip
    recalled_before = REGISTRY.get_sample_value("txmq_store_timer_recalled_total") or 0.0
    status, due = await store.recall(topic="TopicA", commit_log_offset=gone.commit_log_offset, unique_id=gone.msg_id)
    assert (status, due) == (SendStatus.OK, T0_MS + 5_000)
    assert await store.recall(topic="TopicA", commit_log_offset=gone.commit_log_offset, unique_id=gone.msg_id) == (
        SendStatus.OK, due,
    )  # fmt: skip
    assert REGISTRY.get_sample_value("txmq_store_timer_recalled_total") == recalled_before + 1  # once, not twice
    await store.close()
    stores.opened.remove(store)
    store.timers.timer.path.unlink()  # every timer is filed again: the recall queue says which not
    again = await stores.open()
    assert again.timers.timer.wheel.pending == 1 and again.timers.timer.recalled == {1}
    clock.advance(5_000)
    await deliver(again)
    assert [m.body for m in visible(again)] == [b"kept"]
    with pytest.raises(TxmqError) as caught:
        await again.recall(topic="TopicA", commit_log_offset=kept.commit_log_offset, unique_id=kept.msg_id)
    assert caught.value.code == E.CODE_MESSAGE_ALREADY_DELIVERED


async def test_a_recall_naming_anything_but_a_delayed_message_is_not_found(store: MessageStore) -> None:
    (later,) = await store.send([msg(b"later", properties={"TIMER_DELAY_SEC": "5"})])
    (now,) = await store.send([msg(b"now")])
    for topic, offset, unique_id, code in [
        ("Other", later.commit_log_offset, later.msg_id, E.CODE_MESSAGE_NOT_FOUND),  # another topic
        ("TopicA", later.commit_log_offset, "U-forged", E.CODE_MESSAGE_NOT_FOUND),
        ("TopicA", now.commit_log_offset, now.msg_id, E.CODE_MESSAGE_NOT_FOUND),  # not delayed
        ("TopicA", later.commit_log_offset + 1, later.msg_id, E.CODE_MESSAGE_NOT_FOUND),  # not a record's start
        ("TopicA", -1, later.msg_id, E.CODE_ILLEGAL_OFFSET),
    ]:
        with pytest.raises(TxmqError) as caught:
            await store.recall(topic=topic, commit_log_offset=offset, unique_id=unique_id)
        assert caught.value.code == code, (topic, offset, unique_id)
    assert store.timers.timer.recalled == set()


async def test_recall_over_grpc(grpc_store: GrpcStore, clock: ManualClock) -> None:
    one = await grpc_store.stub.SendMessage(
        store_pb2.SendMessageRequest(
            message=common_pb2.Message(topic="TopicA", body=b"c", properties={"TIMER_DELAY_MS": "4000"})
        )
    )
    ask = store_pb2.RecallMessageRequest(
        topic="TopicA", commit_log_offset=one.result.commit_log_offset, unique_id=one.result.msg_id
    )
    resp = await grpc_store.stub.RecallMessage(ask)
    assert (resp.status, resp.unique_id, resp.deliver_at_ms) == (
        store_pb2.SEND_STATUS_OK, one.result.msg_id, T0_MS + 4_000,
    )  # fmt: skip
    clock.advance(4_000)
    await deliver(grpc_store.store)
    assert visible(grpc_store.store) == []
