"""Consistent subscriptions with real processes (RocketMQ #2954): a PushConsumer whose
subscription differs from a live member of its group is refused by the pull service
with CODE_SUBSCRIPTION_CONFLICT naming that member, holds no queue and joins by itself
once the member is gone; members that subscribe alike share the queues."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from txmq import Admin, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from txmq.errors import ConflictError
from txmq.v1 import errors_pb2

from .conftest import Cluster, Topics, assigned, unique, wait_until
from .consumer_settings import FAST


@pytest.fixture
def fast(fast_cluster: Cluster) -> Iterator[tuple[Cluster, Topics, Producer]]:
    with Admin(fast_cluster.bootstrap) as admin, Producer("consumer-test-producer", fast_cluster.bootstrap) as prod:
        topics = Topics(admin)
        yield fast_cluster, topics, prod
        topics.delete_all()


def _consumer(cluster: Cluster, group: str, topic: str, name: str, tags: str, seen: set[str]) -> PushConsumer:
    consumer = PushConsumer(
        group,
        cluster.bootstrap,
        client_id=name,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        **FAST,  # type: ignore[arg-type]
    )

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        seen.update(m.msg_id for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.subscribe(topic, tags)
    consumer.register_message_listener(listener)
    return consumer


def test_different_tags_the_second_is_refused_naming_the_first(
    fast: tuple[Cluster, Topics, Producer], caplog: pytest.LogCaptureFixture
) -> None:
    cluster, topics, producer = fast
    topic, group = topics(queues=4), unique("conflict-group")
    seen_a: set[str] = set()
    seen_b: set[str] = set()
    a = _consumer(cluster, group, topic, "consumer-a", "TagA", seen_a)
    b = _consumer(cluster, group, topic, "consumer-b", "TagB", seen_b)
    caplog.set_level(logging.ERROR, logger="txmq.consumer")
    a.start()
    try:
        wait_until(lambda: len(assigned(a, topic)) == 4, what="a alone owns every queue")
        b.start()  # does not raise: the refusal comes with its heartbeats
        wait_until(lambda: b.subscription_conflict is not None, what="b's heartbeat refused")
        err = b.subscription_conflict
        assert isinstance(err, ConflictError)
        assert err.code == errors_pb2.CODE_SUBSCRIPTION_CONFLICT and not err.retriable
        assert err.metadata == {"topic": topic, "other_client_id": "consumer-a"}
        for part in (repr(group), "'consumer-b'", repr(topic), "TAG 'TagB'", "'consumer-a'", "TAG 'TagA'"):
            assert part in err.message
        sent_a = [producer.send(Message(topic, b"a", tags="TagA")).msg_id for _ in range(8)]
        wait_until(lambda: set(sent_a) <= seen_a, what="a consumes every queue")
        assert not assigned(b, topic) and len(assigned(a, topic)) == 4 and not seen_b
        assert a.subscription_conflict is None
        refusals = [r for r in caplog.records if "refuses its subscription" in r.getMessage()]
        assert len(refusals) == 1  # once per change, not once per heartbeat
        # a leaves: b defines the group anew and takes every queue
        a.shutdown()
        wait_until(lambda: b.subscription_conflict is None, what="b accepted once a left")
        wait_until(lambda: len(assigned(b, topic)) == 4, what="b owns every queue")
        sent_b = [producer.send(Message(topic, b"b", tags="TagB")).msg_id for _ in range(8)]
        wait_until(lambda: set(sent_b) <= seen_b, what="b consumes")
    finally:
        b.shutdown()
        a.shutdown()


def test_same_tags_both_consume(fast: tuple[Cluster, Topics, Producer]) -> None:
    cluster, topics, producer = fast
    topic, group = topics(queues=4), unique("same-group")
    seen: set[str] = set()
    a = _consumer(cluster, group, topic, "consumer-a", "TagA || TagB", seen)
    b = _consumer(cluster, group, topic, "consumer-b", "TagB||TagA", seen)  # the same filter
    a.start()
    b.start()
    try:
        wait_until(
            lambda: len(assigned(a, topic)) == len(assigned(b, topic)) == 2, what="the queues split between a and b"
        )
        assert a.subscription_conflict is None and b.subscription_conflict is None
        sent = [producer.send(Message(topic, b"x", tags="TagB")).msg_id for _ in range(8)]
        wait_until(lambda: set(sent) <= seen, what="every message consumed")
    finally:
        b.shutdown()
        a.shutdown()
