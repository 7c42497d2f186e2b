"""PullMessage and UpdateOffset in the consumer core, over the contract-checked fake
backend (fake_backend.py): what the pull service's answer becomes, and when an offset
update is refused (no processes)."""

from __future__ import annotations

from typing import Any

import pytest

from txmq.v1 import common_pb2
from txmq_gateway.consumer import SimpleConsumerCore
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code

from .fake_backend import TOPIC, FakeBackend


def core() -> tuple[SimpleConsumerCore, FakeBackend]:
    backend = FakeBackend()
    backend.add_topic(TOPIC, {"s1": 2})
    return SimpleConsumerCore(backend, GatewaySettings(), clock=backend.clock), backend  # type: ignore[arg-type]


def tag(expression: str) -> common_pb2.FilterExpression:
    return common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=expression)


async def pull(consumer: SimpleConsumerCore, offset: int, **overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "group": "G", "store_id": "s1", "topic": TOPIC, "queue_id": 0, "offset": offset, "batch_size": 32,
        "filter": tag("*"), "long_polling_timeout_ms": 0, "time_remaining_ms": None,
    }  # fmt: skip
    return await consumer.pull(**{**fields, **overrides})


async def test_a_tag_hash_collision_is_skipped_and_a_full_batch_stops_at_its_last_message() -> None:
    consumer, backend = core()
    for i, t in enumerate("ABABA"):
        backend.put(f"m{i}", tags=t)
    backend.ignore_tag_filter = True  # the store answers every message, as on a hash collision
    pulled = await pull(consumer, 0, filter=tag("A"))
    assert pulled.code == Code.OK and [v.message.body for v in pulled.views] == [b"m0", b"m2", b"m4"]
    assert pulled.next_offset == 5
    pulled = await pull(consumer, 0, batch_size=2)
    assert [v.queue_offset for v in pulled.views] == [0, 1] and pulled.next_offset == 2
    only_b = await pull(consumer, 4, filter=tag("B"))  # m4 is A: skipped, counts as read
    assert (only_b.code, only_b.views, only_b.next_offset) == (Code.MESSAGE_NOT_FOUND, [], 5)


async def test_the_hold_is_cut_to_the_deadline_and_the_pull_commits_nothing() -> None:
    consumer, backend = core()
    backend.no_hold = True
    pulled = await pull(consumer, 0, long_polling_timeout_ms=20_000, time_remaining_ms=1_200)
    assert pulled.code == Code.MESSAGE_NOT_FOUND and pulled.next_offset == 0
    assert backend.pulls[-1].suspend_timeout_ms == 700  # the deadline less the 500 ms reserve
    assert not backend.pulls[-1].HasField("commit_offset") and backend.commits == []


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"group": ""}, Code.ILLEGAL_CONSUMER_GROUP),
        ({"offset": -1}, Code.ILLEGAL_OFFSET),
        ({"batch_size": -1}, Code.BAD_REQUEST),
        ({"long_polling_timeout_ms": -1}, Code.ILLEGAL_POLLING_TIME),
    ],
)
async def test_bad_pulls_are_refused_typed(overrides: dict[str, Any], code: int) -> None:
    consumer, _ = core()
    with pytest.raises(GatewayError) as info:
        await pull(consumer, overrides.pop("offset", 0), **overrides)
    assert info.value.code == code


async def test_an_offset_past_the_end_says_where_to_go_on() -> None:
    consumer, backend = core()
    backend.put("m0")
    pulled = await pull(consumer, 9)
    assert pulled.code == Code.ILLEGAL_OFFSET and "[0, 1]" in pulled.message and pulled.next_offset == 0


async def test_update_offset_commits_within_the_queue_and_spares_a_receiving_group() -> None:
    consumer, backend = core()
    backend.put("m0")
    await consumer.update_offset(group="G", store_id="s1", topic=TOPIC, queue_id=0, offset=1)
    assert backend.offsets[("s1", "G", TOPIC, 0)] == 1
    refusals = [(2, 0, Code.ILLEGAL_OFFSET), (-1, 0, Code.ILLEGAL_OFFSET), (0, 5, Code.BAD_REQUEST)]
    for offset, queue_id, code in refusals:
        with pytest.raises(GatewayError) as info:
            await consumer.update_offset(group="G", store_id="s1", topic=TOPIC, queue_id=queue_id, offset=offset)
        assert info.value.code == code
    receive: dict[str, Any] = {
        "filter": tag("*"), "batch_size": 1, "invisible_ms": None, "long_polling_timeout_ms": 0,
        "client_id": "c", "auto_renew": False, "time_remaining_ms": None,
    }  # fmt: skip
    await consumer.receive(group="P", topic=TOPIC, **receive)
    with pytest.raises(GatewayError) as info:
        await consumer.update_offset(group="P", store_id="s1", topic=TOPIC, queue_id=0, offset=0)
    assert info.value.code == Code.PRECONDITION_FAILED
    consumer.drop_group("P")  # another gateway owns it now: not served here any more
    await consumer.update_offset(group="P", store_id="s1", topic=TOPIC, queue_id=0, offset=0)
    await consumer.close()
