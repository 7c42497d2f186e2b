"""The transactional producer's check channel gives up on a refusal a reconnect cannot
fix (and says why), instead of reconnecting forever. A fake transport: no cluster."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc
import pytest

from txmq._channel import ProducerChannel
from txmq.errors import ERROR_DETAIL_KEY
from txmq.v1 import errors_pb2


class _Refused(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def __init__(self, detail: errors_pb2.ErrorDetail) -> None:
        self._detail = detail

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INVALID_ARGUMENT

    def details(self) -> str:
        return self._detail.message

    def trailing_metadata(self):  # type: ignore[no-untyped-def]
        return [(ERROR_DETAIL_KEY, self._detail.SerializeToString())]


class _Call:
    def __init__(self, error: grpc.RpcError) -> None:
        self._error = error

    def initial_metadata(self) -> None:
        raise self._error

    def cancel(self) -> None:
        pass


@dataclass
class _Endpoint:
    address: str


class _Core:
    """Routes name one txcheck; its ProducerChannel refuses every stream."""

    def __init__(self, error: grpc.RpcError) -> None:
        self.routes = self
        self.error = error
        self.dialled = 0

    def endpoints(self, kind, *, timeout):  # type: ignore[no-untyped-def]
        return [_Endpoint("txcheck:1")]

    def stub(self, address, stub_type):  # type: ignore[no-untyped-def]
        core = self

        class Stub:
            def ProducerChannel(self, requests):  # type: ignore[no-untyped-def]
                core.dialled += 1
                return _Call(core.error)

        return Stub()


def test_a_refused_channel_stops_reconnecting_and_keeps_the_error(caplog: pytest.LogCaptureFixture) -> None:
    detail = errors_pb2.ErrorDetail(code=errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP, message="bad group", retriable=False)
    core = _Core(_Refused(detail))
    channel = ProducerChannel(core, group="g", client_id="c", on_checks=lambda checks: None)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="txmq.transaction.channel"):
        channel.start()
        channel._thread.join(timeout=30)
        assert not channel._thread.is_alive(), "the channel kept reconnecting"
    assert channel.error is not None and channel.error.code == errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP
    assert core.dialled == 1 and not channel.connected.is_set()
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    channel.stop()
