"""Fixtures for the pull tests.

- ``store_access``: stubs to the session cluster's real store process (create topics and
  groups, send messages, read offsets).
- ``cluster_view``: a real ClusterView on the session cluster's etcd prefix.
- ``make_core``: builds the pull core in-process (a ``PullCore``: processor, hold
  service, arrival feed, servicer) on a ``ManualClock`` against the real store, so
  timeouts and sweeps happen only when a test moves the clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest
from support.clock import ManualClock
from support.waiting import eventually as eventually  # re-exported: the pull tests import it from here
from support.waiting import unique_name

from txmq.v1 import common_pb2, pull_pb2, store_pb2, store_pb2_grpc
from txmq_pull.service import PullCore, build_core
from txmq_pull.settings import PullSettings
from txmq_pull.store_client import ClusterLocator
from txmq_runtime.etcd import etcd_client
from txmq_runtime.registry import ClusterView, EtcdKeys

STORE_ID = "store-0"  # the session cluster's store (no --store_id)


def unique(prefix: str) -> str:
    return unique_name(prefix, sep="_")


@dataclass
class StoreAccess:
    address: str
    store: store_pb2_grpc.StoreStub
    admin: store_pb2_grpc.StoreAdminStub
    store_id: str = STORE_ID

    async def create_topic(self, name: str, *, queues: int = 4, perm: int = 0) -> None:
        await self.admin.CreateTopic(
            store_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
            ),
            timeout=10,
        )

    async def create_group(self, name: str, *, consume_enable: bool = True) -> None:
        await self.admin.CreateSubscriptionGroup(
            store_pb2.CreateSubscriptionGroupRequest(
                group=common_pb2.SubscriptionGroupConfig(group_name=name, consume_enable=consume_enable)
            ),
            timeout=10,
        )

    async def send(
        self, topic: str, body: bytes = b"body", *, tags: str = "", queue_id: int = 0, **properties: str
    ) -> store_pb2.SendResult:
        message = common_pb2.Message(topic=topic, body=body, tags=tags, properties=properties, queue_id=queue_id)
        reply = await self.store.SendMessage(store_pb2.SendMessageRequest(message=message), timeout=10)
        return reply.result

    async def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        reply = await self.store.QueryConsumeOffset(
            store_pb2.QueryConsumeOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id), timeout=10
        )
        return reply.offset if reply.found else None

    def queue(self, topic: str, queue_id: int = 0) -> common_pb2.MessageQueue:
        return common_pb2.MessageQueue(topic=topic, store_id=self.store_id, queue_id=queue_id)


def pull_request(
    queue: common_pb2.MessageQueue,
    *,
    group: str = "PullTestGroup",
    offset: int = 0,
    suspend: bool = False,
    suspend_timeout_ms: int = 0,
    tag: str | None = None,
    sql: str | None = None,
    commit_offset: int | None = None,
    max_messages: int = 0,
) -> pull_pb2.PullMessageRequest:
    req = pull_pb2.PullMessageRequest(
        consumer_group=group,
        queue=queue,
        queue_offset=offset,
        suspend=suspend,
        suspend_timeout_ms=suspend_timeout_ms,
        max_messages=max_messages,
        client_id="test-client",
    )
    if tag is not None:
        req.filter.CopyFrom(common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=tag))
    if sql is not None:
        req.filter.CopyFrom(common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression=sql))
    if commit_offset is not None:
        req.commit_offset = commit_offset
    return req


@pytest.fixture(scope="session")
async def store_access(txmq_cluster) -> AsyncIterator[StoreAccess]:
    channel = grpc.aio.insecure_channel(txmq_cluster.store_address)
    try:
        yield StoreAccess(
            txmq_cluster.store_address, store_pb2_grpc.StoreStub(channel), store_pb2_grpc.StoreAdminStub(channel)
        )
    finally:
        await channel.close()


async def open_cluster_view(etcd_endpoints: str, prefix: str) -> tuple[ClusterView, Callable[[], Awaitable[None]]]:
    client = etcd_client(etcd_endpoints)
    view = ClusterView(client, EtcdKeys(prefix))
    await view.start(timeout_s=10)

    async def close() -> None:
        await view.close()
        await client.close()

    return view, close


@pytest.fixture(scope="session")
async def cluster_view(txmq_cluster) -> AsyncIterator[ClusterView]:
    view, close = await open_cluster_view(txmq_cluster.etcd_endpoints, "/txmq")
    try:
        yield view
    finally:
        await close()


MakeCore = Callable[..., Awaitable[PullCore]]


@pytest.fixture
async def make_core(cluster_view: ClusterView) -> AsyncIterator[MakeCore]:
    """``await make_core(view=None, **settings)``: a started PullCore on a ManualClock
    (``core.clock``), closed after the test."""
    cores: list[PullCore] = []

    async def make(view: ClusterView | None = None, **settings: object) -> PullCore:
        core = build_core(
            PullSettings(**settings),  # type: ignore[arg-type]
            ClusterLocator(view or cluster_view),
            clock=ManualClock(),
        )
        core.start()
        cores.append(core)
        return core

    try:
        yield make
    finally:
        for core in cores:
            await _close_or_explain(core)


async def _close_or_explain(core: PullCore) -> None:
    """Close ``core``; if that hangs, fail naming the tasks still waiting (a hang seen
    once in CI under heavy load, not reproduced since)."""
    try:
        await asyncio.wait_for(core.close(), 30)
    except TimeoutError:
        import io

        out = io.StringIO()
        for task in asyncio.all_tasks():
            task.print_stack(file=out)
        pytest.fail(f"PullCore.close() did not finish in 30 s; tasks:\n{out.getvalue()}")


async def arrivals_live(core: PullCore, access: StoreAccess, topic: str) -> int:
    """Make sure the core's arrival stream from the store is open and delivering: send a
    message to ``topic`` queue 0 until a batch comes in after one (the stream may not be
    open yet when the first is sent). Returns queue 0's max offset after them."""
    assert core.feed is not None
    core.feed.ensure(access.store_id)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 10
    while True:
        before = core.feed.batches.get(access.store_id, 0)
        sent = await access.send(topic, b"warm-up", tags="WarmUp")
        wait_until = loop.time() + 0.5
        while core.feed.batches.get(access.store_id, 0) == before and loop.time() < wait_until:
            await asyncio.sleep(0.005)
        if core.feed.batches.get(access.store_id, 0) > before:
            return sent.queue_offset + 1
        assert loop.time() < give_up, "the arrival stream never delivered"
