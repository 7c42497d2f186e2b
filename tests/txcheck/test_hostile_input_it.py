"""One request must not take a service out of the cluster (issue 16), with real
processes and a real etcd: "a producer channel with a 2 MB client id made txcheck
disappear from etcd; a topic created with 2 MB of attributes made the store disappear".
Both are refused at the API with a typed error, and both services stay registered past
their lease's TTL. Channels "c" and "c1" are two keys: closing one keeps the other."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from support import ServiceFactory

from txmq.errors import TxmqError
from txmq.protocol import MAX_CLIENT_ID_BYTES
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc
from txmq_runtime.etcd import etcd_client

from .helpers import FAST

TTL_S = 1.0  # FAST: --registration_ttl_ms 1000


async def _keys(endpoint: str, prefix: str) -> list[str]:
    async with etcd_client(endpoint) as client:
        return sorted(kv.key.decode() for kv in await client.get_prefix(prefix.encode()))


def _refusal(call) -> TxmqError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    err = TxmqError.from_rpc_error(info.value)
    assert not err.transport, info.value
    return err


async def _channel(address: str, hello: txcheck_pb2.ProducerCommand):
    """Open a producer channel with ``hello``; returns (call, first event): the initial
    metadata when it opened, or the typed error."""
    channel = grpc.aio.insecure_channel(address)
    stub = txcheck_pb2_grpc.TransactionStub(channel)
    done = asyncio.Event()

    async def commands():
        yield hello
        await done.wait()

    call = stub.ProducerChannel(commands())
    try:
        metadata = await asyncio.wait_for(call.initial_metadata(), 10)
        if dict(metadata).get("txmq-channel") != "open":
            await call.read()  # raises the refusal
            raise AssertionError(f"neither open nor refused: {await call.code()}")
    except grpc.aio.AioRpcError as exc:
        done.set()
        await channel.close()
        return None, TxmqError.from_rpc_error(exc)
    return (channel, call, done), None


async def _close(opened) -> None:
    channel, call, done = opened
    done.set()
    call.cancel()
    await channel.close()


@pytest.fixture
def services(service_factory: ServiceFactory):
    store = service_factory.store()
    txcheck = service_factory.start("txcheck", *FAST)
    return service_factory, store, txcheck


async def test_huge_client_ids_and_attributes_are_refused_and_no_service_leaves_etcd(services) -> None:
    factory, store, txcheck = services
    prefix, endpoint = factory.etcd_prefix, factory.etcd_endpoints
    registered = await _keys(endpoint, f"{prefix}/services/")
    assert any("/services/store/" in k for k in registered) and any("/services/txcheck/" in k for k in registered)

    # A topic with 2 MB of attributes: refused whole, nothing created.
    with grpc.insecure_channel(store.address) as ch:
        admin = store_pb2_grpc.StoreAdminStub(ch)
        topic = common_pb2.TopicConfig(name="Hostile", attributes={"a": "x" * 2_000_000})
        err = _refusal(lambda: admin.CreateTopic(store_pb2.CreateTopicRequest(topic=topic), timeout=10))
        assert err.code == errors_pb2.CODE_PAYLOAD_TOO_LARGE, err
        err = _refusal(lambda: admin.GetTopic(store_pb2.GetTopicRequest(name="Hostile"), timeout=10))
        assert err.code == errors_pb2.CODE_TOPIC_NOT_FOUND

    # A producer channel with a 2 MB client id: refused with a typed error.
    for client_id in ("c" * 2_000_000, "é" * (MAX_CLIENT_ID_BYTES // 2 + 1)):
        hello = txcheck_pb2.ProducerCommand(hello=txcheck_pb2.ProducerHello(producer_group="PG", client_id=client_id))
        opened, err = await _channel(txcheck.address, hello)
        assert opened is None and err is not None and err.code == errors_pb2.CODE_ILLEGAL_ARGUMENT, err
    # A first command that is not a hello: typed too (STATUS_CODES.md).
    not_hello = txcheck_pb2.ProducerCommand(end_transaction=txcheck_pb2.EndTransactionRequest())
    opened, err = await _channel(txcheck.address, not_hello)
    assert opened is None and err is not None and err.code == errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP, err

    # Both services are still registered, past their lease's TTL.
    await asyncio.sleep(3 * TTL_S)
    assert await _keys(endpoint, f"{prefix}/services/") == registered
    assert not [k for k in await _keys(endpoint, prefix) if "Hostile" in k]


async def test_closing_a_channel_keeps_a_channel_whose_id_starts_the_same(services) -> None:
    factory, _, txcheck = services
    producers = f"{factory.etcd_prefix}/txcheck/producers/PG/"

    def hello(client_id: str) -> txcheck_pb2.ProducerCommand:
        return txcheck_pb2.ProducerCommand(hello=txcheck_pb2.ProducerHello(producer_group="PG", client_id=client_id))

    c, _ = await _channel(txcheck.address, hello("c"))
    c1, _ = await _channel(txcheck.address, hello("c1"))
    assert c is not None and c1 is not None
    try:
        deadline = time.monotonic() + 10
        while len(await _keys(factory.etcd_endpoints, producers)) < 2:
            assert time.monotonic() < deadline, "both channels in etcd"
            await asyncio.sleep(0.05)
        await _close(c)
        while [k.rsplit("/", 1)[1] for k in await _keys(factory.etcd_endpoints, producers)] != ["c1"]:
            assert time.monotonic() < deadline, await _keys(factory.etcd_endpoints, producers)
            await asyncio.sleep(0.05)
        await asyncio.sleep(3 * TTL_S)
        assert [k.rsplit("/", 1)[1] for k in await _keys(factory.etcd_endpoints, producers)] == ["c1"]
    finally:
        await _close(c1)
