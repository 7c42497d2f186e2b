"""``txmq._client`` for asyncio: ``grpc.aio`` channels (one per address) and the topic
routes learned from the bootstrap endpoint, with the same rules as the threaded SDK's
``RouteCache`` (refresh after ``refresh_interval`` or a send error; a stale route when no
route server answers; services named in routes as fallbacks). All of it runs on one
event loop, so nothing here is locked."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc

from txmq._client import _CHANNEL_OPTIONS, _CachedRoute, parse_endpoints
from txmq._convert import endpoint_from_proto, topic_route_from_proto
from txmq.errors import TxmqError, UpstreamTimeoutError
from txmq.models import Endpoint, ServiceKind, TopicRoute
from txmq.signing import Credentials, async_interceptors
from txmq.tls import TlsConfig
from txmq.v1 import common_pb2, route_pb2, route_pb2_grpc

log = logging.getLogger("txmq.client")

Resp = TypeVar("Resp")
Stub = TypeVar("Stub")


async def call(method: Callable[..., Awaitable[Resp]], request: object, *, timeout: float) -> Resp:  # noqa: ASYNC109 - the RPC deadline
    """Await a unary stub method; a failed call becomes its typed ``TxmqError``."""
    try:
        return await method(request, timeout=timeout)
    except grpc.RpcError as exc:  # grpc.aio.AioRpcError is one
        raise TxmqError.from_rpc_error(exc) from exc


class AsyncChannels:
    """One ``grpc.aio`` channel per address, made on first use, over TLS with ``tls``;
    every call signed as ``credentials``."""

    def __init__(self, *, tls: TlsConfig | None = None, credentials: Credentials | None = None) -> None:
        self._interceptors = async_interceptors(credentials)
        self._credentials = None if tls is None else tls.channel_credentials()
        self._options: tuple[tuple[str, int | str], ...] = (
            _CHANNEL_OPTIONS if tls is None else (*_CHANNEL_OPTIONS, *tls.channel_options())
        )
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[str, Callable[[grpc.aio.Channel], object]], object] = {}

    def stub(self, address: str, stub_type: Callable[[grpc.aio.Channel], Stub]) -> Stub:
        key = (address, stub_type)
        found = self._stubs.get(key)
        if found is None:
            channel = self._channels.get(address)
            if channel is None:
                interceptors = self._interceptors or None
                if self._credentials is None:
                    channel = grpc.aio.insecure_channel(address, options=self._options, interceptors=interceptors)
                else:
                    channel = grpc.aio.secure_channel(
                        address, self._credentials, options=self._options, interceptors=interceptors
                    )
                self._channels[address] = channel
            found = self._stubs[key] = stub_type(channel)
        return found  # type: ignore[return-value]

    async def close(self) -> None:
        channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            await channel.close()


class AsyncRouteCache:
    """``txmq._client.RouteCache`` on an event loop."""

    def __init__(self, channels: AsyncChannels, bootstrap: Sequence[str], *, refresh_interval: float) -> None:
        self._channels = channels
        self._bootstrap = list(bootstrap)
        self._refresh_interval = refresh_interval
        self._routes: dict[str, _CachedRoute] = {}
        self._learned: list[str] = []
        self._last_good: str | None = None

    async def get(self, topic: str, *, timeout: float) -> TopicRoute:  # noqa: ASYNC109 - the RPC deadline
        cached = self._routes.get(topic)
        if cached is not None and time.monotonic() - cached.fetched_at < self._refresh_interval:
            return cached.route
        try:
            response = await self._ask("QueryRoute", route_pb2.QueryRouteRequest(topic=topic), timeout=timeout)
        except TxmqError as err:
            if cached is not None and err.retriable:
                log.warning("route refresh of %s failed (%s); using the cached route", topic, err)
                return cached.route
            self._routes.pop(topic, None)
            raise
        route = topic_route_from_proto(response)
        addresses = [e.address for e in (*route.store_endpoints, *route.pull_endpoints, *route.txcheck_endpoints)]
        self._learned = [a for a in dict.fromkeys(addresses) if a not in self._bootstrap]
        if route.queues:
            self._routes[topic] = _CachedRoute(route, time.monotonic())
        else:  # not cached: a topic created a moment later must be usable at once
            self._routes.pop(topic, None)
        return route

    def mark_stale(self, topic: str) -> None:
        """Refresh the topic's route before its next use (keeping it as a fallback)."""
        cached = self._routes.get(topic)
        if cached is not None:
            cached.fetched_at = 0.0

    async def endpoints(self, kind: ServiceKind | None = None, *, timeout: float) -> list[Endpoint]:  # noqa: ASYNC109 - the RPC deadline
        request = route_pb2.ListEndpointsRequest(kind=kind.value if kind else common_pb2.SERVICE_KIND_UNSPECIFIED)
        response = await self._ask("ListEndpoints", request, timeout=timeout)
        return [endpoint_from_proto(e) for e in response.endpoints]

    async def _ask(self, rpc: str, request: object, *, timeout: float) -> Any:  # noqa: ASYNC109 - the RPC deadline
        """Ask the route servers in turn until one answers; only a retriable failure moves on."""
        deadline = time.monotonic() + timeout
        last_error: TxmqError | None = None
        ordered = [self._last_good] if self._last_good else []
        for address in dict.fromkeys(ordered + self._bootstrap + self._learned):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            stub = self._channels.stub(address, route_pb2_grpc.RouteStub)
            try:
                response = await call(getattr(stub, rpc), request, timeout=remaining)
            except TxmqError as err:
                if not err.retriable:
                    raise
                log.debug("route server %s failed: %s", address, err)
                last_error = err
                continue
            self._last_good = address
            return response
        if last_error is not None:
            raise last_error
        raise UpstreamTimeoutError(f"no route server answered within {timeout:.3f}s")


class AsyncClientCore:
    """Channels + routes for one asyncio client."""

    def __init__(
        self,
        endpoint: str,
        *,
        route_refresh_interval: float,
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.channels = AsyncChannels(tls=tls, credentials=credentials)
        self.routes = AsyncRouteCache(self.channels, parse_endpoints(endpoint), refresh_interval=route_refresh_interval)

    def stub(self, address: str, stub_type: Callable[[grpc.aio.Channel], Stub]) -> Stub:
        return self.channels.stub(address, stub_type)

    async def close(self) -> None:
        await self.channels.close()
