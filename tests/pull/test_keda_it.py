"""KEDA's external scaler on real processes, called as KEDA calls it: the generated
externalscaler stub over a real socket to the pull service. Its answers are the group's
real lag (what `txmq lag` / Admin.consume_offsets report), they drop to 0 once the group
consumed, StreamIsActive pushes the change, and bad metadata, an unknown group or topic,
and a pull service with the scaler off are answered with typed statuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from txmq import Admin
from txmq.errors import TxmqError
from txmq.keda import externalscaler_pb2 as pb
from txmq.keda import externalscaler_pb2_grpc as pb_grpc
from txmq.v1 import errors_pb2, pull_pb2, pull_pb2_grpc, store_pb2_grpc

from .conftest import StoreAccess, pull_request, unique

SENT = {0: 5, 1: 3, 2: 0, 3: 2}  # messages per queue
COMMITTED = {0: 2, 1: 0, 2: 0}  # the group's offsets (queue 3: never committed, not counted)
LAG = (5 - 2) + (3 - 0) + 0


@dataclass
class Scaling:
    scaler: pb_grpc.ExternalScalerStub
    pull: pull_pb2_grpc.PullStub
    store: StoreAccess
    pull_address: str


def ref(metadata: Mapping[str, str]) -> pb.ScaledObjectRef:
    # What KEDA sends: the ScaledObject, and every key of the trigger's metadata.
    return pb.ScaledObjectRef(
        name="order-workers",
        namespace="shop",
        scalerMetadata={"scalerAddress": "txmq-pull.mq.svc.cluster.local:10912", **metadata},
    )


async def lag_by_admin(store_address: str, group: str, topic: str) -> int:
    """The lag as `txmq lag` computes it (the SDK's Admin)."""

    def read() -> int:
        with Admin(store_address) as admin:
            return sum(o.lag for o in admin.consume_offsets(group, topic))

    return await asyncio.to_thread(read)


async def prepare(store: StoreAccess, pull: pull_pb2_grpc.PullStub) -> tuple[str, str]:
    """A topic of 4 queues with SENT messages, a group with COMMITTED offsets."""
    topic, group = unique("KedaIt"), unique("KedaGroup")
    await store.create_topic(topic, queues=4)
    await store.create_group(group)
    for queue_id, n in SENT.items():
        for i in range(n):
            await store.send(topic, f"m{i}".encode(), queue_id=queue_id)
    for queue_id, offset in COMMITTED.items():
        await pull.UpdateConsumerOffset(
            pull_pb2.UpdateConsumerOffsetRequest(
                consumer_group=group, queue=store.queue(topic, queue_id), offset=offset
            ),
            timeout=10,
        )
    return topic, group


async def consume_everything(store: StoreAccess, pull: pull_pb2_grpc.PullStub, topic: str, group: str) -> int:
    """Pull every queue the group committed on from its offset and commit what was read."""
    consumed = 0
    for queue_id, offset in COMMITTED.items():
        q = store.queue(topic, queue_id)
        while True:
            reply = await pull.PullMessage(pull_request(q, group=group, offset=offset, max_messages=32), timeout=10)
            if reply.status != pull_pb2.PULL_STATUS_FOUND:
                break
            consumed += len(reply.messages)
            offset = reply.next_begin_offset
        await pull.UpdateConsumerOffset(
            pull_pb2.UpdateConsumerOffsetRequest(consumer_group=group, queue=q, offset=offset), timeout=10
        )
    return consumed


def typed(exc: grpc.aio.AioRpcError) -> TxmqError:
    return TxmqError.from_rpc_error(exc)


@pytest.fixture(scope="module")
async def shared(txmq_cluster, store_access: StoreAccess) -> AsyncIterator[Scaling]:
    """The session cluster's pull process (the scaler is on by default)."""
    channel = grpc.aio.insecure_channel(txmq_cluster.pull_address)
    try:
        yield Scaling(
            pb_grpc.ExternalScalerStub(channel),
            pull_pb2_grpc.PullStub(channel),
            store_access,
            txmq_cluster.pull_address,
        )
    finally:
        await channel.close()


async def test_answers_are_the_real_lag_and_drop_to_zero_once_consumed(shared: Scaling) -> None:
    topic, group = await prepare(shared.store, shared.pull)
    assert await lag_by_admin(shared.store.address, group, topic) == LAG
    meta = {"consumerGroup": group, "topic": topic, "lagThreshold": "4"}

    assert (await shared.scaler.IsActive(ref(meta), timeout=10)).result is True
    spec = await shared.scaler.GetMetricSpec(ref(meta), timeout=10)
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in spec.metricSpecs] == [
        (f"txmq-lag-{group.lower()}-{topic.lower()}".replace("_", "-"), 4, 4.0)
    ]
    name = spec.metricSpecs[0].metricName
    metrics = await shared.scaler.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(meta), metricName=name))
    assert [(v.metricName, v.metricValue, v.metricValueFloat) for v in metrics.metricValues] == [
        (name, LAG, float(LAG))
    ]
    # Active only above the activation threshold.
    at_threshold = {**meta, "activationLagThreshold": str(LAG)}
    assert (await shared.scaler.IsActive(ref(at_threshold), timeout=10)).result is False
    below = {**meta, "activationLagThreshold": str(LAG - 1)}
    assert (await shared.scaler.IsActive(ref(below), timeout=10)).result is True
    # StreamIsActive answers at once.
    stream = shared.scaler.StreamIsActive(ref(meta), timeout=10)
    assert (await anext(aiter(stream))).result is True
    stream.cancel()

    assert await consume_everything(shared.store, shared.pull, topic, group) == LAG
    assert await lag_by_admin(shared.store.address, group, topic) == 0
    metrics = await shared.scaler.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(meta), metricName=name))
    assert [(v.metricValue, v.metricValueFloat) for v in metrics.metricValues] == [(0, 0.0)]
    assert (await shared.scaler.IsActive(ref(meta), timeout=10)).result is False


async def test_a_group_that_never_committed_on_the_topic_has_no_lag(shared: Scaling) -> None:
    topic, _ = await prepare(shared.store, shared.pull)
    idle = unique("KedaIdle")
    await shared.store.create_group(idle)
    meta = {"consumerGroup": idle, "topic": topic}
    metrics = await shared.scaler.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(meta)), timeout=10)
    assert [v.metricValue for v in metrics.metricValues] == [0]
    assert (await shared.scaler.IsActive(ref(meta), timeout=10)).result is False


@pytest.mark.parametrize(
    ("metadata", "status", "code", "says"),
    [
        ({"topic": "Orders"}, grpc.StatusCode.INVALID_ARGUMENT, errors_pb2.CODE_ILLEGAL_ARGUMENT, "consumerGroup"),
        (
            {"consumerGroup": "g", "topic": "Orders", "lagThreshold": "lots"},
            grpc.StatusCode.INVALID_ARGUMENT,
            errors_pb2.CODE_ILLEGAL_ARGUMENT,
            "lagThreshold",
        ),
        (
            {"consumerGroup": "KedaNoSuchGroup", "topic": "<topic>"},
            grpc.StatusCode.NOT_FOUND,
            errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND,
            "KedaNoSuchGroup",
        ),
        (
            {"consumerGroup": "<group>", "topic": "KedaNoSuchTopic"},
            grpc.StatusCode.NOT_FOUND,
            errors_pb2.CODE_TOPIC_NOT_FOUND,
            "KedaNoSuchTopic",
        ),
    ],
)
async def test_bad_metadata_and_unknown_names_are_typed(
    shared: Scaling, metadata: dict[str, str], status: grpc.StatusCode, code: int, says: str
) -> None:
    topic, group = unique("KedaErr"), unique("KedaErrGroup")
    await shared.store.create_topic(topic, queues=1)
    await shared.store.create_group(group)
    meta = {k: v.replace("<topic>", topic).replace("<group>", group) for k, v in metadata.items()}
    calls = [
        lambda: shared.scaler.IsActive(ref(meta), timeout=10),
        lambda: shared.scaler.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(meta)), timeout=10),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call()
        assert exc.value.code() == status
        err = typed(exc.value)
        assert err.code == code
        assert says in str(err)
    stream = shared.scaler.StreamIsActive(ref(meta), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await anext(aiter(stream))
    assert (exc.value.code(), typed(exc.value).code) == (status, code)


# -- a pull process of its own: the stream's pace, and the scaler off ------------------


@pytest.fixture
async def private(service_factory) -> AsyncIterator[Scaling]:
    """A store and a pull process that pushes IsActive every 100 ms."""
    store = service_factory.store()
    pull = service_factory.start("pull", "--keda_stream_interval_ms", "100")
    store_channel = grpc.aio.insecure_channel(store.address)
    pull_channel = grpc.aio.insecure_channel(pull.address)
    try:
        access = StoreAccess(
            store.address, store_pb2_grpc.StoreStub(store_channel), store_pb2_grpc.StoreAdminStub(store_channel)
        )
        yield Scaling(
            pb_grpc.ExternalScalerStub(pull_channel), pull_pb2_grpc.PullStub(pull_channel), access, pull.address
        )
    finally:
        await pull_channel.close()
        await store_channel.close()


async def test_stream_pushes_the_change_once_the_group_caught_up(private: Scaling) -> None:
    topic, group = await prepare(private.store, private.pull)
    stream = private.scaler.StreamIsActive(ref({"consumerGroup": group, "topic": topic}), timeout=60)
    pushes = aiter(stream)
    assert (await anext(pushes)).result is True
    assert (await anext(pushes)).result is True  # pushed again: nothing changed
    await consume_everything(private.store, private.pull, topic, group)
    while (await anext(pushes)).result:  # ends once a push says inactive (the call's deadline guards it)
        pass
    stream.cancel()


async def test_scaler_off_is_unimplemented(service_factory) -> None:
    service_factory.store()
    pull = service_factory.start("pull", "--keda_scaler_enabled", "false")
    async with grpc.aio.insecure_channel(pull.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await pb_grpc.ExternalScalerStub(channel).IsActive(ref({"consumerGroup": "g", "topic": "t"}), timeout=10)
        assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED
        health = health_pb2_grpc.HealthStub(channel)
        served = await health.Check(health_pb2.HealthCheckRequest(service="txmq.v1.Pull"), timeout=10)
        assert served.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await health.Check(health_pb2.HealthCheckRequest(service="externalscaler.ExternalScaler"), timeout=10)
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND
