"""PushConsumer with real processes: queue sharing, take-over after a consumer leaves
(shut down, or killed with SIGKILL in a child process), retries, offsets.

The take-over tests use ``fast_cluster`` (its pull service forgets a silent consumer
after 2 s). Every check that waits does so for a condition, never for a duration.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
)
from txmq_cli.cluster import ChildProcess

from .conftest import (
    Cluster,
    Consumption,
    Delivery,
    Topics,
    assert_no_concurrent_consumption,
    assigned,
    unique,
    wait_until,
)
from .consumer_settings import FAST

CHILD = Path(__file__).with_name("push_child.py")


def _recording_consumer(
    cluster: Cluster, group: str, topic: str, name: str, log: Consumption, *, pause: float = 0.0, **options: object
) -> PushConsumer:
    consumer = PushConsumer(
        group,
        cluster.bootstrap,
        client_id=name,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        **{**FAST, **options},  # type: ignore[arg-type]
    )

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            d = Delivery(name, m.msg_id, f"{m.queue_id}", m.queue_offset, m.reconsume_times, time.monotonic())
            log.begin(d)
            if pause:
                time.sleep(pause)
            log.finish(d)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    return consumer


def _send(producer: Producer, topic: str, n: int, tag: str = "t") -> list[str]:
    return [producer.send(Message(topic, f"{tag}-{i}".encode(), tags=tag)).msg_id for i in range(n)]


@pytest.fixture
def fast(fast_cluster: Cluster) -> Iterator[tuple[Cluster, Topics, Producer]]:
    with Admin(fast_cluster.bootstrap) as admin, Producer("consumer-test-producer", fast_cluster.bootstrap) as prod:
        topics = Topics(admin)
        yield fast_cluster, topics, prod
        topics.delete_all()


def _shares_split(a: PushConsumer, b: PushConsumer, n_queues: int, topic: str) -> bool:
    qa, qb = assigned(a, topic), assigned(b, topic)
    return bool(qa) and bool(qb) and not (qa & qb) and len(qa | qb) == n_queues


def test_two_consumers_share_then_one_shuts_down(fast: tuple[Cluster, Topics, Producer]) -> None:
    cluster, topics, producer = fast
    topic, group, log = topics(queues=4), unique("push-group"), Consumption()
    a = _recording_consumer(cluster, group, topic, "consumer-a", log)
    b = _recording_consumer(cluster, group, topic, "consumer-b", log, pause=0.01)
    a.start()
    try:
        wait_until(lambda: len(assigned(a, topic)) == 4, what="a alone owns every queue")
        first = _send(producer, topic, 20, "first")
        b.start()
        # b joins: a gives two queues away, b takes them after the membership settled.
        wait_until(lambda: _shares_split(a, b, 4, topic), what="the queues split between a and b")
        assert len(assigned(a, topic)) == len(assigned(b, topic)) == 2
        second = _send(producer, topic, 40, "second")
        wait_until(lambda: set(first) <= log.consumed_ids(), what="first batch consumed")
        wait_until(lambda: len({d.msg_id for d in log.by("consumer-b")} & set(second)) >= 5, what="b consuming")
        b.shutdown()  # mid-batch: its offsets are committed at the lowest message not done
        b_stopped = time.monotonic()
        assert not assigned(b, topic)
        third = _send(producer, topic, 20, "third")
        # b told the pull service it left; a, alone, takes every queue.
        wait_until(lambda: len(assigned(a, topic)) == 4, what="a takes b's queues over")
        wait_until(lambda: set(first + second + third) <= log.consumed_ids(), what="every message consumed")
    finally:
        b.shutdown()
        a.shutdown()
    assert all(d.end is not None and d.end <= b_stopped for d in log.by("consumer-b"))
    assert_no_concurrent_consumption(log.deliveries, now=time.monotonic())
    # After a clean shutdown of both, the group's offsets cover everything consumed.
    with PullConsumer(group, cluster.bootstrap) as pc:
        for mq in pc.fetch_message_queues(topic):
            assert pc.fetch_offset(mq) == pc.max_offset(mq)


def _read_record(path: Path) -> tuple[list[Delivery], list[list[int]]]:
    deliveries: dict[str, Delivery] = {}
    assignments: list[list[int]] = []
    order: list[Delivery] = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "assign":
            assignments.append([int(p) for p in parts[1:]])
        elif parts[0] == "start" and len(parts) == 6:
            d = Delivery("child", parts[1], parts[2], int(parts[3]), int(parts[4]), float(parts[5]))
            deliveries[parts[1]] = d
            order.append(d)
        elif parts[0] == "end" and len(parts) == 3 and parts[1] in deliveries:
            deliveries[parts[1]].end = float(parts[2])
    return order, assignments


def test_survivor_takes_over_from_a_killed_consumer(fast: tuple[Cluster, Topics, Producer], tmp_path: Path) -> None:
    cluster, topics, producer = fast
    topic, group, log = topics(queues=4), unique("push-group"), Consumption()
    record = tmp_path / "child.record"
    record.touch()
    child = ChildProcess(
        name="push-child",
        argv=[sys.executable, str(CHILD), cluster.bootstrap, group, topic, str(record), "consumer-child"],
        log_path=tmp_path / "child.log",
    )
    survivor = _recording_consumer(cluster, group, topic, "consumer-survivor", log)
    child.spawn()
    try:
        survivor.start()

        def split() -> bool:
            assert child.running(), child.log_tail()
            _, assignments = _read_record(record)
            theirs = set(assignments[-1]) if assignments else set()
            mine = {q.queue_id for q in assigned(survivor, topic)}
            return bool(mine) and bool(theirs) and not (mine & theirs) and len(mine | theirs) == 4

        wait_until(split, what="the queues split between the child and the survivor")
        before = _send(producer, topic, 40, "before")
        wait_until(lambda: sum(d.end is not None for d in _read_record(record)[0]) >= 3, what="the child consuming")
        child.kill()  # SIGKILL: no commit, no goodbye
        killed_at = time.monotonic()
        after = _send(producer, topic, 20, "after")
        wait_until(lambda: len(assigned(survivor, topic)) == 4, what="the survivor takes the child's queues over")
        child_deliveries, _ = _read_record(record)
        consumed = log.consumed_ids() | {d.msg_id for d in child_deliveries if d.end is not None}
        wait_until(
            lambda: set(before + after) <= (log.consumed_ids() | consumed), what="every message consumed at least once"
        )
    finally:
        survivor.shutdown()
        child.kill()
    child_deliveries, _ = _read_record(record)
    assert child_deliveries, "the child consumed nothing"
    assert all(d.start <= killed_at for d in child_deliveries)
    assert_no_concurrent_consumption(log.deliveries + child_deliveries, now=killed_at)


def test_failed_message_is_retried_later_without_blocking_the_queue(retry_cluster: Cluster) -> None:
    # retry_cluster: short delay levels, so the retries' delays are short with a timer too
    with Admin(retry_cluster.bootstrap) as admin, Producer("consumer-test-producer", retry_cluster.bootstrap) as p:
        topics = Topics(admin)
        try:
            _retried_later_without_blocking_the_queue(retry_cluster, topics(queues=1), p)
        finally:
            topics.delete_all()


def _retried_later_without_blocking_the_queue(session_cluster: Cluster, topic: str, producer: Producer) -> None:
    group = unique("push-group")
    seen: list[tuple[bytes, int]] = []
    lock = threading.Lock()
    failed_once: set[bytes] = set()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        (m,) = msgs
        with lock:
            seen.append((m.body, m.reconsume_times))
        if m.body == b"flaky" and m.body not in failed_once:
            failed_once.add(m.body)
            raise RuntimeError("first delivery fails")  # an exception means RECONSUME_LATER
        if m.body == b"poison":
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group,
        session_cluster.bootstrap,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        max_reconsume_times=2,
        **FAST,  # type: ignore[arg-type]
    )
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    for body in (b"flaky", b"ok-1", b"poison", b"ok-2"):
        producer.send(Message(topic, body))
    with consumer:
        wait_until(lambda: (b"flaky", 1) in seen and (b"poison", 2) in seen and (b"ok-2", 0) in seen)
        with PullConsumer(group, session_cluster.bootstrap) as pc:
            (mq,) = pc.fetch_message_queues(topic)
            # poison goes to the dead-letter topic after its last retry (failed messages
            # are sent back to the store): every offset is done.
            wait_until(lambda: pc.fetch_offset(mq) == 4, what="the offset committed past every message")
    assert [r for b, r in seen if b == b"flaky"] == [0, 1]
    assert [r for b, r in seen if b == b"poison"] == [0, 1, 2]  # 1 delivery + max_reconsume_times
    assert [b for b, _ in seen].count(b"ok-1") == 1
    # The queue went on while flaky waited: ok-1 came before flaky's second delivery.
    assert seen.index((b"ok-1", 0)) < seen.index((b"flaky", 1))


def test_resumes_from_the_committed_offset_and_filters_tags(
    session_cluster: Cluster, new_topic: Topics, producer: Producer
) -> None:
    topic, group = new_topic(queues=2), unique("push-group")
    got: list[bytes] = []
    # A restarted consumer with the same client id takes its own place back at once
    # (another id would wait for the old one to expire on the pull service: 30 s).
    client_id = unique("restarting")

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def consumer() -> PushConsumer:
        c = PushConsumer(
            group,
            session_cluster.bootstrap,
            client_id=client_id,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
            **FAST,  # type: ignore[arg-type]
        )
        c.subscribe(topic, "Aa || keep")
        c.register_message_listener(listener)
        return c

    for i in range(4):
        producer.send(Message(topic, f"keep-{i}".encode(), tags="keep"))
        producer.send(Message(topic, f"bb-{i}".encode(), tags="BB"))  # same hash code as "Aa"
        producer.send(Message(topic, f"other-{i}".encode(), tags="other"))
    with consumer():
        wait_until(lambda: len(got) >= 4)
    assert sorted(got) == [f"keep-{i}".encode() for i in range(4)]
    producer.send(Message(topic, b"keep-late", tags="keep"))
    with consumer():  # the same group resumes where the first one committed
        wait_until(lambda: b"keep-late" in got)
    assert sorted(got) == sorted([f"keep-{i}".encode() for i in range(4)] + [b"keep-late"])


def test_consume_from_last_offset_skips_older_messages(
    session_cluster: Cluster, new_topic: Topics, producer: Producer
) -> None:
    topic, group = new_topic(queues=1), unique("push-group")
    producer.send(Message(topic, b"old"))
    got: list[bytes] = []
    c = PushConsumer(group, session_cluster.bootstrap, **FAST)  # type: ignore[arg-type]
    c.subscribe(topic)
    c.register_message_listener(lambda msgs: got.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with c:
        wait_until(lambda: len(assigned(c, topic)) == 1)
        with PullConsumer(group, session_cluster.bootstrap) as pc:
            (mq,) = pc.fetch_message_queues(topic)
            wait_until(lambda: pc.fetch_offset(mq) == 1, what="the start offset committed")
        producer.send(Message(topic, b"new"))
        wait_until(lambda: b"new" in got)
    assert got == [b"new"]


def test_lifecycle_errors(session_cluster: Cluster) -> None:
    c = PushConsumer(unique("push-group"), session_cluster.bootstrap)
    with pytest.raises(RuntimeError):
        c.start()  # no listener
    c.register_message_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    with pytest.raises(RuntimeError):
        c.start()  # no subscription
    with pytest.raises(ValueError):
        PushConsumer(unique("g"), session_cluster.bootstrap, heartbeat_interval=5, takeover_delay=5)
    c.shutdown()  # never started: a no-op


class _Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "heartbeats blocked by the test"


class _BlockHeartbeats(grpc.UnaryUnaryClientInterceptor):
    """Fault injection: while ``blocked`` is set, every ConsumerHeartbeat fails."""

    def __init__(self) -> None:
        self.blocked = threading.Event()

    def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        if self.blocked.is_set() and client_call_details.method.endswith("/ConsumerHeartbeat"):
            raise _Unavailable()
        return continuation(client_call_details, request)


def test_a_consumer_that_cannot_heartbeat_gives_its_queues_up(
    session_cluster: Cluster, new_topic: Topics, producer: Producer
) -> None:
    topic, group = new_topic(queues=2), unique("push-group")
    fault = _BlockHeartbeats()
    got: list[bytes] = []
    c = PushConsumer(
        group,
        session_cluster.bootstrap,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        interceptors=[fault],
        **FAST,  # type: ignore[arg-type]
    )
    c.subscribe(topic)
    c.register_message_listener(lambda msgs: got.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)
    with c:
        wait_until(lambda: len(assigned(c, topic)) == 2)
        fault.blocked.set()
        # Others would take its queues once the pull service forgets it: it stops first.
        wait_until(lambda: not assigned(c, topic), what="queues given up")
        producer.send(Message(topic, b"while-away"))
        fault.blocked.clear()
        wait_until(lambda: len(assigned(c, topic)) == 2, what="queues taken again")
        wait_until(lambda: b"while-away" in got)
