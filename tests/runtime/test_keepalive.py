"""Keepalive: clients and servers agree (settings, the SDK), and the installed gRPC core
reads the option names txmq_runtime.keepalive uses (a renamed one would silently fall
back to gRPC's defaults, which cut idle links)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from pydantic import ValidationError

from txmq._client import _CHANNEL_OPTIONS as SDK_CHANNEL_OPTIONS
from txmq_runtime import calls, keepalive
from txmq_runtime.keepalive import Keepalive
from txmq_runtime.settings import ServiceSettings


def test_servers_permit_twice_the_pings_clients_send_by_default() -> None:
    settings = ServiceSettings()
    assert settings.keepalive_permit_time_ms * 2 <= settings.keepalive_time_ms
    sdk = dict(SDK_CHANNEL_OPTIONS)
    assert sdk["grpc.keepalive_time_ms"] >= 2 * settings.keepalive_permit_time_ms
    assert sdk["grpc.keepalive_permit_without_calls"] == 1  # the server permits that too
    assert sdk["grpc.http2.max_pings_without_data"] == 0


def test_a_server_that_would_refuse_its_own_clients_pings_is_refused() -> None:
    with pytest.raises(ValidationError, match="keepalive_permit_time_ms"):
        ServiceSettings(keepalive_time_ms=1_000, keepalive_permit_time_ms=600)
    ServiceSettings(keepalive_time_ms=1_000, keepalive_permit_time_ms=500)


def test_internal_channels_use_the_configured_keepalive() -> None:
    before = keepalive.current()
    try:
        keepalive.configure(Keepalive(time_ms=1_000, timeout_ms=500, permit_time_ms=500))
        options = dict(calls.channel_options())
        assert options["grpc.keepalive_time_ms"] == 1_000
        assert options["grpc.keepalive_timeout_ms"] == 500
    finally:
        keepalive.configure(before)


async def _idle_stream_outcome(server_options: tuple[tuple[str, int], ...], client: Keepalive, idle_s: float) -> str:
    """Open a stream, leave it idle ``idle_s`` while the client pings; what happened."""
    server = grpc.aio.server(options=server_options)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=client.client_options()) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            await stub.Check(health_pb2.HealthCheckRequest())
            call = stub.Watch(health_pb2.HealthCheckRequest())
            await call.read()  # the first status; then nothing until the server stops
            try:
                await asyncio.wait_for(call.read(), idle_s)
            except TimeoutError:
                return "alive"
            except grpc.aio.AioRpcError as exc:
                return f"{exc.code().name}: {exc.details()}"
            return "unexpected message"
    finally:
        await server.stop(0)


async def test_an_idle_stream_outlives_many_policy_windows() -> None:
    fast = Keepalive(time_ms=500, timeout_ms=1_000, permit_time_ms=250)
    # Control: the same pinging client against gRPC's default policy is cut (so the
    # check below can fail), then against txmq's server options it is not.
    cut = await _idle_stream_outcome((), fast, idle_s=4.0)
    assert "ping" in cut.lower(), cut
    assert await _idle_stream_outcome(fast.server_options(), fast, idle_s=4.0) == "alive"


def test_etcd_channels_ping_only_with_open_streams_and_never_too_often() -> None:
    """Towards etcd: the process's keepalive, but at most one ping per ETCD_MIN_PING_MS
    (etcd answers closer pings with GOAWAY) and none on a link with no open stream."""
    from txmq_runtime.keepalive import ETCD_MIN_PING_MS, Keepalive

    fast = dict(Keepalive(time_ms=1_000, timeout_ms=500, permit_time_ms=500).etcd_options())
    assert fast["grpc.keepalive_time_ms"] == ETCD_MIN_PING_MS >= 10_000
    assert fast["grpc.keepalive_timeout_ms"] == 500 and fast["grpc.keepalive_permit_without_calls"] == 0
    slow = dict(Keepalive(time_ms=60_000).etcd_options())
    assert slow["grpc.keepalive_time_ms"] == 60_000
