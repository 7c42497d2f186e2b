"""The txmq.v1.Pull servicer: adapts each call to the core (processor, membership).
Errors are typed by the core and mapped to statuses by ``@rpc``; a client that goes
away cancels its call, which removes its held pull."""

from __future__ import annotations

import grpc

from txmq.v1 import pull_pb2, pull_pb2_grpc
from txmq_pull.membership import ConsumerGroups
from txmq_pull.metrics import pulled
from txmq_pull.processor import PullProcessor
from txmq_pull.retry_topics import RetryTopics
from txmq_runtime.clock import Clock
from txmq_runtime.grpc_errors import rpc
from txmq_runtime.quotas import admit_fetch, charge_fetch

SERVICE_NAME = pull_pb2.DESCRIPTOR.services_by_name["Pull"].full_name


class PullServicer(pull_pb2_grpc.PullServicer):
    def __init__(
        self,
        processor: PullProcessor,
        groups: ConsumerGroups,
        *,
        clock: Clock,
        deadline_margin_ms: int,
        retry_topics: RetryTopics,
    ) -> None:
        self._processor = processor
        self._groups = groups
        self._retry_topics = retry_topics
        self._clock = clock
        self._margin_ms = deadline_margin_ms

    @rpc
    async def PullMessage(
        self, request: pull_pb2.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> pull_pb2.PullMessageResponse:
        admit_fetch()  # the caller's byte-rate quota: refused while in debt
        remaining_s = context.time_remaining()
        answer_by_ms = None
        if remaining_s is not None:
            answer_by_ms = self._clock.now_ms() + int(remaining_s * 1000) - self._margin_ms
        response = await self._processor.pull(request, answer_by_ms=answer_by_ms)
        pulled(request, response)
        charge_fetch(response)
        return response

    @rpc
    async def UpdateConsumerOffset(
        self, request: pull_pb2.UpdateConsumerOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pull_pb2.UpdateConsumerOffsetResponse:
        await self._processor.update_offset(request)
        return pull_pb2.UpdateConsumerOffsetResponse()

    @rpc
    async def QueryConsumerOffset(
        self, request: pull_pb2.QueryConsumerOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pull_pb2.QueryConsumerOffsetResponse:
        return await self._processor.query_offset(request)

    @rpc
    async def ConsumerHeartbeat(
        self, request: pull_pb2.ConsumerHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pull_pb2.ConsumerHeartbeatResponse:
        ids = self._groups.heartbeat(
            request.consumer_group,
            request.client_id,
            list(request.topics),
            leaving=request.leaving,
            subscriptions=list(request.subscriptions),
        )
        if not request.leaving:
            # Before the answer: the member's first rebalance then finds the retry topic.
            await self._retry_topics.ensure(request.consumer_group, request.topics)
        return pull_pb2.ConsumerHeartbeatResponse(consumer_ids=ids)


def add_pull_servicer(server: grpc.aio.Server, servicer: PullServicer) -> str:
    pull_pb2_grpc.add_PullServicer_to_server(servicer, server)
    return SERVICE_NAME
