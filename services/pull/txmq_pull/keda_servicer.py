"""KEDA's externalscaler.ExternalScaler servicer: adapts each call to the core (keda.py).
Errors are typed by the core and mapped to statuses by ``@rpc``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from txmq.keda import externalscaler_pb2 as pb
from txmq.keda import externalscaler_pb2_grpc as pb_grpc
from txmq_pull.keda import Scaler
from txmq_runtime.grpc_errors import rpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    def __init__(self, scaler: Scaler) -> None:
        self._scaler = scaler

    @rpc
    async def IsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> pb.IsActiveResponse:
        return pb.IsActiveResponse(result=await self._scaler.is_active(request.scalerMetadata))

    @rpc
    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        async for active in self._scaler.stream_is_active(request.scalerMetadata):
            yield pb.IsActiveResponse(result=active)

    @rpc
    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        spec = self._scaler.metric_spec(request.scalerMetadata)
        return pb.GetMetricSpecResponse(
            metricSpecs=[pb.MetricSpec(metricName=spec.name, targetSize=spec.target, targetSizeFloat=spec.target)]
        )

    @rpc
    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        name, lag = await self._scaler.metric(request.scaledObjectRef.scalerMetadata, request.metricName)
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName=name, metricValue=lag, metricValueFloat=lag)]
        )


def add_external_scaler_servicer(server: grpc.aio.Server, servicer: ExternalScalerServicer) -> str:
    pb_grpc.add_ExternalScalerServicer_to_server(servicer, server)
    return SERVICE_NAME
