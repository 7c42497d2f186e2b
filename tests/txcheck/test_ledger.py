"""END_TRANSACTION against a real store: validation, commit/rollback effects, op
messages, and idempotency (the first decision wins, durably)."""

from __future__ import annotations

from pathlib import Path

import pytest

from txmq.errors import TxmqError
from txmq.protocol import (
    PROPERTY_OP_DECISIONS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from txmq.v1 import errors_pb2, txcheck_pb2
from txmq_txcheck.ledger import Ledger, committed_copy

from .conftest import GROUP, TOPIC, Env, open_env

COMMIT = txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT
ROLLBACK = txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK
UNKNOWN = txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN


async def test_half_message_is_rewritten_and_invisible(env: Env) -> None:
    r = await env.half(b"half", props={"k": "v"})
    assert r.transaction_id and r.transaction_id == r.msg_id
    half = await env.client.view(r.commit_log_offset)
    assert half.message.topic == TRANS_HALF_TOPIC and half.message.queue_id == 0
    props = half.message.properties
    assert props[PROPERTY_REAL_TOPIC] == TOPIC and props[PROPERTY_REAL_QUEUE_ID] == str(r.queue.queue_id)
    assert props["PGROUP"] == GROUP and props["TRAN_MSG"] == "true" and props["k"] == "v"
    assert half.sys_flag & TRANSACTION_TYPE_MASK == 0
    assert half.message.unique_id == r.transaction_id
    assert await env.real_messages() == []


async def test_transactional_send_refused_when_disabled(tmp_path: Path) -> None:
    e, server, channel = await open_env(tmp_path, transaction_message_enable=False)
    try:
        with pytest.raises(Exception) as info:
            await e.half()
        err = TxmqError.from_rpc_error(info.value)
        assert err.code == errors_pb2.CODE_TRANSACTION_NOT_ALLOWED
    finally:
        await channel.close()
        await server.stop(None)
        await e.store.close()


async def test_commit_restores_on_real_topic_and_writes_op(env: Env) -> None:
    r = await env.half(b"pay", props={"p": "1"})
    resp = await env.ledger.end(env.end_request(r, COMMIT))
    where = resp.committed  # where the copy is (no body, no properties)
    assert where.message.topic == TOPIC and where.message.queue_id == r.queue.queue_id
    assert where.message.unique_id == r.transaction_id and where.store_id == env.store.store_id
    copy = await env.client.view(where.commit_log_offset)
    assert copy.queue_offset == where.queue_offset and copy.offset_msg_id == where.offset_msg_id
    assert copy.store_timestamp_ms == where.store_timestamp_ms and copy.sys_flag == where.sys_flag
    assert copy.message.body == b"pay" and copy.message.unique_id == r.transaction_id
    assert copy.message.properties["p"] == "1"
    assert PROPERTY_REAL_TOPIC not in copy.message.properties and PROPERTY_REAL_QUEUE_ID not in copy.message.properties
    assert copy.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
    assert copy.prepared_transaction_offset == r.commit_log_offset
    visible = await env.real_messages()
    assert [m.message.unique_id for m in visible] == [r.transaction_id]
    ops = await env.topic_messages(TRANS_OP_HALF_TOPIC)
    assert len(ops) == 1 and ops[0].message.tags == "d" and ops[0].message.body == str(r.queue_offset).encode()
    assert ops[0].message.properties[PROPERTY_OP_DECISIONS] == f"{r.queue_offset}:{r.transaction_id}:C"


async def test_rollback_writes_only_op(env: Env) -> None:
    r = await env.half()
    resp = await env.ledger.end(env.end_request(r, ROLLBACK))
    assert not resp.HasField("committed")
    assert await env.real_messages() == []
    ops = await env.topic_messages(TRANS_OP_HALF_TOPIC)
    assert [o.message.body for o in ops] == [str(r.queue_offset).encode()]


async def test_unknown_changes_nothing(env: Env) -> None:
    r = await env.half()
    await env.ledger.end(env.end_request(r, UNKNOWN))
    assert await env.real_messages() == [] and await env.topic_messages(TRANS_OP_HALF_TOPIC) == []


@pytest.mark.parametrize(
    "change",
    [
        dict(producer_group="OtherGroup"),
        dict(tran_state_table_offset=99),
        dict(transaction_id="NOT-THE-ID"),
    ],
)
async def test_mismatch_is_refused(env: Env, change: dict) -> None:
    r = await env.half()
    req = env.end_request(r, COMMIT)
    for k, v in change.items():
        setattr(req, k, v)
    with pytest.raises(TxmqError) as info:
        await env.ledger.end(req)
    assert info.value.code == errors_pb2.CODE_TRANSACTION_MISMATCH
    assert await env.real_messages() == []


async def test_unknown_offset_and_bad_group(env: Env) -> None:
    r = await env.half()
    req = env.end_request(r, COMMIT)
    req.commit_log_offset = 10**9
    with pytest.raises(TxmqError) as info:
        await env.ledger.end(req)
    assert info.value.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND
    with pytest.raises(TxmqError) as info:
        await env.ledger.end(env.end_request(r, COMMIT, group="bad group!"))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP


async def test_double_commit_delivers_once(env: Env) -> None:
    r = await env.half()
    first = await env.ledger.end(env.end_request(r, COMMIT))
    second = await env.ledger.end(env.end_request(r, COMMIT, from_check=True))
    assert second.committed.commit_log_offset == first.committed.commit_log_offset
    assert len(await env.real_messages()) == 1


async def test_concurrent_commits_deliver_once(env: Env) -> None:
    import asyncio

    r = await env.half()
    await asyncio.gather(*(env.ledger.end(env.end_request(r, COMMIT)) for _ in range(5)))
    assert len(await env.real_messages()) == 1


async def test_commit_after_rollback_and_reverse_refused(env: Env) -> None:
    a, b = await env.half(b"a"), await env.half(b"b")
    await env.ledger.end(env.end_request(a, ROLLBACK))
    await env.ledger.end(env.end_request(b, COMMIT))
    for r, res in ((a, COMMIT), (b, ROLLBACK)):
        with pytest.raises(TxmqError) as info:
            await env.ledger.end(env.end_request(r, res, from_check=True))
        assert info.value.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert [m.message.body for m in await env.real_messages()] == [b"b"]


async def test_first_decision_survives_a_restart(env: Env) -> None:
    """A fresh ledger (a restarted txcheck, or another replica) reads the decision from
    the store: no second copy, and the opposite decision is refused."""
    a, b = await env.half(b"a"), await env.half(b"b")
    await env.ledger.end(env.end_request(a, COMMIT))
    await env.ledger.end(env.end_request(b, ROLLBACK))
    fresh = Ledger(env.client, clock=env.clock, transaction_timeout_ms=6000)
    await fresh.end(env.end_request(a, COMMIT))
    with pytest.raises(TxmqError) as info:
        await fresh.end(env.end_request(b, COMMIT))
    assert info.value.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert [m.message.body for m in await env.real_messages()] == [b"a"]


async def test_crash_between_copy_and_op_is_healed(env: Env) -> None:
    """The committed copy is stored but the op message is not (crash in between): a
    retried commit finds the copy, writes only the op."""
    r = await env.half(b"x")
    half = await env.client.view(r.commit_log_offset)
    await env.client.put([committed_copy(half)])  # what the crashed txcheck managed
    fresh = Ledger(env.client, clock=env.clock, transaction_timeout_ms=6000)
    await fresh.end(env.end_request(r, COMMIT, from_check=True))
    assert len(await env.real_messages()) == 1
    assert [o.message.body for o in await env.topic_messages(TRANS_OP_HALF_TOPIC)] == [str(r.queue_offset).encode()]


async def test_late_commit_not_from_check_refused(env: Env) -> None:
    r = await env.half(props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "10"})
    env.clock.advance(11_000)
    with pytest.raises(TxmqError) as info:
        await env.ledger.end(env.end_request(r, COMMIT))
    assert info.value.code == errors_pb2.CODE_TRANSACTION_EXPIRED
    assert await env.real_messages() == []
    await env.ledger.end(env.end_request(r, COMMIT, from_check=True))  # a check answer is taken
    assert len(await env.real_messages()) == 1


async def test_late_commit_without_own_immunity_is_taken(env: Env) -> None:
    r = await env.half()
    env.clock.advance(60_000)
    await env.ledger.end(env.end_request(r, COMMIT))
    assert len(await env.real_messages()) == 1


async def test_concurrent_decisions_each_get_an_op_entry(env: Env) -> None:
    import asyncio

    rs = [await env.half(str(i).encode()) for i in range(6)]
    await asyncio.gather(*(env.ledger.end(env.end_request(r, ROLLBACK)) for r in rs))
    ops = await env.topic_messages(TRANS_OP_HALF_TOPIC)
    offsets = sorted(int(x) for o in ops for x in o.message.body.decode().split(","))
    assert offsets == sorted(r.queue_offset for r in rs)


async def test_decisions_ready_together_share_one_store_call(env: Env) -> None:
    """Concurrent ENDs go to the store together: one DecideTransactions call, one op
    message naming every half, every caller answered with its own result."""
    import asyncio

    rs = [await env.half(str(i).encode()) for i in range(6)]
    calls = env.ledger.decider.calls
    answers = await asyncio.gather(
        *(env.ledger.end(env.end_request(r, COMMIT if i % 2 else ROLLBACK)) for i, r in enumerate(rs))
    )
    assert env.ledger.decider.calls == calls + 1
    (op,) = await env.topic_messages(TRANS_OP_HALF_TOPIC)
    assert op.message.body == ",".join(str(r.queue_offset) for r in rs).encode()
    assert [a.HasField("committed") for a in answers] == [False, True] * 3
    assert sorted(m.message.body for m in await env.real_messages()) == [b"1", b"3", b"5"]


async def test_a_bad_item_fails_alone(env: Env) -> None:
    """One refused decision in a shared store call does not fail the others."""
    import asyncio

    good, bad = await env.half(b"good"), await env.half(b"bad")
    wrong = env.end_request(bad, COMMIT)
    wrong.tran_state_table_offset += 100
    results = await asyncio.gather(
        env.ledger.end(env.end_request(good, COMMIT)), env.ledger.end(wrong), return_exceptions=True
    )
    assert not isinstance(results[0], BaseException)
    assert isinstance(results[1], TxmqError) and results[1].code == errors_pb2.CODE_TRANSACTION_MISMATCH
    assert [m.message.body for m in await env.real_messages()] == [b"good"]


async def test_any_ledger_decides_without_a_leader(env: Env) -> None:
    """Two ledgers (two txcheck replicas) deciding the same transaction at once, in
    opposite ways: the store takes exactly one; the other is refused."""
    import asyncio

    r = await env.half(b"race")
    other = Ledger(env.client, clock=env.clock, transaction_timeout_ms=6000)
    results = await asyncio.gather(
        env.ledger.end(env.end_request(r, COMMIT)), other.end(env.end_request(r, ROLLBACK)), return_exceptions=True
    )
    refused = [x for x in results if isinstance(x, TxmqError)]
    assert len(refused) == 1 and refused[0].code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    committed = not isinstance(results[0], BaseException)
    assert len(await env.real_messages()) == (1 if committed else 0)
