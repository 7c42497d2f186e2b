"""Fixtures for the SDK's integration tests, on the session cluster (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from support import waiting as support_waiting

from txmq import Admin, NotFoundError, Producer, TopicRoute


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """Tests share the session cluster: every test uses names of its own."""
    return support_waiting.unique_name


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """Polls until a condition holds (for state that spreads through etcd watches)."""
    return support_waiting.wait_until


@pytest.fixture
def bootstrap(txmq_cluster) -> str:  # type: ignore[no-untyped-def]
    return txmq_cluster.bootstrap


@pytest.fixture
def admin(bootstrap: str) -> Iterator[Admin]:
    with Admin(bootstrap) as client:
        yield client


@pytest.fixture
def wait_route(admin: Admin) -> Callable[..., None]:
    """Waits until route look-ups show a topic as ``check`` wants it (by default: at
    all). The store answers an admin call once its change is in etcd, but the other
    services answer route look-ups from a watched copy of etcd, which may trail an
    update (not a creation: an unknown topic is read from etcd directly) by a moment."""

    def wait(topic: str, check: Callable[[TopicRoute], bool] = lambda route: bool(route.queues)) -> None:
        def shows() -> bool:
            try:
                return check(admin.topic_route(topic))
            except NotFoundError:
                return False

        support_waiting.wait_until(shows)

    return wait


@pytest.fixture
def new_topic(admin: Admin) -> Iterator[Callable[..., str]]:
    """Creates topics (4 queues unless told) and deletes them after the test. Sends
    right after creation must work: CreateTopic answers once the route is published."""
    created: list[str] = []

    def create(*, queues: int = 4) -> str:
        name = support_waiting.unique_name("sdk")
        admin.create_topic(name, read_queue_nums=queues, write_queue_nums=queues)
        created.append(name)
        return name

    yield create
    for name in created:
        admin.delete_topic(name)


@pytest.fixture
def topic(new_topic: Callable[..., str]) -> str:
    return new_topic()


@pytest.fixture
def producer(bootstrap: str) -> Iterator[Producer]:
    with Producer("sdk-test-producer", bootstrap) as client:
        yield client
