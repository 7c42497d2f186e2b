"""Retry and dead-letter topics on real processes (docs/consumers.md "Retries and dead
letters"): a store with short delay levels (``retry_cluster``), a pull service, the SDK's
consumers and the ``txmq dlq`` commands.

Every wait is for a condition, never for a duration; no assertion is about time.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    NotFoundError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)
from txmq.protocol import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, dlq_topic, retry_topic
from txmq_cli.main import cli

from .conftest import RETRY_DELAY_LEVELS, RETRY_DELAY_S, Cluster, Topics, assigned, unique, wait_until
from .consumer_settings import FAST


@dataclass(frozen=True)
class Seen:
    topic: str
    body: bytes
    msg_id: str
    reconsume_times: int
    origin_id: str | None
    at: float = 0.0  # time.time() when the listener got it


class Recorder:
    """A listener that records every delivery and answers what ``answer`` says."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.answer = lambda m: ConsumeStatus.CONSUME_SUCCESS
        self.pause = 0.0

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        status = ConsumeStatus.CONSUME_SUCCESS
        for m in msgs:
            with self.lock:
                self.seen.append(
                    Seen(
                        m.topic,
                        m.body,
                        m.msg_id,
                        m.reconsume_times,
                        m.properties.get(PROPERTY_ORIGIN_MESSAGE_ID),
                        time.time(),
                    )
                )
            if self.pause:
                time.sleep(self.pause)
            answer = self.answer(m)
            if answer is not ConsumeStatus.CONSUME_SUCCESS:
                status = answer
        return status

    def of(self, body: bytes) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.body == body]


@pytest.fixture
def env(retry_cluster: Cluster) -> Iterator[tuple[Cluster, Topics, Producer, Admin]]:
    with Admin(retry_cluster.bootstrap) as admin, Producer("retry-test-producer", retry_cluster.bootstrap) as prod:
        topics = Topics(admin, prefix="retry")
        yield retry_cluster, topics, prod, admin
        topics.delete_all()


def _consumer(cluster: Cluster, group: str, topic: str, recorder: Recorder, **options: object) -> PushConsumer:
    settings: dict[str, object] = {"consume_from": ConsumeFromWhere.FIRST_OFFSET, **FAST, **options}
    consumer = PushConsumer(group, cluster.bootstrap, **settings)  # type: ignore[arg-type]
    consumer.subscribe(topic)
    consumer.register_message_listener(recorder)
    return consumer


def _txmq(cluster: Cluster, *args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--endpoint", cluster.bootstrap])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.slow
def test_failing_message_goes_through_every_level_to_the_dead_letter_topic_and_back(env) -> None:  # type: ignore[no-untyped-def]
    cluster, topics, producer, admin = env
    topic, group, rec = topics(queues=1), unique("retry-group"), Recorder()
    failing = threading.Event()
    failing.set()
    rec.answer = lambda m: (
        ConsumeStatus.RECONSUME_LATER if m.body == b"poison" and failing.is_set() else ConsumeStatus.CONSUME_SUCCESS
    )
    poison = producer.send(Message(topic, b"poison", tags="T")).msg_id
    producer.send(Message(topic, b"ok", tags="T"))
    with _consumer(cluster, group, topic, rec, max_reconsume_times=3):
        letters = wait_until(lambda: admin.list_dead_letters(group), what="the poison message dead-lettered")
        # every retry level went by: the listener saw counts 0..3, always on the original topic
        assert [s.reconsume_times for s in rec.of(b"poison")] == [0, 1, 2, 3]
        # each retry waited for its level in the store's timer (never delivered early)
        times = [s.at for s in rec.of(b"poison")]
        assert all(b - a >= RETRY_DELAY_S - 0.1 for a, b in itertools.pairwise(times)), times
        assert {s.topic for s in rec.of(b"poison")} == {topic}
        assert {s.msg_id for s in rec.of(b"poison")} == {poison}
        assert [s.reconsume_times for s in rec.of(b"ok")] == [0]
        (letter,) = letters
        assert (letter.origin_topic, letter.msg_id, letter.reconsume_times) == (topic, poison, 4)
        assert letter.message.topic == dlq_topic(group) and letter.message.body == b"poison"
        # the original queue's offset went past the poison message (it is done here)
        with PullConsumer(group, cluster.bootstrap) as pc:
            (mq,) = pc.fetch_message_queues(topic)
            wait_until(lambda: pc.fetch_offset(mq) == 2, what="the offset committed past both messages")

        listed = json.loads(_txmq(cluster, "dlq", "list", group, "-o", "json"))
        assert [(d["msg_id"], d["origin_topic"], d["reconsume_times"]) for d in listed] == [(poison, topic, 4)]
        assert poison in _txmq(cluster, "dlq", "list", group)

        failing.clear()
        (resent,) = json.loads(_txmq(cluster, "dlq", "resend", group, "--all", "-o", "json"))
        assert resent["dead_letter_id"] == poison and resent["topic"] == topic and resent["msg_id"] != poison
        wait_until(
            lambda: any(s.msg_id == resent["msg_id"] for s in rec.of(b"poison")), what="the resent message consumed"
        )
    (again,) = [s for s in rec.of(b"poison") if s.msg_id == resent["msg_id"]]
    assert (again.topic, again.reconsume_times, again.origin_id) == (topic, 0, poison)
    assert len(admin.list_dead_letters(group)) == 1  # a resend leaves the dead letter where it is


def test_uncounted_answer_redelivers_without_counting(env) -> None:  # type: ignore[no-untyped-def]
    cluster, topics, producer, admin = env
    topic, group, rec = topics(queues=1), unique("retry-group"), Recorder()
    rec.answer = lambda m: (
        ConsumeStatus.RECONSUME_LATER_UNCOUNTED if len(rec.of(b"later")) <= 3 else ConsumeStatus.CONSUME_SUCCESS
    )
    # LAST_OFFSET (the default): the retry topic, which the group never committed on, is
    # still read from its first message.
    consumer = _consumer(cluster, group, topic, rec, max_reconsume_times=1, consume_from=ConsumeFromWhere.LAST_OFFSET)
    with consumer:
        wait_until(lambda: assigned(consumer, topic), what="the topic's queue taken")
        producer.send(Message(topic, b"later"))
        wait_until(lambda: len(rec.of(b"later")) == 4, what="four deliveries")
    # never counted, so never dead-lettered although 4 deliveries > 1 + max_reconsume_times
    assert [s.reconsume_times for s in rec.of(b"later")] == [0, 0, 0, 0]
    assert {s.topic for s in rec.of(b"later")} == {topic}
    assert admin.list_dead_letters(group) == []


@pytest.mark.slow
def test_limit_holds_with_a_listener_slower_than_the_redelivery_delay(env) -> None:  # type: ignore[no-untyped-def]
    cluster, topics, producer, admin = env
    topic, group, rec = topics(queues=1), unique("retry-group"), Recorder()
    rec.pause = 1.0  # longer than every delay level of the cluster (300 ms)
    rec.answer = lambda m: ConsumeStatus.RECONSUME_LATER
    producer.send(Message(topic, b"slow"))
    with _consumer(cluster, group, topic, rec, max_reconsume_times=2):
        wait_until(lambda: admin.list_dead_letters(group), what="the slow failing message dead-lettered")
    assert [s.reconsume_times for s in rec.of(b"slow")] == [0, 1, 2]
    (letter,) = admin.list_dead_letters(group)
    assert letter.reconsume_times == 3


def _retry_queue(pc: PullConsumer, group: str):  # type: ignore[no-untyped-def]
    def found():  # type: ignore[no-untyped-def]
        try:
            return pc.fetch_message_queues(retry_topic(group))
        except NotFoundError:
            return None

    (mq,) = wait_until(found, what="the retry topic's route")
    return mq


def test_pull_consumer_send_back_stores_one_copy_per_record(env) -> None:  # type: ignore[no-untyped-def]
    cluster, topics, producer, admin = env
    topic, group = topics(queues=1), unique("retry-group")
    sent = producer.send(Message(topic, b"pulled", tags="T", keys="k1", properties={"color": "red"}))
    with PullConsumer(group, cluster.bootstrap) as pc:
        (mq,) = pc.fetch_message_queues(topic)
        (m,) = pc.pull(mq, "*", 0, 1, suspend=False).messages
        first = pc.send_back(m)
        assert (first.topic, first.dead_lettered, first.reconsume_times) == (retry_topic(group), False, 1)
        assert first.msg_id == sent.msg_id and not first.duplicate
        again = pc.send_back(m)  # a retry after a lost answer, or another consumer
        assert again.duplicate and again.offset_msg_id == first.offset_msg_id
        rq = _retry_queue(pc, group)

        def pulled_copy() -> list[MessageExt]:
            r = pc.pull(rq, "*", 0, 8, suspend=False)
            return r.messages if r.status is PullStatus.FOUND else []

        (copy,) = wait_until(pulled_copy, what="the retry copy visible (after its delay in the timer)")
        assert pc.max_offset(rq) == 1  # one copy
        assert (copy.body, copy.tags, copy.keys, copy.msg_id) == (b"pulled", "T", ("k1",), sent.msg_id)
        assert copy.properties["color"] == "red" and copy.properties[PROPERTY_RETRY_TOPIC] == topic
        assert copy.reconsume_times == 1
        dead = pc.send_back(copy, delay_level=-1)
        assert (dead.topic, dead.dead_lettered, dead.reconsume_times) == (dlq_topic(group), True, 2)
    (letter,) = admin.list_dead_letters(group)
    assert (letter.origin_topic, letter.msg_id) == (topic, sent.msg_id)


@pytest.mark.slow
def test_a_send_back_to_a_store_that_is_down_falls_back_to_local_redelivery(service_factory) -> None:  # type: ignore[no-untyped-def]
    store = service_factory.store("--message_delay_levels", RETRY_DELAY_LEVELS)
    pull = service_factory.start("pull")
    topic, group = unique("retry-down"), unique("retry-group")
    with Admin(pull.address) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    with Producer("retry-test-producer", pull.address) as producer:
        producer.send(Message(topic, b"m"))
    first_running, store_down, store_back = threading.Event(), threading.Event(), threading.Event()
    seen: list[tuple[str, int, bool]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        (m,) = msgs
        seen.append((m.topic, m.reconsume_times, PROPERTY_RETRY_TOPIC in m.properties))
        if len(seen) == 1:  # the store goes down while this runs: the send-back fails
            first_running.set()
            store_down.wait(60)
            return ConsumeStatus.RECONSUME_LATER
        if PROPERTY_RETRY_TOPIC not in m.properties:  # redelivered from memory
            store_back.wait(60)  # until the store is back; its channel may still be reconnecting
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group, pull.address, consume_from=ConsumeFromWhere.FIRST_OFFSET, max_reconsume_times=16,
        **{**FAST, "route_refresh_interval": 0.5, "retry_backoff": 0.5, "retry_backoff_max": 2.0},  # type: ignore[arg-type]
    )  # fmt: skip
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with consumer:
        first_running.wait(60)
        store.kill()
        store_down.set()
        wait_until(lambda: len(seen) >= 2, what="the local redelivery")
        store.restart()
        store_back.set()
        wait_until(lambda: seen[-1][2], timeout_s=60, what="the retry copy from the store, back")
        assert consumer.error is None
    # delivered, redelivered from memory while the send-back failed (local counts 1, 2,
    # ...), then once from %RETRY% with the store's count: the record's 0 + 1
    local, (copy,) = seen[:-1], seen[-1:]
    assert len(local) >= 2 and local == [(topic, n, False) for n in range(len(local))]
    assert copy == (topic, 1, True)
