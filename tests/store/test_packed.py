"""Store.SendStream: frames of records in the commit-log layout (txmq.records), over a
real grpc.aio server; the stored result compared with the field-by-field SendBatch path."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from txmq._convert import message_ext_from_proto
from txmq.errors import TxmqError
from txmq.records import HEADER_SIZE, decode_messages, encode_for_send
from txmq.v1 import common_pb2, errors_pb2, store_pb2

from .conftest import CountingFsync, GrpcStore, StoreFactory, grpc_server_for

pytestmark = pytest.mark.asyncio(loop_scope="session")


def rec(
    body: bytes = b"hello", *, topic: str = "TopicA", queue_id: int | None = 1, uid: str = "", **kw: object
) -> bytes:
    return encode_for_send(topic, queue_id, body, uid or f"U{body.hex().upper():0>8}", **kw)  # type: ignore[arg-type]


async def frames(*blobs: bytes) -> AsyncIterator[store_pb2.RecordFrame]:
    for i, blob in enumerate(blobs):
        yield store_pb2.RecordFrame(sequence=i + 1, records=blob)


async def stream(grpc_store: GrpcStore, *blobs: bytes) -> list[store_pb2.RecordAck]:
    return [ack async for ack in grpc_store.stub.SendStream(frames(*blobs))]


async def queue_max(grpc_store: GrpcStore, topic: str = "TopicA") -> list[int]:
    offsets = await grpc_store.stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=topic))
    return [q.max_offset for q in offsets.queues]


async def read(grpc_store: GrpcStore, topic: str, queue_id: int, n: int = 32) -> list[common_pb2.MessageView]:
    got = await grpc_store.stub.GetMessage(
        store_pb2.GetMessageRequest(topic=topic, queue_id=queue_id, offset=0, max_messages=n)
    )
    return list(got.messages)


def error_of(ack: store_pb2.RecordAck) -> TxmqError:
    assert ack.HasField("error"), ack
    return TxmqError.from_detail(ack.error)


async def test_mixed_topics_any_queue_and_results(grpc_store: GrpcStore) -> None:
    grpc_store.store.create_topic("TopicB", read_queue_nums=2, write_queue_nums=2)
    blob = b"".join(
        [
            rec(b"a0", queue_id=3),
            rec(b"b0", topic="TopicB", queue_id=None),
            rec(b"a1", queue_id=3, tags="TagA", keys=("k1", "k2"), properties={"p": "v"}, flag=7),
            rec(b"b1", topic="TopicB", queue_id=None),
        ]
    )
    (ack,) = await stream(grpc_store, blob)
    assert not ack.HasField("error")
    assert ack.sequence == 1 and ack.status == store_pb2.SEND_STATUS_OK and ack.store_id == "store-0"
    assert list(ack.queue_ids) == [3, 0, 3, 1]  # the store picked TopicB's queues round robin
    assert list(ack.queue_offsets) == [0, 0, 1, 0]
    offsets = list(ack.commit_log_offsets)
    assert offsets == sorted(offsets) and len(set(offsets)) == 4
    views = await read(grpc_store, "TopicA", 3)
    assert [v.message.body for v in views] == [b"a0", b"a1"]
    a1 = views[1]
    assert (a1.message.tags, list(a1.message.keys), dict(a1.message.properties)) == ("TagA", ["k1", "k2"], {"p": "v"})
    assert a1.message.flag == 7 and a1.message.unique_id == "U00006131"
    assert a1.offset_msg_id == ack.offset_msg_id_prefix + f"{offsets[2]:016X}"
    assert (
        a1.born_host.startswith("127.0.0.1:") and a1.message.born_timestamp_ms == a1.store_timestamp_ms
    )  # 0: store time
    q = await grpc_store.stub.QueryMessages(store_pb2.QueryMessagesRequest(topic="TopicA", key="k2"))
    assert [m.message.unique_id for m in q.messages] == ["U00006131"]
    assert [v.message.body for v in await read(grpc_store, "TopicB", 1)] == [b"b1"]


async def test_packed_record_reads_back_as_the_field_by_field_send(grpc_store: GrpcStore) -> None:
    fields = dict(tags="T", keys=["x", "y"], properties={"a": "1", "b": "ü"}, flag=-3, born_timestamp_ms=1234)
    sent = await grpc_store.stub.SendMessage(
        store_pb2.SendMessageRequest(
            message=common_pb2.Message(topic="TopicA", body=b"same", unique_id="ID1", queue_id=0, **fields)  # type: ignore[arg-type]
        )
    )
    (ack,) = await stream(grpc_store, rec(b"same", queue_id=0, uid="ID2", **fields))  # type: ignore[arg-type]
    old, new = await read(grpc_store, "TopicA", 0)
    assert old.commit_log_offset == sent.result.commit_log_offset and new.commit_log_offset == ack.commit_log_offsets[0]
    for view in (old, new):  # all but where it landed, when, from which connection and its id
        for name in ("commit_log_offset", "offset_msg_id", "queue_offset", "store_timestamp_ms", "born_host"):
            view.ClearField(name)
        view.message.ClearField("unique_id")
    assert old == new


@pytest.mark.parametrize(
    ("damage", "index"),
    [
        (lambda b: b[:-1], "1"),  # torn: the frame ends inside the record
        (lambda b: b + b"\x00" * 7, "2"),  # a torn record after it
        (lambda b: b[:4] + b"XXXX" + b[8:], "1"),  # magic
        (lambda b: b[:HEADER_SIZE] + b"H" + b[HEADER_SIZE + 1 :], "1"),  # body vs body CRC
        (lambda b: b[:40] + struct.pack(">I", 4) + b[44:], "1"),  # sysflag: a half message
        (lambda b: b[:112] + struct.pack(">I", 2) + b[116:], "1"),  # body length vs size
    ],
)
async def test_a_damaged_record_refuses_the_whole_frame(grpc_store: GrpcStore, damage, index: str) -> None:  # type: ignore[no-untyped-def]
    good = rec(b"good")
    blob = good + damage(rec(b"hello"))
    bad, after = await stream(grpc_store, blob, rec(b"next"))
    err = error_of(bad)
    assert err.code == errors_pb2.CODE_ILLEGAL_MESSAGE and err.metadata.get("index") == index, err
    assert bad.sequence == 1 and not bad.commit_log_offsets
    # Nothing of the refused frame is stored; the stream goes on.
    assert not after.HasField("error") and list(after.queue_offsets) == [0]
    assert [v.message.body for v in await read(grpc_store, "TopicA", 1)] == [b"next"]


@pytest.mark.parametrize(
    ("record", "code"),
    [
        (rec(b"x", properties={"TRAN_MSG": "true"}), errors_pb2.CODE_ILLEGAL_MESSAGE),  # reserved
        (rec(b"x", topic="RMQ_SYS_TRANS_HALF_TOPIC"), errors_pb2.CODE_SYSTEM_TOPIC),
        (rec(b"x", queue_id=9), errors_pb2.CODE_ILLEGAL_QUEUE_ID),
        (rec(b"x", topic="No Such"), errors_pb2.CODE_ILLEGAL_TOPIC),
        (encode_for_send("TopicA", 1, b"x", ""), errors_pb2.CODE_ILLEGAL_MESSAGE),  # no unique id
    ],
)
async def test_refused_records(grpc_store: GrpcStore, record: bytes, code: int) -> None:
    (ack,) = await stream(grpc_store, rec(b"ok") + record)
    err = error_of(ack)
    assert err.code == code and err.metadata.get("index") == "1", err
    assert await queue_max(grpc_store) == [0, 0, 0, 0]


async def test_duplicate_property_and_empty_frame(grpc_store: GrpcStore) -> None:
    dup = rec(b"x", properties={"a": "1"})
    dup = dup.replace(b"a\x011\x02", b"a\x011\x02a\x012\x02")
    dup = struct.pack(">I", len(dup)) + dup[4:]
    tail_at = dup.rindex(b"UNIQ_KEY") - 2
    dup = dup[:tail_at] + struct.pack(">H", len(dup) - tail_at - 2) + dup[tail_at + 2 :]
    empty, dup_ack = await stream(grpc_store, b"", dup)
    assert error_of(empty).code == errors_pb2.CODE_ILLEGAL_ARGUMENT
    assert error_of(dup_ack).code == errors_pb2.CODE_ILLEGAL_MESSAGE
    assert "twice" in error_of(dup_ack).message


async def test_pipelined_frames_under_sync_flush_share_fsyncs(stores: StoreFactory) -> None:
    """Every frame is appended on arrival, so one group commit covers the frames in
    flight: while an fsync is held, all 40 frames are appended; acks come in order."""
    fsync = CountingFsync()
    store = await stores.open(fsync=fsync, flush_mode="sync")
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    async with grpc_server_for(store) as served:
        blobs = [b"".join(rec(b"%d-%d" % (f, i), queue_id=0) for i in range(8)) for f in range(40)]
        expected_end = store.commitlog.write_offset + sum(len(b) for b in blobs)
        fsync.calls = 0
        fsync.gate.clear()
        sending = asyncio.create_task(stream(served, *blobs))
        while store.commitlog.write_offset < expected_end:  # noqa: ASYNC110 - a store attribute, no event to wait on
            await asyncio.sleep(0.005)
        assert not sending.done()  # nothing acknowledged before its fsync
        fsync.gate.set()
        acks = await sending
        assert [a.sequence for a in acks] == list(range(1, 41))
        assert all(not a.HasField("error") and a.status == store_pb2.SEND_STATUS_OK for a in acks)
        assert [a.queue_offsets[0] for a in acks] == list(range(0, 320, 8))
        assert fsync.calls <= 3  # the held one, then one (or two) for everything after it
        assert await queue_max(served) == [320]


# -- raw reads: GetMessage(raw_records) --------------------------------------------------


async def test_raw_records_decode_as_the_views(grpc_store: GrpcStore) -> None:
    """A raw read decoded by the SDK (txmq.records) gives exactly what the MessageView
    path gives, for every kind of message, with and without filters."""
    await grpc_store.stub.SendBatch(
        store_pb2.SendBatchRequest(
            messages=[
                common_pb2.Message(topic="TopicA", body=b"plain", queue_id=2),
                common_pb2.Message(
                    topic="TopicA",
                    body=b"all",
                    queue_id=2,
                    tags="T1",
                    keys=["a", "b"],
                    properties={"n": "5", "ü": "ß"},
                    flag=-7,
                    born_timestamp_ms=42,
                ),
                common_pb2.Message(topic="TopicA", body=bytes(range(256)), queue_id=2, tags="T2"),
            ]
        )
    )
    await stream(grpc_store, rec(b"packed", queue_id=2, tags="T1", properties={"n": "9"}))
    filters = [
        None,
        common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="T1"),
        common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression="n > 6"),
    ]
    for f in filters:
        request = store_pb2.GetMessageRequest(topic="TopicA", queue_id=2, offset=0, max_messages=32, filter=f)
        views = await grpc_store.stub.GetMessage(request)
        request.raw_records = True
        raw = await grpc_store.stub.GetMessage(request)
        assert not raw.messages and raw.store_id == "store-0"
        assert (raw.status, raw.next_begin_offset, raw.max_offset) == (
            views.status, views.next_begin_offset, views.max_offset
        )  # fmt: skip
        assert decode_messages(raw.records, raw.store_id) == [message_ext_from_proto(v) for v in views.messages]
        assert len(views.messages) == {None: 4, "T1": 2, "n > 6": 1}[f.expression if f else None]


async def test_a_prepared_frame_stores_half_messages(grpc_store: GrpcStore) -> None:
    """transaction_prepared: each record becomes a half message (as SendBatch does): not
    in its real queue, the ack names the real queue and the half record's queue offset."""
    blob = rec(b"h0", queue_id=2, uid="TX0") + rec(b"h1", queue_id=None, uid="TX1")

    async def one() -> AsyncIterator[store_pb2.RecordFrame]:
        yield store_pb2.RecordFrame(sequence=7, records=blob, producer_group="pg", transaction_prepared=True)

    (ack,) = [a async for a in grpc_store.stub.SendStream(one())]
    assert not ack.HasField("error"), ack
    assert ack.queue_ids[0] == 2 and 0 <= ack.queue_ids[1] < 4
    assert list(ack.queue_offsets) == [0, 1]  # the half queue's offsets
    assert await queue_max(grpc_store) == [0, 0, 0, 0]  # nothing visible before the commit
    half = await grpc_store.stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=ack.commit_log_offsets[0]))
    m = half.message.message
    assert (m.topic, m.unique_id, m.body) == ("RMQ_SYS_TRANS_HALF_TOPIC", "TX0", b"h0")
    assert m.properties["REAL_TOPIC"] == "TopicA" and m.properties["REAL_QID"] == "2" and m.properties["PGROUP"] == "pg"

    async def no_group() -> AsyncIterator[store_pb2.RecordFrame]:
        yield store_pb2.RecordFrame(sequence=8, records=rec(b"h2", uid="TX2"), transaction_prepared=True)

    (refused,) = [a async for a in grpc_store.stub.SendStream(no_group())]
    assert error_of(refused).code == errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP
