"""A caller's commit-log offset is only taken where the store's dispatch put a record
(issue 16): a message body that holds a well-formed half record, CRC right and claiming
the offset where the body lands (predictable from the send result), is no half message
-- not for ViewMessage, DecideTransactions or RequeueHalves -- and a decision naming it
writes nothing. Real records are still found: prepared records by the index, after a
restart, after crash recovery and across a segment roll."""

from __future__ import annotations

import shutil

import pytest

from txmq.errors import TxmqError
from txmq.protocol import (
    HALF_QUEUE_ID,
    OP_COMMIT,
    OP_ROLLBACK,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    TRANS_HALF_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from txmq.v1 import errors_pb2
from txmq_store.codec import HEADER_SIZE, encode_host, encode_record
from txmq_store.message_store import MessageStore
from txmq_store.model import OutgoingMessage, SendResult
from txmq_store.transactions import CHECK, DecisionRequest, HalfAction
from txmq_store.validation import MessageEncoder, MessageLimits

from .conftest import ADDRESS, T0_MS, StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")

GROUP = "PG_FORGE"


def forged_half(at: int, *, queue_offset: int, unique_id: str = "FORGED", sys_flag: int = 0) -> bytes:
    """A half record as the store itself encodes one (MessageEncoder + encode_record),
    claiming commit-log offset ``at`` and ``queue_offset`` of the half queue."""
    encoder = MessageEncoder(
        limits=MessageLimits(max_body_bytes=1 << 20, max_properties_bytes=1 << 15, max_record_bytes=1 << 20),
        born_host=encode_host("127.0.0.1", 1),
        now_ms=T0_MS,
        system=True,
    )
    extra = {
        PROPERTY_REAL_TOPIC: "TopicA",
        PROPERTY_REAL_QUEUE_ID: "0",
        PROPERTY_PRODUCER_GROUP: GROUP,
        PROPERTY_TRANSACTION_PREPARED: "true",
    }
    rec = encoder.prepare(
        OutgoingMessage("TopicA", b"steal", unique_id=unique_id), 0, TRANS_HALF_TOPIC, HALF_QUEUE_ID, extra, sys_flag
    )
    host, port = ADDRESS.split(":")
    return b"".join(encode_record(rec, queue_offset, at, T0_MS, encode_host(host, int(port))))


async def smuggle(store: MessageStore, record_for: object) -> tuple[SendResult, int]:
    """Send a normal message whose body is the record ``record_for(at)`` makes for the
    offset ``at`` where the body will land; returns the send result and ``at``."""
    where = store.commitlog.write_offset
    at = where + HEADER_SIZE
    body = record_for(at)  # type: ignore[operator]
    [r] = await store.send([msg(body, queue_id=0)])
    assert r.commit_log_offset == where  # the prediction held
    assert store.commitlog.read(at, len(body)) == body  # the forged record lies there, intact
    return r, at


async def pending_half(store: MessageStore, body: bytes = b"real") -> SendResult:
    [r] = await store.send([msg(body)], producer_group=GROUP, transaction_prepared=True)
    return r


def op_count(store: MessageStore) -> int:
    return sum(q.max_offset for q in store.queue_offsets("RMQ_SYS_TRANS_OP_HALF_TOPIC"))


def refused(fn: object, code: int) -> TxmqError:
    with pytest.raises(TxmqError) as info:
        fn()  # type: ignore[operator]
    assert info.value.code == code
    return info.value


@pytest.mark.parametrize("claim", ["the pending half's queue offset", "the next queue offset", "prepared sysflag"])
async def test_a_half_record_inside_a_body_is_no_half_message(store: MessageStore, claim: str) -> None:
    real = await pending_half(store)
    queue_offset = real.queue_offset + (1 if claim == "the next queue offset" else 0)
    sys_flag = TRANSACTION_PREPARED_TYPE if claim == "prepared sysflag" else 0
    carrier, at = await smuggle(store, lambda a: forged_half(a, queue_offset=queue_offset, sys_flag=sys_flag))
    if claim == "the next queue offset":  # the unit the forgery names now exists, elsewhere
        later = await pending_half(store, b"later")
        assert later.queue_offset == queue_offset
    end = store.commitlog.write_offset

    # Not a message, however it is asked for.
    err = refused(lambda: store.reader.view_message(at), errors_pb2.CODE_MESSAGE_NOT_FOUND)
    assert err.metadata["commit_log_offset"] == str(at)
    refused(
        lambda: store.reader.view_message_by_id(f"{store.sender.offset_msg_id_prefix}{at:016X}"),
        errors_pb2.CODE_MESSAGE_NOT_FOUND,
    )
    # Not a half message: the decision is refused and writes nothing.
    for decision in (OP_ROLLBACK, OP_COMMIT):
        [out] = await store.transactions.decide(
            [DecisionRequest(at, queue_offset, "FORGED", GROUP, decision, from_transaction_check=True)]
        )
        assert out.error is not None and out.error.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND
    [act] = await store.transactions.requeue([HalfAction(at, CHECK)])
    assert act.error is not None and act.error.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND
    assert store.commitlog.write_offset == end and op_count(store) == 0

    # The real half is still pending: its first decision is taken now.
    [out] = await store.transactions.decide(
        [DecisionRequest(real.commit_log_offset, real.queue_offset, real.transaction_id, GROUP, OP_COMMIT)]
    )
    assert out.error is None and out.first and out.decision == OP_COMMIT
    # The carrier itself is an ordinary message, found as usual.
    assert store.reader.view_message(carrier.commit_log_offset).body == forged_half(at, queue_offset=queue_offset,
                                                                               sys_flag=sys_flag)  # fmt: skip


async def test_a_forgery_with_a_wrong_crc_is_refused_and_not_counted_as_damage(store: MessageStore) -> None:
    def broken(at: int) -> bytes:
        rec = bytearray(forged_half(at, queue_offset=0))
        rec[HEADER_SIZE] ^= 0xFF  # the body: the record CRC no longer matches
        return bytes(rec)

    await pending_half(store)
    _, at = await smuggle(store, broken)
    # Damage or forgery: the store cannot tell, so it says "damaged" -- and decides nothing.
    refused(lambda: store.reader.view_message(at), errors_pb2.CODE_DATA_CORRUPTED)
    [out] = await store.transactions.decide([DecisionRequest(at, 0, "FORGED", GROUP, OP_ROLLBACK)])
    assert out.error is not None and out.error.code == errors_pb2.CODE_DATA_CORRUPTED
    assert op_count(store) == 0
    # No queue names a record there: not reported as a damaged record (no metric, no log).
    assert at not in store._corruption._seen


async def test_system_records_without_a_queue_slot(store: MessageStore) -> None:
    prepared, rolled_back, normal = await store.send(
        [
            msg(b"prepared", queue_id=0, unique_id="P", sys_flag=TRANSACTION_PREPARED_TYPE),
            msg(b"rolled back", queue_id=0, unique_id="R", sys_flag=TRANSACTION_ROLLBACK_TYPE),
            msg(b"normal", queue_id=0, unique_id="N"),
        ],
        system=True,
    )
    # A prepared record is in no queue, but the index vouches for it.
    assert store.reader.view_message(prepared.commit_log_offset).body == b"prepared"
    # A rolled-back one is in neither: no offset is taken for it (txmq writes none).
    refused(lambda: store.reader.view_message(rolled_back.commit_log_offset), errors_pb2.CODE_MESSAGE_NOT_FOUND)
    assert store.reader.view_message(normal.commit_log_offset).body == b"normal"


async def test_a_deleted_topics_records_are_not_found_by_offset(store: MessageStore) -> None:
    store.create_topic("TopicB", read_queue_nums=1, write_queue_nums=1)
    [old] = await store.send([msg(b"old", topic="TopicB")])
    store.admin.delete_topic("TopicB")
    store.create_topic("TopicB", read_queue_nums=1, write_queue_nums=1)
    [new] = await store.send([msg(b"new", topic="TopicB")])
    assert new.queue_offset == old.queue_offset == 0
    refused(lambda: store.reader.view_message(old.commit_log_offset), errors_pb2.CODE_MESSAGE_NOT_FOUND)
    assert store.reader.view_message(new.commit_log_offset).body == b"new"


@pytest.mark.parametrize("how", ["restart", "crash recovery"])
async def test_real_records_are_found_after_a_restart_and_across_segments(stores: StoreFactory, how: str) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=2, write_queue_nums=2)
    halves = [await pending_half(store, b"h%d" % i) for i in range(3)]
    results: list[SendResult] = []
    for i in range(0, 240, 40):  # several 64 KiB segments
        results += await store.send([msg(b"m%d" % i + bytes(900), queue_id=i % 2) for i in range(i, i + 40)])
    [prepared] = await store.send([msg(b"p", unique_id="P", sys_flag=TRANSACTION_PREPARED_TYPE)], system=True)
    _, forged_at = await smuggle(store, lambda a: forged_half(a, queue_offset=halves[0].queue_offset))
    segments = {r.commit_log_offset // store.settings.commitlog_segment_bytes for r in results}
    assert len(segments) >= 3
    # The first record of each segment after the first (a roll) among them.
    seg_bytes = store.settings.commitlog_segment_bytes
    firsts = [min((r for r in results if r.commit_log_offset // seg_bytes == s), key=lambda r: r.commit_log_offset)
              for s in sorted(segments)]  # fmt: skip
    if how == "restart":
        await store.close()
        stores.opened.remove(store)
        store = await stores.open()
    else:
        shutil.copytree(store.settings.data_dir, stores.base / "crash")  # the abort marker with it
        store = await stores.open("crash")
        assert store.recovered_from_crash
    for r in [*results[::17], *firsts, results[-1]]:
        m = store.reader.view_message(r.commit_log_offset)
        assert (m.queue_id, m.queue_offset) == (r.queue_id, r.queue_offset)
        assert store.reader.view_message_by_id(r.offset_msg_id).commit_log_offset == r.commit_log_offset
    assert store.reader.view_message(prepared.commit_log_offset).body == b"p"
    refused(lambda: store.reader.view_message(forged_at), errors_pb2.CODE_MESSAGE_NOT_FOUND)
    outs = await store.transactions.decide(
        [DecisionRequest(h.commit_log_offset, h.queue_offset, h.transaction_id, GROUP, OP_ROLLBACK) for h in halves]
    )
    assert [(o.error, o.first) for o in outs] == [(None, True)] * 3
