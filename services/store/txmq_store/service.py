"""The store process: open the message store, serve it, and publish the topics it
serves to etcd under the instance's lease (route look-ups read them from there)."""

from __future__ import annotations

import asyncio
import logging

from txmq.protocol import replica_id_of, replica_instance_id
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.registry import EtcdKeys, Registration, encode
from txmq_runtime.server import ServiceContext, ServiceParts
from txmq_store.export import StoreExporter
from txmq_store.group import LeaderKeys, ReplicationServicer, StoreGroup, leader_key, replica_endpoint
from txmq_store.message_store import MessageStore
from txmq_store.metrics import COLLECTOR as STORE_METRICS
from txmq_store.servicer import add_store_servicers
from txmq_store.settings import StoreSettings

log = logging.getLogger("txmq.store.service")


class TopicPublisher:
    """Keeps ``<prefix>/stores/<store_id>/topics/*`` equal to the store's topics.

    Topic changes only mark the set dirty; one task writes the latest set, so a burst
    of changes costs one etcd transaction, and writes never overtake each other. Each
    change gets a future that completes once a publish that began after it is done: the
    admin RPC awaits it, so a route look-up after CreateTopic answers finds the topic.
    """

    def __init__(
        self, store: MessageStore, *, store_id: str, keys: EtcdKeys, registration: Registration | LeaderKeys
    ) -> None:
        self._store = store
        self._store_id = store_id
        self._keys = keys
        self._registration = registration
        self._dirty = asyncio.Event()
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.publish()
        self._store.admin.add_topic_listener(self._changed)
        self._task = asyncio.create_task(self._run(), name="topic-publisher")

    def _changed(self) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._dirty.set()
        return waiter

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for waiter in self._waiters:
            waiter.cancel()

    async def publish(self) -> None:
        values = {
            self._keys.store_topic(self._store_id, config.name): encode(
                common_pb2.TopicConfig(
                    name=config.name,
                    read_queue_nums=config.read_queue_nums,
                    write_queue_nums=config.write_queue_nums,
                    perm=config.perm,
                    attributes=config.attributes,
                )
            )
            for config in self._store.admin.topic_configs()
        }
        await self._registration.replace(values, prefix=self._keys.store_topics(self._store_id))

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            waiters, self._waiters = self._waiters, []
            try:
                # Registration records the keys even when etcd is unreachable and writes
                # them with its next lease, so a publish never fails the admin call.
                await self.publish()
            finally:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)


async def setup(ctx: ServiceContext[StoreSettings]) -> ServiceParts:
    store = await MessageStore.open(ctx.settings, advertised_address=ctx.address)
    if store.recovered_from_crash:
        log.warning(
            "store %s recovered from a crash (no clean-shutdown marker in %s)", store.store_id, ctx.settings.data_dir
        )
    service_names = add_store_servicers(ctx.server, store)
    replication = ReplicationServicer(store, ctx.settings)
    store_pb2_grpc.add_StoreReplicationServicer_to_server(replication, ctx.server)
    service_names = [*service_names, store_pb2.DESCRIPTOR.services_by_name["StoreReplication"].full_name]
    STORE_METRICS.add(store)
    group: StoreGroup | None = None
    if store.replicated:
        # A replica of a store group: the group's leader publishes the store endpoint
        # and its topics (docs/replication.md); this process registers as a replica.
        published = LeaderKeys(
            ctx.etcd, leader_key=leader_key(ctx.keys, store.store_id), ttl_ms=ctx.settings.registration_ttl_ms
        )
        await published.put(
            ctx.keys.service(common_pb2.SERVICE_KIND_STORE, store.store_id),
            encode(replica_endpoint(store, ctx.settings, ctx.address)),
        )
        publisher = TopicPublisher(store, store_id=store.store_id, keys=ctx.keys, registration=published)

        def live_replicas() -> set[str]:
            replicas = ctx.cluster.endpoints(common_pb2.SERVICE_KIND_STORE_REPLICA)
            return {rid for e in replicas if (rid := replica_id_of(e.instance_id, store.store_id)) is not None}

        group = replication.group = StoreGroup(
            store, etcd=ctx.etcd, keys=ctx.keys, settings=ctx.settings, address=ctx.address, published=published,
            live_replicas=live_replicas,
        )  # fmt: skip
    else:
        publisher = TopicPublisher(store, store_id=store.store_id, keys=ctx.keys, registration=ctx.registration)
    await publisher.start()
    if group is not None:
        await group.start()
    exporter = StoreExporter.from_settings(store, ctx.settings)  # None: export_interval_ms is 0
    if exporter is not None:
        exporter.start()

    async def close() -> None:
        if exporter is not None:
            await exporter.stop()  # one last export, while the store is open (and still leads)
        if group is not None:
            await group.close()
        await publisher.close()
        STORE_METRICS.discard(store)
        await store.close()

    async def stopping() -> None:
        store.end_arrival_streams()

    if group is not None:
        return ServiceParts(
            service_names=service_names,
            close=close,
            stopping=stopping,
            instance_id=replica_instance_id(store.store_id, store.settings.replica_id),
            kind=common_pb2.SERVICE_KIND_STORE_REPLICA,
            readiness=group.watch_ready,  # ready only while an in-sync copy of its group
        )
    return ServiceParts(service_names=service_names, close=close, stopping=stopping, instance_id=store.store_id)
