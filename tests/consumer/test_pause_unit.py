"""A paused group (consume_enable off) as the push consumer sees it with
``pause_on_consume_disabled``: no stop, no error, bounded retries, one line each way.
No processes and no sleeping: the consumer's timer and pull client are fakes."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from txmq import ForbiddenError, PushConsumer
from txmq._process_queue import ProcessQueue
from txmq._subscription import build_subscription
from txmq.errors import error
from txmq.message import MessageQueue
from txmq.v1 import errors_pb2, pull_pb2


class _Timer:
    def __init__(self) -> None:
        self.calls: list[tuple[float, Any, tuple[Any, ...]]] = []

    def call_later(self, delay: float, fn: Any, *args: Any) -> None:
        self.calls.append((delay, fn, args))


class _Routes:
    def __init__(self) -> None:
        self.stale: list[str] = []

    def mark_stale(self, topic: str) -> None:
        self.stale.append(topic)


class _Core:
    def __init__(self) -> None:
        self.routes = _Routes()


class _Client:
    def __init__(self) -> None:
        self.core = _Core()


class _Future:
    def __init__(self, response: pull_pb2.PullMessageResponse) -> None:
        self._response = response

    def cancelled(self) -> bool:
        return False

    def result(self) -> pull_pb2.PullMessageResponse:
        return self._response


def _running(pause: bool) -> tuple[PushConsumer, _Timer, ProcessQueue]:
    consumer = PushConsumer(
        "pause-unit", "127.0.0.1:1", client_id="c1", pull_error_backoff=0.5, pause_on_consume_disabled=pause
    )
    timer = _Timer()
    consumer._client = _Client()  # type: ignore[assignment]
    consumer._timer = timer  # type: ignore[assignment]
    consumer._state = "running"
    pq = ProcessQueue(MessageQueue("T", "s1", 0), 7)
    consumer._queues[pq.mq] = pq
    return consumer, timer, pq


def _disabled() -> Any:
    return error(errors_pb2.CODE_CONSUME_DISABLED, "subscription group pause-unit may not consume")


def test_refused_pulls_wait_with_a_bounded_backoff_and_log_once(caplog: pytest.LogCaptureFixture) -> None:
    consumer, timer, pq = _running(pause=True)
    with caplog.at_level(logging.DEBUG, logger="txmq"):
        for _ in range(8):
            consumer._pull_failed(pq, _disabled())
    delays = [d for d, _, _ in timer.calls]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0]  # backs off, then every 3 s at most
    assert all(fn == consumer._pull and args == (pq,) for _, fn, args in timer.calls)
    assert consumer.paused and consumer.error is None and consumer._running
    assert consumer.assignment() == {pq.mq} and pq.next_offset == 7 and not pq.dropped
    assert pq.failures == 0  # not a failing instance: the same one is asked again
    assert consumer._client.core.routes.stale == []  # type: ignore[union-attr]
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and "is paused" in lines[0].getMessage() and lines[0].levelno == logging.WARNING


def test_the_first_answered_pull_ends_the_pause_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    consumer, timer, pq = _running(pause=True)
    consumer._pull_failed(pq, _disabled())
    consumer._pull_failed(pq, _disabled())
    pulled: list[ProcessQueue] = []
    consumer._pull = pulled.append  # type: ignore[method-assign]
    answer = pull_pb2.PullMessageResponse(status=pull_pb2.PULL_STATUS_NO_NEW_MSG, next_begin_offset=7)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="txmq"):
        consumer._on_pulled(pq, _Future(answer), _sub())  # type: ignore[arg-type]
        consumer._on_pulled(pq, _Future(answer), _sub())  # type: ignore[arg-type]
    assert not consumer.paused and pq.paused_polls == 0 and pulled == [pq, pq]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "resumed" in lines[0]
    # Paused again later: the backoff starts over.
    consumer._pull_failed(pq, _disabled())
    assert consumer.paused and timer.calls[-1][0] == 0.5


def test_without_the_option_a_disabled_group_still_stops_the_consumer() -> None:
    consumer, timer, pq = _running(pause=False)
    consumer._wake.set = lambda: None  # type: ignore[method-assign]
    consumer._pull_failed(pq, _disabled())
    assert consumer.error is not None and consumer.error.code == errors_pb2.CODE_CONSUME_DISABLED
    assert not consumer.paused and timer.calls == []


def _sub() -> Any:
    return build_subscription("T", "*")


def test_a_pull_held_since_before_the_pause_does_not_end_it(caplog: pytest.LogCaptureFixture) -> None:
    consumer, _, pq = _running(pause=True)
    other = ProcessQueue(MessageQueue("T", "s1", 1), 0)
    consumer._queues[other.mq] = other
    consumer._pull = lambda pq: None  # type: ignore[method-assign]
    answer = pull_pb2.PullMessageResponse(status=pull_pb2.PULL_STATUS_NO_NEW_MSG, next_begin_offset=0)
    with caplog.at_level(logging.INFO, logger="txmq"):
        consumer._pull_failed(pq, _disabled())
        consumer._on_pulled(other, _Future(answer), _sub())  # type: ignore[arg-type]
        assert consumer.paused  # pq is still refused
        consumer._pull_failed(other, _disabled())
        consumer._on_pulled(pq, _Future(answer), _sub())  # type: ignore[arg-type]
        assert consumer.paused
        consumer._on_pulled(other, _Future(answer), _sub())  # type: ignore[arg-type]
        assert not consumer.paused
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 2 and "is paused" in lines[0] and "resumed" in lines[1]


def test_a_released_paused_queue_does_not_keep_the_group_paused() -> None:
    consumer, _, pq = _running(pause=True)
    other = ProcessQueue(MessageQueue("T", "s1", 1), 0)
    consumer._queues[other.mq] = other
    consumer._pull = lambda pq: None  # type: ignore[method-assign]
    consumer._pull_failed(pq, _disabled())
    consumer._pull_failed(other, _disabled())
    del consumer._queues[pq.mq]  # released (rebalanced away) while paused
    answer = pull_pb2.PullMessageResponse(status=pull_pb2.PULL_STATUS_NO_NEW_MSG, next_begin_offset=0)
    consumer._on_pulled(other, _Future(answer), _sub())  # type: ignore[arg-type]
    assert not consumer.paused


class _RefusingClient(_Client):
    def message_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, "s1", 0)]

    def queue_range(self, mq: MessageQueue) -> tuple[int, int]:
        return 0, 5

    def pull(self, *args: Any, **kwargs: Any) -> Any:
        raise _disabled()


def test_start_on_a_paused_group_starts_paused() -> None:
    consumer, _, _ = _running(pause=True)
    consumer._check_subscription(_RefusingClient(), _sub())  # type: ignore[arg-type]
    assert consumer.paused
    strict, _, _ = _running(pause=False)
    with pytest.raises(ForbiddenError):
        strict._check_subscription(_RefusingClient(), _sub())  # type: ignore[arg-type]
