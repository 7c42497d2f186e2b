"""A woken raw pull answered from the records the arrival stream carried (no second read
of the store), and when it must read instead: answer_from_arrivals on synthetic events,
then end to end against the session cluster's real store."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from txmq.records import decode_messages, encode_for_send
from txmq.v1 import common_pb2, pull_pb2
from txmq_pull.filters import parse_filter
from txmq_pull.hold import ArrivalEvent, QueueKey
from txmq_pull.processor import ValidPull, answer_from_arrivals
from txmq_runtime.tags import tag_hash_code

from .conftest import MakeCore, StoreAccess, arrivals_live, eventually, pull_request, unique

GUARD_S = 10
KEY = QueueKey("store-x", "T", 0)


def event(offset: int, *, record: bool = True, tag: str = "", key: QueueKey = KEY, **props: str) -> ArrivalEvent:
    body = encode_for_send("T", 0, b"m%d" % offset, f"U{offset}", tags=tag or None) if record else b""
    return ArrivalEvent(key, offset, offset + 1, tag_hash_code(tag) if tag else 0, props, 3, body)


def pull(*, max_messages: int = 32, tag: str | None = None) -> ValidPull:
    expr = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=tag) if tag else None
    return ValidPull(KEY, None, "g", parse_filter(expr, property_filter_enable=True), max_messages, True)  # type: ignore[arg-type]


def bodies(resp: pull_pb2.PullMessageResponse | None) -> list[bytes]:
    assert resp is not None
    return [m.body for m in decode_messages(resp.records, resp.store_id)]


def test_a_run_from_the_offset_answers() -> None:
    resp = answer_from_arrivals(pull(), 5, [event(6), event(5), event(7), event(5)])  # unordered, repeated
    assert bodies(resp) == [b"m5", b"m6", b"m7"]
    assert resp is not None and resp.status == pull_pb2.PULL_STATUS_FOUND
    assert (resp.next_begin_offset, resp.min_offset, resp.max_offset, resp.store_id) == (8, 3, 8, "store-x")


def test_it_stops_at_a_gap_a_missing_record_or_max_messages() -> None:
    assert bodies(answer_from_arrivals(pull(), 5, [event(5), event(7)])) == [b"m5"]
    assert bodies(answer_from_arrivals(pull(), 5, [event(5), event(6, record=False), event(7)])) == [b"m5"]
    resp = answer_from_arrivals(pull(max_messages=2), 5, [event(5), event(6), event(7)])
    assert bodies(resp) == [b"m5", b"m6"] and resp is not None and resp.next_begin_offset == 7


def test_it_cannot_answer_when_the_run_does_not_start_at_the_offset() -> None:
    assert answer_from_arrivals(pull(), 5, [event(6), event(7)]) is None
    assert answer_from_arrivals(pull(), 5, [event(5, record=False)]) is None
    assert answer_from_arrivals(pull(), 5, [event(5, key=QueueKey("store-x", "T", 1))]) is None
    assert answer_from_arrivals(pull(), 5, []) is None


def test_the_filter_skips_as_the_store_does() -> None:
    resp = answer_from_arrivals(pull(tag="A"), 5, [event(5, tag="B"), event(6, tag="A"), event(7, tag="B")])
    assert bodies(resp) == [b"m6"] and resp is not None and resp.next_begin_offset == 8  # past the skipped ones
    assert answer_from_arrivals(pull(tag="A"), 5, [event(5, tag="B")]) is None  # nothing matched: read


def answered_from_arrivals() -> float:
    return REGISTRY.get_sample_value("txmq_pull_answered_from_arrivals_total") or 0.0


@pytest.mark.asyncio(loop_scope="session")
async def test_a_woken_raw_pull_needs_no_second_read(
    make_core: MakeCore, store_access: StoreAccess, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique("FromArrivals")
    await store_access.create_topic(topic, queues=1)
    core = await make_core()
    offset = await arrivals_live(core, store_access, topic)
    client = core.clients.client(store_access.store_id)
    reads: list[int] = []
    real_get = client.get_message

    async def counting_get(request):  # type: ignore[no-untyped-def]
        reads.append(request.offset)
        return await real_get(request)

    monkeypatch.setattr(client, "get_message", counting_get)
    request = pull_request(
        store_access.queue(topic), offset=offset, suspend=True, suspend_timeout_ms=15_000, sql="n > 5"
    )
    request.raw_records = True
    before = answered_from_arrivals()
    task = asyncio.ensure_future(core.processor.pull(request))
    await eventually(lambda: core.hold.held_on(QueueKey(store_access.store_id, topic, 0)) == 1)
    assert reads == [offset]  # the read that found nothing
    await store_access.send(topic, b"small", n="1")  # passes by, does not wake it
    await store_access.send(topic, b"big", n="9")
    resp = await asyncio.wait_for(task, GUARD_S)
    assert reads == [offset]  # answered without reading the store again
    assert answered_from_arrivals() == before + 1
    assert resp.status == pull_pb2.PULL_STATUS_FOUND and resp.next_begin_offset == offset + 2
    (got,) = decode_messages(resp.records, resp.store_id)
    assert (got.body, got.properties["n"], got.queue_offset) == (b"big", "9", offset + 1)
    # The same as a read of the store gives.
    again = pull_request(store_access.queue(topic), offset=offset, sql="n > 5")
    again.raw_records = True
    read = await core.processor.pull(again)
    assert (read.records, read.next_begin_offset, read.max_offset) == (
        resp.records,
        resp.next_begin_offset,
        resp.max_offset,
    )
