"""KEDA's external scaler, the core: a consumer group's lag on a topic -> KEDA's answers.
No gRPC here: the servicer (keda_servicer.py) only adapts KEDA's messages.

A ScaledObject's trigger names the group and topic in its metadata, which KEDA passes on
every call (``scalerMetadata``):

- ``consumerGroup``, ``topic`` (required): whose lag, on what;
- ``lagThreshold`` (default 100): the lag one replica is meant to handle; the HPA runs
  ceil(lag / lagThreshold) replicas (KEDA's default AverageValue target);
- ``activationLagThreshold`` (default 0): the target is active (KEDA scales it up from
  zero) only while the lag is above this.

Other keys (KEDA's own ``scalerAddress``, ``enableTLS``, ...) are ignored. Bad metadata is
CODE_ILLEGAL_ARGUMENT (INVALID_ARGUMENT, the message names the key), an unknown topic or
group CODE_TOPIC_NOT_FOUND / CODE_SUBSCRIPTION_GROUP_NOT_FOUND (NOT_FOUND): KEDA shows the
message in the ScaledObject's events.

The lag is ``txmq lag``'s: the sum over every queue of the topic the group has committed
on (on every store serving the topic) of ``txmq.models.consume_lag`` (the queue's max offset
minus the committed offset), read from the stores with ListConsumeOffsets. Queues the
group never committed on do not count.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from txmq.errors import TxmqError, error
from txmq.models import consume_lag
from txmq.v1 import auth_pb2, errors_pb2
from txmq.validation import check_group, check_topic
from txmq_pull.store_client import StoreClient, StoreClients
from txmq_runtime.auth import require
from txmq_runtime.clock import Clock

GROUP_KEY = "consumerGroup"
TOPIC_KEY = "topic"
LAG_THRESHOLD_KEY = "lagThreshold"
ACTIVATION_LAG_THRESHOLD_KEY = "activationLagThreshold"
DEFAULT_LAG_THRESHOLD = 100
DEFAULT_ACTIVATION_LAG_THRESHOLD = 0
METRIC_PREFIX = "txmq-lag"
_NOT_IN_METRIC_NAME = re.compile(r"[^a-z0-9-]")


def metric_name(group: str, topic: str) -> str:
    """``txmq-lag-<group>-<topic>``, lower case, every character other than a-z, 0-9 and
    '-' replaced by '-' (group and topic names may hold '%', '|' and '_')."""
    return _NOT_IN_METRIC_NAME.sub("-", f"{METRIC_PREFIX}-{group}-{topic}".lower())


@dataclass(frozen=True, slots=True)
class Trigger:
    """A ScaledObject trigger's metadata, checked."""

    group: str
    topic: str
    lag_threshold: int = DEFAULT_LAG_THRESHOLD
    activation_lag_threshold: int = DEFAULT_ACTIVATION_LAG_THRESHOLD

    @classmethod
    def parse(cls, metadata: Mapping[str, str]) -> Trigger:
        group = _required(metadata, GROUP_KEY, "the consumer group whose lag scales the target")
        topic = _required(metadata, TOPIC_KEY, "the topic the group consumes")
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        check_topic(topic)
        return cls(
            group,
            topic,
            _integer(metadata, LAG_THRESHOLD_KEY, DEFAULT_LAG_THRESHOLD, minimum=1),
            _integer(metadata, ACTIVATION_LAG_THRESHOLD_KEY, DEFAULT_ACTIVATION_LAG_THRESHOLD, minimum=0),
        )

    @property
    def metric_name(self) -> str:
        return metric_name(self.group, self.topic)


def _required(metadata: Mapping[str, str], key: str, what: str) -> str:
    value = metadata.get(key, "").strip()
    if not value:
        raise error(
            errors_pb2.CODE_ILLEGAL_ARGUMENT,
            f"scaler metadata {key!r} is required: {what} (trigger metadata of the ScaledObject)",
            key=key,
        )
    return value


def _integer(metadata: Mapping[str, str], key: str, default: int, *, minimum: int) -> int:
    text = metadata.get(key, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise error(
            errors_pb2.CODE_ILLEGAL_ARGUMENT,
            f"scaler metadata {key!r} must be an integer >= {minimum}, not {text[:32]!r}",
            key=key,
        )
    return value


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    target: int


class LagSource(Protocol):
    async def lag(self, group: str, topic: str) -> int:
        """The group's lag on the topic; CODE_TOPIC_NOT_FOUND / CODE_SUBSCRIPTION_GROUP_NOT_FOUND
        when there is no such topic or group."""
        ...


class StoreLag:
    """The lag as the stores serving the topic report it (ListConsumeOffsets)."""

    def __init__(self, clients: StoreClients) -> None:
        self._clients = clients

    async def lag(self, group: str, topic: str) -> int:
        store_ids = await self._clients.locator.stores_serving(topic)
        if not store_ids:
            raise error(errors_pb2.CODE_TOPIC_NOT_FOUND, f"no live store serves topic {topic!r}", topic=topic)
        stores = [(store_id, self._clients.client(store_id)) for store_id in dict.fromkeys(store_ids)]
        listed = await asyncio.gather(*(s.list_consume_offsets(group=group, topic=topic) for _, s in stores))
        offsets = [o for rows in listed for o in rows]
        if not offsets:
            await self._group_exists(group, stores)
        return sum(consume_lag(offset=o.offset, min_offset=o.min_offset, max_offset=o.max_offset) for o in offsets)

    async def _group_exists(self, group: str, stores: list[tuple[str, StoreClient]]) -> None:
        """A group with no committed offset on the topic exists when any store serving the
        topic has it; else CODE_SUBSCRIPTION_GROUP_NOT_FOUND."""
        missing: TxmqError | None = None
        for _, store in stores:
            try:
                await store.get_subscription_group(group)
                return
            except TxmqError as exc:
                if exc.code != errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND:
                    raise
                missing = exc
        assert missing is not None
        raise missing


def check_access(trigger: Trigger) -> None:
    """The caller may read the group's offsets on the topic (what ListConsumeOffsets
    asks): Get on both. Does nothing when auth is off."""
    require(auth_pb2.RESOURCE_TYPE_TOPIC, trigger.topic, auth_pb2.ACTION_GET)
    require(auth_pb2.RESOURCE_TYPE_GROUP, trigger.group, auth_pb2.ACTION_GET)


class Scaler:
    """KEDA's four questions about one trigger, answered from its group's lag."""

    def __init__(
        self,
        source: LagSource,
        *,
        clock: Clock,
        stream_interval_ms: int,
        authorize: Callable[[Trigger], None] = check_access,
    ) -> None:
        self._source = source
        self._clock = clock
        self._interval_ms = stream_interval_ms
        self._authorize = authorize
        self._closing = asyncio.Event()

    def trigger(self, metadata: Mapping[str, str]) -> Trigger:
        """The trigger's metadata, checked, and the caller's right to read it."""
        trigger = Trigger.parse(metadata)
        self._authorize(trigger)
        return trigger

    async def lag(self, trigger: Trigger) -> int:
        return await self._source.lag(trigger.group, trigger.topic)

    async def active(self, trigger: Trigger) -> bool:
        return await self.lag(trigger) > trigger.activation_lag_threshold

    async def is_active(self, metadata: Mapping[str, str]) -> bool:
        return await self.active(self.trigger(metadata))

    def metric_spec(self, metadata: Mapping[str, str]) -> MetricSpec:
        """One metric, the lag, with lagThreshold as the target per replica. The group and
        topic need not exist yet (KEDA asks this when it builds the HPA)."""
        trigger = self.trigger(metadata)
        return MetricSpec(trigger.metric_name, trigger.lag_threshold)

    async def metric(self, metadata: Mapping[str, str], name: str) -> tuple[str, int]:
        """(metric name, the lag). ``name`` is what GetMetricSpec answered (empty: that one)."""
        trigger = self.trigger(metadata)
        if name and name != trigger.metric_name:
            raise error(
                errors_pb2.CODE_NOT_FOUND,
                f"no metric {name[:300]!r} here: this trigger's metric is {trigger.metric_name!r}",
            )
        return trigger.metric_name, await self.lag(trigger)

    async def stream_is_active(self, metadata: Mapping[str, str]) -> AsyncIterator[bool]:
        """``is_active`` now and then every ``stream_interval_ms`` until the caller stops
        listening or ``close``. A failed read of the lag ends the stream with its error
        (KEDA opens it again after a backoff)."""
        trigger = self.trigger(metadata)
        while not self._closing.is_set():
            yield await self.active(trigger)
            await self._clock.wait(self._closing, self._clock.now_ms() + self._interval_ms)

    def close(self) -> None:
        """End every stream (the service is stopping: KEDA reconnects to another replica)."""
        self._closing.set()
