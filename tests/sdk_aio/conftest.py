"""Fixtures for the asyncio SDK's tests (``txmq.aio``), on the session cluster
(tests/conftest.py: ``bootstrap``, ``admin``, ``new_topic``). Tests are coroutines run by
pytest-asyncio, each on asyncio's event loop and on uvloop's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
import uvloop

from txmq import PullConsumer


@pytest.fixture
def topic(new_topic) -> str:  # type: ignore[no-untyped-def]
    return new_topic()


@pytest.fixture
def reader(bootstrap: str) -> Iterator[PullConsumer]:
    """A threaded PullConsumer to read back what the asyncio clients sent."""
    with PullConsumer("sdk-aio-reader", bootstrap) as consumer:
        yield consumer


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every test of this directory runs on asyncio's loop and on uvloop's."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
