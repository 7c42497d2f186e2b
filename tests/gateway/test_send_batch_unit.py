"""Several messages in one SendMessageRequest: one batch, stored all or nothing
(rocketmq-apis #68) with one SendBatch on one queue of one store (no processes)."""

from __future__ import annotations

import pytest

from txmq.v1 import route_pb2
from txmq_gateway.producer import ProducerCore
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.v2 import Code, pb, svc

from .fake_backend import FakeBackend

STORES = [
    route_pb2.QueueData(store_id="s1", read_queue_nums=4, write_queue_nums=4, perm=6),
    route_pb2.QueueData(store_id="s2", read_queue_nums=4, write_queue_nums=4, perm=6),
]


def core() -> tuple[ProducerCore, FakeBackend]:
    backend = FakeBackend(commit_log_offset=100)
    backend.add_topic("Orders", {q.store_id: q.write_queue_nums for q in STORES})
    backend.add_topic("Other", {"s1": 4})
    return ProducerCore(backend, GatewaySettings()), backend  # type: ignore[arg-type]


def message(i: int, topic: str = "Orders", **system: object) -> pb.Message:
    fields: dict[str, object] = {"message_id": f"ID{i}", "message_type": pb.NORMAL, **system}
    return pb.Message(topic=pb.Resource(name=topic), body=b"m%d" % i, system_properties=pb.SystemProperties(**fields))  # type: ignore[arg-type]


async def test_a_batch_is_one_store_call_on_one_queue_with_one_entry_per_message_in_order() -> None:
    producer, backend = core()
    response = await producer.send(svc.SendMessageRequest(messages=[message(i) for i in range(3)]))
    assert response.status.code == Code.OK
    assert [(e.status.code, e.message_id) for e in response.entries] == [(Code.OK, f"ID{i}") for i in range(3)]
    assert len({(store, m.queue_id) for store, m, _, _ in backend.sends}) == 1
    assert [m.body for _, m, _, _ in backend.sends] == [b"m0", b"m1", b"m2"]
    offsets = [e.offset for e in response.entries]
    assert offsets == sorted(offsets) and len(set(offsets)) == 3


@pytest.mark.parametrize(
    ("third", "code", "words"),
    [
        (lambda m: m.ClearField("body"), Code.MESSAGE_BODY_EMPTY, "message 3 of the batch"),
        (lambda m: setattr(m.topic, "name", "Other"), Code.BAD_REQUEST, "share one topic"),
        (
            lambda m: setattr(m.system_properties, "message_type", pb.TRANSACTION),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "transactional",
        ),
        (lambda m: setattr(m.system_properties, "message_group", "g"), Code.BAD_REQUEST, "one message group"),
        (lambda m: setattr(m.system_properties, "message_id", "ID0"), Code.ILLEGAL_MESSAGE_ID, "distinct"),
        (lambda m: setattr(m.system_properties, "message_type", pb.DELAY), Code.ILLEGAL_DELIVERY_TIME, "message 3"),
    ],
)
async def test_one_bad_message_refuses_the_whole_batch_and_stores_nothing(third, code: int, words: str) -> None:  # type: ignore[no-untyped-def]
    producer, backend = core()
    messages = [message(i) for i in range(4)]
    third(messages[2])
    response = await producer.send(svc.SendMessageRequest(messages=messages))
    assert response.status.code == code and words in response.status.message, response.status
    assert "all or nothing" in response.status.message
    assert [e.status.code for e in response.entries] == [code] * 4
    assert [e.message_id for e in response.entries] == [m.system_properties.message_id for m in messages]
    assert backend.sends == []


async def test_a_store_refusal_stores_none_and_fails_every_entry() -> None:
    from txmq.errors import error
    from txmq.v1 import errors_pb2

    producer, backend = core()
    backend.send_error = error(errors_pb2.CODE_BATCH_TOO_LARGE, "too large")
    response = await producer.send(svc.SendMessageRequest(messages=[message(i) for i in range(2)]))
    assert response.status.code == Code.PAYLOAD_TOO_LARGE
    assert [e.status.code for e in response.entries] == [Code.PAYLOAD_TOO_LARGE] * 2
    assert backend.sends == []


async def test_a_fifo_batch_goes_to_its_groups_queue() -> None:
    producer, backend = core()
    await producer.send_one(message(9, message_group="order-1"))
    response = await producer.send(
        svc.SendMessageRequest(messages=[message(i, message_group="order-1") for i in range(3)])
    )
    assert response.status.code == Code.OK
    assert len({(store, m.queue_id) for store, m, _, _ in backend.sends}) == 1


async def test_a_retried_batch_is_answered_with_the_first_result() -> None:
    producer, backend = core()
    request = svc.SendMessageRequest(messages=[message(i) for i in range(2)])
    first = await producer.send(request)
    again = await producer.send(request)
    assert first == again and len(backend.sends) == 2
