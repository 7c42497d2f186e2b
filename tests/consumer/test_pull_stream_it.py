"""The consumers' long polls on PullStream, on real processes: a PullConsumer's long
polls from several threads share one stream; a pull service killed with SIGKILL under a
push consumer's open stream and started again loses nothing — every message is consumed
once, and no offset is committed ahead of what the listener finished."""

from __future__ import annotations

import logging
import threading

import pytest
from support import ServiceFactory

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)

from .conftest import unique, wait_until
from .consumer_settings import FAST


def test_long_polls_of_several_threads_share_one_stream(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    service_factory.start("pull")
    topic = unique("stream-share")
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=3, write_queue_nums=3)
    with PullConsumer(unique("stream-group"), store.address) as consumer, Producer("p", store.address) as producer:
        queues = consumer.fetch_message_queues(topic)
        results: dict[int, object] = {}

        def poll(i: int) -> None:
            results[i] = consumer.pull(queues[i], "*", 0, suspend=True, timeout=30.0)

        threads = [threading.Thread(target=poll, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        client = consumer._client
        assert client is not None
        wait_until(lambda: sum(s.outstanding for s in client._streams.values()) == 3, what="3 pulls on the stream")
        assert len(client._streams) == 1
        for i in range(3):
            producer.send(Message(topic, f"m{i}".encode(), queue_id=queues[i].queue_id))
        for t in threads:
            t.join(60)
    for i in range(3):
        r = results[i]
        assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [f"m{i}".encode()]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_kill_9_of_the_pull_service_under_an_open_stream_loses_nothing(
    service_factory: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = service_factory.store()
    pull = service_factory.start("pull")
    topic, group = unique("stream-kill"), unique("stream-kill-group")
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    lock = threading.Lock()
    consumed: list[bytes] = []
    ahead: list[str] = []
    checker = PullConsumer(group, store.address)
    checker.start()

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        for m in messages:
            # Nothing of this queue is committed at or past a message still being consumed.
            mq = MessageQueue(m.topic, m.store_id, m.queue_id)
            committed = checker.fetch_offset(mq)
            if committed is not None and committed > m.queue_offset:
                ahead.append(f"{mq}: committed {committed} while consuming {m.queue_offset}")
            with lock:
                consumed.append(m.body)
        return ConsumeStatus.CONSUME_SUCCESS

    # Heartbeats far apart: the consumer keeps its queues while the pull service is down.
    settings = {**FAST, "heartbeat_interval": 5.0, "takeover_delay": 10.0, "suspend_timeout": 30.0}
    consumer = PushConsumer(group, store.address, consume_from=ConsumeFromWhere.FIRST_OFFSET, **settings)  # type: ignore[arg-type]
    consumer.register_message_listener(listener)
    consumer.subscribe(topic)
    sent: list[bytes] = []
    with caplog.at_level(logging.INFO, logger="txmq"), Producer("stream-kill-producer", store.address) as producer:
        consumer.start()
        try:
            for i in range(40):
                sent.append(f"before-{i}".encode())
                producer.send(Message(topic, sent[-1], queue_id=i % 2))
            wait_until(lambda: len(consumed) == 40, what="the first 40 consumed")
            client = consumer._client
            assert client is not None
            wait_until(lambda: sum(s.outstanding for s in client._streams.values()) >= 2, what="long polls held")

            pull.kill()  # SIGKILL: the held pulls' stream breaks without an answer
            for i in range(40):
                sent.append(f"after-{i}".encode())
                producer.send(Message(topic, sent[-1], queue_id=i % 2))
            pull.restart()
            wait_until(lambda: len(consumed) >= 80, timeout_s=90, what="the rest consumed after the restart")
        finally:
            consumer.shutdown()
            checker.shutdown()
    assert consumer.error is None
    assert sorted(consumed) == sorted(sent)  # every message, once
    assert ahead == []
    assert any("pull stream to" in r.getMessage() and "broke" in r.getMessage() for r in caplog.records)
    with PullConsumer(group, store.address) as after:
        for mq in after.fetch_message_queues(topic):
            assert after.fetch_offset(mq) == after.max_offset(mq) == 40  # all committed, once done
