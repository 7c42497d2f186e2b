"""PullConsumer against the session cluster's real store and pull processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from txmq import (
    BadRequestError,
    ExpressionType,
    Message,
    MessageQueue,
    NotFoundError,
    Producer,
    PullConsumer,
    PullStatus,
)
from txmq.v1 import errors_pb2

from .conftest import Topics, unique


@pytest.fixture
def consumer(bootstrap: str) -> Iterator[PullConsumer]:
    with PullConsumer(unique("pull-group"), bootstrap) as client:
        yield client


def _queue(consumer: PullConsumer, topic: str, queue_id: int = 0) -> MessageQueue:
    return next(q for q in consumer.fetch_message_queues(topic) if q.queue_id == queue_id)


def test_fetch_message_queues(consumer: PullConsumer, new_topic: Topics) -> None:
    topic = new_topic(queues=3)
    queues = consumer.fetch_message_queues(topic)
    assert [q.queue_id for q in queues] == [0, 1, 2]
    assert {q.topic for q in queues} == {topic}
    with pytest.raises(NotFoundError) as info:
        consumer.fetch_message_queues(unique("missing"))
    assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND


def test_found_no_new_msg_offset_illegal(consumer: PullConsumer, new_topic: Topics, producer: Producer) -> None:
    topic = new_topic()
    mq = _queue(consumer, topic, 1)
    empty = consumer.pull(mq, "*", 0, suspend=False)
    assert (empty.status, empty.next_begin_offset, empty.messages) == (PullStatus.NO_NEW_MSG, 0, [])
    sent = [producer.send(Message(topic, f"m{i}".encode(), tags="A", queue_id=1)) for i in range(3)]
    found = consumer.pull(mq, "*", 1, suspend=False)
    assert found.status is PullStatus.FOUND
    assert [(m.body, m.queue_offset, m.msg_id) for m in found.messages] == [
        (b"m1", 1, sent[1].msg_id),
        (b"m2", 2, sent[2].msg_id),
    ]
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (3, 0, 3)
    assert found.messages[0].tags == "A" and found.messages[0].store_id == mq.store_id
    at_end = consumer.pull(mq, "*", 3, suspend=False)
    assert (at_end.status, at_end.next_begin_offset) == (PullStatus.NO_NEW_MSG, 3)
    beyond = consumer.pull(mq, "*", 10, suspend=False)
    assert beyond.status is PullStatus.OFFSET_ILLEGAL
    assert 0 <= beyond.next_begin_offset <= 3
    assert consumer.pull(mq, "*", 0, 2, suspend=False).next_begin_offset == 2  # max_nums


def test_tag_filter_rechecks_tag_strings(consumer: PullConsumer, new_topic: Topics, producer: Producer) -> None:
    # "Aa" and "BB" have the same Java hash code: the service cannot tell them apart in
    # the consume queue, the client re-check can.
    topic = new_topic()
    mq = _queue(consumer, topic)
    for tag in ("Aa", "BB", "C", "Aa", None):
        producer.send(Message(topic, f"{tag}".encode(), tags=tag, queue_id=0))
    only_aa = consumer.pull(mq, "Aa", 0, suspend=False)
    assert only_aa.status is PullStatus.FOUND
    assert [(m.tags, m.queue_offset) for m in only_aa.messages] == [("Aa", 0), ("Aa", 3)]
    assert only_aa.next_begin_offset == 5
    either = consumer.pull(mq, " BB || C ", 0, suspend=False)
    assert [m.tags for m in either.messages] == ["BB", "C"]
    # The BB at offset 1 passes the service's hash check, fails the client's re-check.
    collided = consumer.pull(mq, "Aa", 1, 1, suspend=False)
    assert (collided.status, collided.messages, collided.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, [], 2)
    everything = consumer.pull(mq, "*", 0, suspend=False)
    assert len(everything.messages) == 5
    with pytest.raises(BadRequestError) as info:
        consumer.pull(mq, " || ", 0, suspend=False)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION


def test_sql92_filter(consumer: PullConsumer, new_topic: Topics, producer: Producer) -> None:
    topic = new_topic()
    mq = _queue(consumer, topic)
    for i, region in enumerate(["eu", "us", "eu", "ap"]):
        producer.send(Message(topic, f"m{i}".encode(), properties={"region": region, "n": str(i)}, queue_id=0))
    result = consumer.pull(mq, "region = 'eu' AND n > 0", 0, expression_type=ExpressionType.SQL92, suspend=False)
    assert result.status is PullStatus.FOUND
    assert [m.body for m in result.messages] == [b"m2"]
    assert result.messages[0].properties["region"] == "eu"
    with pytest.raises(BadRequestError) as info:
        consumer.pull(mq, "region = ", 0, expression_type=ExpressionType.SQL92, suspend=False)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION


class _PullStarted(grpc.UnaryUnaryClientInterceptor):
    """Sets ``started`` when a PullMessage call is handed to the channel."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        if client_call_details.method.endswith("/PullMessage"):
            self.started.set()
        return continuation(client_call_details, request)


def test_long_poll_is_woken_by_a_send(bootstrap: str, new_topic: Topics, producer: Producer) -> None:
    topic = new_topic()
    started = _PullStarted()
    with PullConsumer(unique("pull-group"), bootstrap, interceptors=[started]) as consumer:
        mq = _queue(consumer, topic, 2)

        def send_when_pulling() -> None:
            assert started.started.wait(30)
            time.sleep(0.3)  # let the pull reach its hold; the result is FOUND either way
            producer.send(Message(topic, b"wake", tags="T", queue_id=2))

        sender = threading.Thread(target=send_when_pulling)
        sender.start()
        try:
            result = consumer.pull(mq, "T", 0, suspend=True, timeout=20.0)
        finally:
            sender.join()
    assert result.status is PullStatus.FOUND
    assert [m.body for m in result.messages] == [b"wake"]


def test_suspended_pull_times_out_with_no_new_msg(consumer: PullConsumer, new_topic: Topics) -> None:
    topic = new_topic()
    result = consumer.pull(_queue(consumer, topic), "*", 0, suspend=True, timeout=0.2)
    assert result.status is PullStatus.NO_NEW_MSG


def test_commit_and_fetch_offset(consumer: PullConsumer, new_topic: Topics, producer: Producer) -> None:
    topic = new_topic()
    mq = _queue(consumer, topic, 3)
    assert consumer.fetch_offset(mq) is None
    for i in range(4):
        producer.send(Message(topic, f"m{i}".encode(), queue_id=3))
    consumer.commit_offset(mq, 2)
    assert consumer.fetch_offset(mq) == 2
    consumer.commit_offset(mq, 4)
    assert consumer.fetch_offset(mq) == 4
    assert (consumer.min_offset(mq), consumer.max_offset(mq)) == (0, 4)
    # Offsets belong to the group.
    with PullConsumer(unique("other-group"), consumer.endpoint) as other:
        assert other.fetch_offset(mq) is None
    with pytest.raises(BadRequestError):
        consumer.commit_offset(mq, -1)


def test_requires_start(bootstrap: str) -> None:
    consumer = PullConsumer(unique("pull-group"), bootstrap)
    with pytest.raises(RuntimeError):
        consumer.fetch_message_queues("anything")
    with pytest.raises(BadRequestError):
        PullConsumer("bad group!", bootstrap)
