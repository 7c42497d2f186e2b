"""txmq._sending.SendRetry, the retry policy both producers follow: what is retried,
what is waited out without counting, when it gives up."""

from __future__ import annotations

import time

from txmq._sending import SendRetry
from txmq.errors import BadRequestError, TooManyRequestsError, TxmqError, UnavailableError
from txmq.message import MessageQueue
from txmq.v1 import errors_pb2

MQ = MessageQueue("t", "store-0", 0)


def retry(retry_times: int = 2, budget: float = 60.0) -> SendRetry:
    return SendRetry(retry_times, time.monotonic() + budget, "t")


def test_a_retriable_failure_is_retried_retry_times_then_raised_with_the_count() -> None:
    r = retry(retry_times=2)
    outcomes = []
    for _ in range(3):
        r.attempt()
        err = UnavailableError("down")
        outcomes.append(r.failed(err, MQ))
    assert outcomes == [0.0, 0.0, None]
    assert err.metadata["attempts"] == "3" and r.failed_store == "store-0"


def test_a_non_retriable_failure_is_raised_at_once() -> None:
    r = retry()
    r.attempt()
    assert r.failed(BadRequestError("no", code=errors_pb2.CODE_ILLEGAL_MESSAGE), MQ) is None


def test_throttling_and_leader_changes_are_waited_out_without_counting() -> None:
    r = retry(retry_times=0)
    r.attempt()
    quota = TooManyRequestsError("over", code=errors_pb2.CODE_QUOTA_EXCEEDED, metadata={"retry_after_ms": "250"})
    assert r.failed(quota, MQ) == 0.25 and r.attempts == 0
    r.attempt()
    leader = TxmqError("no leader", code=errors_pb2.CODE_NOT_LEADER, retriable=True)
    assert r.failed(leader, MQ) == 0.1 and r.attempts == 0 and r.failed_store is None
    r.attempt()
    assert r.failed(leader, MQ) == 0.2  # the waits double


def test_past_the_deadline_nothing_is_retried() -> None:
    r = retry(budget=-1.0)
    r.attempt()
    assert r.failed(UnavailableError("down"), MQ) is None
