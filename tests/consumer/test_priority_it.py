"""Priority messages on real processes (docs/sdk.md "Priority messages"): a store (short
delay levels) restarted on its data, a pull service, the SDK's producer and push
consumer. Messages of mixed priorities sent before the consumer starts are consumed
highest first; the priority survives the restart; a retried message comes back with
its priority; bad input is a typed error.

Every wait is for a condition, never for a duration; no assertion is about time.
"""

from __future__ import annotations

import threading

import pytest

from txmq import (
    Admin,
    BadRequestError,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from txmq.protocol import MESSAGE_TYPE_PRIORITY, TOPIC_ATTRIBUTE_MESSAGE_TYPE, is_priority_topic, retry_topic
from txmq.v1 import errors_pb2

from .conftest import RETRY_DELAY_LEVELS, unique, wait_until
from .consumer_settings import FAST

QUEUES = 4
PER_PRIORITY = 6


def test_higher_priorities_first_across_a_restart_and_a_retry(service_factory) -> None:  # type: ignore[no-untyped-def]
    store = service_factory.store("--message_delay_levels", RETRY_DELAY_LEVELS)
    pull = service_factory.start("pull")
    topic, plain, group = unique("prio"), unique("plain"), unique("prio-group")
    with Admin(pull.address) as admin, Producer("prio-producer", pull.address) as producer:
        admin.create_topic(
            topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES,
            attributes={TOPIC_ATTRIBUTE_MESSAGE_TYPE: MESSAGE_TYPE_PRIORITY},
        )  # fmt: skip
        admin.create_topic(plain, read_queue_nums=1, write_queue_nums=1)
        # interleaved, lowest first: arrival order is the opposite of priority order
        sent = [
            producer.send(Message(topic, b"%d-%d" % (p, i), priority=p))
            for i in range(PER_PRIORITY)
            for p in range(QUEUES)
        ]
        assert {r.message_queue.queue_id for r in sent} == set(range(QUEUES))
        with pytest.raises(BadRequestError) as info:
            producer.send(Message(topic, b"too high", priority=QUEUES))
        assert info.value.code == errors_pb2.CODE_ILLEGAL_PRIORITY
        assert info.value.metadata["max_priority"] == str(QUEUES - 1)
        with pytest.raises(BadRequestError) as info:
            producer.send(Message(plain, b"not a priority topic", priority=1))
        assert info.value.code == errors_pb2.CODE_MESSAGE_TYPE_CONFLICT
        with pytest.raises(ValueError):
            Message(topic, b"x", priority=-1)

    store.stop()
    store.restart()  # the priorities and the topic's type are on disk

    seen: list[tuple[int | None, bytes, int]] = []
    lock = threading.Lock()
    failed_once = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        (m,) = msgs
        with lock:
            seen.append((m.priority, m.body, m.reconsume_times))
        if m.body == b"3-0" and not failed_once.is_set():
            failed_once.set()
            return ConsumeStatus.RECONSUME_LATER  # back through the store's retry topic
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group, pull.address, consume_from=ConsumeFromWhere.FIRST_OFFSET, consume_thread_max=1,
        pull_batch_size=2,  # several pulls per queue: the queues' pulls would interleave
        **{**FAST, "route_refresh_interval": 0.5},  # type: ignore[arg-type]
    )  # fmt: skip
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with consumer:
        wait_until(lambda: len(seen) == QUEUES * PER_PRIORITY + 1, timeout_s=60, what="every message and the retry")
        assert consumer.error is None
    first = [(p, body) for p, body, times in seen if times == 0]
    assert len(first) == QUEUES * PER_PRIORITY
    # one consume thread: the order of consumption is the order of delivery
    assert [p for p, _ in first] == sorted((p for p, _ in first), reverse=True), first
    # within a priority, the order of sending
    for p in range(QUEUES):
        assert [body for q, body in first if q == p] == [b"%d-%d" % (p, i) for i in range(PER_PRIORITY)]
    (retried,) = [(p, body) for p, body, times in seen if times == 1]
    assert retried == (3, b"3-0")
    with Admin(pull.address) as admin:
        assert is_priority_topic(admin.get_topic(retry_topic(group)).attributes)
