"""ConsumerTuning, the consumer core's timings and limits: one frozen object, and a core
built with other values uses them (the fake backend of tests/gateway; no processes)."""

from __future__ import annotations

import pydantic
import pytest

from txmq.errors import error
from txmq.v1 import common_pb2, errors_pb2
from txmq_gateway.consumer import SimpleConsumerCore
from txmq_gateway.consumer_state import ConsumerTuning
from txmq_gateway.settings import GatewaySettings

from .fake_backend import TOPIC, FakeBackend

ALL = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression="*")


def test_the_tuning_is_frozen_and_refuses_unknown_fields() -> None:
    tuning = ConsumerTuning()
    with pytest.raises(pydantic.ValidationError):
        tuning.dlq_retry_ms = 1  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        ConsumerTuning(no_such_field=1)  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        ConsumerTuning(error_backoff_ms=0)


async def test_a_core_backs_a_failing_queue_off_as_its_tuning_says() -> None:
    backend = FakeBackend()
    backend.add_topic(TOPIC, {"s1": 1, "s2": 1})
    tuning = ConsumerTuning(error_backoff_ms=1_000, error_backoff_max_ms=1_000)
    core = SimpleConsumerCore(backend, GatewaySettings(), clock=backend.clock, tuning=tuning)  # type: ignore[arg-type]

    async def receive() -> list[str]:
        got = await core.receive(
            group="G", topic=TOPIC, filter=ALL, batch_size=8, invisible_ms=30_000, long_polling_timeout_ms=0,
            client_id="c1",
        )  # fmt: skip
        return [d.view.message.body.decode() for d in got]

    try:
        backend.pull_errors["s1"] = error(errors_pb2.CODE_UNAVAILABLE, "store down")
        backend.put("ok", store_id="s2")
        backend.put("stuck", store_id="s1")
        assert await receive() == ["ok"]
        del backend.pull_errors["s1"]
        backend.clock.advance(999)
        assert await receive() == []  # s1 is still backed off
        backend.clock.advance(1)
        assert await receive() == ["stuck"]
    finally:
        await core.close()


async def test_a_core_keeps_its_tunings_reserve_before_the_calls_deadline() -> None:
    backend = FakeBackend()
    backend.add_topic(TOPIC, {"s1": 1})
    core = SimpleConsumerCore(
        backend,  # type: ignore[arg-type]
        GatewaySettings(),
        clock=backend.clock,
        tuning=ConsumerTuning(deadline_reserve_ms=2_000),
    )
    try:
        backend.no_hold = True  # held pulls answer at once, so the call ends without moving the clock
        await core.pull(
            group="G", store_id="s1", topic=TOPIC, queue_id=0, offset=0, batch_size=1, filter=ALL,
            long_polling_timeout_ms=10_000, time_remaining_ms=2_500,
        )  # fmt: skip
        assert backend.pulls[-1].suspend_timeout_ms == 500  # 2.5 s left less the 2 s reserve (default: 0.5 s)
    finally:
        await core.close()
