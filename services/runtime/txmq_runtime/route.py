"""The Route service, served by every txmq service: route look-ups answered from the
cluster view (a watched copy of etcd), so clients need one bootstrap address and no
etcd access."""

from __future__ import annotations

import grpc

from txmq.errors import error
from txmq.v1 import common_pb2, errors_pb2, route_pb2, route_pb2_grpc
from txmq_runtime.grpc_errors import rpc
from txmq_runtime.registry import ClusterView

SERVICE_NAME = route_pb2.DESCRIPTOR.services_by_name["Route"].full_name


class RouteServicer(route_pb2_grpc.RouteServicer):
    def __init__(self, cluster: ClusterView) -> None:
        self._cluster = cluster

    @rpc
    async def QueryRoute(
        self, request: route_pb2.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> route_pb2.QueryRouteResponse:
        if not request.topic:
            raise error(errors_pb2.CODE_ILLEGAL_TOPIC, "topic is empty")
        queues, state = await self._cluster.route(request.topic)
        if not queues:
            raise error(
                errors_pb2.CODE_TOPIC_NOT_FOUND, f"no live store serves topic {request.topic!r}", topic=request.topic
            )
        return route_pb2.QueryRouteResponse(
            topic=request.topic,
            queues=queues,
            store_endpoints=state.endpoints(common_pb2.SERVICE_KIND_STORE),
            pull_endpoints=state.endpoints(common_pb2.SERVICE_KIND_PULL),
            txcheck_endpoints=state.endpoints(common_pb2.SERVICE_KIND_TXCHECK),
        )

    @rpc
    async def ListEndpoints(
        self, request: route_pb2.ListEndpointsRequest, context: grpc.aio.ServicerContext
    ) -> route_pb2.ListEndpointsResponse:
        return route_pb2.ListEndpointsResponse(endpoints=await self._cluster.listed_endpoints(request.kind))


def add_route_servicer(server: grpc.aio.Server, cluster: ClusterView) -> str:
    route_pb2_grpc.add_RouteServicer_to_server(RouteServicer(cluster), server)
    return SERVICE_NAME
