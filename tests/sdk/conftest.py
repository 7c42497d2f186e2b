"""Fixtures for the SDK's integration tests, on the session cluster (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support import waiting as support_waiting

from txmq import Admin, NotFoundError, TopicRoute


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """Tests share the session cluster: every test uses names of its own."""
    return support_waiting.unique_name


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """Polls until a condition holds (for state that spreads through etcd watches)."""
    return support_waiting.wait_until


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
def topic(new_topic: Callable[..., str]) -> str:
    return new_topic()
