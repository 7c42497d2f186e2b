"""The SDK's backoff honours a refusal's ``retry_after_ms`` (a user over its byte-rate
quota, CODE_QUOTA_EXCEEDED): the wait is at least that long, even past the backoff's
maximum; errors without it wait the plain backoff."""

from __future__ import annotations

from txmq import _backoff
from txmq.errors import TooManyRequestsError, TxmqError, error
from txmq.v1 import errors_pb2


def quota_refusal(retry_after_ms: str) -> TxmqError:
    return error(errors_pb2.CODE_QUOTA_EXCEEDED, "over quota", user="u", quota="produce", retry_after_ms=retry_after_ms)


def test_a_quota_refusal_is_retriable_and_typed() -> None:
    err = TxmqError.from_detail(quota_refusal("250").to_detail())
    assert isinstance(err, TooManyRequestsError) and err.retriable
    assert _backoff.retry_after(err) == 0.25


def test_the_wait_is_at_least_retry_after() -> None:
    err = quota_refusal("1500")
    assert _backoff.delay(1, first=0.05, maximum=1.0, after=err) == 1.5
    assert _backoff.delay(8, first=0.05, maximum=10.0, after=err) == 6.4  # the backoff is longer
    assert _backoff.delay(1, first=0.05, maximum=1.0, after=error(errors_pb2.CODE_TOO_MANY_REQUESTS, "busy")) == 0.05
    assert _backoff.delay(1, first=0.05, maximum=1.0) == 0.05


def test_a_retry_after_that_does_not_parse_is_ignored() -> None:
    assert _backoff.retry_after(quota_refusal("soon")) == 0.0
    assert _backoff.retry_after(quota_refusal("-5")) == 0.0
    assert _backoff.retry_after(None) == 0.0


def test_backoff_loops_take_the_failure() -> None:
    backoff = _backoff.Backoff(first=0.1, maximum=0.4)
    assert backoff.next_delay(quota_refusal("900")) == 0.9
    assert backoff.next_delay() == 0.2
    assert backoff.failures == 2
