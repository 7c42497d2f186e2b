"""Delayed messages through the SDK against the session cluster: a delivery time and a
delay level, a batch and a packed send, and the message in its queue once, not before
its time (waits are liveness guards, not timing assertions)."""

from __future__ import annotations

import time

import pytest
from support.waiting import wait_until

from txmq import Admin, BadRequestError, ConflictError, Message, Producer, RecallHandle, SendStatus
from txmq.protocol import PROPERTY_TIMER_OFFSET
from txmq.v1 import errors_pb2


def stored(admin: Admin, topic: str) -> int:
    return sum(q.max_offset for q in admin.queue_offsets(topic))


def test_a_delayed_message_appears_once_after_its_time(producer: Producer, admin: Admin, topic: str) -> None:
    at = int(time.time() * 1000) + 3_000
    result = producer.send(Message(topic, b"later", keys="delayed-1", delivery_timestamp_ms=at))
    assert result.deliver_at_ms == at and result.queue_offset == -1
    immediate = producer.send(Message(topic, b"now"))
    assert immediate.deliver_at_ms == 0
    assert stored(admin, topic) == 1
    wait_until(lambda: stored(admin, topic) == 2, what="the delayed message's delivery")
    copy = admin.query_messages_by_key(topic, "delayed-1")
    assert [m.body for m in copy] == [b"later"]
    (m,) = copy
    assert m.store_timestamp_ms >= at  # never early (same host: one clock)
    assert (m.queue_id, m.unique_id) == (result.message_queue.queue_id, result.msg_id)
    assert PROPERTY_TIMER_OFFSET in m.properties
    time.sleep(1.5)  # a later tick must not deliver it again
    assert stored(admin, topic) == 2


def test_a_batch_with_a_delay_level_and_a_bad_delay(producer: Producer, admin: Admin, topic: str) -> None:
    results = producer.send_batch(
        [Message(topic, b"a", queue_id=1), Message(topic, b"b", queue_id=1, delay_level=2)]  # level 2: 5 s
    )
    assert [r.queue_offset for r in results] == [0, -1] and results[1].deliver_at_ms > 0
    with pytest.raises(BadRequestError) as info:
        producer.send(Message(topic, b"c", delay_level=99))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_DELIVERY_TIME
    with pytest.raises(BadRequestError) as info:
        producer.send(Message(topic, b"c", properties={"TIMER_DELAY_SEC": str(10 * 24 * 3600)}))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_DELIVERY_TIME
    wait_until(lambda: stored(admin, topic) == 2, what="the delay level's delivery")


def test_a_recalled_message_never_appears_and_a_delivered_one_cannot_be_recalled(
    producer: Producer, admin: Admin, topic: str
) -> None:
    at = int(time.time() * 1000) + 2_000
    recalled = producer.send(Message(topic, b"recalled", delivery_timestamp_ms=at))
    kept = producer.send(Message(topic, b"kept", delivery_timestamp_ms=at))
    assert producer.send(Message(topic, b"now")).recall_handle == ""
    handle = recalled.recall_handle
    assert RecallHandle.decode(handle) == RecallHandle(
        topic, recalled.message_queue.store_id, recalled.commit_log_offset, recalled.msg_id
    )
    assert producer.recall(handle) == SendStatus.OK
    assert producer.recall(handle) == SendStatus.OK  # again: the same answer
    wait_until(lambda: stored(admin, topic) == 2, what="the kept message's delivery")
    time.sleep(1.5)  # a later tick must not deliver the recalled one
    assert admin.query_message_by_unique_id(kept.msg_id, topic=topic).body == b"kept"
    assert stored(admin, topic) == 2
    with pytest.raises(ConflictError) as info:
        producer.recall(kept.recall_handle)
    assert info.value.code == errors_pb2.CODE_MESSAGE_ALREADY_DELIVERED
    with pytest.raises(BadRequestError) as bad:
        producer.recall("txr1.not-a-handle")
    assert bad.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
