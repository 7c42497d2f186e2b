"""Orderly consumption on real processes: a store whose queue locks last 4 s
(``--queue_lock_lease_ms 4000``), a pull service that forgets a silent consumer after 2 s,
and orderly PushConsumers.

- Two orderly consumers in processes of their own (orderly_child.py): the first alone,
  then a second (the rebalance hands queues over through the store's locks), then the
  first killed with SIGKILL (its locks run out on the store). For every queue: nobody
  consumed a message while another consumer was consuming on that queue, each holder
  consumed in offset order without skipping, and every message was consumed
  (uncommitted ones may come again after the kill).
- A failing listener suspends its queue and gets the same message again, in order: the
  next message is not consumed before the failing one succeeded.

Every wait is for a condition, never for a duration.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from support import ServiceFactory
from support.scratch import scoped_dir

from txmq import Admin, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PullConsumer, PushConsumer
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc
from txmq_cli.cluster import ChildProcess

from .conftest import Cluster, Topics, unique, wait_until
from .consumer_settings import FAST

CHILD = Path(__file__).with_name("orderly_child.py")
LEASE_MS = 4000
QUEUES = 4


@pytest.fixture(scope="module")
def lock_cluster(etcd, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # type: ignore[no-untyped-def]
    factory = ServiceFactory(
        etcd_endpoints=etcd.endpoint, base_dir=scoped_dir(request, tmp_path_factory, "orderly-cluster")
    )
    try:
        factory.store("--queue_lock_lease_ms", str(LEASE_MS))
        pull = factory.start("pull", "--consumer_expiry_ms", "2000")
        yield Cluster(pull.address, pull.address)
    finally:
        factory.close()


@pytest.fixture
def env(lock_cluster: Cluster) -> Iterator[tuple[Cluster, Topics, Producer]]:
    with Admin(lock_cluster.bootstrap) as admin, Producer("orderly-test-producer", lock_cluster.bootstrap) as prod:
        topics = Topics(admin)
        yield lock_cluster, topics, prod
        topics.delete_all()


def _send(producer: Producer, topic: str, per_queue: int, sent: dict[int, int]) -> None:
    """``per_queue`` numbered messages to every queue; ``sent`` counts them per queue."""
    for n in range(per_queue):
        for q in range(QUEUES):
            producer.send(Message(topic, f"q{q}-{sent.get(q, 0) + n}".encode(), queue_id=q))
    for q in range(QUEUES):
        sent[q] = sent.get(q, 0) + per_queue


@dataclass
class Consumed:
    client: str
    queue: int
    offset: int
    reconsume_times: int
    start: float
    end: float | None = None


def _read(path: Path) -> tuple[list[Consumed], list[list[int]]]:
    events: list[Consumed] = []
    open_: dict[tuple[str, int, int], Consumed] = {}
    assignments: list[list[int]] = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "assign":
            assignments.append([int(p) for p in parts[1:]])
        elif parts[0] == "start" and len(parts) == 6:
            c = Consumed(parts[1], int(parts[2]), int(parts[3]), int(parts[4]), float(parts[5]))
            events.append(c)
            open_[(c.client, c.queue, c.offset)] = c
        elif parts[0] == "end" and len(parts) == 5:
            c2 = open_.pop((parts[1], int(parts[2]), int(parts[3])), None)
            if c2 is not None:
                c2.end = float(parts[4])
    return events, assignments


def _consumed(events: list[Consumed]) -> dict[int, set[int]]:
    done: dict[int, set[int]] = {}
    for e in events:
        if e.end is not None:
            done.setdefault(e.queue, set()).add(e.offset)
    return done


def _all_consumed(events: list[Consumed], sent: dict[int, int]) -> bool:
    done = _consumed(events)
    return all(set(range(n)) <= done.get(q, set()) for q, n in sent.items())


def check_orderly(events: list[Consumed], sent: dict[int, int], *, ends: dict[str, float]) -> None:
    """The orderly guarantees, per queue (a delivery that never ended, its process
    killed, lasts until ``ends[client]``)."""
    for q in range(QUEUES):
        on_q = sorted((e for e in events if e.queue == q), key=lambda e: e.start)
        assert on_q and on_q[0].offset == 0, f"queue {q}: first delivery {on_q[:1]}"
        for prev, e in itertools.pairwise(on_q):
            prev_end = prev.end if prev.end is not None else ends[prev.client]
            if prev.client != e.client:
                # Nobody starts on a queue while another consumer is still on it.
                assert prev_end <= e.start, f"queue {q}: {e} started while {prev} ran"
                # The next holder starts at the committed offset: redelivery, never a gap.
                assert e.offset <= prev.offset + 1, f"queue {q}: {e} skipped ahead of {prev}"
            else:
                assert e.offset == prev.offset + 1, f"queue {q}: {e} after {prev}: not in offset order"
        assert set(range(sent[q])) <= {e.offset for e in on_q if e.end is not None}, f"queue {q}: not all consumed"


def _child(cluster: Cluster, group: str, topic: str, record: Path, name: str, tmp_path: Path) -> ChildProcess:
    record.touch()
    child = ChildProcess(
        name=name,
        argv=[sys.executable, str(CHILD), cluster.bootstrap, group, topic, str(record), name],
        log_path=tmp_path / f"{name}.log",
    )
    child.spawn()
    return child


@pytest.mark.slow
def test_two_orderly_consumers_never_interleave_on_a_queue(
    env: tuple[Cluster, Topics, Producer], tmp_path: Path
) -> None:
    cluster, topics, producer = env
    topic, group = topics(queues=QUEUES), unique("orderly-group")
    sent: dict[int, int] = {}
    rec_a, rec_b = tmp_path / "a.record", tmp_path / "b.record"
    _send(producer, topic, 40, sent)
    a = _child(cluster, group, topic, rec_a, "consumer-a", tmp_path)
    b: ChildProcess | None = None
    try:

        def a_consumes(n: int) -> bool:
            assert a.running(), a.log_tail()
            return sum(e.end is not None for e in _read(rec_a)[0]) >= n

        wait_until(lambda: a_consumes(8), what="a consuming alone")
        b = _child(cluster, group, topic, rec_b, "consumer-b", tmp_path)
        _send(producer, topic, 40, sent)

        last_send = time.monotonic()

        def b_took_over() -> bool:
            nonlocal last_send
            assert b is not None and b.running(), b.log_tail() if b else ""
            b_events = _read(rec_b)[0]
            a_queues = {e.queue for e in _read(rec_a)[0]}
            if any(e.end is not None and e.queue in a_queues for e in b_events):
                return True
            # a may drain everything before b's rebalance hands it a queue: keep a
            # little coming, so the queue b takes over has something to consume.
            if time.monotonic() - last_send > 1.0:
                _send(producer, topic, 1, sent)
                last_send = time.monotonic()
            return False

        wait_until(b_took_over, timeout_s=60, what="b consuming a queue a consumed before (a hand-over)")
        a_before = sum(e.end is not None for e in _read(rec_a)[0])
        _send(producer, topic, 40, sent)
        wait_until(lambda: a_consumes(a_before + 3), what="a still consuming its share")
        a.kill()  # SIGKILL: no commit, no unlock: its locks run out on the store
        a_killed = time.monotonic()
        _send(producer, topic, 20, sent)

        def all_done() -> bool:
            assert b is not None and b.running(), b.log_tail() if b else ""
            return _all_consumed(_read(rec_a)[0] + _read(rec_b)[0], sent)

        wait_until(all_done, timeout_s=90, what="every message consumed")
        b.kill()
        b_killed = time.monotonic()
    finally:
        a.kill()
        if b is not None:
            b.kill()
    a_events, b_events = _read(rec_a)[0], _read(rec_b)[0]
    assert all(e.start <= a_killed for e in a_events)
    assert {e.queue for e in b_events if e.start > a_killed} & {e.queue for e in a_events}, "b took nothing from a"
    check_orderly(a_events + b_events, sent, ends={"consumer-a": a_killed, "consumer-b": b_killed})


@pytest.mark.slow
def test_a_failing_message_suspends_its_queue_and_is_retried_before_the_next(
    env: tuple[Cluster, Topics, Producer],
) -> None:
    cluster, topics, producer = env
    topic, group = topics(queues=1), unique("orderly-group")
    for n in range(6):
        producer.send(Message(topic, f"m{n}".encode(), queue_id=0))
    seen: list[tuple[int, int, float, float]] = []  # (offset, reconsume_times, start, end)
    fails = {2: 3}  # offset 2 fails three times: once raising, then RECONSUME_LATER
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        (m,) = msgs
        start = time.monotonic()
        with lock:
            left = fails.get(m.queue_offset, 0)
            fails[m.queue_offset] = left - 1
        status = ConsumeStatus.RECONSUME_LATER if left > 0 else ConsumeStatus.CONSUME_SUCCESS
        if left == 3:
            with lock:
                seen.append((m.queue_offset, m.reconsume_times, start, time.monotonic()))
            raise RuntimeError("failing on purpose")
        with lock:
            seen.append((m.queue_offset, m.reconsume_times, start, time.monotonic()))
        return status

    consumer = PushConsumer(
        group,
        cluster.bootstrap,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        orderly=True,
        suspend_current_queue_time=0.2,
        **FAST,  # type: ignore[arg-type]
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        wait_until(lambda: any(o == 5 for o, *_ in seen), timeout_s=30, what="every message consumed")
    finally:
        consumer.shutdown()
    assert [(o, r) for o, r, *_ in seen] == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (2, 3), (3, 0), (4, 0), (5, 0)]
    # One at a time: each delivery starts after the previous one ended.
    for prev, nxt in itertools.pairwise(seen):
        assert prev[3] <= nxt[2]


def test_a_message_failing_past_the_limit_goes_to_the_dead_letter_topic_and_the_queue_goes_on(
    env: tuple[Cluster, Topics, Producer],
) -> None:
    """Orderly: after max_reconsume_times failures the message is sent to %DLQ%<group>
    through the store's SendBack (delay level -1), and the messages after it follow in order."""
    cluster, topics, producer = env
    topic, group = topics(queues=1), unique("orderly-group")
    poison = None
    for n in range(4):
        sent = producer.send(Message(topic, f"m{n}".encode(), queue_id=0))
        poison = sent.msg_id if n == 1 else poison
    seen: list[tuple[int, int]] = []  # (offset, reconsume_times)
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        (m,) = msgs
        with lock:
            seen.append((m.queue_offset, m.reconsume_times))
        return ConsumeStatus.RECONSUME_LATER if m.queue_offset == 1 else ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group,
        cluster.bootstrap,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        orderly=True,
        suspend_current_queue_time=0.1,
        max_reconsume_times=2,
        **FAST,  # type: ignore[arg-type]
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        wait_until(lambda: any(o == 3 for o, _ in seen), timeout_s=30, what="every message consumed")
    finally:
        consumer.shutdown()
    assert seen == [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (3, 0)]
    with Admin(cluster.bootstrap) as admin:
        (letter,) = wait_until(lambda: admin.list_dead_letters(group), what="the dead letter")
    assert (letter.msg_id, letter.origin_topic) == (poison, topic)


@pytest.mark.slow
def test_a_restarted_store_grants_no_lock_for_half_a_lease_and_the_consumer_goes_on(
    etcd,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    """The store is killed and restarted under an orderly consumer. Another client asks
    for the queues from the moment the store is back: it gets them no earlier than half a
    lease after the restart began, and the consumer starts nothing while it holds them.
    The consumer, whose renewal the restarted store refuses, stops, locks again once it
    may, and consumes everything (redelivering what it had not committed), in order."""
    lease_ms, queues = 6000, 2
    factory = ServiceFactory(etcd_endpoints=etcd.endpoint, base_dir=tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    store = factory.store("--queue_lock_lease_ms", str(lease_ms))
    pull = factory.start("pull", "--consumer_expiry_ms", "2000")
    events: list[Consumed] = []
    guard = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            c = Consumed("c", m.queue_id, m.queue_offset, m.reconsume_times, time.monotonic())
            with guard:
                events.append(c)
            time.sleep(0.01)
            c.end = time.monotonic()
        return ConsumeStatus.CONSUME_SUCCESS

    try:
        with Admin(pull.address) as admin, Producer("orderly-restart-producer", pull.address) as producer:
            topic, group = unique("orderly-restart"), unique("orderly-group")
            admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
            sent = {q: 0 for q in range(queues)}

            def send(per_queue: int) -> None:
                for q in range(queues):
                    for _ in range(per_queue):
                        producer.send(Message(topic, f"q{q}-{sent[q]}".encode(), queue_id=q))
                        sent[q] += 1

            send(100)
            with PullConsumer(group, pull.address) as pc:
                mqs = [
                    common_pb2.MessageQueue(topic=mq.topic, store_id=mq.store_id, queue_id=mq.queue_id)
                    for mq in pc.fetch_message_queues(topic)
                ]
            consumer = PushConsumer(
                group,
                pull.address,
                consume_from=ConsumeFromWhere.FIRST_OFFSET,
                orderly=True,
                **FAST,  # type: ignore[arg-type]
            )
            consumer.subscribe(topic, "*")
            consumer.register_message_listener(listener)
            consumer.start()
            try:
                wait_until(lambda: sum(e.end is not None for e in events) >= 20, what="consuming before the restart")
                store.kill()
                restart_began = time.monotonic()
                store.restart()
                request = store_pb2.LockQueuesRequest(group=group, client_id="intruder", queues=mqs)
                with grpc.insecure_channel(store.address) as channel:
                    stub = store_pb2_grpc.ConsumerControlStub(channel)

                    # Asked for back to back, so the intruder, not the consumer (which
                    # asks every 0.5 s), almost surely gets the first queue freed.
                    deadline = time.monotonic() + 60
                    held: set[int] = set()
                    while not held:
                        assert time.monotonic() < deadline, "the store never granted the intruder a lock"
                        held = {q.queue_id for q in stub.LockQueues(request, timeout=5).locked}
                    granted = time.monotonic()
                    send(20)  # the consumer must not consume the held queues meanwhile
                    held_until = time.monotonic()
                    stub.UnlockQueues(
                        store_pb2.UnlockQueuesRequest(group=group, client_id="intruder", queues=mqs), timeout=5
                    )
                assert granted - restart_began >= lease_ms / 2000, (
                    "a lock was granted within half a lease of the restart"
                )
                wait_until(
                    lambda: _all_consumed(list(events), sent), timeout_s=60, what="every message consumed after it"
                )
            finally:
                consumer.shutdown()
    finally:
        factory.close()
    assert not [e for e in events if e.queue in held and granted <= e.start <= held_until], (
        "consumed while another client held the lock"
    )
    for q in range(queues):
        on_q = sorted((e for e in events if e.queue == q), key=lambda e: e.start)
        for prev, e in itertools.pairwise(on_q):
            assert prev.end is not None and prev.end <= e.start, f"queue {q}: {e} overlaps {prev}"
            assert e.offset <= prev.offset + 1, f"queue {q}: {e} skipped ahead of {prev}"
