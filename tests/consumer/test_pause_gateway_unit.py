"""A paused group's ReceiveMessage through the gateway: FORBIDDEN (as RocketMQ's proxy
answers for consumeEnable=false), and no warning per refused read in the gateway's log.
The gateway's consumer core on the fake backend of tests/gateway; no processes."""

from __future__ import annotations

import logging

import pytest
from gateway.fake_backend import TOPIC, FakeBackend
from support.clock import ManualClock

from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2
from txmq_gateway.consumer import SimpleConsumerCore
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import from_exception
from txmq_gateway.v2 import Code


async def test_a_paused_group_is_forbidden_quietly(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    backend = FakeBackend(clock)
    backend.add_topic()
    backend.put("waiting")
    backend.pull_errors["s1"] = error(errors_pb2.CODE_CONSUME_DISABLED, "subscription group G may not consume")
    core = SimpleConsumerCore(backend, GatewaySettings(), clock=clock)  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.DEBUG, logger="txmq.gateway"):
            for _ in range(3):
                with pytest.raises(TxmqError) as info:
                    await core.receive(
                        group="G",
                        topic=TOPIC,
                        filter=common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="*"),
                        batch_size=8,
                        invisible_ms=30_000,
                        long_polling_timeout_ms=0,
                        client_id="c1",
                    )
                assert info.value.code == errors_pb2.CODE_CONSUME_DISABLED
                clock.advance(10_000)  # past the queue's back-off
        assert from_exception(info.value).code == Code.FORBIDDEN
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r for r in caplog.records if "left alone" in r.getMessage()]  # said at DEBUG
    finally:
        await core.close()
