"""The internals every client shares: gRPC channels and the route cache.

``ClientCore`` is owned by one facade (``Producer``, ``Admin``, and the consumers);
it owns one channel per address and the topic routes learned from the bootstrap
endpoint, so a facade only decides *what* to call and *how often to retry*.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc

from txmq._convert import endpoint_from_proto, topic_route_from_proto
from txmq.errors import BadRequestError, TxmqError, UpstreamTimeoutError
from txmq.models import Endpoint, ServiceKind, TopicRoute
from txmq.signing import Credentials, SigningInterceptor
from txmq.tls import TlsConfig
from txmq.v1 import common_pb2, errors_pb2, route_pb2, route_pb2_grpc

log = logging.getLogger("txmq.client")

# Big batches must fit in one call; the store enforces its own, smaller, limits.
MAX_GRPC_MESSAGE_BYTES = 64 * 1024 * 1024
#: Keepalive pings on every channel, idle ones included (a producer channel may wait hours
#: for a check): a vanished server is noticed within 30 + 10 s. txmq's servers permit a
#: ping every keepalive_permit_time_ms (default 10 s, txmq_runtime.keepalive); keep this
#: interval at least twice that.
KEEPALIVE_TIME_MS = 30_000
_CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Stub = TypeVar("Stub")


def call(method: Callable[..., Resp], request: Req, *, timeout: float) -> Resp:
    """Invoke a unary stub method; a failed call becomes its typed ``TxmqError``."""
    try:
        return method(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise TxmqError.from_rpc_error(exc) from exc


def parse_endpoints(endpoint: str) -> list[str]:
    """``"h1:p1,h2:p2"`` -> ``["h1:p1", "h2:p2"]``; any listed service can answer routes."""
    addresses = [a.strip() for a in endpoint.split(",") if a.strip()]
    if not addresses or any(":" not in a for a in addresses):
        raise BadRequestError(
            f"endpoint {endpoint!r} must be host:port[,host:port...]", code=errors_pb2.CODE_ILLEGAL_ARGUMENT
        )
    return addresses


class Channels:
    """One channel per address, created on first use and shared by every call; over TLS
    with ``tls`` (its files read here, once)."""

    def __init__(
        self,
        *,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        # Signing last (innermost): the signature is added just before the call goes out.
        signer = () if credentials is None else (SigningInterceptor(credentials),)
        self._interceptors = (*interceptors, *signer)
        self._credentials = None if tls is None else tls.channel_credentials()
        self._options: tuple[tuple[str, int | str], ...] = (
            _CHANNEL_OPTIONS if tls is None else (*_CHANNEL_OPTIONS, *tls.channel_options())
        )
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[tuple[str, Callable[[grpc.Channel], object]], object] = {}

    def stub(self, address: str, stub_type: Callable[[grpc.Channel], Stub]) -> Stub:
        key = (address, stub_type)
        found = self._stubs.get(key)  # made once per store: most calls end here, unlocked
        if found is not None:
            return found  # type: ignore[return-value]
        with self._lock:
            found = self._stubs.get(key)
            if found is None:
                channel = self._channels.get(address)
                if channel is None:
                    if self._credentials is None:
                        channel = grpc.insecure_channel(address, options=self._options)
                    else:
                        channel = grpc.secure_channel(address, self._credentials, options=self._options)
                    if self._interceptors:
                        channel = grpc.intercept_channel(channel, *self._interceptors)
                    self._channels[address] = channel
                found = self._stubs[key] = stub_type(channel)
        return found  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            channel.close()


@dataclass(slots=True)
class _CachedRoute:
    route: TopicRoute
    fetched_at: float  # monotonic seconds; 0 forces a refresh


class RouteCache:
    """Topic routes from the Route service (any txmq service answers it).

    A route is refreshed when older than ``refresh_interval`` or after a send error.
    When no route server answers, a stale route is used rather than failing: the stores
    it names may well be alive (RocketMQ keeps its last route when the name server is down).
    """

    def __init__(self, channels: Channels, bootstrap: Sequence[str], *, refresh_interval: float) -> None:
        self._channels = channels
        self._bootstrap = list(bootstrap)
        self._refresh_interval = refresh_interval
        self._lock = threading.Lock()
        self._routes: dict[str, _CachedRoute] = {}
        # Services named in route answers: fallbacks when every bootstrap address is down.
        self._learned: list[str] = []
        self._last_good: str | None = None

    def get(self, topic: str, *, timeout: float) -> TopicRoute:
        cached = self._routes.get(topic)  # one dict read: atomic, no lock needed
        if cached is not None and time.monotonic() - cached.fetched_at < self._refresh_interval:
            return cached.route
        try:
            response = self._ask(
                lambda stub: stub.QueryRoute, route_pb2.QueryRouteRequest(topic=topic), timeout=timeout
            )
        except TxmqError as err:
            if cached is not None and err.retriable:
                log.warning("route refresh of %s failed (%s); using the cached route", topic, err)
                return cached.route
            with self._lock:
                self._routes.pop(topic, None)
            raise
        route = topic_route_from_proto(response)
        self._learn(route)
        with self._lock:
            if route.queues:
                self._routes[topic] = _CachedRoute(route, time.monotonic())
            else:
                # Not cached: a topic created a moment later must be usable at once.
                self._routes.pop(topic, None)
        return route

    def mark_stale(self, topic: str) -> None:
        """Refresh the topic's route before its next use (keeping it as a fallback)."""
        with self._lock:
            cached = self._routes.get(topic)
            if cached is not None:
                cached.fetched_at = 0.0

    def endpoints(self, kind: ServiceKind | None = None, *, timeout: float) -> list[Endpoint]:
        request = route_pb2.ListEndpointsRequest(kind=kind.value if kind else common_pb2.SERVICE_KIND_UNSPECIFIED)
        response = self._ask(lambda stub: stub.ListEndpoints, request, timeout=timeout)
        return [endpoint_from_proto(e) for e in response.endpoints]

    def _servers(self) -> list[str]:
        with self._lock:
            ordered = [self._last_good] if self._last_good else []
            ordered += self._bootstrap + self._learned
        return list(dict.fromkeys(ordered))

    def _ask(
        self,
        method: Callable[[route_pb2_grpc.RouteStub], Callable[..., Resp]],
        request: object,
        *,
        timeout: float,
    ) -> Resp:
        return self.ask_any(route_pb2_grpc.RouteStub, method, request, timeout=timeout)

    def ask_any(
        self,
        stub_type: Callable[[grpc.Channel], Stub],
        method: Callable[[Stub], Callable[..., Resp]],
        request: object,
        *,
        timeout: float,
    ) -> Resp:
        """Ask the services every txmq service serves (Route; Auth with auth on) in turn
        until one answers; only a retriable failure moves on."""
        deadline = time.monotonic() + timeout
        last_error: TxmqError | None = None
        for address in self._servers():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            stub = self._channels.stub(address, stub_type)
            try:
                response = call(method(stub), request, timeout=remaining)
            except TxmqError as err:
                if not err.retriable:
                    raise
                log.debug("route server %s failed: %s", address, err)
                last_error = err
                continue
            with self._lock:
                self._last_good = address
            return response
        if last_error is not None:
            raise last_error
        raise UpstreamTimeoutError(f"no route server answered within {timeout:.3f}s")

    def _learn(self, route: TopicRoute) -> None:
        addresses = [e.address for e in (*route.store_endpoints, *route.pull_endpoints, *route.txcheck_endpoints)]
        with self._lock:
            self._learned = [a for a in dict.fromkeys(addresses) if a not in self._bootstrap]


class ClientCore:
    """Channels + routes for one client facade."""

    def __init__(
        self,
        endpoint: str,
        *,
        route_refresh_interval: float,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.channels = Channels(interceptors=interceptors, tls=tls, credentials=credentials)
        self.routes = RouteCache(self.channels, parse_endpoints(endpoint), refresh_interval=route_refresh_interval)

    def stub(self, address: str, stub_type: Callable[[grpc.Channel], Stub]) -> Stub:
        return self.channels.stub(address, stub_type)

    def close(self) -> None:
        self.channels.close()
