"""The check path's batches: a producer's answers decided as one batch (Ledger.end_many)
in a few store calls at once (Decider), and the store's RequeueHalves taking the half
records the walk just read instead of reading them again -- unless the commit log no
longer holds them there; the records kept are bounded."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from txmq.errors import TxmqError
from txmq.protocol import OP_ROLLBACK as ROLLBACK_OP
from txmq.protocol import PROPERTY_CHECK_TIMES, TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
from txmq.v1 import errors_pb2, store_pb2, txcheck_pb2
from txmq_store.transactions import CHECK, HalfAction
from txmq_txcheck.ledger import Decider

from .conftest import Env

COMMIT = txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT
ROLLBACK = txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK
UNKNOWN = txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN


async def test_a_batch_of_answers_is_decided_item_by_item_in_one_store_call(env: Env) -> None:
    a, b, c, d = [await env.half(f"tx{i}".encode()) for i in range(4)]
    await env.ledger.end(env.end_request(d, ROLLBACK))
    calls = env.ledger.decider.calls
    out = await env.ledger.end_many(
        [
            env.end_request(a, COMMIT, from_check=True),
            env.end_request(b, ROLLBACK, from_check=True),
            env.end_request(c, UNKNOWN, from_check=True),
            env.end_request(d, COMMIT, from_check=True),  # decided the other way before
            env.end_request(a, COMMIT, group="bad group!"),
        ]
    )
    assert env.ledger.decider.calls == calls + 1
    assert isinstance(out[0], txcheck_pb2.EndTransactionResponse) and out[0].committed.message.topic == "TxTopic"
    assert isinstance(out[1], txcheck_pb2.EndTransactionResponse) and not out[1].HasField("committed")
    assert out[2] == txcheck_pb2.EndTransactionResponse()
    assert isinstance(out[3], TxmqError) and out[3].code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert isinstance(out[4], TxmqError) and out[4].code == errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP
    assert [m.message.unique_id for m in await env.real_messages()] == [a.transaction_id]
    assert (await env.ledger.decision_of(b.transaction_id)).decision == ROLLBACK_OP  # type: ignore[union-attr]
    kinds = [e.kind for e in env.ledger.timeline.events(a.transaction_id)]
    assert kinds == ["check_answered", "committed"]


async def walk(env: Env) -> store_pb2.GetMessageResponse:
    return await env.stub.GetMessage(
        store_pb2.GetMessageRequest(consumer_group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=0, offset=0)
    )


@pytest.fixture
def reads(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Commit-log offsets the store reads a record at (Reader.view_message)."""
    seen: list[int] = []
    reader = env.store.reader
    real = reader.view_message

    def counted(offset: int):
        seen.append(offset)
        return real(offset)

    monkeypatch.setattr(reader, "view_message", counted)
    return seen


async def test_requeue_takes_the_records_the_walk_read(env: Env, reads: list[int]) -> None:
    r = await env.half(b"walked")
    await walk(env)
    [out] = await env.store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)])
    assert reads == []
    copy = env.store.reader.view_message(out.commit_log_offset)
    assert copy.body == b"walked" and copy.properties[PROPERTY_CHECK_TIMES] == "1"
    reads.clear()
    # Taken once: a second action on the same record reads it.
    await env.store.transactions.requeue([HalfAction(r.commit_log_offset, CHECK)])
    assert reads == [r.commit_log_offset]


async def test_requeue_reads_a_record_the_log_no_longer_holds_as_walked(env: Env, reads: list[int]) -> None:
    r = await env.half(b"walked")
    await walk(env)
    tx = env.store.transactions
    # As if the log had been cut back and written again at that offset since the walk.
    walked = tx._walked[r.commit_log_offset]
    tx._walked[r.commit_log_offset] = dataclasses.replace(walked, body=b"stale", body_crc=walked.body_crc ^ 1)
    [out] = await tx.requeue([HalfAction(r.commit_log_offset, CHECK)])
    assert reads == [r.commit_log_offset]
    assert env.store.reader.view_message(out.commit_log_offset).body == b"walked"  # not the stale one


async def test_only_the_check_loops_walk_fills_the_records_kept(env: Env) -> None:
    await env.half()
    await env.stub.GetMessage(
        store_pb2.GetMessageRequest(consumer_group="CID_OTHER", topic=TRANS_HALF_TOPIC, queue_id=0, offset=0)
    )
    assert env.store.transactions._walked == {}
    await walk(env)
    assert len(env.store.transactions._walked) == 1


class SlowStore:
    """A store whose DecideTransactions takes a while: counts calls in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.sizes: list[int] = []

    async def decide(self, decisions, *, transaction_timeout_ms: int, fence=None):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.sizes.append(len(decisions))
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return [store_pb2.DecisionResult(first=True, decision=d.decision) for d in decisions]


async def test_a_full_batch_waiting_goes_out_in_a_few_calls_at_once() -> None:
    store = SlowStore()
    decider = Decider(store, transaction_timeout_ms=1000, max_entries=64)  # type: ignore[arg-type]
    items = [
        store_pb2.TransactionDecision(transaction_id=str(i), decision=store_pb2.DECISION_COMMIT) for i in range(300)
    ]
    results = await decider.decide_many(items)
    assert len(results) == 300 and all(isinstance(r, store_pb2.DecisionResult) for r in results)
    assert sorted(store.sizes) == [44, 64, 64, 64, 64] and store.most == 4
    # A lone decision goes alone, at once.
    assert (await decider.decide(items[0])).first and store.sizes[-1] == 1


async def test_the_records_kept_are_bounded_in_count_and_bytes(env: Env) -> None:
    await env.half()
    [m] = env.store.reader.get_message(topic=TRANS_HALF_TOPIC, queue_id=0, offset=0).messages
    tx = env.store.transactions
    tx.walked([dataclasses.replace(m, commit_log_offset=i) for i in range(600)])
    assert sorted(tx._walked) == list(range(88, 600))  # the newest 512
    big = 3 << 20
    tx.walked([dataclasses.replace(m, commit_log_offset=1000 + i, store_size=big) for i in range(3)])
    assert list(tx._walked)[-2:] == [1001, 1002] and sum(r.store_size for r in tx._walked.values()) <= 8 << 20
