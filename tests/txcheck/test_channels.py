"""A producer channel's queue of checks: batches for producers that take them, one
command per check for the others, and a bound that makes the sender wait (backpressure)
instead of growing, until the stream takes commands or the channel closes."""

from __future__ import annotations

import asyncio

import pytest

from txmq.v1 import txcheck_pb2
from txmq_txcheck import channels
from txmq_txcheck.channels import LocalChannel


def _checks(n: int) -> list[txcheck_pb2.CheckTransactionState]:
    return [txcheck_pb2.CheckTransactionState(transaction_id=f"t{i}") for i in range(n)]


async def test_batches_only_for_producers_that_take_them() -> None:
    batched, single = LocalChannel("k1", "g", "c1", batches=True), LocalChannel("k2", "g", "c2")
    assert await batched.put(_checks(5)) and await single.put(_checks(5))
    assert batched.queue.qsize() == 1 and single.queue.qsize() == 5
    cmd = batched.queue.get_nowait()
    assert [c.transaction_id for c in cmd.check_batch.checks] == [f"t{i}" for i in range(5)]
    batched.taken(cmd)
    assert batched.queued_checks == 0 and single.queued_checks == 5


async def test_a_full_channel_makes_the_sender_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(channels, "MAX_QUEUED_CHECKS", 8)
    ch = LocalChannel("k", "g", "c", batches=True)
    assert await ch.put(_checks(6))
    waiting = asyncio.create_task(ch.put(_checks(4)))
    await asyncio.sleep(0)
    assert not waiting.done() and ch.queued_checks == 6  # 6 + 4 > 8: it waits
    ch.taken(ch.queue.get_nowait())  # the stream took the first batch
    assert await asyncio.wait_for(waiting, 5) and ch.queued_checks == 4
    # A closed channel wakes its waiters and takes nothing.
    assert await ch.put(_checks(4))
    blocked = asyncio.create_task(ch.put(_checks(4)))
    await asyncio.sleep(0)
    ch.close()
    assert await asyncio.wait_for(blocked, 5) is False and ch.queued_checks == 8
