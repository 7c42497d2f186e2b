"""Fixtures for the consumer tests.

- ``bootstrap`` / ``admin`` / ``producer`` / ``new_topic``: on the session cluster
  (``txmq_cluster``), topics with names of their own, deleted afterwards.
- ``fast_cluster``: a store and a pull service of this directory's own (private etcd
  prefix) whose pull service forgets a silent consumer after 2 s instead of 30 s, so
  take-over tests see a consumer leave quickly. Started once, on first use.
- ``Consumption``: a thread-safe log of who consumed which message when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from support import ServiceFactory
from support.topics import Topics
from support.waiting import unique_name, wait_until

from txmq import PushConsumer
from txmq.message import MessageQueue

CONSUMER_EXPIRY_MS = 2000


unique = unique_name  # the consumer tests' name for it


def assigned(consumer: PushConsumer, topic: str) -> set[MessageQueue]:
    """``consumer``'s queues of ``topic``: its assignment also holds its share of the
    group's %RETRY% queues (the retry topic exists from the group's first heartbeat)."""
    return {q for q in consumer.assignment() if q.topic == topic}


# bootstrap, admin, new_topic (a Topics) and producer: tests/conftest.py
__all__ = ["Topics", "assigned", "unique", "wait_until"]


@dataclass(frozen=True)
class Cluster:
    bootstrap: str
    pull_address: str


@pytest.fixture(scope="session")
def session_cluster(txmq_cluster) -> Cluster:  # type: ignore[no-untyped-def]
    return Cluster(txmq_cluster.bootstrap, txmq_cluster.pull_address)


@pytest.fixture(scope="session")
def fast_cluster(etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # type: ignore[no-untyped-def]
    factory = ServiceFactory(etcd_endpoints=etcd.endpoint, base_dir=tmp_path_factory.mktemp("consumer-cluster"))
    try:
        factory.store()
        pull = factory.start("pull", "--consumer_expiry_ms", str(CONSUMER_EXPIRY_MS))
        yield Cluster(pull.address, pull.address)
    finally:
        factory.close()


@dataclass
class Delivery:
    consumer: str
    msg_id: str
    queue: str
    offset: int
    reconsume_times: int
    start: float  # time.monotonic(): one clock for every process of the machine
    end: float | None = None


@dataclass
class Consumption:
    """Who consumed what, when; ``record`` wraps a listener."""

    deliveries: list[Delivery] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, delivery: Delivery) -> None:
        with self.lock:
            self.deliveries.append(delivery)

    def finish(self, delivery: Delivery) -> None:
        with self.lock:
            delivery.end = time.monotonic()

    def consumed_ids(self) -> set[str]:
        with self.lock:
            return {d.msg_id for d in self.deliveries if d.end is not None}

    def by(self, consumer: str) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.consumer == consumer]


def assert_no_concurrent_consumption(deliveries: list[Delivery], *, now: float) -> None:
    """No message was being consumed by two consumers at the same time (a delivery
    that never ended, e.g. its process was killed, lasts until ``now``)."""
    by_msg: dict[str, list[Delivery]] = {}
    for d in deliveries:
        by_msg.setdefault(d.msg_id, []).append(d)
    for msg_id, ds in by_msg.items():
        for i, a in enumerate(ds):
            for b in ds[i + 1 :]:
                if a.consumer == b.consumer:
                    continue
                a_end, b_end = a.end or now, b.end or now
                assert a_end <= b.start or b_end <= a.start, f"{msg_id} consumed by {a} and {b} at once"


#: The retry cluster's delay levels: short, but longer than the timer's 1 s precision,
#: so every retry waits in the store's timer for 2 s whichever level its count picks.
RETRY_DELAY_LEVELS = " ".join(["2s"] * 18)
#: How long each retry of the retry cluster waits at least.
RETRY_DELAY_S = 2.0


@pytest.fixture(scope="session")
def retry_cluster(etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:  # type: ignore[no-untyped-def]
    """A store with short delay levels (``RETRY_DELAY_LEVELS``) and a pull service, for
    the retry and dead-letter tests. Started once, on first use."""
    factory = ServiceFactory(etcd_endpoints=etcd.endpoint, base_dir=tmp_path_factory.mktemp("retry-cluster"))
    try:
        factory.store("--message_delay_levels", RETRY_DELAY_LEVELS)
        pull = factory.start("pull", "--consumer_expiry_ms", str(CONSUMER_EXPIRY_MS))
        yield Cluster(pull.address, pull.address)
    finally:
        factory.close()
