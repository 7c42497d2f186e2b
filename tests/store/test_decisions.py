"""The store decides transactions (txmq_store/transactions.py): the decision rule
against a real store in a temp dir -- every pair of first and second decision, after a
restart (book empty: the index answers), with a tiny decision book, after a put-back,
several decisions in one call, refusals -- and the check loop's put-backs."""

from __future__ import annotations

import itertools

import pytest

from txmq.protocol import (
    OP_COMMIT,
    OP_ROLLBACK,
    PROPERTY_CHECK_IMMUNITY,
    PROPERTY_CHECK_TIMES,
    PROPERTY_CHECK_WAITS,
    PROPERTY_DISCARD_REASON,
    PROPERTY_PREPARED_QUEUE_OFFSET,
    TRANS_CHECK_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    decode_op_entries,
)
from txmq.v1 import errors_pb2
from txmq_store.message_store import MessageStore
from txmq_store.model import SendResult, SendStatus
from txmq_store.transactions import CHECK, DISCARD, IMMUNITY, WAIT, DecisionRequest, HalfAction

from .conftest import StoreFactory, msg

GROUP = "PG_DECIDE"
WORD = {OP_COMMIT: "commit", OP_ROLLBACK: "rollback"}


async def half(store: MessageStore, body: bytes = b"tx", **props: str) -> SendResult:
    [r] = await store.send([msg(body, properties=props)], producer_group=GROUP, transaction_prepared=True)
    return r


def request(r: SendResult, decision: str = OP_COMMIT, *, from_check: bool = False, **change: object) -> DecisionRequest:
    fields: dict[str, object] = dict(
        commit_log_offset=r.commit_log_offset,
        tran_state_table_offset=r.queue_offset,
        transaction_id=r.transaction_id,
        producer_group=GROUP,
        decision=decision,
        from_transaction_check=from_check,
    )
    fields.update(change)
    return DecisionRequest(**fields)  # type: ignore[arg-type]


def real(store: MessageStore) -> list[bytes]:
    out: list[bytes] = []
    for q in range(4):
        out += [
            m.body for m in store.reader.get_message(topic="TopicA", queue_id=q, offset=0, max_messages=100).messages
        ]
    return out


def ops(store: MessageStore) -> list[tuple[int, str, str]]:
    try:
        r = store.reader.get_message(topic=TRANS_OP_HALF_TOPIC, queue_id=0, offset=0, max_messages=100)
    except Exception:  # noqa: BLE001 - no op topic yet
        return []
    return [
        (e.half_offset, e.transaction_id, e.decision)
        for m in r.messages
        for e in decode_op_entries(m.properties, m.body)
    ]


def halves(store: MessageStore, topic: str = TRANS_HALF_TOPIC):
    return store.reader.get_message(topic=topic, queue_id=0, offset=0, max_messages=100).messages


async def decide_one(store: MessageStore, req: DecisionRequest):
    [out] = await store.transactions.decide([req])
    return out


PAIRS = list(itertools.product((OP_COMMIT, OP_ROLLBACK), repeat=2))


@pytest.mark.parametrize(("first", "second"), PAIRS)
@pytest.mark.parametrize("when", ["same store", "after a restart", "tiny book"])
async def test_first_decision_wins(stores: StoreFactory, first: str, second: str, when: str) -> None:
    overrides = {"decision_cache_entries": 1} if when == "tiny book" else {}
    store = await stores.open(**overrides)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    r = await half(store, b"pay")
    a = await decide_one(store, request(r, first))
    assert a.error is None and a.first and a.decision == first
    assert (a.committed is not None) == (first == OP_COMMIT)
    if first == OP_COMMIT:
        assert a.committed.topic == "TopicA" and a.committed.unique_id == r.transaction_id
    if when == "after a restart":
        await store.close()
        stores.opened.remove(store)
        store = await stores.open()
    elif when == "tiny book":  # push the decision out of the book: the index answers
        for i in range(3):
            other = await half(store, f"other{i}".encode())
            await decide_one(store, request(other, OP_ROLLBACK))
    b = await decide_one(store, request(r, second, from_check=True))
    if second == first:
        assert b.error is None and not b.first and b.decision == first
        if first == OP_COMMIT:
            assert b.committed is not None and b.committed.commit_log_offset == a.committed.commit_log_offset
    else:
        assert b.error is not None and b.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
        assert b.error.metadata["resolution"] == WORD[first]
    # Delivered at most once, and one op entry for the half.
    assert real(store) == ([b"pay"] if first == OP_COMMIT else [])
    assert [e for e in ops(store) if e[1] == r.transaction_id] == [(r.queue_offset, r.transaction_id, first)]


async def test_commit_copy_and_op_in_one_append(store: MessageStore) -> None:
    r = await half(store, b"x", p="1")
    writes = store.commitlog.write_offset
    out = await decide_one(store, request(r, OP_COMMIT))
    [copy] = [m for q in range(4) for m in store.reader.get_message(topic="TopicA", queue_id=q, offset=0).messages]
    assert copy.commit_log_offset == writes  # the copy first, the op right after it
    assert copy.body == b"x" and copy.properties["p"] == "1" and copy.unique_id == r.transaction_id
    assert copy.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
    assert copy.prepared_transaction_offset == r.commit_log_offset
    assert out.committed.commit_log_offset == copy.commit_log_offset
    assert out.committed.queue_offset == copy.queue_offset and out.status == SendStatus.OK
    [op] = store.reader.get_message(topic=TRANS_OP_HALF_TOPIC, queue_id=0, offset=0).messages
    assert op.commit_log_offset == copy.commit_log_offset + copy.store_size
    assert r.transaction_id in op.keys


async def test_a_batch_is_one_append_and_items_fail_alone(store: MessageStore) -> None:
    rs = [await half(store, str(i).encode()) for i in range(100)]
    bad = await half(store, b"bad")
    before = store.commitlog.write_offset
    reqs = [request(r, OP_COMMIT if i % 2 else OP_ROLLBACK) for i, r in enumerate(rs)]
    reqs.insert(10, request(bad, OP_COMMIT, producer_group="PG_OTHER"))
    reqs.insert(20, request(rs[0], OP_COMMIT))  # the opposite of item 0, in the same call
    reqs.insert(30, request(rs[1], OP_COMMIT))  # the same as item 1, in the same call
    outs = await store.transactions.decide(reqs)
    assert outs[10].error.code == errors_pb2.CODE_TRANSACTION_MISMATCH
    assert "producer group" in outs[10].error.message
    assert outs[20].error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert outs[30].error is None and not outs[30].first
    assert outs[30].committed is not None and outs[30].committed == outs[1].committed
    # 50 copies and one op message naming all 100 halves, appended together.
    assert len(real(store)) == 50
    [op] = store.reader.get_message(topic=TRANS_OP_HALF_TOPIC, queue_id=0, offset=0).messages
    assert sorted(e[0] for e in ops(store)) == sorted(r.queue_offset for r in rs)
    copies = sorted(
        m.commit_log_offset
        for q in range(4)
        for m in store.reader.get_message(topic="TopicA", queue_id=q, offset=0, max_messages=100).messages
    )
    assert copies[0] == before and op.commit_log_offset > copies[-1]
    assert store.commitlog.write_offset == op.commit_log_offset + op.store_size


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"transaction_id": ""}, errors_pb2.CODE_ILLEGAL_TRANSACTION_ID),
        ({"producer_group": "bad group!"}, errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP),
        ({"decision": ""}, errors_pb2.CODE_ILLEGAL_ARGUMENT),
        ({"transaction_id": "0A0000000000000000000000000000FF"}, errors_pb2.CODE_TRANSACTION_MISMATCH),
        ({"tran_state_table_offset": 99}, errors_pb2.CODE_TRANSACTION_MISMATCH),
        ({"commit_log_offset": 10**9}, errors_pb2.CODE_TRANSACTION_NOT_FOUND),
    ],
)
async def test_refusals_write_nothing(store: MessageStore, change: dict, code: int) -> None:
    r = await half(store)
    end = store.commitlog.write_offset
    fields = {"decision": OP_COMMIT, **change}
    out = await decide_one(store, request(r, **fields))
    assert out.error is not None and out.error.code == code
    assert store.commitlog.write_offset == end


async def test_not_a_half_record_is_not_found(store: MessageStore) -> None:
    [plain] = await store.send([msg(b"plain")])
    r = await half(store)
    out = await decide_one(store, request(r, OP_COMMIT, commit_log_offset=plain.commit_log_offset))
    assert out.error.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND


async def test_late_decision_refused_unless_from_a_check(store: MessageStore, stores: StoreFactory) -> None:
    r = await half(store, **{PROPERTY_CHECK_IMMUNITY: "10"})
    stores.clock.advance(11_000)
    out = await decide_one(store, request(r, OP_COMMIT))
    assert out.error.code == errors_pb2.CODE_TRANSACTION_EXPIRED and real(store) == []
    out = await decide_one(store, request(r, OP_COMMIT, from_check=True))
    assert out.error is None and out.first and real(store) == [b"tx"]


async def test_a_put_back_copy_decided_after_the_original_is_settled(store: MessageStore) -> None:
    """The check loop put the half back (check 1); the producer commits the original,
    then the check's answer commits the copy: one copy delivered, both halves named by
    an op entry (the second by a settle)."""
    r = await half(store, b"once")
    [put] = await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)])
    assert put.error is None and not put.decided and put.properties[PROPERTY_CHECK_TIMES] == "1"
    first = await decide_one(store, request(r, OP_COMMIT))
    copy_req = request(r, OP_COMMIT, from_check=True, commit_log_offset=put.commit_log_offset,
                       tran_state_table_offset=put.queue_offset)  # fmt: skip
    again = await decide_one(store, copy_req)
    assert first.first and not again.first and again.committed == first.committed
    assert real(store) == [b"once"]
    assert sorted(e[0] for e in ops(store)) == [r.queue_offset, put.queue_offset]
    # Asked once more (a duplicate answer): nothing new at all.
    end = store.commitlog.write_offset
    await decide_one(store, copy_req)
    assert store.commitlog.write_offset == end


async def test_requeue_actions_make_the_copies(store: MessageStore) -> None:
    r = await half(store, b"body", k="v")
    acts = [
        HalfAction(r.commit_log_offset, a, "check max" if a == DISCARD else "")
        for a in (CHECK, WAIT, IMMUNITY, DISCARD)
    ]
    outs = await store.transactions.requeue(acts)
    assert [o.error for o in outs] == [None] * 4 and [o.decided for o in outs] == [""] * 4
    check, wait, immunity, discard = outs
    assert check.properties[PROPERTY_CHECK_TIMES] == "1" and PROPERTY_CHECK_WAITS not in check.properties
    assert wait.properties[PROPERTY_CHECK_WAITS] == "1" and PROPERTY_CHECK_TIMES not in wait.properties
    assert immunity.properties[PROPERTY_PREPARED_QUEUE_OFFSET] == str(r.queue_offset)
    assert discard.properties[PROPERTY_DISCARD_REASON] == "check max"
    copies = halves(store)
    assert [c.queue_offset for c in copies[1:]] == [check.queue_offset, wait.queue_offset, immunity.queue_offset]
    for c in copies[1:]:
        assert c.body == b"body" and c.properties["k"] == "v" and c.unique_id == r.transaction_id
        assert c.prepared_transaction_offset == r.commit_log_offset  # where the first half is
    [kept] = halves(store, TRANS_CHECK_MAX_TIME_TOPIC)
    assert kept.commit_log_offset == discard.commit_log_offset and kept.unique_id == r.transaction_id
    # A copy of a copy counts on: check 2, and it still knows its first record.
    [again] = await store.transactions.requeue([HalfAction(check.commit_log_offset, CHECK)])
    assert again.properties[PROPERTY_CHECK_TIMES] == "2"
    assert store.reader.view_message(again.commit_log_offset).prepared_transaction_offset == r.commit_log_offset


async def test_requeue_settles_a_decided_transaction(store: MessageStore) -> None:
    r = await half(store)
    [put] = await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)])
    await decide_one(store, request(r, OP_ROLLBACK))
    n = len(halves(store))
    [out] = await store.transactions.requeue([HalfAction(put.commit_log_offset, CHECK)])
    assert out.decided == OP_ROLLBACK and out.commit_log_offset == 0
    assert len(halves(store)) == n  # nothing put back
    assert sorted(e[0] for e in ops(store)) == [r.queue_offset, put.queue_offset]
    [bad] = await store.transactions.requeue([HalfAction(10**9, CHECK)])
    assert bad.error.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND


async def test_a_copy_without_its_op_is_found_by_the_index(store: MessageStore) -> None:
    """A committed copy written around DecideTransactions (older txmq, PutSystemMessages)
    is found: a rollback is refused, a commit settles the missing op entry."""
    from txmq_store.transactions import _committed_copy

    r = await half(store, b"legacy")
    store.transactions.note_written_elsewhere(0)  # no-op, the horizon only rises
    await store.sender.send_records([_committed_copy(store.reader.view_message(r.commit_log_offset))], system=True)
    store.transactions.note_written_elsewhere(store.commitlog.write_offset)  # what the servicer does
    out = await decide_one(store, request(r, OP_ROLLBACK))
    assert out.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    out = await decide_one(store, request(r, OP_COMMIT))
    assert out.error is None and not out.first and real(store) == [b"legacy"]
    assert ops(store) == [(r.queue_offset, r.transaction_id, OP_COMMIT)]


async def test_sync_flush_decisions(stores: StoreFactory) -> None:
    store = await stores.open(flush_mode="sync")
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    rs = [await half(store, str(i).encode()) for i in range(5)]
    outs = await store.transactions.decide([request(r, OP_COMMIT) for r in rs])
    assert all(o.first and o.status == SendStatus.OK for o in outs)
    assert sorted(real(store)) == [str(i).encode() for i in range(5)]
    again = await store.transactions.decide([request(r, OP_ROLLBACK) for r in rs])
    assert {o.error.code for o in again} == {errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED}


async def test_a_failed_append_changes_nothing_in_the_book(store: MessageStore) -> None:
    """The call fails as a whole (here: the store stopped writing) and the decision book
    is as before: the op entry it meant to add is added by the next call."""
    from txmq.errors import TxmqError

    r = await half(store, b"x")
    [put] = await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)])
    await decide_one(store, request(r, OP_COMMIT))
    copy_req = request(r, OP_COMMIT, commit_log_offset=put.commit_log_offset, tran_state_table_offset=put.queue_offset)
    store.sender.writable = False
    with pytest.raises(TxmqError) as info:
        await store.transactions.decide([copy_req])
    assert info.value.code == errors_pb2.CODE_SERVICE_NOT_WRITABLE
    store.sender.writable = True
    await decide_one(store, copy_req)
    assert sorted(e[0] for e in ops(store)) == [r.queue_offset, put.queue_offset]


async def test_decisions_put_through_put_system_messages_are_learnt_before_indexed(stores: StoreFactory) -> None:
    """An older txcheck writes its op message / committed copy with PutSystemMessages; in
    sync flush mode the index has them only after the fsync. A decision asked for in
    between is answered from the book, which learnt them at the append."""
    from txmq.protocol import OpEntry
    from txmq_store.transactions import _committed_copy, _op_message

    store = await stores.open(flush_mode="sync")
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    rolled, committed = await half(store, b"rolled"), await half(store, b"committed")
    op = _op_message([OpEntry(rolled.queue_offset, rolled.transaction_id, OP_ROLLBACK)])
    copy = _committed_copy(store.reader.view_message(committed.commit_log_offset))
    appended = store.transactions.append_system([op, copy])
    assert store.reader.dispatched_offset < appended.end  # not indexed yet
    out = await decide_one(store, request(rolled, OP_COMMIT))
    assert out.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert out.error.metadata["resolution"] == "rollback"
    out = await decide_one(store, request(committed, OP_ROLLBACK))
    assert out.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert store.reader.dispatched_offset < appended.end  # the refusals wrote and waited for nothing
    assert await store.sender.settle(appended) == SendStatus.OK
    out = await decide_one(store, request(committed, OP_COMMIT))
    assert out.error is None and not out.first
    assert out.committed.commit_log_offset == appended.offsets[1]
    assert real(store) == [b"committed"]
    assert sorted(ops(store)) == sorted(
        [
            (rolled.queue_offset, rolled.transaction_id, OP_ROLLBACK),
            (committed.queue_offset, committed.transaction_id, OP_COMMIT),
        ]
    )


@pytest.mark.parametrize("when", ["after a restart", "tiny book"])
async def test_a_duplicate_half_stored_after_the_decision_left_the_book(stores: StoreFactory, when: str) -> None:
    """A producer's retried send stores a second half record with the same transaction id
    after the first was decided and the book forgot it: the index still answers (the
    young half alone does not prove the transaction undecided)."""
    # A retry later than the idempotence window (off here), which would answer it.
    overrides = {"idempotence_window_ms": 0, **({"decision_cache_entries": 1} if when == "tiny book" else {})}
    store = await stores.open(**overrides)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    txid = "0A0000010000000000000000000000AB"
    [h1] = await store.send([msg(b"dup", unique_id=txid)], producer_group=GROUP, transaction_prepared=True)
    first = await decide_one(store, request(h1, OP_COMMIT))
    assert first.first
    if when == "after a restart":
        # The check loop is past the op message: the book is not warmed with it.
        store.commit_consume_offset(group=TRANS_CHECK_GROUP, topic=TRANS_OP_HALF_TOPIC, queue_id=0, offset=1)
        await store.close()
        stores.opened.remove(store)
        store = await stores.open(**overrides)
        assert txid not in store.transactions._book
    else:
        for i in range(3):
            other = await half(store, f"other{i}".encode())
            await decide_one(store, request(other, OP_ROLLBACK))
        assert txid not in store.transactions._book
    [h2] = await store.send([msg(b"dup", unique_id=txid)], producer_group=GROUP, transaction_prepared=True)
    assert h2.transaction_id == txid and h2.commit_log_offset >= store.transactions.horizon
    out = await decide_one(store, request(h2, OP_ROLLBACK))
    assert out.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    out = await decide_one(store, request(h2, OP_COMMIT))
    assert out.error is None and not out.first
    assert out.committed.commit_log_offset == first.committed.commit_log_offset
    assert real(store) == [b"dup"]
    assert sorted(e[0] for e in ops(store) if e[1] == txid) == [h1.queue_offset, h2.queue_offset]


async def test_a_young_transaction_needs_no_index_read(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A half stored after the store opened, unknown to the book: no decision, and the
    index is not read for it (only its hash chain is walked)."""
    r = await half(store)

    def no_query(**kw: object) -> None:
        raise AssertionError(f"index read: {kw}")

    monkeypatch.setattr(store, "query_messages", no_query)
    out = await decide_one(store, request(r, OP_COMMIT))
    assert out.error is None and out.first


async def test_an_unflushed_decision_stays_in_a_full_book(stores: StoreFactory) -> None:
    """Sync flush with a slow disk: the decision is written (FLUSH_DISK_TIMEOUT in the
    item's status) but not indexed; a one-entry book keeps it past its cap, so the
    opposite decision is still refused."""
    from .conftest import CountingFsync

    fsync = CountingFsync()
    store = await stores.open(fsync=fsync, flush_mode="sync", sync_flush_timeout_ms=20, decision_cache_entries=1)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    rs = [await half(store, str(i).encode()) for i in range(3)]
    fsync.gate.clear()
    try:
        a = await decide_one(store, request(rs[0], OP_COMMIT))
        assert a.first and a.status == SendStatus.FLUSH_DISK_TIMEOUT
        for r in rs[1:]:
            out = await decide_one(store, request(r, OP_ROLLBACK))
            assert out.first and out.status == SendStatus.FLUSH_DISK_TIMEOUT
        assert rs[0].transaction_id in store.transactions._book
        out = await decide_one(store, request(rs[0], OP_ROLLBACK))
        assert out.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    finally:
        fsync.gate.set()
    await store.flush()
    assert real(store) == [b"0"]


async def test_requeue_keeps_an_immunity_offset_and_names_a_discard(store: MessageStore) -> None:
    r = await half(store, b"b")
    imm, disc, wait = await store.transactions.requeue(
        [HalfAction(r.commit_log_offset, IMMUNITY), HalfAction(r.commit_log_offset, DISCARD),
         HalfAction(r.commit_log_offset, WAIT)]
    )  # fmt: skip
    # An immunity copy of an immunity copy still names the first half's queue offset.
    [imm2] = await store.transactions.requeue([HalfAction(imm.commit_log_offset, IMMUNITY)])
    assert imm.properties[PROPERTY_PREPARED_QUEUE_OFFSET] == str(r.queue_offset)
    assert imm2.properties[PROPERTY_PREPARED_QUEUE_OFFSET] == str(r.queue_offset) != str(imm.queue_offset)
    assert disc.properties[PROPERTY_DISCARD_REASON] == "discarded"
    assert halves(store, TRANS_CHECK_MAX_TIME_TOPIC)[0].commit_log_offset == disc.commit_log_offset
    [again] = await store.transactions.requeue([HalfAction(wait.commit_log_offset, WAIT)])
    assert again.properties[PROPERTY_CHECK_WAITS] == "2" and PROPERTY_CHECK_TIMES not in again.properties
    [bad] = await store.transactions.requeue([HalfAction(r.commit_log_offset, 9)])
    assert bad.error.code == errors_pb2.CODE_ILLEGAL_ARGUMENT


async def test_the_book_is_warmed_from_the_op_queue_on_open(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    rs = [await half(store, str(i).encode()) for i in range(4)]
    await store.transactions.decide([request(r, OP_ROLLBACK) for r in rs])
    await store.close()
    stores.opened.remove(store)
    store = await stores.open(decision_cache_entries=3)
    book = store.transactions._book
    assert len(book) == 3 and all(k.decision == OP_ROLLBACK for k in book.values())
    assert set(book) <= {r.transaction_id for r in rs}
    out = await decide_one(store, request(rs[0], OP_COMMIT))  # in the book or not: refused
    assert out.error.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED


async def test_a_damaged_half_is_an_item_error(store: MessageStore) -> None:
    from pathlib import Path

    from .test_integrity import flip_in_record

    damaged, fine = await half(store, b"x" * 64), await half(store, b"y" * 64)
    flip_in_record(store, Path(store.settings.data_dir), damaged.commit_log_offset, 116 + 5)
    bad, ok = await store.transactions.decide([request(damaged, OP_COMMIT), request(fine, OP_COMMIT)])
    assert bad.error.code == errors_pb2.CODE_DATA_CORRUPTED
    assert ok.error is None and ok.first and real(store) == [b"y" * 64]
    [out] = await store.transactions.requeue([HalfAction(damaged.commit_log_offset, CHECK)])
    assert out.error.code == errors_pb2.CODE_DATA_CORRUPTED


async def test_decisions_are_counted(store: MessageStore) -> None:
    from prometheus_client import REGISTRY

    def count(decision: str, outcome: str) -> float:
        labels = {"decision": decision, "outcome": outcome}
        return REGISTRY.get_sample_value("txmq_store_transaction_decisions_total", labels) or 0.0

    keys = [("commit", o) for o in ("first", "repeat", "settled")] + [("rollback", "refused")]
    before = {k: count(*k) for k in keys}
    r = await half(store)
    [put] = await store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)])
    await decide_one(store, request(r, OP_COMMIT))
    await decide_one(store, request(r, OP_COMMIT))
    await decide_one(store, request(r, OP_ROLLBACK))
    await decide_one(
        store, request(r, OP_COMMIT, commit_log_offset=put.commit_log_offset, tran_state_table_offset=put.queue_offset)
    )
    assert {k: count(*k) - before[k] for k in keys} == {k: 1.0 for k in keys}
