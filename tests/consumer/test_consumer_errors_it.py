"""Errors a retry cannot fix stop a consumer instead of looping: at start() (bad SQL92,
missing topic, a group that may not consume) and while running (the group loses its
permission), on the session cluster's real processes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from support import ServiceFactory

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    ExpressionType,
    ForbiddenError,
    Message,
    MessageExt,
    NotFoundError,
    Producer,
    PushConsumer,
    TxmqError,
)
from txmq.errors import BadRequestError
from txmq.v1 import errors_pb2

from .conftest import Topics, assigned, unique, wait_until
from .consumer_settings import FAST


def _consumer(bootstrap: str, group: str, **options: object) -> PushConsumer:
    consumer = PushConsumer(
        group,
        bootstrap,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        **{**FAST, **options},  # type: ignore[arg-type]
    )
    consumer.register_message_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    return consumer


@pytest.fixture
def group(admin: Admin) -> Iterator[str]:
    name = unique("errs")
    yield name
    try:
        admin.delete_subscription_group(name)
    except NotFoundError:
        pass


def test_bad_sql92_fails_start_with_the_sql_error_code(bootstrap: str, new_topic: Topics, group: str) -> None:
    topic = new_topic()
    consumer = _consumer(bootstrap, group)
    consumer.subscribe(topic, "region = ", ExpressionType.SQL92)
    with pytest.raises(BadRequestError) as info:
        consumer.start()
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION and not info.value.retriable
    assert consumer.assignment() == set()
    # Fixed, it starts (start() raising left it startable).
    consumer.subscribe(topic, "region = 'eu'", ExpressionType.SQL92)
    consumer.start()
    try:
        wait_until(lambda: len(assigned(consumer, topic)) == 4, what=f"queues of {topic} assigned")
        # Subscribing again while running is checked the same way, and changes nothing.
        with pytest.raises(BadRequestError) as again:
            consumer.subscribe(topic, "region = ", ExpressionType.SQL92)
        assert again.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
        assert consumer.wait(timeout=0.01) is False and consumer.error is None
    finally:
        consumer.shutdown()


def test_missing_topic_fails_start(bootstrap: str, group: str) -> None:
    consumer = _consumer(bootstrap, group)
    consumer.subscribe(unique("no-such-topic"))
    with pytest.raises(NotFoundError) as info:
        consumer.start()
    assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND


def test_group_that_may_not_consume_fails_start(bootstrap: str, admin: Admin, new_topic: Topics, group: str) -> None:
    admin.create_subscription_group(group, consume_enable=False)
    # A paused group is waited out by default (docs/consumers.md "Pausing a group"); this
    # consumer asks for the strict behaviour: a disabled group is an error.
    consumer = _consumer(bootstrap, group, pause_on_consume_disabled=False)
    consumer.subscribe(new_topic())
    with pytest.raises(ForbiddenError) as info:
        consumer.start()
    assert info.value.code == errors_pb2.CODE_CONSUME_DISABLED


def test_a_later_non_retriable_error_stops_the_consumer_and_is_reported(
    bootstrap: str,
    admin: Admin,
    new_topic: Topics,
    producer: Producer,
    group: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = new_topic(queues=2)
    admin.create_subscription_group(group)
    reported: list[TxmqError] = []
    reported_once = threading.Event()
    consumed: list[MessageExt] = []

    def on_error(err: TxmqError) -> None:
        reported.append(err)
        reported_once.set()

    consumer = _consumer(bootstrap, group, on_error=on_error, pause_on_consume_disabled=False)

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        consumed.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_message_listener(listener)
    consumer.subscribe(topic)
    consumer.start()
    try:
        producer.send(Message(topic, b"before", queue_id=0))
        wait_until(lambda: len(consumed) == 1, what="the first message consumed")
        assert consumer.wait(timeout=0.01) is False  # running

        with caplog.at_level(logging.WARNING, logger="txmq"):
            admin.update_subscription_group(group, consume_enable=False)
            assert reported_once.wait(60), "the consumer did not stop"
            with pytest.raises(ForbiddenError) as info:
                consumer.wait(timeout=30)
        assert info.value.code == errors_pb2.CODE_CONSUME_DISABLED
        assert [e.code for e in reported] == [errors_pb2.CODE_CONSUME_DISABLED]
        assert consumer.error is info.value and consumer.assignment() == set()
        stops = [r for r in caplog.records if "a retry cannot fix this" in r.getMessage()]
        assert len(stops) == 1 and stops[0].levelno == logging.ERROR
        # Nothing loops after the stop: no "retrying" line for the forbidden pulls.
        assert not [r for r in caplog.records if "retrying" in r.getMessage() and "CONSUME_DISABLED" in r.getMessage()]
        with pytest.raises(RuntimeError):
            consumer.start()
    finally:
        consumer.shutdown()  # after a stop on an error: returns at once


def test_a_retriable_error_is_retried_with_a_bounded_number_of_lines(
    service_factory: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The pull service goes away and comes back: the consumer keeps trying, logs one
    line when a call starts failing (not one per attempt) and one when it works again."""
    store = service_factory.store()
    pull = service_factory.start("pull")
    topic, group = unique("retry"), unique("retry-group")
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    consumed: list[bytes] = []
    consumer = PushConsumer(
        group,
        store.address,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        **{**FAST, "route_refresh_interval": 0.5},  # type: ignore[arg-type]
    )
    consumer.register_message_listener(
        lambda msgs: consumed.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS
    )
    consumer.subscribe(topic)
    key = ("pull-addresses", topic)
    with caplog.at_level(logging.INFO, logger="txmq"), Producer("retry-producer", store.address) as producer:
        consumer.start()
        try:
            producer.send(Message(topic, b"one"))
            wait_until(lambda: consumed == [b"one"], what="the first message consumed")
            pull.stop()
            started = time.monotonic()
            # Heartbeats (every 0.2 s) find no pull instance; wait for many failures.
            wait_until(lambda: consumer._failures.failing(key) >= 20, what="20 failed look-ups")
            elapsed = time.monotonic() - started
            lines = [r for r in caplog.records if f"finding the pull instances of topic {topic}" in r.getMessage()]
            assert len(lines) <= 1 + int(elapsed // 60), [r.getMessage() for r in lines]
            assert consumer.wait(timeout=0.01) is False  # still running: a retry can fix this

            pull.restart()
            producer.send(Message(topic, b"two"))
            wait_until(
                lambda: b"two" in consumed, timeout_s=60, what="consuming again"
            )  # "one" may come again: at least once
            again = [
                r
                for r in caplog.records
                if f"finding the pull instances of topic {topic} works again" in r.getMessage()
            ]
            assert len(again) == 1 and consumer._failures.failing(key) == 0
        finally:
            consumer.shutdown()
    assert consumer.error is None
