"""Registration (write side) and the cluster view (read side) against a real etcd."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import aetcd
import pytest
from support import EtcdServer, new_etcd
from support.processes import free_port, private_prefix

from txmq.v1 import common_pb2
from txmq_runtime.etcd import etcd_client
from txmq_runtime.registry import ClusterView, EtcdKeys, Registration, encode

pytestmark = pytest.mark.asyncio(loop_scope="session")

STORE = common_pb2.SERVICE_KIND_STORE
PULL = common_pb2.SERVICE_KIND_PULL


@pytest.fixture
async def client(etcd: EtcdServer) -> AsyncIterator[aetcd.Client]:
    c = etcd_client(etcd.endpoint)
    try:
        yield c
    finally:
        await c.close()


def endpoint(kind: int, instance_id: str, address: str) -> common_pb2.Endpoint:
    return common_pb2.Endpoint(kind=kind, instance_id=instance_id, address=address, started_at_ms=1)


def topic(name: str, queues: int) -> bytes:
    return encode(common_pb2.TopicConfig(name=name, read_queue_nums=queues, write_queue_nums=queues, perm=6))


async def wait_until(predicate, *, timeout_s: float = 10.0) -> None:
    """For state that follows a watch: look again on every loop turn until true."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def wait_key_put(
    client: aetcd.Client, key: str, *, after_revision: int, timeout_s: float = 10.0
) -> aetcd.KeyValue:
    event = await client.watch_once(
        key.encode(), timeout=timeout_s, start_revision=after_revision + 1, kind=aetcd.EventKind.PUT
    )
    return event.kv


async def test_registration_lives_under_a_lease_and_is_revoked_on_close(client: aetcd.Client) -> None:
    keys = EtcdKeys(private_prefix())
    reg = Registration(client, ttl_ms=3_000)
    service_key = keys.service(PULL, "p1")
    await reg.put(service_key, encode(endpoint(PULL, "p1", "127.0.0.1:1")))
    assert await client.get(service_key.encode()) is None  # recorded only, until start

    await reg.start(give_up_after_s=10)
    stored = await client.get(service_key.encode())
    assert stored is not None and stored.lease == reg.lease_id != 0
    info = await client.get_lease_info(reg.lease_id)
    assert info.grantedTTL == 3 and 0 < info.TTL <= 3
    assert [k for k in info.keys] == [service_key.encode()]

    await reg.close()
    assert await client.get(service_key.encode()) is None
    assert (await client.get_lease_info(stored.lease)).TTL == -1  # revoked, not merely expiring


async def test_replace_puts_and_deletes_under_a_prefix(client: aetcd.Client) -> None:
    keys = EtcdKeys(private_prefix())
    reg = Registration(client, ttl_ms=5_000)
    under = keys.store_topics("s1")
    await reg.replace({keys.store_topic("s1", "A"): topic("A", 4)}, prefix=under)
    await reg.start(give_up_after_s=10)
    try:
        values = {keys.store_topic("s1", "A"): topic("A", 8), keys.store_topic("s1", "B"): topic("B", 2)}
        await reg.replace(values, prefix=under)
        listing = await client.get_prefix(under.encode())
        assert {kv.key.decode(): kv.value for kv in listing} == {
            keys.store_topic("s1", "A"): topic("A", 8),
            keys.store_topic("s1", "B"): topic("B", 2),
        }
        assert {kv.lease for kv in listing} == {reg.lease_id}

        await reg.replace({keys.store_topic("s1", "B"): topic("B", 2)}, prefix=under)
        listing = await client.get_prefix(under.encode())
        assert [kv.key.decode() for kv in listing] == [keys.store_topic("s1", "B")]
    finally:
        await reg.close()
    assert not await client.get_prefix(under.encode())


async def test_lost_lease_registers_again_with_every_key(client: aetcd.Client) -> None:
    keys = EtcdKeys(private_prefix())
    reg = Registration(client, ttl_ms=3_000)
    service_key, topic_key = keys.service(STORE, "s1"), keys.store_topic("s1", "T")
    await reg.put(service_key, encode(endpoint(STORE, "s1", "127.0.0.1:1")))
    await reg.put(topic_key, topic("T", 4))
    await reg.start(give_up_after_s=10)
    try:
        first_lease = reg.lease_id
        revoked = await client.get(service_key.encode())
        await client.revoke_lease(first_lease)  # as if it had expired while etcd was away

        back = await wait_key_put(client, service_key, after_revision=revoked.header.revision)
        assert back.lease not in (0, first_lease)
        again = await client.get(topic_key.encode())
        assert again is not None and again.value == topic("T", 4) and again.lease == back.lease
    finally:
        await reg.close()


async def test_cluster_view_follows_etcd(client: aetcd.Client) -> None:
    keys = EtcdKeys(private_prefix())
    view = ClusterView(client, keys)
    await client.put(keys.service(STORE, "s1").encode(), encode(endpoint(STORE, "s1", "h1:1")))
    await client.put(keys.store_topic("s1", "T").encode(), topic("T", 4))
    await view.start(timeout_s=10)
    try:
        assert [e.instance_id for e in view.endpoints()] == ["s1"]
        queues, _ = await view.route("T")
        assert [(q.store_id, q.store_address, q.read_queue_nums) for q in queues] == [("s1", "h1:1", 4)]

        # Changes arrive through the watch.
        await client.put(keys.service(PULL, "p1").encode(), encode(endpoint(PULL, "p1", "h2:2")))
        await client.put(keys.service(STORE, "s2").encode(), encode(endpoint(STORE, "s2", "h3:3")))
        await client.put(keys.store_topic("s2", "T").encode(), topic("T", 2))
        await wait_until(lambda: len(view.endpoints()) == 3)
        # The topic key came after the endpoints: it may arrive in a later watch response.
        async with asyncio.timeout(10):
            while len((await view.route("T"))[0]) < 2:  # noqa: ASYNC110 - state that follows a watch
                await asyncio.sleep(0.01)
        assert [e.instance_id for e in view.endpoints(PULL)] == ["p1"]
        queues, state = await view.route("T")
        assert [(q.store_id, q.read_queue_nums) for q in queues] == [("s1", 4), ("s2", 2)]
        assert [e.instance_id for e in state.endpoints(STORE)] == ["s1", "s2"]

        # A store whose endpoint is gone serves nothing, even if its topic key lingers.
        await client.delete(keys.service(STORE, "s1").encode())
        await wait_until(lambda: len(view.endpoints(STORE)) == 1)
        queues, _ = await view.route("T")
        assert [q.store_id for q in queues] == ["s2"]

        # Garbage under the prefix is ignored, not fatal.
        await client.put(keys.service(PULL, "bad").encode(), b"{not json")
        await client.put((keys.root + "somebody/else").encode(), b"x")
        await client.delete(keys.store_topic("s2", "T").encode())
        await wait_until(lambda: not view._state.queues("T"))
        assert [e.instance_id for e in view.endpoints(PULL)] == ["p1"]
        queues, _ = await view.route("T")
        assert queues == []
    finally:
        await view.close()
        await client.delete_prefix(keys.root.encode())


async def test_cluster_view_reads_etcd_for_a_topic_it_has_not_seen(client: aetcd.Client) -> None:
    keys = EtcdKeys(private_prefix())
    view = ClusterView(client, keys)
    await view.start(timeout_s=10)
    try:
        await view.close()  # no watch any more: only a direct read can find the topic
        await client.put(keys.service(STORE, "s1").encode(), encode(endpoint(STORE, "s1", "h1:1")))
        await client.put(keys.store_topic("s1", "New").encode(), topic("New", 3))
        queues, state = await view.route("New")
        assert [(q.store_id, q.write_queue_nums) for q in queues] == [("s1", 3)]
        assert [e.address for e in state.endpoints(STORE)] == ["h1:1"]
    finally:
        await client.delete_prefix(keys.root.encode())


async def test_cluster_view_reads_etcd_for_a_kind_of_service_it_has_none_of(client: aetcd.Client) -> None:
    """Route.ListEndpoints: a store that registered before the watch told the copy (a
    cluster that just started) is listed all the same."""
    keys = EtcdKeys(private_prefix())
    view = ClusterView(client, keys)
    await view.start(timeout_s=10)
    try:
        await view.close()  # no watch any more: only a direct read can find the store
        await client.put(keys.service(STORE, "s1").encode(), encode(endpoint(STORE, "s1", "h1:1")))
        assert view.endpoints(STORE) == []  # the copy has not seen it
        assert [e.address for e in await view.listed_endpoints(STORE)] == ["h1:1"]
        assert await view.listed_endpoints(PULL) == []  # none in etcd either
        assert await view.listed_endpoints(999) == []  # no such kind (a hostile request): no read
    finally:
        await client.delete_prefix(keys.root.encode())


async def test_several_endpoints_fail_over_to_a_live_member(etcd: EtcdServer) -> None:
    dead = f"127.0.0.1:{free_port()}"
    c = etcd_client(f"http://{dead},{etcd.endpoint}")
    try:
        key = (private_prefix() + "/k").encode()
        await c.put(key, b"v")
        assert (await c.get(key)).value == b"v"
        await c.delete(key)
    finally:
        await c.close()


async def test_survives_an_etcd_that_restarts_with_no_data(tmp_path: Path) -> None:
    """etcd comes back empty (lost its disk): the registration is written again under a
    new lease, and the cluster view reads everything again."""
    server = new_etcd(tmp_path)
    server.start()
    c = etcd_client(server.endpoint)
    keys = EtcdKeys("/txmq")
    reg = Registration(c, ttl_ms=2_000)
    view = ClusterView(c, keys)
    try:
        await reg.put(keys.service(PULL, "p1"), encode(endpoint(PULL, "p1", "h:1")))
        await reg.start(give_up_after_s=10)
        await view.start(timeout_s=10)
        assert [e.instance_id for e in view.endpoints()] == ["p1"]

        server.kill()
        shutil.rmtree(server.data_dir)
        server.start()

        # Registered again, under a lease of the new etcd.
        stored = None
        async with asyncio.timeout(30):
            while stored is None:
                try:
                    stored = await c.get(keys.service(PULL, "p1").encode())
                except aetcd.ClientError:
                    pass  # the channel is still reconnecting
                await asyncio.sleep(0.05)
        assert stored.lease == reg.lease_id
        # The view read etcd again and watches it: a key written now shows up.
        await c.put(keys.service(STORE, "s9").encode(), encode(endpoint(STORE, "s9", "h:9")))
        await wait_until(lambda: [e.instance_id for e in view.endpoints()] == ["s9", "p1"], timeout_s=30)
    finally:
        await view.close()
        await reg.close()
        await c.close()
        server.stop()
