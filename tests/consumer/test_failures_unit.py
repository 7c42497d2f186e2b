"""The retry-or-stop policy of the SDK's background loops (txmq._failures) and the
transport errors it relies on; no cluster, no sleeping (a fake clock)."""

from __future__ import annotations

import logging

import grpc
import pytest

from txmq._failures import FailureLog, retriable
from txmq.errors import ERROR_DETAIL_KEY, TxmqError, error
from txmq.v1 import errors_pb2


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class _RpcError(grpc.RpcError):
    def __init__(self, status: grpc.StatusCode, detail: errors_pb2.ErrorDetail | None = None) -> None:
        self._status = status
        self._detail = detail

    def code(self) -> grpc.StatusCode:
        return self._status

    def details(self) -> str:
        return "boom"

    def trailing_metadata(self):  # type: ignore[no-untyped-def]
        return [(ERROR_DETAIL_KEY, self._detail.SerializeToString())] if self._detail else []


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, False),
        (errors_pb2.CODE_CONSUME_DISABLED, False),
        (errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND, False),
        (errors_pb2.CODE_TOPIC_NOT_READABLE, False),
        (errors_pb2.CODE_DATA_CORRUPTED, False),
        (errors_pb2.CODE_UNAVAILABLE, True),
        (errors_pb2.CODE_SERVICE_NOT_READY, True),
        (errors_pb2.CODE_TOO_MANY_REQUESTS, True),
        (errors_pb2.CODE_UPSTREAM_TIMEOUT, True),
        # A store restarting: unknown to the pull service, or serving no topic, for a while.
        (errors_pb2.CODE_STORE_NOT_FOUND, True),
        (errors_pb2.CODE_TOPIC_NOT_FOUND, True),
    ],
)
def test_which_errors_a_loop_retries(code: int, expected: bool) -> None:
    assert retriable(error(code, "x")) is expected


def test_a_service_error_keeps_its_flag_and_a_transport_failure_is_retriable_and_marked() -> None:
    detail = errors_pb2.ErrorDetail(code=errors_pb2.CODE_INTERNAL_ERROR, message="bug", retriable=False)
    from_service = TxmqError.from_rpc_error(_RpcError(grpc.StatusCode.INTERNAL, detail))
    assert not from_service.retriable and not from_service.transport and not from_service.unreachable

    broken_stream = TxmqError.from_rpc_error(_RpcError(grpc.StatusCode.INTERNAL))
    assert broken_stream.retriable and broken_stream.transport and not broken_stream.unreachable

    refused = TxmqError.from_rpc_error(_RpcError(grpc.StatusCode.UNAVAILABLE))
    assert refused.retriable and refused.unreachable
    assert TxmqError.from_rpc_error(_RpcError(grpc.StatusCode.DEADLINE_EXCEEDED)).unreachable

    refused_by_service = TxmqError.from_rpc_error(
        _RpcError(grpc.StatusCode.UNAVAILABLE, errors_pb2.ErrorDetail(code=errors_pb2.CODE_UNAVAILABLE, retriable=True))
    )
    assert not refused_by_service.unreachable  # a service answered


def test_failure_log_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    failures = FailureLog(logging.getLogger("test.failures"), repeat_interval=60.0, now=clock)
    err = error(errors_pb2.CODE_UNAVAILABLE, "down")
    with caplog.at_level(logging.INFO, logger="test.failures"):
        for _ in range(8 * 59):  # eight a second for 59 s: one line
            failures.failed("q1", "pull of q1", err)
            clock.t += 0.125
        assert [r.getMessage() for r in caplog.records] == [
            "pull of q1 failed, retrying with backoff: [CODE_UNAVAILABLE] down"
        ]
        assert failures.failing("q1") == 8 * 59
        clock.t += 1.0
        failures.failed("q1", "pull of q1", err)  # a minute after the first line: one more, with the count
        assert len(caplog.records) == 2 and "still failing (473 failures in 60s)" in caplog.records[1].getMessage()
        failures.failed("q2", "pull of q2", err)  # another key has its own first line
        assert len(caplog.records) == 3
        failures.recovered("q1", "pull of q1")
        failures.recovered("q1", "pull of q1")  # only once
        assert len(caplog.records) == 4 and "works again after 473 failure(s)" in caplog.records[3].getMessage()
        assert failures.failing("q1") == 0
        failures.forget("q2")
        failures.recovered("q2", "pull of q2")
        assert len(caplog.records) == 4
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING, logging.WARNING, logging.INFO]
