"""SimpleConsumerCore (pop semantics) against an in-memory backend: receive / ack,
redelivery after the invisible duration, changes, receipt-handle validity, long polling,
committed offsets, dead letters, auto-renew, concurrent receives and FIFO message groups.

The fake backend keeps queues in memory and answers pulls like the pull service
(FOUND / NO_NEW_MSG / NO_MATCHED_MSG / OFFSET_ILLEGAL, held pulls woken by arrivals);
tests/gateway/test_backend_contract.py checks those answers against the real backend.
Everything runs on one manual clock (the core's invisibility, holds and back-offs, the
fake's held pulls), so no test sleeps: a hold ends when the test advances the clock, and
a receive that returns without it was woken, not timed out. Only the stress tests move
the clock in the background (``ticking``), where the interleaving is the point."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from support.clock import ManualClock, settle, ticking, until

from txmq.errors import TxmqError, error
from txmq.protocol import DLQ_GROUP_TOPIC_PREFIX, PROPERTY_DLQ_ORIGIN_TOPIC
from txmq.v1 import common_pb2, errors_pb2
from txmq_gateway import consumer_state as consumer_module
from txmq_gateway.consumer import SimpleConsumerCore
from txmq_gateway.consumer_receipts import ReceiptHandle
from txmq_gateway.consumer_state import ConsumerTuning, Delivery
from txmq_gateway.convert import PROPERTY_MESSAGE_GROUP, HandleSigner, TransactionHandle, encode_token
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code

from .fake_backend import TOPIC, FakeBackend

GROUP = "G"
ALL = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="*")
INVISIBLE_MS = 30_000
GUARD_S = 10  # a hang guard, not a timing claim


@dataclass
class Env:
    backend: FakeBackend
    clock: ManualClock
    make: Callable[..., SimpleConsumerCore]
    core: SimpleConsumerCore

    async def receive(self, core: SimpleConsumerCore | None = None, **kwargs: Any) -> list[Delivery]:
        args: dict[str, Any] = {
            "group": GROUP,
            "topic": TOPIC,
            "filter": ALL,
            "batch_size": 32,
            "invisible_ms": INVISIBLE_MS,
            "long_polling_timeout_ms": 0,
            "client_id": "c1",
        }
        args.update(kwargs)
        return await asyncio.wait_for((core or self.core).receive(**args), GUARD_S)

    async def ack(self, d: Delivery, core: SimpleConsumerCore | None = None, **kwargs: Any) -> None:
        args: dict[str, Any] = {
            "group": GROUP,
            "topic": TOPIC,
            "receipt_handle": d.receipt_handle,
            "message_id": d.view.message.unique_id,
        }
        args.update(kwargs)
        await (core or self.core).ack(**args)

    async def change(self, d: Delivery, invisible_ms: int, **kwargs: Any) -> str:
        args: dict[str, Any] = {
            "group": GROUP,
            "topic": TOPIC,
            "receipt_handle": d.receipt_handle,
            "message_id": d.view.message.unique_id,
            "invisible_ms": invisible_ms,
        }
        args.update(kwargs)
        return await self.core.change_invisible_duration(**args)


#: The cluster's handle key, as every gateway of a cluster holds it.
SIGNER = HandleSigner.ephemeral()


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = ManualClock()
    backend = FakeBackend(clock)
    backend.add_topic()
    cores: list[SimpleConsumerCore] = []

    def make(tuning: ConsumerTuning | None = None, **settings: Any) -> SimpleConsumerCore:
        core = SimpleConsumerCore(
            backend,  # type: ignore[arg-type]
            GatewaySettings(**settings),
            tuning=tuning,
            clock=clock,
            commit_interval_ms=3_600_000,  # tests flush explicitly
            handles=SIGNER,
        )
        cores.append(core)
        return core

    try:
        yield Env(backend, clock, make, make())
    finally:
        for core in cores:
            await core.close()


def offsets(deliveries: list[Delivery]) -> list[tuple[str, int, int]]:
    return sorted((d.view.store_id, d.view.message.queue_id, d.view.queue_offset) for d in deliveries)


def bodies(deliveries: list[Delivery]) -> list[str]:
    return [d.view.message.body.decode() for d in deliveries]


async def holding(env: Env, pulls: int = 1) -> None:
    """Until ``pulls`` held pulls wait (on the clock, for an arrival), then until every
    task blocked."""
    await until(lambda: env.backend.held >= pulls)
    await settle()


async def receive_until_timeout(
    env: Env, hold_ms: int, core: SimpleConsumerCore | None = None, *, pulls: int = 1, **kwargs: Any
) -> list[Delivery]:
    """A receive that holds exactly ``hold_ms`` (with ``pulls`` held pulls): still waiting
    1 ms before, answered at."""
    held = asyncio.ensure_future(env.receive(core, **kwargs))
    await holding(env, pulls)
    env.clock.advance(hold_ms - 1)
    await settle()
    assert not held.done()
    env.clock.advance(1)
    return await asyncio.wait_for(held, GUARD_S)


async def expect_code(code: int, awaitable: Any) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await awaitable
    assert info.value.code == code, info.value
    return info.value


# -- receive / ack ---------------------------------------------------------------------


async def test_receive_then_ack(env: Env) -> None:
    for i in range(3):
        env.backend.put(f"m{i}")
    got = await env.receive(batch_size=10)
    assert bodies(got) == ["m0", "m1", "m2"]
    assert all(d.delivery_attempt == 1 and d.invisible_ms == INVISIBLE_MS for d in got)
    assert len({d.receipt_handle for d in got}) == 3
    assert await env.receive() == []  # all invisible
    for d in got:
        await env.ack(d)
    env.clock.advance(INVISIBLE_MS + 1)
    assert await env.receive() == []  # acked: never again


async def test_receive_takes_at_most_the_batch_size(env: Env) -> None:
    for i in range(5):
        env.backend.put(f"m{i}")
    assert bodies(await env.receive(batch_size=2)) == ["m0", "m1"]
    assert bodies(await env.receive(batch_size=2)) == ["m2", "m3"]
    assert bodies(await env.receive(batch_size=2)) == ["m4"]


async def test_unacked_message_comes_back_after_its_invisible_duration(env: Env) -> None:
    env.backend.put("m0")
    [first] = await env.receive()
    env.clock.advance(INVISIBLE_MS - 1)
    assert await env.receive() == []
    env.clock.advance(1)
    [again] = await env.receive()
    assert again.view.queue_offset == first.view.queue_offset
    assert again.delivery_attempt == 2
    assert again.receipt_handle != first.receipt_handle
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(first))  # redelivered: stale
    await env.ack(again)
    env.clock.advance(INVISIBLE_MS)
    assert await env.receive() == []


async def test_redeliveries_come_before_new_messages(env: Env) -> None:
    env.backend.put("old")
    await env.receive()
    env.backend.put("new")
    env.clock.advance(INVISIBLE_MS)
    got = await env.receive(batch_size=1)
    assert bodies(got) == ["old"] and got[0].delivery_attempt == 2
    assert bodies(await env.receive(batch_size=1)) == ["new"]


async def test_round_robin_over_queues_and_stores(env: Env) -> None:
    env.backend.add_topic(TOPIC, {"s1": 2, "s2": 2})
    for store_id in ("s1", "s2"):
        for qid in range(2):
            for i in range(10):
                env.backend.put(f"{store_id}-{qid}-{i}", store_id=store_id, queue_id=qid)
    got = await env.receive(batch_size=4)
    assert sorted((d.view.store_id, d.view.message.queue_id) for d in got) == [
        ("s1", 0), ("s1", 1), ("s2", 0), ("s2", 1),
    ]  # fmt: skip
    # a queue with a backlog does not starve the others
    env.backend.put("lonely", store_id="s2", queue_id=1)
    everything = await env.receive(batch_size=32)
    assert len(everything) == 32
    per_queue: dict[tuple[str, int], int] = {}
    for d in everything:
        per_queue[(d.view.store_id, d.view.message.queue_id)] = (
            per_queue.get((d.view.store_id, d.view.message.queue_id), 0) + 1
        )
    assert set(per_queue.values()) == {8}


async def test_a_priority_topics_higher_queues_are_read_first(env: Env) -> None:
    """Queue N of a priority topic holds priority N (docs/store.md "Priority messages"):
    a receive takes the highest queues' messages first, of every store alike."""
    env.backend.add_topic(TOPIC, {"s1": 3, "s2": 3})
    env.backend.priority_topics.add(TOPIC)
    for store_id, qid, n in (("s1", 0, 5), ("s1", 1, 2), ("s1", 2, 2), ("s2", 0, 5), ("s2", 2, 1)):
        for i in range(n):
            env.backend.put(f"{store_id}-{qid}-{i}", store_id=store_id, queue_id=qid)
    first = await env.receive(batch_size=4)
    assert sorted(d.view.message.queue_id for d in first) == [1, 2, 2, 2]  # every priority-2 message, then 1
    rest = await env.receive(batch_size=32)
    assert sorted(d.view.message.queue_id for d in rest) == [0] * 10 + [1]


# -- change invisible duration ---------------------------------------------------------


async def test_change_returns_a_new_handle_and_the_old_one_is_refused(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    handle = await env.change(d, 60_000)
    assert handle != d.receipt_handle
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d))
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.change(d, 10_000))
    env.clock.advance(INVISIBLE_MS + 1)  # the first deadline passed; the new one did not
    assert await env.receive() == []
    await env.core.ack(group=GROUP, topic=TOPIC, receipt_handle=handle, message_id=d.view.message.unique_id)
    env.clock.advance(60_000)
    assert await env.receive() == []


async def test_change_to_zero_makes_it_visible_at_once(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    await env.change(d, 0)  # a push consumer's nack with no backoff
    [again] = await env.receive()
    assert again.delivery_attempt == 2


async def test_change_wakes_a_held_receive(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    held = asyncio.ensure_future(env.receive(long_polling_timeout_ms=5_000))
    await holding(env)
    assert not held.done()
    await env.change(d, 0)
    [again] = await asyncio.wait_for(held, GUARD_S)
    assert again.view.queue_offset == d.view.queue_offset and again.delivery_attempt == 2


async def test_change_validates_the_duration(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    await expect_code(Code.ILLEGAL_INVISIBLE_TIME, env.change(d, -1))
    await expect_code(Code.ILLEGAL_INVISIBLE_TIME, env.change(d, 12 * 3_600_000 + 1))
    await env.change(d, 1_000)  # below the receive minimum is fine for a change


# -- receipt handles -------------------------------------------------------------------


async def test_malformed_and_foreign_handles_are_refused(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    for bad in (
        "",
        "garbage!",
        encode_token({"x": 1}),
        encode_token({"e": 1, "s": "s1", "t": TOPIC, "q": 0, "o": 0, "v": 1}),
    ):
        await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, receipt_handle=bad))
    h = ReceiptHandle.decode(d.receipt_handle, SIGNER)
    other_epoch = ReceiptHandle("other", h.store_id, h.topic, h.queue_id, h.offset, h.version).encode(SIGNER)
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, receipt_handle=other_epoch))
    wrong_offset = ReceiptHandle(h.epoch, h.store_id, h.topic, h.queue_id, h.offset + 1, h.version).encode(SIGNER)
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, receipt_handle=wrong_offset))
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, topic="Other"))
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, group="OtherGroup"))
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, message_id="not-its-id"))
    await env.ack(d)  # still valid after all that


async def test_a_forged_or_altered_handle_is_refused(env: Env) -> None:
    """A client that knows the format cannot make a handle for a message it was not
    given, nor change one it was given: handles carry the cluster key's signature."""
    env.backend.put("m0")
    env.backend.put("m1")
    [d] = await env.receive(batch_size=1)
    h = ReceiptHandle.decode(d.receipt_handle, SIGNER)
    fields = {"e": h.epoch, "s": h.store_id, "t": h.topic, "q": h.queue_id, "o": h.offset, "v": h.version}
    unsigned = encode_token(fields)  # the handle's exact fields, without a signature
    other_key = ReceiptHandle(h.epoch, h.store_id, h.topic, h.queue_id, h.offset, h.version).encode(
        HandleSigner.ephemeral()
    )
    encoded, _, mac = d.receipt_handle.partition(".")
    altered = encode_token({**fields, "g": h.owner, "o": h.offset + 1}) + "." + mac
    as_transaction_id = SIGNER.encode(TransactionHandle(h.store_id, 0, h.offset, "x"))
    for forged in (unsigned, other_key, altered, as_transaction_id, encoded + ".", d.receipt_handle + "x"):
        err = await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, receipt_handle=forged))
        assert "not issued by txmq" in err.message, err.message
    await env.ack(d)  # the genuine one still works


async def test_expired_handle_is_refused(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    env.clock.advance(INVISIBLE_MS)
    err = await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d))
    assert "expired" in err.message
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.change(d, 10_000))


async def test_a_repeated_ack_answers_ok(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    await env.ack(d)
    await env.ack(d)  # a client retrying after a lost answer
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.change(d, 10_000))


async def test_handles_do_not_survive_a_restart(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    restarted = env.make()
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(d, core=restarted))


# -- validation ------------------------------------------------------------------------


async def test_receive_validation(env: Env) -> None:
    env.backend.put("m0")
    await expect_code(Code.BAD_REQUEST, env.receive(batch_size=0))
    await expect_code(Code.ILLEGAL_INVISIBLE_TIME, env.receive(invisible_ms=9_999))
    await expect_code(Code.ILLEGAL_INVISIBLE_TIME, env.receive(invisible_ms=12 * 3_600_000 + 1))
    await expect_code(Code.ILLEGAL_POLLING_TIME, env.receive(long_polling_timeout_ms=-1))
    with pytest.raises(TxmqError) as info:
        await env.receive(topic="Missing")
    assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND
    [d] = await env.receive(invisible_ms=None)  # none: the default
    assert d.invisible_ms == GatewaySettings().default_invisible_duration_ms


async def test_batch_size_is_cut_to_the_maximum(env: Env) -> None:
    core = env.make(max_receive_batch_size=2)
    for i in range(5):
        env.backend.put(f"m{i}")
    assert len(await env.receive(core, batch_size=100)) == 2


# -- long polling ----------------------------------------------------------------------


async def test_long_polling_wakes_when_a_message_arrives(env: Env) -> None:
    env.backend.add_topic(TOPIC, {"s1": 2, "s2": 2})
    held = asyncio.ensure_future(env.receive(long_polling_timeout_ms=20_000))
    await holding(env, 4)  # a held pull on each of the four queues
    assert not held.done()
    env.backend.put("late", store_id="s2", queue_id=1)
    got = await asyncio.wait_for(held, GUARD_S)  # the clock did not move: woken, not timed out
    assert bodies(got) == ["late"]
    held_pulls = [p for p in env.backend.pulls if p.suspend]
    assert {(p.queue.store_id, p.queue.queue_id) for p in held_pulls} == {("s1", 0), ("s1", 1), ("s2", 0), ("s2", 1)}
    assert all(0 < p.suspend_timeout_ms <= 20_000 for p in held_pulls)


async def test_empty_list_at_the_polling_timeout(env: Env) -> None:
    assert await receive_until_timeout(env, 200, long_polling_timeout_ms=200) == []
    assert [p.suspend_timeout_ms for p in env.backend.pulls if p.suspend] == [200]


async def test_polling_time_is_cut_to_the_maximum_and_the_deadline(env: Env) -> None:
    core = env.make(max_long_polling_timeout_ms=100)
    assert await receive_until_timeout(env, 100, core, long_polling_timeout_ms=60_000) == []
    # the call's deadline less the reserve for the answer
    reserve = consumer_module.DEADLINE_RESERVE_MS
    assert await receive_until_timeout(env, 700 - reserve, long_polling_timeout_ms=20_000, time_remaining_ms=700) == []


async def test_a_message_for_one_of_two_held_receives(env: Env) -> None:
    """Two receives wait; one message arrives: exactly one of them gets it, the other
    keeps waiting and gets the next one."""
    env.backend.add_topic(TOPIC, {"s1": 2})
    a = asyncio.ensure_future(env.receive(long_polling_timeout_ms=5_000, batch_size=1))
    b = asyncio.ensure_future(env.receive(long_polling_timeout_ms=5_000, batch_size=1))
    await holding(env, 2)  # one of them holds both queues, the other waits for a release
    env.backend.put("one", queue_id=0)
    done, _ = await asyncio.wait([a, b], timeout=GUARD_S, return_when=asyncio.FIRST_COMPLETED)
    first = done.pop().result()
    assert bodies(first) == ["one"]
    other = b if a.done() else a
    await settle()
    assert not other.done()
    env.backend.put("two", queue_id=1)
    assert bodies(await asyncio.wait_for(other, GUARD_S)) == ["two"]


async def test_close_answers_held_receives(env: Env) -> None:
    held = asyncio.ensure_future(env.receive(long_polling_timeout_ms=20_000))
    await holding(env)
    await env.core.close()
    assert await asyncio.wait_for(held, GUARD_S) == []
    await expect_code(Code.INTERNAL_SERVER_ERROR, env.receive())


# -- concurrency -----------------------------------------------------------------------


async def test_concurrent_receives_never_get_the_same_message(env: Env) -> None:
    env.backend.add_topic(TOPIC, {"s1": 3, "s2": 2})
    sent = 0
    for store_id, nums in (("s1", 3), ("s2", 2)):
        for qid in range(nums):
            for i in range(20):
                env.backend.put(f"{store_id}-{qid}-{i}", store_id=store_id, queue_id=qid)
                sent += 1
    seen: list[tuple[str, int, int]] = []

    async def consumer() -> None:
        while len(seen) < sent:
            got = await env.receive(batch_size=3, long_polling_timeout_ms=50)
            seen.extend(offsets(got))
            for d in got:
                await env.ack(d)

    async with ticking(env.clock):
        await asyncio.wait_for(asyncio.gather(*(consumer() for _ in range(8))), GUARD_S)
    assert len(seen) == sent and len(set(seen)) == sent


async def test_concurrent_held_receives_never_get_the_same_message(env: Env) -> None:
    env.backend.add_topic(TOPIC, {"s1": 4})
    seen: list[tuple[str, int, int]] = []
    total = 40

    async def consumer() -> None:
        while len(seen) < total:
            seen.extend(offsets(await env.receive(batch_size=2, long_polling_timeout_ms=300)))

    async with ticking(env.clock):
        consumers = asyncio.gather(*(consumer() for _ in range(6)))
        for i in range(total):
            env.backend.put(f"m{i}", queue_id=i % 4)
            if i % 5 == 0:
                await settle(10)
        await asyncio.wait_for(consumers, GUARD_S)
    assert len(seen) == total and len(set(seen)) == total


# -- offsets ---------------------------------------------------------------------------


async def test_offsets_are_committed_at_the_lowest_unacked(env: Env) -> None:
    for i in range(5):
        env.backend.put(f"m{i}")
    got = await env.receive()
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 0  # a new group's start is committed
    for i in (0, 1, 3):
        await env.ack(got[i])
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 2
    commits = len(env.backend.commits)
    await env.core.flush()
    assert len(env.backend.commits) == commits  # nothing changed: no call
    await env.ack(got[2])
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 4
    await env.ack(got[4])
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 5


async def test_a_restart_redelivers_only_from_the_lowest_unacked(env: Env) -> None:
    for i in range(4):
        env.backend.put(f"m{i}")
    got = await env.receive()
    await env.ack(got[0])
    await env.ack(got[2])
    await env.core.close()  # commits on the way out
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 1
    restarted = env.make()
    assert bodies(await env.receive(restarted)) == ["m1", "m2", "m3"]  # m2 again: at least once


async def test_a_new_group_starts_at_the_min_offset(env: Env) -> None:
    env.backend.min_offsets[("s1", TOPIC, 0)] = 7  # older messages are gone
    env.backend.put("m7")
    env.backend.put("m8")
    [d, _] = await env.receive()
    assert d.view.queue_offset == 7


async def test_a_group_with_an_offset_starts_there(env: Env) -> None:
    for i in range(3):
        env.backend.put(f"m{i}")
    env.backend.offsets[("s1", GROUP, TOPIC, 0)] = 2
    assert bodies(await env.receive()) == ["m2"]


async def test_an_offset_outside_the_queue_moves_to_its_start(env: Env) -> None:
    env.backend.min_offsets[("s1", TOPIC, 0)] = 5
    env.backend.put("m5")
    env.backend.offsets[("s1", GROUP, TOPIC, 0)] = 1  # behind the queue's min offset
    assert bodies(await env.receive()) == ["m5"]


# -- filters ---------------------------------------------------------------------------


async def test_filter_is_passed_to_the_pull_and_tag_strings_are_rechecked(env: Env) -> None:
    env.backend.ignore_tag_filter = True  # the store's tag-hash filter let everything through
    env.backend.put("a", tags="A")
    env.backend.put("b", tags="B")
    env.backend.put("a2", tags="A")
    only_a = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="A || C")
    got = await env.receive(filter=only_a)
    assert bodies(got) == ["a", "a2"]
    assert all(p.filter == only_a for p in env.backend.pulls)
    for d in got:
        await env.ack(d)
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 3  # the skipped one counts as consumed


async def test_non_matching_messages_are_skipped(env: Env) -> None:
    for i in range(5):
        env.backend.put(f"b{i}", tags="B")
    env.backend.put("a", tags="A")
    only_a = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="A")
    assert bodies(await env.receive(filter=only_a, batch_size=1)) == ["a"]


# -- dead letters ----------------------------------------------------------------------


async def test_dead_letter_after_max_delivery_attempts(env: Env) -> None:
    core = env.make(max_delivery_attempts=2)
    env.backend.put("poison", tags="T1", properties={"k": "v", "REAL_TOPIC": "x", "TXMQ_CHECK_WAITS": "1"})
    [first] = await env.receive(core)
    env.clock.advance(INVISIBLE_MS)
    [second] = await env.receive(core)
    assert second.delivery_attempt == 2
    env.clock.advance(INVISIBLE_MS)
    assert await env.receive(core) == []  # third delivery: to the DLQ instead
    await until(lambda: bool(env.backend.sent))
    [(store_id, copy)] = env.backend.sent
    assert store_id == "s1"
    assert env.backend.ensured == [("s1", DLQ_GROUP_TOPIC_PREFIX + GROUP, 1)]
    assert copy.topic == DLQ_GROUP_TOPIC_PREFIX + GROUP
    assert copy.body == b"poison" and copy.tags == "T1"
    assert copy.unique_id == first.view.message.unique_id
    assert dict(copy.properties) == {"k": "v", PROPERTY_DLQ_ORIGIN_TOPIC: TOPIC}
    await expect_code(Code.INVALID_RECEIPT_HANDLE, env.ack(second, core=core))
    env.clock.advance(INVISIBLE_MS)
    assert await env.receive(core) == []  # counts as acked
    await core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 1


async def test_a_failed_dead_letter_send_is_retried(env: Env) -> None:
    core = env.make(max_delivery_attempts=1)
    env.backend.put("poison")
    await env.receive(core)
    env.backend.send_error = error(errors_pb2.CODE_UNAVAILABLE, "store down")
    env.clock.advance(INVISIBLE_MS)
    assert await env.receive(core) == []
    await settle()
    assert env.backend.sent == []
    env.backend.send_error = None
    env.clock.advance(5_000)
    assert await env.receive(core) == []
    await until(lambda: len(env.backend.sent) == 1)


async def test_the_client_may_ask_for_fewer_attempts(env: Env) -> None:
    env.backend.put("poison")
    await env.receive(max_delivery_attempts=1)
    env.clock.advance(INVISIBLE_MS)
    assert await env.receive(max_delivery_attempts=1) == []
    await until(lambda: len(env.backend.sent) == 1)


async def test_forward_to_dead_letter_queue_on_request(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    await env.core.forward_to_dead_letter_queue(
        group=GROUP, topic=TOPIC, receipt_handle=d.receipt_handle, message_id=d.view.message.unique_id
    )
    [(_, copy)] = env.backend.sent
    assert copy.topic == DLQ_GROUP_TOPIC_PREFIX + GROUP and copy.unique_id == d.view.message.unique_id
    env.clock.advance(INVISIBLE_MS)
    assert await env.receive() == []
    await env.ack(d)  # it counts as acked: a repeated ack is fine


async def test_a_failed_forward_keeps_the_message(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive()
    env.backend.send_error = error(errors_pb2.CODE_UNAVAILABLE, "store down")
    with pytest.raises(TxmqError):
        await env.core.forward_to_dead_letter_queue(
            group=GROUP, topic=TOPIC, receipt_handle=d.receipt_handle, message_id=d.view.message.unique_id
        )
    env.clock.advance(INVISIBLE_MS)
    [again] = await env.receive()
    assert again.delivery_attempt == 2


# -- auto renew ------------------------------------------------------------------------


async def test_auto_renew_keeps_the_message_while_the_client_lives(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive(auto_renew=True, invisible_ms=None, client_id="push-1")
    env.clock.advance(10 * INVISIBLE_MS)
    assert await env.receive(client_id="other") == []
    await env.ack(d)  # the handle still works


async def test_auto_renew_ends_when_the_client_goes(env: Env) -> None:
    env.backend.put("m0")
    await env.receive(auto_renew=True, client_id="push-1")
    env.clock.advance(2 * INVISIBLE_MS)
    env.core.client_gone("push-1")
    assert await env.receive(client_id="other") == []
    env.clock.advance(1_000)
    [again] = await env.receive(client_id="other")
    assert again.delivery_attempt == 2


async def test_a_change_stops_auto_renew(env: Env) -> None:
    env.backend.put("m0")
    [d] = await env.receive(auto_renew=True, client_id="push-1")
    await env.change(d, 10_000)
    env.clock.advance(10_000)
    [again] = await env.receive(client_id="other")
    assert again.delivery_attempt == 2


# -- failures --------------------------------------------------------------------------


async def test_a_refused_pull_is_raised(env: Env) -> None:
    env.backend.pull_errors["s1"] = error(errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, "bad filter")
    env.backend.put("m0")
    with pytest.raises(TxmqError) as info:
        await env.receive()
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION


async def test_a_refused_held_pull_is_raised(env: Env) -> None:
    env.backend.pull_errors["s1"] = error(errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND, "no group")
    with pytest.raises(TxmqError) as info:  # the clock does not move: raised, not timed out
        await env.receive(long_polling_timeout_ms=5_000)  # nothing to read: the held pull fails
    assert info.value.code == errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND


async def test_a_failing_store_is_raised_when_it_is_the_only_one(env: Env) -> None:
    env.backend.pull_errors["s1"] = error(errors_pb2.CODE_UNAVAILABLE, "store down")
    with pytest.raises(TxmqError) as info:
        await env.receive(long_polling_timeout_ms=5_000)
    assert info.value.code == errors_pb2.CODE_UNAVAILABLE


async def test_early_empty_answers_to_held_pulls_do_not_spin(env: Env) -> None:
    env.backend.no_hold = True
    held = asyncio.ensure_future(env.receive(long_polling_timeout_ms=500))
    for _ in range(50):  # 500 ms in steps of 10
        await settle()
        env.clock.advance(10)
    assert await asyncio.wait_for(held, GUARD_S) == []
    assert len(env.backend.pulls) < 10  # backed off ERROR_BACKOFF_MS after each early answer


async def test_one_failing_store_does_not_stop_the_others(env: Env) -> None:
    env.backend.add_topic(TOPIC, {"s1": 1, "s2": 1})
    env.backend.pull_errors["s1"] = error(errors_pb2.CODE_UNAVAILABLE, "store down")
    env.backend.put("ok", store_id="s2")
    env.backend.put("stuck", store_id="s1")
    assert bodies(await env.receive()) == ["ok"]
    del env.backend.pull_errors["s1"]
    assert await env.receive() == []  # s1 is still backed off
    env.clock.advance(consumer_module.ERROR_BACKOFF_MS)  # past the queue's back-off
    assert bodies(await env.receive()) == ["stuck"]


# -- FIFO message groups ---------------------------------------------------------------


def put_group(env: Env, body: str, group: str | None, **kwargs: Any) -> common_pb2.MessageView:
    """A message of FIFO message ``group`` (None: a normal message), as the gateway's
    producer stores it."""
    properties = {PROPERTY_MESSAGE_GROUP: group} if group else {}
    return env.backend.put(body, properties=properties, **kwargs)


def put_fifo_sample(env: Env) -> None:
    for body, group in (("g1-a", "g1"), ("g1-b", "g1"), ("g2-a", "g2"), ("plain-x", None)):
        put_group(env, body, group)


def by_body(deliveries: list[Delivery]) -> dict[str, Delivery]:
    return {d.view.message.body.decode(): d for d in deliveries}


async def test_fifo_a_later_message_of_a_group_waits_for_the_ack_of_the_earlier(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    assert sorted(got) == ["g1-a", "g2-a", "plain-x"]  # other groups and plain ones flow
    assert await env.receive(batch_size=10) == []  # g1-b waits for g1-a
    await env.ack(got["g1-a"])
    [b] = await env.receive(batch_size=10)
    assert bodies([b]) == ["g1-b"] and b.delivery_attempt == 1


async def test_fifo_the_earlier_message_is_redelivered_first(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    await env.ack(got["g2-a"])
    await env.ack(got["plain-x"])
    env.clock.advance(INVISIBLE_MS)
    [again] = await env.receive(batch_size=10)
    assert bodies([again]) == ["g1-a"] and again.delivery_attempt == 2
    env.clock.advance(INVISIBLE_MS)
    [third] = await env.receive(batch_size=10)  # still not g1-b
    assert bodies([third]) == ["g1-a"] and third.delivery_attempt == 3
    await env.ack(third)
    assert bodies(await env.receive(batch_size=10)) == ["g1-b"]


async def test_fifo_a_nack_keeps_the_successor_waiting(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    await env.change(got["g1-a"], 0)  # a push consumer's nack
    [again] = await env.receive(batch_size=10)
    assert bodies([again]) == ["g1-a"] and again.delivery_attempt == 2


async def test_fifo_the_ack_wakes_a_receive_held_on_the_successor(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    held = asyncio.ensure_future(env.receive(batch_size=10, long_polling_timeout_ms=5_000))
    await holding(env)
    assert not held.done()
    await env.ack(got["g1-a"])
    assert bodies(await asyncio.wait_for(held, GUARD_S)) == ["g1-b"]  # the clock did not move


async def test_fifo_a_receive_with_only_blocked_messages_does_not_spin(env: Env) -> None:
    put_fifo_sample(env)
    await env.receive(batch_size=10)
    pulls = len(env.backend.pulls)
    assert await receive_until_timeout(env, 300, batch_size=10, long_polling_timeout_ms=300) == []
    assert len(env.backend.pulls) - pulls < 10  # one held pull, not a loop


async def test_fifo_the_committed_offset_stays_at_a_waiting_message(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    for name in ("g1-a", "g2-a", "plain-x"):
        await env.ack(got[name])
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 1  # g1-b: read, not delivered
    [b] = await env.receive()
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 1
    await env.ack(b)
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 4


async def test_fifo_a_restart_rereads_waiting_messages_in_order(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    await env.ack(got["g1-a"])
    await env.ack(got["g2-a"])
    await env.core.close()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 1
    restarted = env.make()
    # from g1-b on (g2-a again: acked above the lowest un-acked offset, at least once)
    assert bodies(await env.receive(restarted)) == ["g1-b", "g2-a", "plain-x"]


async def test_fifo_a_forward_to_the_dead_letter_queue_releases_the_successor(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    a = got["g1-a"]
    await env.core.forward_to_dead_letter_queue(
        group=GROUP, topic=TOPIC, receipt_handle=a.receipt_handle, message_id=a.view.message.unique_id
    )
    assert bodies(await env.receive(batch_size=10)) == ["g1-b"]


async def test_fifo_a_dead_letter_after_max_attempts_releases_the_successor(env: Env) -> None:
    core = env.make(max_delivery_attempts=1)
    put_group(env, "g1-a", "g1")
    put_group(env, "g1-b", "g1")
    assert bodies(await env.receive(core)) == ["g1-a"]
    env.clock.advance(INVISIBLE_MS)
    # this receive sends g1-a to the DLQ and is woken when that is done (the clock stays)
    assert bodies(await env.receive(core, long_polling_timeout_ms=5_000)) == ["g1-b"]
    [(_, copy)] = env.backend.sent
    assert copy.body == b"g1-a"


async def test_fifo_a_failed_dead_letter_keeps_the_successor_waiting(env: Env) -> None:
    put_fifo_sample(env)
    got = by_body(await env.receive(batch_size=10))
    a = got["g1-a"]
    env.backend.send_error = error(errors_pb2.CODE_UNAVAILABLE, "store down")
    with pytest.raises(TxmqError):
        await env.core.forward_to_dead_letter_queue(
            group=GROUP, topic=TOPIC, receipt_handle=a.receipt_handle, message_id=a.view.message.unique_id
        )
    assert await env.receive(batch_size=10) == []
    await env.ack(a)
    assert bodies(await env.receive(batch_size=10)) == ["g1-b"]


async def test_fifo_groups_are_per_queue(env: Env) -> None:
    env.backend.add_topic(TOPIC, {"s1": 2})
    put_group(env, "q0-g1-a", "g1", queue_id=0)
    put_group(env, "q1-g1-a", "g1", queue_id=1)  # the same name on another queue: ordered apart
    assert sorted(bodies(await env.receive())) == ["q0-g1-a", "q1-g1-a"]


async def test_fifo_waiting_messages_are_bounded_per_queue(env: Env) -> None:
    env.core = env.make(tuning=ConsumerTuning(max_waiting_per_queue=3))
    for body in ("g1-a", "g1-b", "g1-c", "g1-d", "g1-e"):
        put_group(env, body, "g1")
    put_group(env, "plain-x", None)
    [a] = await env.receive(batch_size=10)
    assert bodies([a]) == ["g1-a"]
    pulls = len(env.backend.pulls)
    assert await receive_until_timeout(env, 200, pulls=0, batch_size=10, long_polling_timeout_ms=200) == []
    # three wait; the queue is not read past them (plain-x is not reached), not even held
    assert len(env.backend.pulls) == pulls
    await env.core.flush()
    assert env.backend.offsets[("s1", GROUP, TOPIC, 0)] == 0
    await env.ack(a)
    got = await env.receive(batch_size=10)
    assert bodies(got) == ["g1-b", "plain-x"]  # a released one frees room: reading goes on
    await env.ack(got[0])
    assert bodies(await env.receive(batch_size=10)) == ["g1-c"]


async def test_fifo_a_saturated_queue_does_not_hold_up_the_others(env: Env) -> None:
    env.core = env.make(tuning=ConsumerTuning(max_waiting_per_queue=2))
    env.backend.add_topic(TOPIC, {"s1": 2})
    for body in ("g1-a", "g1-b", "g1-c", "g1-d"):
        put_group(env, body, "g1", queue_id=0)
    assert bodies(await env.receive(batch_size=10)) == ["g1-a"]
    held = asyncio.ensure_future(env.receive(batch_size=10, long_polling_timeout_ms=5_000))
    await holding(env)
    put_group(env, "other", None, queue_id=1)
    assert bodies(await asyncio.wait_for(held, GUARD_S)) == ["other"]


async def test_fifo_concurrent_receives_never_break_the_order(env: Env) -> None:
    """Eight consumers over three queues of five groups plus normal messages, acking or
    nacking at random: a message of a group is only ever delivered when every earlier
    one of its group (same queue) is acked, and every message is acked once."""
    rng = random.Random(7)
    env.backend.add_topic(TOPIC, {"s1": 2, "s2": 1})
    queues = [("s1", 0), ("s1", 1), ("s2", 0)]
    order: dict[tuple[str, int, str], list[int]] = {}  # (store, queue, group) -> offsets
    total = 0
    for i in range(120):
        store_id, qid = queues[i % 3] if i % 4 else queues[rng.randrange(3)]
        group = None if i % 5 == 0 else f"g{rng.randrange(5)}"
        view = put_group(env, f"m{i}", group, store_id=store_id, queue_id=qid)
        if group:
            order.setdefault((store_id, qid, group), []).append(view.queue_offset)
        total += 1
    acked: set[tuple[str, int, int]] = set()
    out: set[tuple[str, int, int]] = set()  # delivered, not settled

    async def consumer() -> None:
        while len(acked) < total:
            got = await env.receive(batch_size=3, long_polling_timeout_ms=50)
            for d in got:
                key = (d.view.store_id, d.view.message.queue_id, d.view.queue_offset)
                assert key not in acked and key not in out
                group = d.view.message.properties.get(PROPERTY_MESSAGE_GROUP)
                if group:
                    earlier = [o for o in order[(key[0], key[1], group)] if o < key[2]]
                    assert all((key[0], key[1], o) in acked for o in earlier), (key, group)
                out.add(key)
            for d in got:
                await settle(rng.randrange(4))
                key = (d.view.store_id, d.view.message.queue_id, d.view.queue_offset)
                out.discard(key)
                if rng.random() < 0.2:
                    await env.change(d, 0)  # nack: comes back, before its successors
                else:
                    await env.ack(d)
                    acked.add(key)

    async with ticking(env.clock):
        await asyncio.wait_for(asyncio.gather(*(consumer() for _ in range(8))), GUARD_S * 2)
    assert len(acked) == total
    await env.core.flush()
    for store_id, qid in queues:  # everything acked: committed up to the end
        assert env.backend.offsets[(store_id, GROUP, TOPIC, qid)] == env.backend.bounds((store_id, TOPIC, qid))[1]
