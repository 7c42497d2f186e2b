"""KEDA's external scaler core on fakes and a manual clock: the trigger's metadata, the
answers from the lag, the access check before any read, StreamIsActive's pace, and the
lag summed over the stores serving a topic (StoreLag over fake store clients)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
from support.clock import ManualClock, settle, until

from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2, store_pb2
from txmq_pull.keda import (
    DEFAULT_ACTIVATION_LAG_THRESHOLD,
    DEFAULT_LAG_THRESHOLD,
    Scaler,
    StoreLag,
    Trigger,
    metric_name,
)

GROUP, TOPIC = "OrderWorkers", "Orders"
META = {"consumerGroup": GROUP, "topic": TOPIC}
INTERVAL_MS = 5_000


class FakeLag:
    """A LagSource with lags set by the test; an unknown group or topic is NOT_FOUND as
    the stores answer it."""

    def __init__(self) -> None:
        self.lags: dict[tuple[str, str], int] = {}
        self.reads = 0
        self.fail: TxmqError | None = None

    async def lag(self, group: str, topic: str) -> int:
        self.reads += 1
        if self.fail is not None:
            raise self.fail
        if (group, topic) not in self.lags:
            raise error(errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND, f"group {group}", group=group)
        return self.lags[(group, topic)]


def no_check(trigger: Trigger) -> None:
    pass


def scaler(source: FakeLag, clock: ManualClock | None = None, **kwargs: object) -> Scaler:
    return Scaler(
        source,
        clock=clock or ManualClock(),
        stream_interval_ms=INTERVAL_MS,
        authorize=kwargs.pop("authorize", no_check),  # type: ignore[arg-type]
    )


def code_of(exc: pytest.ExceptionInfo[TxmqError]) -> int:
    return exc.value.code


# -- the trigger's metadata ------------------------------------------------------------


def test_defaults_and_keda_keys_ignored() -> None:
    trigger = Trigger.parse({**META, "scalerAddress": "txmq-pull.mq.svc:10912", "enableTLS": "false"})
    assert trigger == Trigger(GROUP, TOPIC, DEFAULT_LAG_THRESHOLD, DEFAULT_ACTIVATION_LAG_THRESHOLD)
    assert (DEFAULT_LAG_THRESHOLD, DEFAULT_ACTIVATION_LAG_THRESHOLD) == (100, 0)
    given = Trigger.parse({**META, "lagThreshold": " 250 ", "activationLagThreshold": "10"})
    assert (given.lag_threshold, given.activation_lag_threshold) == (250, 10)


@pytest.mark.parametrize(
    ("metadata", "code", "names"),
    [
        ({"topic": TOPIC}, errors_pb2.CODE_ILLEGAL_ARGUMENT, "'consumerGroup' is required"),
        ({"consumerGroup": GROUP}, errors_pb2.CODE_ILLEGAL_ARGUMENT, "'topic' is required"),
        ({"consumerGroup": " ", "topic": TOPIC}, errors_pb2.CODE_ILLEGAL_ARGUMENT, "'consumerGroup' is required"),
        ({**META, "lagThreshold": "many"}, errors_pb2.CODE_ILLEGAL_ARGUMENT, "'lagThreshold' must be an integer >= 1"),
        ({**META, "lagThreshold": "0"}, errors_pb2.CODE_ILLEGAL_ARGUMENT, "'lagThreshold' must be an integer >= 1"),
        ({**META, "lagThreshold": "1.5"}, errors_pb2.CODE_ILLEGAL_ARGUMENT, "'lagThreshold'"),
        (
            {**META, "activationLagThreshold": "-1"},
            errors_pb2.CODE_ILLEGAL_ARGUMENT,
            "'activationLagThreshold' must be an integer >= 0",
        ),
        ({"consumerGroup": "no spaces", "topic": TOPIC}, errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP, "group name"),
        ({"consumerGroup": GROUP, "topic": "a/b"}, errors_pb2.CODE_ILLEGAL_TOPIC, "topic name"),
    ],
)
async def test_bad_metadata_is_invalid_argument_naming_the_key(
    metadata: Mapping[str, str], code: int, names: str
) -> None:
    source = FakeLag()
    s = scaler(source)
    for call in (s.is_active(metadata), s.metric(metadata, "")):
        with pytest.raises(TxmqError) as exc:
            await call
        assert code_of(exc) == code
        assert names in str(exc.value)
        assert exc.value.grpc_status.name == "INVALID_ARGUMENT"
    with pytest.raises(TxmqError) as exc:
        s.metric_spec(metadata)
    assert code_of(exc) == code
    assert source.reads == 0


def test_metric_name_is_sanitized() -> None:
    assert metric_name("OrderWorkers", "Orders") == "txmq-lag-orderworkers-orders"
    assert metric_name("%RETRY%pay_group", "pay|v2") == "txmq-lag--retry-pay-group-pay-v2"
    assert Trigger.parse(META).metric_name == "txmq-lag-orderworkers-orders"


# -- answers ---------------------------------------------------------------------------


@pytest.mark.parametrize(("lag", "activation", "active"), [(0, 0, False), (1, 0, True), (5, 5, False), (6, 5, True)])
async def test_is_active_when_the_lag_is_above_the_activation_threshold(
    lag: int, activation: int, active: bool
) -> None:
    source = FakeLag()
    source.lags[(GROUP, TOPIC)] = lag
    assert await scaler(source).is_active({**META, "activationLagThreshold": str(activation)}) is active


async def test_metric_spec_and_metric_value() -> None:
    source = FakeLag()
    source.lags[(GROUP, TOPIC)] = 1234
    s = scaler(source)
    spec = s.metric_spec({**META, "lagThreshold": "50"})
    assert (spec.name, spec.target) == ("txmq-lag-orderworkers-orders", 50)
    assert source.reads == 0  # the spec needs no lag: KEDA asks for it when it builds the HPA
    assert await s.metric(META, spec.name) == (spec.name, 1234)
    assert await s.metric(META, "") == (spec.name, 1234)
    with pytest.raises(TxmqError) as exc:
        await s.metric(META, "txmq-lag-someone-else")
    assert code_of(exc) == errors_pb2.CODE_NOT_FOUND
    assert "txmq-lag-orderworkers-orders" in str(exc.value)


async def test_unknown_group_is_not_found() -> None:
    s = scaler(FakeLag())
    with pytest.raises(TxmqError) as exc:
        await s.is_active(META)
    assert code_of(exc) == errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND
    assert exc.value.grpc_status.name == "NOT_FOUND"


async def test_access_is_checked_before_anything_is_read() -> None:
    source = FakeLag()
    source.lags[(GROUP, TOPIC)] = 7
    seen: list[Trigger] = []

    def deny(trigger: Trigger) -> None:
        seen.append(trigger)
        raise error(errors_pb2.CODE_ACCESS_DENIED, "no Get on the group")

    s = scaler(source, authorize=deny)
    for call in (s.is_active(META), s.metric(META, "")):
        with pytest.raises(TxmqError) as exc:
            await call
        assert code_of(exc) == errors_pb2.CODE_ACCESS_DENIED
    with pytest.raises(TxmqError):
        s.metric_spec(META)
    with pytest.raises(TxmqError):
        await anext(s.stream_is_active(META))
    assert source.reads == 0
    assert seen == [Trigger(GROUP, TOPIC)] * 4


# -- StreamIsActive ----------------------------------------------------------------------


async def test_stream_pushes_at_once_then_every_interval_until_closed() -> None:
    clock = ManualClock()
    source = FakeLag()
    source.lags[(GROUP, TOPIC)] = 3
    s = scaler(source, clock)
    pushed: list[bool] = []

    async def listen() -> None:
        async for active in s.stream_is_active(META):
            pushed.append(active)

    task = asyncio.create_task(listen())
    await until(lambda: pushed == [True])  # the first answer without the clock moving
    source.lags[(GROUP, TOPIC)] = 0
    clock.advance(INTERVAL_MS - 1)
    await settle()
    assert pushed == [True] and source.reads == 1
    clock.advance(1)
    await until(lambda: pushed == [True, False])
    clock.advance(INTERVAL_MS)
    await until(lambda: pushed == [True, False, False])
    s.close()
    await asyncio.wait_for(task, 5)  # a hang guard, not a timing claim
    assert source.reads == 3


async def test_stream_ends_with_the_error_of_a_failed_read() -> None:
    clock = ManualClock()
    source = FakeLag()
    source.lags[(GROUP, TOPIC)] = 0
    stream = scaler(source, clock).stream_is_active(META)
    assert await anext(stream) is False
    source.fail = error(errors_pb2.CODE_UNAVAILABLE, "store gone")
    following = asyncio.ensure_future(anext(stream))
    await settle()
    clock.advance(INTERVAL_MS)
    with pytest.raises(TxmqError) as exc:
        await asyncio.wait_for(following, 5)
    assert code_of(exc) == errors_pb2.CODE_UNAVAILABLE


# -- StoreLag: the lag over the stores serving a topic -----------------------------------


def row(queue_id: int, offset: int, max_offset: int, min_offset: int = 0) -> store_pb2.ConsumeOffset:
    return store_pb2.ConsumeOffset(
        consumer_group=GROUP,
        topic=TOPIC,
        queue_id=queue_id,
        offset=offset,
        min_offset=min_offset,
        max_offset=max_offset,
    )


class FakeStore:
    """A store's ListConsumeOffsets and GetSubscriptionGroup, answered as the store does."""

    def __init__(self, offsets: list[store_pb2.ConsumeOffset], groups: set[str]) -> None:
        self.offsets = offsets
        self.groups = groups

    async def list_consume_offsets(self, *, group: str, topic: str) -> list[store_pb2.ConsumeOffset]:
        return [o for o in self.offsets if o.consumer_group == group and o.topic == topic]

    async def get_subscription_group(self, name: str) -> common_pb2.SubscriptionGroupConfig:
        if name not in self.groups:
            raise error(errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND, f"subscription group {name}", group=name)
        return common_pb2.SubscriptionGroupConfig(group_name=name)


class FakeClients:
    def __init__(self, stores: dict[str, FakeStore], serving: dict[str, list[str]]) -> None:
        self.stores = stores
        self.locator = self
        self.serving = serving

    async def stores_serving(self, topic: str) -> list[str]:
        return self.serving.get(topic, [])

    def client(self, store_id: str) -> FakeStore:
        return self.stores[store_id]


async def test_store_lag_sums_every_committed_queue_on_every_store() -> None:
    clients = FakeClients(
        {
            # max - committed; an offset below the queue's min counts from the min.
            "s1": FakeStore([row(0, 10, 25), row(1, 3, 3)], {GROUP}),
            "s2": FakeStore([row(0, 0, 40, min_offset=30), row(2, 5, 9)], {GROUP}),
            "s3": FakeStore([row(0, 0, 1000)], {GROUP}),  # not serving the topic
        },
        {TOPIC: ["s1", "s2"]},
    )
    assert await StoreLag(clients).lag(GROUP, TOPIC) == 15 + 0 + 10 + 4  # type: ignore[arg-type]


async def test_store_lag_of_a_group_without_offsets_and_of_unknown_names() -> None:
    clients = FakeClients({"s1": FakeStore([], set()), "s2": FakeStore([], {GROUP})}, {TOPIC: ["s1", "s2"]})
    lag = StoreLag(clients)  # type: ignore[arg-type]
    assert await lag.lag(GROUP, TOPIC) == 0  # s2 has the group: it exists, nothing committed
    with pytest.raises(TxmqError) as exc:
        await lag.lag("NoSuchGroup", TOPIC)
    assert code_of(exc) == errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND
    with pytest.raises(TxmqError) as exc:
        await lag.lag(GROUP, "NoSuchTopic")
    assert code_of(exc) == errors_pb2.CODE_TOPIC_NOT_FOUND
