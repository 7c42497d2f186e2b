"""The pull service's side of the store: one gRPC channel per store address, typed errors
(a store's ErrorDetail is re-raised as the same TxmqError), and where each store is
(``StoreLocator``: from the cluster view in production)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import grpc

from txmq.errors import TxmqError, error
from txmq.protocol import replica_id_of
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.calls import call as _call
from txmq_runtime.calls import internal_channel
from txmq_runtime.registry import ClusterView

_CHANNEL_CLOSE_TIMEOUT_S = 5.0

log = logging.getLogger("txmq.pull.store")


class StoreLocator(Protocol):
    def address(self, store_id: str) -> str | None:
        """The address of a live store, None when there is none with that id."""
        ...

    def store_ids(self) -> list[str]:
        """Ids of the live stores."""
        ...

    async def stores_serving(self, topic: str) -> list[str]:
        """Ids of the live stores that serve ``topic``."""
        ...

    def followers(self, store_id: str) -> list[str]:
        """Addresses of the live followers of a replicated store group (empty for a
        store that is alone)."""
        ...


class ClusterLocator:
    """Stores as the cluster view (a watched copy of etcd) sees them."""

    def __init__(self, cluster: ClusterView) -> None:
        self._cluster = cluster

    def address(self, store_id: str) -> str | None:
        for endpoint in self._cluster.endpoints(common_pb2.SERVICE_KIND_STORE):
            if endpoint.instance_id == store_id:
                return endpoint.address
        return None

    def store_ids(self) -> list[str]:
        return [e.instance_id for e in self._cluster.endpoints(common_pb2.SERVICE_KIND_STORE)]

    async def stores_serving(self, topic: str) -> list[str]:
        queues, _ = await self._cluster.route(topic)
        return [q.store_id for q in queues]

    def followers(self, store_id: str) -> list[str]:
        leader = self.address(store_id)
        return sorted(
            e.address
            for e in self._cluster.endpoints(common_pb2.SERVICE_KIND_STORE_REPLICA)
            if replica_id_of(e.instance_id, store_id) is not None and e.address != leader
        )


class StoreClient:
    """Calls to one store (one channel)."""

    def __init__(self, address: str, channel: grpc.aio.Channel, *, timeout_s: float) -> None:
        self.address = address
        self._channel = channel
        self._store = store_pb2_grpc.StoreStub(channel)
        self._admin = store_pb2_grpc.StoreAdminStub(channel)
        self._timeout_s = timeout_s

    async def get_message(self, request: store_pb2.GetMessageRequest) -> store_pb2.GetMessageResponse:
        return await _call(lambda: self._store.GetMessage(request, timeout=self._timeout_s))

    async def commit_consume_offset(
        self, *, group: str, topic: str, queue_id: int, offset: int, client_id: str = ""
    ) -> None:
        """``client_id`` (an orderly consumer's) has the store fence the commit with the
        queue's lock (``CODE_QUEUE_LOCKED``)."""
        request = store_pb2.CommitConsumeOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, offset=offset, client_id=client_id
        )
        await _call(lambda: self._store.CommitConsumeOffset(request, timeout=self._timeout_s))

    async def query_consume_offset(
        self, *, group: str, topic: str, queue_id: int
    ) -> store_pb2.QueryConsumeOffsetResponse:
        request = store_pb2.QueryConsumeOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id)
        return await _call(lambda: self._store.QueryConsumeOffset(request, timeout=self._timeout_s))

    async def list_consume_offsets(self, *, group: str, topic: str) -> list[store_pb2.ConsumeOffset]:
        """The group's committed offsets on the topic's queues, each with its queue's range."""
        request = store_pb2.ListConsumeOffsetsRequest(consumer_group=group, topic=topic)
        reply = await _call(lambda: self._store.ListConsumeOffsets(request, timeout=self._timeout_s))
        return list(reply.offsets)

    async def queue_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """queue id -> (min offset, max offset) of every queue of ``topic`` (GetQueueOffsets)."""
        request = store_pb2.GetQueueOffsetsRequest(topic=topic)
        reply = await _call(lambda: self._store.GetQueueOffsets(request, timeout=self._timeout_s))
        return {q.queue_id: (q.min_offset, q.max_offset) for q in reply.queues}

    async def get_topic(self, name: str) -> common_pb2.TopicConfig:
        request = store_pb2.GetTopicRequest(name=name)
        return (await _call(lambda: self._admin.GetTopic(request, timeout=self._timeout_s))).topic

    async def create_topic(self, name: str, *, queue_nums: int) -> common_pb2.TopicConfig:
        request = store_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(name=name, read_queue_nums=queue_nums, write_queue_nums=queue_nums)
        )
        return (await _call(lambda: self._admin.CreateTopic(request, timeout=self._timeout_s))).topic

    async def get_subscription_group(self, name: str) -> common_pb2.SubscriptionGroupConfig:
        request = store_pb2.GetSubscriptionGroupRequest(group_name=name)
        return (await _call(lambda: self._admin.GetSubscriptionGroup(request, timeout=self._timeout_s))).group

    async def create_subscription_group(self, name: str) -> common_pb2.SubscriptionGroupConfig:
        request = store_pb2.CreateSubscriptionGroupRequest(group=common_pb2.SubscriptionGroupConfig(group_name=name))
        return (await _call(lambda: self._admin.CreateSubscriptionGroup(request, timeout=self._timeout_s))).group

    async def settings(self) -> Mapping[str, str]:
        """The store's settings as it reports them (GetStoreStatus)."""
        request = store_pb2.GetStoreStatusRequest()
        return dict((await _call(lambda: self._admin.GetStoreStatus(request, timeout=self._timeout_s))).settings)

    def watch_arrivals(self) -> grpc.aio.UnaryStreamCall:
        """The store's arrival stream (every topic, with the records of small dispatches);
        no deadline."""
        return self._store.WatchArrivals(store_pb2.WatchArrivalsRequest(with_records=True))


class StoreClients:
    """One ``StoreClient`` (one channel) per store address, and store-id resolution."""

    def __init__(self, locator: StoreLocator, *, timeout_ms: int) -> None:
        self.locator = locator
        self._timeout_s = timeout_ms / 1000
        self._clients: dict[str, StoreClient] = {}

    def for_address(self, address: str) -> StoreClient:
        client = self._clients.get(address)
        if client is None:
            channel = internal_channel(address)
            client = self._clients[address] = StoreClient(address, channel, timeout_s=self._timeout_s)
        return client

    def client(self, store_id: str) -> StoreClient:
        """The client of a live store; CODE_STORE_NOT_FOUND when there is none."""
        address = self.locator.address(store_id)
        if address is None:
            raise error(errors_pb2.CODE_STORE_NOT_FOUND, f"no live store {store_id!r}", store_id=store_id)
        return self.for_address(address)

    async def resolve(self, queue: common_pb2.MessageQueue) -> tuple[str, StoreClient]:
        """The store a queue names; with no ``store_id``, the one store serving its topic."""
        store_id = queue.store_id
        if not store_id:
            serving = await self.locator.stores_serving(queue.topic)
            if not serving:
                raise error(
                    errors_pb2.CODE_TOPIC_NOT_FOUND, f"no live store serves topic {queue.topic!r}", topic=queue.topic
                )
            if len(serving) > 1:
                raise error(
                    errors_pb2.CODE_ILLEGAL_ARGUMENT,
                    f"topic {queue.topic!r} is served by {len(serving)} stores: queue.store_id is required",
                    topic=queue.topic,
                )
            store_id = serving[0]
        return store_id, self.client(store_id)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for address, client in clients.items():
            # Shutdown must not hang on a channel whose calls do not finish cancelling.
            try:
                await asyncio.wait_for(client._channel.close(), _CHANNEL_CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning(
                    "closing the channel to store %s took over %s s; left behind", address, _CHANNEL_CLOSE_TIMEOUT_S
                )


async def connected(call: grpc.aio.UnaryStreamCall) -> None:
    """Return once the store registered the watch: it sends the response headers
    (initial metadata) right after, so every arrival dispatched later reaches the stream."""
    try:
        await call.wait_for_connection()  # raises when the store cannot be reached
        await call.initial_metadata()
        if call.done() and await call.code() != grpc.StatusCode.OK:
            # Ended before the watch was in place (a failed call can yield empty headers).
            raise error(errors_pb2.CODE_UNAVAILABLE, f"arrival stream ended: {await call.details()}")
    except grpc.aio.AioRpcError as exc:
        raise TxmqError.from_rpc_error(exc) from None


async def iterate(call: grpc.aio.UnaryStreamCall) -> AsyncIterator[store_pb2.ArrivalBatch]:
    """The batches of an arrival stream, with failures as typed errors."""
    try:
        async for batch in call:
            yield batch
    except grpc.aio.AioRpcError as exc:
        raise TxmqError.from_rpc_error(exc) from None
