"""Fixtures for the asyncio SDK's tests (``txmq.aio``), on the session cluster
(tests/conftest.py: ``bootstrap``, ``admin``, ``new_topic``). Tests are coroutines run by
pytest-asyncio; with ``TXMQ_TEST_LOOP=uvloop`` they run on uvloop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from txmq import PullConsumer


@pytest.fixture
def topic(new_topic) -> str:  # type: ignore[no-untyped-def]
    return new_topic()


@pytest.fixture
def reader(bootstrap: str) -> Iterator[PullConsumer]:
    """A threaded PullConsumer to read back what the asyncio clients sent."""
    with PullConsumer("sdk-aio-reader", bootstrap) as consumer:
        yield consumer
