"""The consumers' long polls on PullStream, on real processes: a PullConsumer's long
polls from several threads share one stream; a pull service killed with SIGKILL under a
push consumer's open stream and started again loses nothing — every message is consumed
once, and no offset is committed ahead of what the listener finished; with auth on,
each pull on a stream is checked as PullMessage and a refusal answers only that pull."""

from __future__ import annotations

import logging
import threading

import grpc
import pytest
from support import ServiceFactory

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Policy,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    signing,
)
from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, pull_pb2_grpc

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


SERVICE_KEY = "txmq-service"
SERVICE_SECRET = "service-secret-0123456789"
AUTH_FLAGS = ("--auth_enabled=true", "--auth_access_key", SERVICE_KEY, "--auth_secret_key", SERVICE_SECRET)
ROOT = signing.Credentials(SERVICE_KEY, SERVICE_SECRET)
ERIN = signing.Credentials("erin", "erin-secret-12")


@pytest.mark.slow
def test_each_streamed_pull_is_access_checked_and_a_refusal_answers_only_it(service_factory: ServiceFactory) -> None:
    store = service_factory.store(*AUTH_FLAGS)
    pull = service_factory.start("pull", *AUTH_FLAGS)
    topic, mine, theirs = unique("StreamAuthT"), unique("StreamAuthG"), unique("StreamAuthOther")
    with Admin(store.address, credentials=ROOT) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        admin.create_user(ERIN.access_key, ERIN.secret_key)
        admin.put_acl(ERIN.access_key, [Policy(f"Topic:{topic}", ("Sub",)), Policy(f"Group:{mine}", ("Sub",))])
    queue = common_pb2.MessageQueue(topic=topic, store_id="store-0", queue_id=0)
    requests = [
        pull_pb2.PullStreamRequest(request_id=1, pull=pull_pb2.PullMessageRequest(consumer_group=theirs, queue=queue)),
        pull_pb2.PullStreamRequest(request_id=2, pull=pull_pb2.PullMessageRequest(consumer_group=mine, queue=queue)),
    ]
    with grpc.insecure_channel(pull.address) as channel:
        answers = list(
            pull_pb2_grpc.PullStub(channel).PullStream(iter(requests), metadata=signing.auth_metadata(ERIN), timeout=30)
        )
    by_id = {a.request_id: a for a in answers}
    assert by_id[1].error.code == errors_pb2.CODE_ACCESS_DENIED  # Sub on the other group: refused
    assert by_id[2].pull.status == pull_pb2.PULL_STATUS_NO_NEW_MSG  # the same stream, allowed
    # The SDK's long poll on the stream raises the refusal as the unary call did.
    with PullConsumer(theirs, store.address, credentials=ERIN) as consumer:
        (mq,) = consumer.fetch_message_queues(topic)
        with pytest.raises(TxmqError) as err:
            consumer.pull(mq, "*", 0, 1, suspend=True, timeout=5.0)
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
        assert consumer._client is not None and consumer._client._streams  # it went on the stream
