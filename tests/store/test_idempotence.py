"""Idempotent sends (docs/store.md "Idempotent sends"): a producer send whose topic and
unique id the store accepted within ``idempotence_window_ms`` is answered with the first
send's result and stores nothing, on every send path, across a restart and before the
first send is even dispatched (sync flush)."""

from __future__ import annotations

import asyncio

import pytest

from txmq.protocol import PROPERTY_TIMER_DELIVER_MS, TIMER_TOPIC
from txmq.records import encode_for_send
from txmq.v1 import common_pb2, store_pb2
from txmq_store.message_store import MessageStore
from txmq_store.model import GetMessageStatus

from .conftest import CountingFsync, GrpcStore, StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")

GROUP = "PG"


def bodies(store: MessageStore, topic: str = "TopicA", queues: int = 4) -> list[bytes]:
    out = []
    for q in range(queues):
        got = store.reader.get_message(topic=topic, queue_id=q, offset=0, max_messages=64)
        if got.status == GetMessageStatus.FOUND:
            out += [m.body for m in got.messages]
    return sorted(out)


async def test_a_resent_message_is_answered_with_the_first_result(store: MessageStore) -> None:
    [first] = await store.send([msg(b"once", unique_id="U1")])
    assert not first.duplicate
    [again] = await store.send([msg(b"once", unique_id="U1")])
    assert again.duplicate
    assert (again.msg_id, again.offset_msg_id, again.topic, again.queue_id, again.queue_offset) == (
        first.msg_id, first.offset_msg_id, first.topic, first.queue_id, first.queue_offset,
    )  # fmt: skip
    assert again.commit_log_offset == first.commit_log_offset
    assert bodies(store) == [b"once"]


async def test_the_window_is_per_topic_and_per_unique_id(store: MessageStore) -> None:
    store.create_topic("TopicB", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"a", unique_id="U1")])
    [other_id] = await store.send([msg(b"a", unique_id="U2")])
    [other_topic] = await store.send([msg(b"a", topic="TopicB", unique_id="U1")])
    assert not other_id.duplicate and not other_topic.duplicate
    assert bodies(store) == [b"a", b"a"] and bodies(store, "TopicB", 1) == [b"a"]


async def test_a_send_after_the_window_is_stored_again(stores: StoreFactory) -> None:
    store = await stores.open(idempotence_window_ms=60_000)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"x", unique_id="U1")])
    stores.clock.advance(59_000)
    [inside] = await store.send([msg(b"x", unique_id="U1")])
    stores.clock.advance(2_000)
    [after] = await store.send([msg(b"x", unique_id="U1")])
    assert inside.duplicate and not after.duplicate
    assert bodies(store, queues=1) == [b"x", b"x"]


async def test_off_stores_every_send(stores: StoreFactory) -> None:
    store = await stores.open(idempotence_window_ms=0)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    for _ in range(2):
        [r] = await store.send([msg(b"x", unique_id="U1")])
        assert not r.duplicate
    assert bodies(store, queues=1) == [b"x", b"x"]


async def test_a_batch_stores_only_what_is_new_and_answers_in_order(store: MessageStore) -> None:
    first = await store.send([msg(b"m1", unique_id="U1"), msg(b"m3", unique_id="U3")])
    results = await store.send([msg(b"m0", unique_id="U0"), msg(b"m1", unique_id="U1"), msg(b"m2", unique_id="U2"),
                                msg(b"m3", unique_id="U3")])  # fmt: skip
    assert [r.msg_id for r in results] == ["U0", "U1", "U2", "U3"]
    assert [r.duplicate for r in results] == [False, True, False, True]
    assert results[1].commit_log_offset == first[0].commit_log_offset
    assert results[3].commit_log_offset == first[1].commit_log_offset
    assert bodies(store) == [b"m0", b"m1", b"m2", b"m3"]
    again = await store.send([msg(b"m1", unique_id="U1"), msg(b"m3", unique_id="U3")])
    assert all(r.duplicate for r in again)  # nothing to write at all
    assert bodies(store) == [b"m0", b"m1", b"m2", b"m3"]


async def test_a_resent_half_message_is_one_transaction(store: MessageStore) -> None:
    [h1] = await store.send([msg(b"tx", unique_id="T1")], producer_group=GROUP, transaction_prepared=True)
    [h2] = await store.send([msg(b"tx", unique_id="T1")], producer_group=GROUP, transaction_prepared=True)
    assert h2.duplicate and h2.transaction_id == h1.transaction_id == "T1"
    assert (h2.topic, h2.queue_id, h2.queue_offset) == (h1.topic, h1.queue_id, h1.queue_offset)
    assert h2.commit_log_offset == h1.commit_log_offset
    # The same (topic, unique id) sent as a plain message: one id names one message.
    [plain] = await store.send([msg(b"tx", unique_id="T1")])
    assert plain.duplicate


async def test_the_window_survives_a_restart(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    [first] = await store.send([msg(b"x", unique_id="U1")])
    await store.close()
    stores.opened.remove(store)
    store = await stores.open()
    [again] = await store.send([msg(b"x", unique_id="U1")])
    assert again.duplicate and again.commit_log_offset == first.commit_log_offset
    assert bodies(store, queues=1) == [b"x"]


async def test_a_retry_racing_the_first_fsync_is_caught(stores: StoreFactory) -> None:
    """Sync flush: the first send is appended, not yet fsynced or indexed, when its retry
    arrives; both are answered once the fsync is done, with one record stored."""
    fsync = CountingFsync()
    store = await stores.open(flush_mode="sync", fsync=fsync)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    fsync.gate.clear()
    first = asyncio.ensure_future(store.send([msg(b"x", unique_id="U1")]))
    await asyncio.sleep(0)
    assert store.reader.dispatched_offset == 0  # not indexed yet
    second = asyncio.ensure_future(store.send([msg(b"x", unique_id="U1")]))
    await asyncio.sleep(0)
    fsync.gate.set()
    [r1], [r2] = await asyncio.gather(first, second)
    assert not r1.duplicate and r2.duplicate and r1.commit_log_offset == r2.commit_log_offset
    assert bodies(store, queues=1) == [b"x"]


async def test_system_sends_are_never_answered_from_the_window(store: MessageStore) -> None:
    await store.send([msg(b"x", unique_id="U1")])
    [copy] = await store.send([msg(b"x", unique_id="U1")], system=True)
    assert not copy.duplicate


async def test_packed_frames_answer_duplicates_by_index(grpc_store: GrpcStore) -> None:
    def rec(body: bytes, uid: str) -> bytes:
        return encode_for_send("TopicA", 1, body, uid)

    first = await grpc_store.stub.SendRecords(store_pb2.RecordFrame(sequence=1, records=rec(b"a", "UA")))
    ack = await grpc_store.stub.SendRecords(
        store_pb2.RecordFrame(sequence=2, records=rec(b"b", "UB") + rec(b"a", "UA") + rec(b"c", "UC"))
    )
    assert not ack.HasField("error")
    assert list(ack.duplicate_indexes) == [1]
    assert ack.commit_log_offsets[1] == first.commit_log_offsets[0]
    assert ack.queue_offsets[1] == first.queue_offsets[0] and list(ack.queue_ids) == [1, 1, 1]
    got = await grpc_store.stub.GetMessage(
        store_pb2.GetMessageRequest(topic="TopicA", queue_id=1, offset=0, max_messages=10)
    )
    assert [m.message.body for m in got.messages] == [b"a", b"b", b"c"]
    single = await grpc_store.stub.SendMessage(
        store_pb2.SendMessageRequest(message=common_pb2.Message(topic="TopicA", body=b"b", unique_id="UB"))
    )
    assert single.result.duplicate and single.result.commit_log_offset == ack.commit_log_offsets[0]
    batch = await grpc_store.stub.SendBatch(
        store_pb2.SendBatchRequest(
            messages=[common_pb2.Message(topic="TopicA", body=b"d", unique_id="UD"),
                      common_pb2.Message(topic="TopicA", body=b"c", unique_id="UC")]
        )
    )  # fmt: skip
    assert [r.duplicate for r in batch.results] == [False, True]
    assert batch.results[1].commit_log_offset == ack.commit_log_offsets[2]


async def test_a_resent_delayed_message_is_answered_and_delivered_once(
    store: MessageStore, stores: StoreFactory
) -> None:
    """A delayed message waits in the timer topic; its retry is answered from the window
    (queue offset -1, the delivery time) and the timer holds one record of it."""
    due = stores.clock() + 30_000
    props = {PROPERTY_TIMER_DELIVER_MS: str(due)}
    [first] = await store.send([msg(b"later", unique_id="D1", queue_id=2, properties=props)])
    [again] = await store.send([msg(b"later", unique_id="D1", queue_id=2, properties=props)])
    assert first.deliver_at_ms == due and first.queue_offset == -1 and not first.duplicate
    assert again.duplicate and again.deliver_at_ms == due and again.queue_offset == -1
    assert (again.topic, again.queue_id, again.commit_log_offset) == ("TopicA", 2, first.commit_log_offset)
    assert bodies(store) == []  # not visible before its time
    [timer_queue] = store.queue_offsets(TIMER_TOPIC)
    assert timer_queue.max_offset == 1
