"""The route cache against a small in-process Route server over loopback gRPC: which
server it asks, what it caches, and what it does when route servers fail."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from txmq import NotFoundError, UnavailableError
from txmq._client import Channels, RouteCache, parse_endpoints
from txmq.errors import ERROR_DETAIL_KEY, BadRequestError, error
from txmq.v1 import common_pb2, errors_pb2, route_pb2, route_pb2_grpc


class RouteServer(route_pb2_grpc.RouteServicer):
    """Serves one topic, "T", on one store; counts QueryRoute calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.write_queue_nums = 2
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        route_pb2_grpc.add_RouteServicer_to_server(self, self._server)
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self.pull_address = self.address  # the pull service the route names
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait()

    def QueryRoute(
        self, request: route_pb2.QueryRouteRequest, context: grpc.ServicerContext
    ) -> route_pb2.QueryRouteResponse:
        self.calls += 1
        if request.topic != "T":
            err = error(errors_pb2.CODE_TOPIC_NOT_FOUND, f"no topic {request.topic}")
            context.set_trailing_metadata(((ERROR_DETAIL_KEY, err.to_detail().SerializeToString()),))
            context.abort(err.grpc_status, str(err))
        return route_pb2.QueryRouteResponse(
            topic="T",
            queues=[
                route_pb2.QueueData(
                    store_id="s1",
                    store_address="127.0.0.1:1",
                    read_queue_nums=2,
                    write_queue_nums=self.write_queue_nums,
                    perm=6,
                )
            ],
            pull_endpoints=[
                common_pb2.Endpoint(kind=common_pb2.SERVICE_KIND_PULL, instance_id="p", address=self.pull_address)
            ],
        )

    def ListEndpoints(
        self, request: route_pb2.ListEndpointsRequest, context: grpc.ServicerContext
    ) -> route_pb2.ListEndpointsResponse:
        return route_pb2.ListEndpointsResponse(
            endpoints=[common_pb2.Endpoint(kind=common_pb2.SERVICE_KIND_STORE, instance_id="s1", address="127.0.0.1:1")]
        )


@pytest.fixture
def server() -> Iterator[RouteServer]:
    srv = RouteServer()
    yield srv
    srv.stop()


@pytest.fixture
def channels() -> Iterator[Channels]:
    ch = Channels()
    yield ch
    ch.close()


def dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_parse_endpoints() -> None:
    assert parse_endpoints(" a:1, b:2 ,") == ["a:1", "b:2"]
    for bad in ("", "nohost", "a:1,b"):
        with pytest.raises(BadRequestError):
            parse_endpoints(bad)


def test_skips_a_dead_bootstrap_address(server: RouteServer, channels: Channels) -> None:
    routes = RouteCache(channels, [dead_address(), server.address], refresh_interval=60)
    assert routes.get("T", timeout=5).write_queues()[1].queue_id == 1
    assert routes.endpoints(timeout=5)[0].instance_id == "s1"


def test_caches_until_marked_stale(server: RouteServer, channels: Channels) -> None:
    routes = RouteCache(channels, [server.address], refresh_interval=60)
    routes.get("T", timeout=5)
    routes.get("T", timeout=5)
    assert server.calls == 1
    server.write_queue_nums = 4
    routes.mark_stale("T")
    assert len(routes.get("T", timeout=5).write_queues()) == 4
    assert server.calls == 2


def test_unknown_topic_is_not_retried_elsewhere(server: RouteServer, channels: Channels) -> None:
    other = RouteServer()
    try:
        routes = RouteCache(channels, [server.address, other.address], refresh_interval=60)
        with pytest.raises(NotFoundError) as info:
            routes.get("nope", timeout=5)
        assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND
        assert (server.calls, other.calls) == (1, 0)
    finally:
        other.stop()


def test_uses_the_stale_route_when_no_route_server_answers(server: RouteServer, channels: Channels) -> None:
    routes = RouteCache(channels, [server.address], refresh_interval=60)
    first = routes.get("T", timeout=5)
    server.stop()
    routes.mark_stale("T")
    assert routes.get("T", timeout=5) == first
    with pytest.raises(UnavailableError):
        routes.get("Other", timeout=5)


def test_falls_back_to_learned_services_when_the_bootstrap_dies(channels: Channels) -> None:
    bootstrap, learned = RouteServer(), RouteServer()
    try:
        # The route names `learned` as a pull service: any service answers routes.
        bootstrap.pull_address = learned.address
        routes = RouteCache(channels, [bootstrap.address], refresh_interval=60)
        routes.get("T", timeout=5)
        bootstrap.stop()
        routes.mark_stale("T")
        routes.get("T", timeout=5)
        assert learned.calls == 1
    finally:
        learned.stop()
