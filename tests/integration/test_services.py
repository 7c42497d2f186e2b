"""Service processes: health, reflection, registration in etcd, route look-ups, stop
and crash."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aetcd
import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from support import EtcdServer, ServiceFactory, ServiceProcess, free_port, wait_key_deleted

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, route_pb2, route_pb2_grpc
from txmq_runtime.etcd import etcd_client
from txmq_runtime.registry import EtcdKeys

pytestmark = pytest.mark.asyncio(loop_scope="session")

PULL = common_pb2.SERVICE_KIND_PULL
TXCHECK = common_pb2.SERVICE_KIND_TXCHECK
ROUTE_SERVICE = "txmq.v1.Route"


@pytest.fixture
async def client(etcd: EtcdServer) -> AsyncIterator[aetcd.Client]:
    c = etcd_client(etcd.endpoint)
    try:
        yield c
    finally:
        await c.close()


def health_status(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return reply.status


def reflected_services(address: str) -> set[str]:
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (reply,) = stub.ServerReflectionInfo(iter([request]), timeout=5)
        return {s.name for s in reply.list_services_response.service}


def route_call(address: str, method: str, request):
    with grpc.insecure_channel(address) as channel:
        return getattr(route_pb2_grpc.RouteStub(channel), method)(request, timeout=5)


async def test_each_service_is_healthy_reflects_and_registers(
    service_factory: ServiceFactory, client: aetcd.Client
) -> None:
    pull = service_factory.start("pull", "--registration_ttl_ms", "4000")
    txcheck = service_factory.start("txcheck", "--instance_id", "txcheck-a")
    keys = EtcdKeys(service_factory.etcd_prefix)

    for service in (pull, txcheck):
        assert health_status(service.address, "") == health_pb2.HealthCheckResponse.SERVING
        assert health_status(service.address, ROUTE_SERVICE) == health_pb2.HealthCheckResponse.SERVING
        assert {ROUTE_SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= (
            reflected_services(service.address)
        )

    registered = {kv.key.decode(): kv for kv in await client.get_prefix((keys.root + "services/").encode())}
    pull_key = keys.service(PULL, f"pull-{socket.gethostname()}-{pull.process.pid}")  # the generated id
    assert set(registered) == {pull_key, keys.service(TXCHECK, "txcheck-a")}
    stored = json_format.Parse(registered[pull_key].value, common_pb2.Endpoint())
    assert stored.kind == PULL and stored.address == pull.address and stored.started_at_ms > 0
    lease = await client.get_lease_info(registered[pull_key].lease)
    assert lease.grantedTTL == 4 and lease.TTL > 0

    # Every service answers look-ups about every other: one bootstrap address is enough.
    for service in (pull, txcheck):
        listed = route_call(service.address, "ListEndpoints", route_pb2.ListEndpointsRequest())
        assert sorted((e.kind, e.address) for e in listed.endpoints) == sorted(
            [(TXCHECK, txcheck.address), (PULL, pull.address)]
        )
        only_pull = route_call(service.address, "ListEndpoints", route_pb2.ListEndpointsRequest(kind=PULL))
        assert [e.address for e in only_pull.endpoints] == [pull.address]


async def test_route_errors_carry_their_codes(service_factory: ServiceFactory) -> None:
    pull = service_factory.start("pull")
    with pytest.raises(grpc.RpcError) as unknown:
        route_call(pull.address, "QueryRoute", route_pb2.QueryRouteRequest(topic="NoSuchTopic"))
    err = TxmqError.from_rpc_error(unknown.value)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.code == errors_pb2.CODE_TOPIC_NOT_FOUND and err.metadata == {"topic": "NoSuchTopic"}

    with pytest.raises(grpc.RpcError) as empty:
        route_call(pull.address, "QueryRoute", route_pb2.QueryRouteRequest(topic=""))
    assert TxmqError.from_rpc_error(empty.value).code == errors_pb2.CODE_ILLEGAL_TOPIC


async def test_clean_stop_revokes_the_registration_at_once(
    service_factory: ServiceFactory, client: aetcd.Client
) -> None:
    # A TTL far longer than the test: only the revoke can remove the key in time.
    pull = service_factory.start("pull", "--instance_id", "p-stop", "--registration_ttl_ms", "600000")
    key = EtcdKeys(service_factory.etcd_prefix).service(PULL, "p-stop")
    assert await client.get(key.encode()) is not None
    assert pull.stop() == 0
    assert await client.get(key.encode()) is None
    assert "stopped" in pull.process.log_tail()


async def test_killed_instance_vanishes_after_its_ttl(service_factory: ServiceFactory, client: aetcd.Client) -> None:
    pull = service_factory.start("pull", "--instance_id", "p-kill", "--registration_ttl_ms", "1000")
    key = EtcdKeys(service_factory.etcd_prefix).service(PULL, "p-kill")
    stored = await client.get(key.encode())
    assert stored is not None
    assert pull.kill() == -9
    await wait_key_deleted(client, key, timeout_s=30)
    assert (await client.get_lease_info(stored.lease)).TTL == -1  # expired, not revoked by anyone


async def test_an_invalid_flag_fails_startup(service_factory: ServiceFactory) -> None:
    bad = service_factory.start("txcheck", "--registration_ttl_ms", "10", wait=False)
    assert bad.process.wait(timeout_s=30) != 0
    assert "registration_ttl_ms" in bad.process.log_tail()


async def test_sigterm_during_startup_stops_at_once(tmp_path: Path) -> None:
    # No etcd at this address: start-up keeps retrying until it is told to stop.
    nowhere = f"127.0.0.1:{free_port()}"
    waiting = ServiceProcess("pull", port=free_port(), etcd_endpoints=nowhere, log_path=tmp_path / "pull.log")
    waiting.spawn()
    try:
        deadline = time.monotonic() + 30
        while "retrying" not in waiting.process.log_tail().lower():  # it is inside start-up
            assert time.monotonic() < deadline and waiting.process.running(), waiting.process.log_tail()
            time.sleep(0.05)
        assert waiting.stop(timeout_s=10) == 0
        assert "stopped during start-up" in waiting.process.log_tail()
    finally:
        waiting.kill()


async def test_stop_ends_arrival_streams_and_held_pulls_instead_of_waiting_out_the_grace(
    service_factory: ServiceFactory,
) -> None:
    """With a grace far longer than the stop allows (SIGKILL after 30 s), a clean exit
    (code 0) shows the `stopping` hook ended the long-lived calls: the arrival stream
    finishes normally and the held pull is answered."""
    import threading

    from txmq.v1 import pull_pb2, pull_pb2_grpc, store_pb2, store_pb2_grpc

    grace = ("--shutdown_grace_ms", "600000")
    store = service_factory.store(*grace)
    metrics_port = free_port()
    pull = service_factory.start("pull", *grace, "--metrics_port", str(metrics_port))
    with grpc.insecure_channel(store.address) as channel:
        store_pb2_grpc.StoreAdminStub(channel).CreateTopic(
            store_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(name="Held", read_queue_nums=1, write_queue_nums=1)
            ),
            timeout=10,
        )

    pulled: list[pull_pb2.PullMessageResponse] = []

    def long_poll() -> None:
        with grpc.insecure_channel(pull.address) as channel:
            request = pull_pb2.PullMessageRequest(
                consumer_group="g",
                queue=common_pb2.MessageQueue(topic="Held", store_id="store-0", queue_id=0),
                queue_offset=0,
                suspend=True,
                suspend_timeout_ms=600_000,
            )
            pulled.append(pull_pb2_grpc.PullStub(channel).PullMessage(request, timeout=120))

    poller = threading.Thread(target=long_poll)
    poller.start()
    _wait_for_metric(f"http://127.0.0.1:{metrics_port}/metrics", "txmq_pull_held_requests 1.0")
    with grpc.insecure_channel(store.address) as channel:
        stream = store_pb2_grpc.StoreStub(channel).WatchArrivals(store_pb2.WatchArrivalsRequest(), timeout=120)
        stream.initial_metadata()  # the watch is in place
        assert pull.stop(timeout_s=30) == 0
        poller.join(timeout=60)
        assert [p.status for p in pulled] == [pull_pb2.PULL_STATUS_NO_NEW_MSG]
        assert store.stop(timeout_s=30) == 0
        assert list(stream) == []  # ended normally (an error would raise here)


def _wait_for_metric(url: str, line: str, *, timeout_s: float = 30.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(url, timeout=5) as reply:
            if line in reply.read().decode().splitlines():
                return
        assert time.monotonic() < deadline, f"{url} never showed {line!r}"
        time.sleep(0.05)
