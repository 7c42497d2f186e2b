"""The check loop against a real store, time driven by a manual clock (no sleeps)."""

from __future__ import annotations

import asyncio

import pytest

from txmq.errors import TxmqError
from txmq.protocol import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_CHECK_WAITS,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from txmq.v1 import errors_pb2, txcheck_pb2
from txmq_txcheck.checkloop import resume
from txmq_txcheck.store_client import StoreClient
from txmq_txcheck.txquery import query_transaction

from .conftest import GROUP, Env

COMMIT = txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT
ROLLBACK = txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK


async def progress(env: Env, topic: str) -> int | None:
    return await env.client.query_consume_offset(topic, 0)


async def test_young_half_is_not_checked_then_is(env: Env) -> None:
    r = await env.half()
    env.clock.advance(1_000)
    rep = await env.loop.check_once()
    assert rep.checked == [] and env.sender.checks == []
    env.clock.advance(6_000)
    rep = await env.loop.check_once()
    assert rep.checked == [r.transaction_id]
    check = env.sender.checks[0]
    assert check.transaction_id == r.transaction_id
    assert check.message.message.topic == "TxTopic"  # as the producer sent it
    # The check names the put-back copy, with the count raised.
    copy = await env.client.view(check.commit_log_offset)
    assert copy.message.topic == TRANS_HALF_TOPIC and copy.queue_offset == check.tran_state_table_offset
    assert copy.message.properties[PROPERTY_CHECK_TIMES] == "1"
    assert await progress(env, TRANS_HALF_TOPIC) == r.queue_offset + 1


async def test_check_answer_commits_put_back_copy(env: Env) -> None:
    r = await env.half()
    env.clock.advance(7_000)
    await env.loop.check_once()
    c = env.sender.checks[0]
    req = txcheck_pb2.EndTransactionRequest(
        producer_group=GROUP, transaction_id=c.transaction_id, commit_log_offset=c.commit_log_offset,
        tran_state_table_offset=c.tran_state_table_offset, resolution=COMMIT, from_transaction_check=True,
    )  # fmt: skip
    await env.ledger.end(req)
    # The original producer's commit arrives late (after the put-back): delivered once.
    await env.ledger.end(env.end_request(r, COMMIT))
    assert len(await env.real_messages()) == 1
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.checked == [] and c.tran_state_table_offset in rep.skipped_resolved
    assert await progress(env, TRANS_HALF_TOPIC) == c.tran_state_table_offset + 1


async def test_remove_map_skips_resolved_and_saves_op_progress(env: Env) -> None:
    a, b, c = await env.half(b"a"), await env.half(b"b"), await env.half(b"c")
    await env.ledger.end(env.end_request(a, COMMIT))
    await env.ledger.end(env.end_request(c, ROLLBACK))
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.skipped_resolved == [a.queue_offset, c.queue_offset]
    assert rep.checked == [b.transaction_id]
    assert await progress(env, TRANS_HALF_TOPIC) == c.queue_offset + 1
    assert await progress(env, TRANS_OP_HALF_TOPIC) == len(await env.topic_messages(TRANS_OP_HALF_TOPIC))


async def test_unanswered_checks_until_max_then_discarded_and_resumed(env: Env) -> None:
    r = await env.half()
    for _ in range(15):
        env.clock.advance(7_000)
        rep = await env.loop.check_once()
        assert rep.checked == [r.transaction_id]
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.discarded == [r.transaction_id] and rep.checked == []
    assert len(env.sender.checks) == 15
    kept = await env.topic_messages(TRANS_CHECK_MAX_TIME_TOPIC)
    assert [m.message.unique_id for m in kept] == [r.transaction_id]
    assert kept[0].message.properties[PROPERTY_CHECK_TIMES] == "15"
    env.clock.advance(7_000)
    assert (await env.loop.check_once()).checked == []
    assert (await query_transaction(env.ledger, r.transaction_id)).discarded
    # An admin resumes it: checked again from count 0.
    await resume(env.client, r.transaction_id, env.ledger)
    found = await query_transaction(env.ledger, r.transaction_id)
    assert not found.discarded and [e.kind for e in found.timeline][-1] == "resumed"
    with pytest.raises(TxmqError) as again:  # resumed already: its checks are under way
        await resume(env.client, r.transaction_id, env.ledger)
    assert again.value.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.checked == [r.transaction_id]
    assert env.sender.checks[-1].message.message.properties[PROPERTY_CHECK_TIMES] == "1"
    # The answer to that check decides it.
    check = env.sender.checks[-1]
    await env.ledger.end(
        txcheck_pb2.EndTransactionRequest(
            producer_group=GROUP,
            transaction_id=check.transaction_id,
            commit_log_offset=check.commit_log_offset,
            tran_state_table_offset=check.tran_state_table_offset,
            resolution=ROLLBACK,
            from_transaction_check=True,
        )
    )
    found = await query_transaction(env.ledger, r.transaction_id)
    assert found.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK and not found.discarded


async def test_resume_refused_for_decided_or_unknown(env: Env) -> None:
    r = await env.half()
    try:
        await resume(env.client, r.transaction_id, env.ledger)
        raise AssertionError("resumed a transaction that was never discarded")
    except TxmqError as err:
        assert err.code == errors_pb2.CODE_TRANSACTION_NOT_FOUND
    await env.ledger.end(env.end_request(r, COMMIT))
    try:
        await resume(env.client, r.transaction_id, env.ledger)
        raise AssertionError("resumed a committed transaction")
    except TxmqError as err:
        assert err.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED


async def test_immunity_put_backs_do_not_use_up_checks(env: Env) -> None:
    """RocketMQ #8311: an immunity re-put used to carry an incremented check count."""
    r = await env.half(props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    for _ in range(10):
        env.clock.advance(5_000)
        rep = await env.loop.check_once()
        assert rep.immunity_put_back == [r.transaction_id] and rep.checked == []
    env.clock.advance(20_000)  # past 60 s
    rep = await env.loop.check_once()
    assert rep.checked == [r.transaction_id]
    assert env.sender.checks[0].message.message.properties[PROPERTY_CHECK_TIMES] == "1"


async def test_immunity_copy_resolved_by_original_offset(env: Env) -> None:
    r = await env.half(props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    env.clock.advance(5_000)
    await env.loop.check_once()  # put back, pointing at its original offset
    await env.ledger.end(env.end_request(r, ROLLBACK))
    env.clock.advance(5_000)
    rep = await env.loop.check_once()
    assert rep.immunity_put_back == [] and rep.checked == []
    env.clock.advance(120_000)
    assert (await env.loop.check_once()).checked == []


async def test_no_live_producer_waits_without_counting(env: Env) -> None:
    r = await env.half()
    env.sender.live.clear()
    for _ in range(20):  # more rounds than check_max: nothing is discarded
        env.clock.advance(7_000)
        rep = await env.loop.check_once()
        assert rep.waited == [r.transaction_id] and rep.discarded == []
    env.sender.live.add(GROUP)
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.checked == [r.transaction_id]
    props = env.sender.checks[0].message.message.properties
    assert props[PROPERTY_CHECK_TIMES] == "1" and props[PROPERTY_CHECK_WAITS] == "20"


async def test_decided_transaction_is_settled_not_checked(env: Env) -> None:
    """A committed copy without its op message (crash) is settled by the loop."""
    from txmq_txcheck.ledger import committed_copy

    r = await env.half()
    await env.client.put([committed_copy(await env.client.view(r.commit_log_offset))])
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.settled == [r.transaction_id] and env.sender.checks == []
    assert len(await env.topic_messages(TRANS_OP_HALF_TOPIC)) == 1
    assert len(await env.real_messages()) == 1


class GatedStore(StoreClient):
    """Fault injection: RequeueHalves (the loop's writes) waits on a gate, or fails on
    chosen calls."""

    def __init__(self, inner: StoreClient) -> None:
        super().__init__(inner._channel, store_id=inner.store_id)
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        self.fail_on: set[int] = set()
        self.puts = 0

    async def requeue(self, actions, *, fence=None):
        self.puts += 1
        self.entered.set()
        await self.gate.wait()
        if self.puts in self.fail_on:
            raise TxmqError("injected store failure", code=errors_pb2.CODE_STORAGE_ERROR)
        return await super().requeue(actions, fence=fence)


async def test_rounds_do_not_overlap(env: Env) -> None:
    """RocketMQ #9322: a second round while one runs is skipped, not run beside it."""
    gated = GatedStore(env.client)
    loop = env.new_loop(gated)
    r = await env.half()
    env.clock.advance(7_000)
    gated.gate.clear()
    first = asyncio.create_task(loop.check_once())
    await gated.entered.wait()
    assert loop.running
    assert await loop.check_once() is None
    gated.gate.set()
    rep = await first
    assert rep.checked == [r.transaction_id]
    assert len(env.sender.checks) == 1
    halves = await env.topic_messages(TRANS_HALF_TOPIC)
    assert len(halves) == 2  # the original and one put-back, not two


async def test_failure_mid_queue_saves_progress(env: Env) -> None:
    """RocketMQ #9500: a failure on a queue used to freeze its offsets."""
    gated = GatedStore(env.client)
    loop = env.new_loop(gated, check_batch_max=1)  # one store call per half
    rs = [await env.half(str(i).encode()) for i in range(4)]
    env.clock.advance(7_000)
    gated.fail_on = {3}  # the put-back of the third half message fails
    rep = await loop.check_once()
    assert rep.error is not None
    assert rep.checked == [rs[0].transaction_id, rs[1].transaction_id]
    assert await progress(env, TRANS_HALF_TOPIC) == rs[2].queue_offset
    env.clock.advance(7_000)
    rep = await loop.check_once()
    assert rep.error is None
    assert rep.checked[:2] == [rs[2].transaction_id, rs[3].transaction_id]


async def test_round_time_limit_per_queue(env: Env) -> None:
    """A round stops at the per-queue time limit and the next one goes on from there."""

    rs = [await env.half(str(i).encode()) for i in range(3)]
    env.clock.advance(7_000)
    loop = env.new_loop(max_process_time_per_queue_ms=1_000, check_batch_max=1)
    orig = env.client.requeue

    async def slow_requeue(actions, *, fence=None):
        env.clock.advance(600)  # each put-back "takes" 0.6 s
        return await orig(actions, fence=fence)

    env.client.requeue = slow_requeue  # type: ignore[method-assign]
    try:
        rep = await loop.check_once()
    finally:
        del env.client.requeue
    assert rep.checked == [rs[0].transaction_id, rs[1].transaction_id]
    assert await progress(env, TRANS_HALF_TOPIC) == rs[2].queue_offset


async def test_a_damaged_half_or_op_record_is_stepped_over_not_a_stuck_loop(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """A record of the half or op queue damaged on disk (the store refuses to serve it:
    CODE_DATA_CORRUPTED) is stepped over with one ERROR line, so the transactions after
    it are still checked; a damaged op message's halves are checked again, and a decision
    taken twice stays one decision."""
    from pathlib import Path

    from tests.store.test_integrity import flip_in_record

    a, b, c = await env.half(b"a"), await env.half(b"b"), await env.half(b"c")
    root = Path(env.store.settings.data_dir)
    flip_in_record(env.store, root, b.commit_log_offset, 116 + 5)  # a byte of b's half record
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.checked == [a.transaction_id, c.transaction_id]
    assert rep.damaged == [f"{TRANS_HALF_TOPIC}:{b.queue_offset}"] and rep.error is None
    assert await progress(env, TRANS_HALF_TOPIC) == c.queue_offset + 1
    # Rollback of a through the check: its op message is then damaged on disk.
    await env.ledger.end(env.end_request(a, ROLLBACK))
    [op] = await env.topic_messages(TRANS_OP_HALF_TOPIC)
    flip_in_record(env.store, root, op.commit_log_offset, 116 + 1)
    env.clock.advance(7_000)
    rep = await env.loop.check_once()
    assert rep.damaged == [f"{TRANS_OP_HALF_TOPIC}:{op.queue_offset}"] and rep.error is None
    assert await progress(env, TRANS_OP_HALF_TOPIC) == op.queue_offset + 1
    # a's put-back copy, no longer known decided through the op queue, is settled by the
    # store from its own record of the rollback: no second check, no second decision.
    assert rep.settled == [a.transaction_id] and a.transaction_id not in rep.checked
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "damaged on disk" in r.getMessage()]
    assert len([r for r in errors if TRANS_HALF_TOPIC + " record" in r.getMessage()]) == 1  # once, not per round
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


async def test_a_round_acts_in_batches(env: Env) -> None:
    """Many due halves: one store call per ``check_batch_max`` of them, and the checks
    go to the producers in batches of the same size."""
    rs = [await env.half(str(i).encode()) for i in range(10)]
    env.clock.advance(7_000)
    loop = env.new_loop(check_batch_max=4)
    rep = await loop.check_once()
    assert rep.checked == [r.transaction_id for r in rs]
    assert loop.store_calls == 3 and env.sender.batches == [4, 4, 2]
    assert sorted(c.transaction_id for c in env.sender.checks) == sorted(r.transaction_id for r in rs)
    # Every check names its own put-back copy, count 1.
    for c in env.sender.checks:
        copy = await env.client.view(c.commit_log_offset)
        assert copy.message.unique_id == c.transaction_id and copy.queue_offset == c.tran_state_table_offset
        assert copy.message.properties[PROPERTY_CHECK_TIMES] == "1"
    assert await progress(env, TRANS_HALF_TOPIC) == rs[-1].queue_offset + 1


async def test_waiting_is_bounded_by_transaction_wait_max(env: Env) -> None:
    """No live producer: put back (count kept) until transaction_wait_max_ms, then
    discarded (resumable), so waiting does not grow the half topic for ever (#1543)."""
    r = await env.half()
    env.sender.live.clear()
    loop = env.new_loop(transaction_wait_max_ms=30_000)
    waited = 0
    for _ in range(10):
        env.clock.advance(7_000)
        rep = await loop.check_once()
        waited += len(rep.waited)
        if rep.discarded:
            break
    assert rep.discarded == [r.transaction_id] and waited == 4  # 14, 21, 28 s ... then past 30 s
    halves = await env.topic_messages(TRANS_HALF_TOPIC)
    assert len(halves) == 1 + waited
    [discarded] = await env.topic_messages(TRANS_CHECK_MAX_TIME_TOPIC)
    assert discarded.message.unique_id == r.transaction_id


async def test_a_fenced_loop_stops_and_saves_nothing(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    """The store saw a newer leader's epoch: this loop's writes are refused (nothing
    lands), it logs one WARNING, saves no progress and runs no more rounds."""
    rs = [await env.half(str(i).encode()) for i in range(3)]
    env.clock.advance(7_000)
    old = env.new_loop(epoch=5)
    new = env.new_loop(epoch=9)
    rep = await new.check_once()
    assert rep.checked == [r.transaction_id for r in rs]
    saved = await progress(env, TRANS_HALF_TOPIC)
    halves = len(await env.topic_messages(TRANS_HALF_TOPIC))
    env.clock.advance(7_000)
    rep = await old.check_once()
    assert rep.error is not None and rep.error.startswith("fenced") and rep.checked == []
    assert old.fenced and await old.check_once() is None
    assert await progress(env, TRANS_HALF_TOPIC) == saved
    assert len(await env.topic_messages(TRANS_HALF_TOPIC)) == halves
    assert len(env.sender.checks) == 3  # none from the fenced loop
    assert len([x for x in caplog.records if "fenced" in x.getMessage() and x.levelname == "WARNING"]) == 1


async def test_a_group_that_takes_no_more_checks_does_not_stall_the_round(env: Env) -> None:
    """Producers that answer slower than they are asked: once handing them a batch times
    out, the rest of the round sends them nothing (the put-backs still count, so they end
    in a discard after check_max rounds, as in RocketMQ) and the round goes on."""
    rs = [await env.half(str(i).encode()) for i in range(6)]
    env.clock.advance(7_000)
    blocked = asyncio.Event()

    async def never(group, checks):  # type: ignore[no-untyped-def]
        await blocked.wait()  # a channel whose queue never drains
        return len(checks)

    env.sender.send_checks = never  # type: ignore[method-assign]
    loop = env.new_loop(check_batch_max=2, check_send_timeout_ms=1)
    rep = await loop.check_once()
    assert rep.checked == [r.transaction_id for r in rs] and rep.saturated == {GROUP}
    assert loop.store_calls == 3 and rep.error is None
    assert await progress(env, TRANS_HALF_TOPIC) == rs[-1].queue_offset + 1
