"""The txmq.v1.Pull servicer: adapts each call to the core (processor, membership).
Errors are typed by the core and mapped to statuses by ``@rpc``; a client that goes
away cancels its call, which removes its held pull. PullStream carries many pulls on one
call (``txmq_pull.stream``): their errors are answers, and each is access-checked here
as PullMessage's interceptor checks a unary pull."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from txmq.v1 import pull_pb2, pull_pb2_grpc
from txmq_pull.membership import ConsumerGroups
from txmq_pull.metrics import pulled
from txmq_pull.processor import PullProcessor
from txmq_pull.retry_topics import RetryTopics
from txmq_pull.stream import PullStreamSession
from txmq_runtime.auth import access_of, current_principal, names_at, require
from txmq_runtime.clock import Clock
from txmq_runtime.grpc_errors import rpc
from txmq_runtime.quotas import admit_fetch, charge_fetch

SERVICE_NAME = pull_pb2.DESCRIPTOR.services_by_name["Pull"].full_name
#: Initial metadata of an open PullStream: the client knows the stream is served.
STREAM_OPEN = ("txmq-pull-stream", "1")
_PULL_ACCESS = access_of(pull_pb2.DESCRIPTOR.services_by_name["Pull"].methods_by_name["PullMessage"])


def check_pull_access(request: pull_pb2.PullMessageRequest) -> None:
    """PullMessage's access checks (its ``access`` option) on a streamed pull: raises
    CODE_ACCESS_DENIED; nothing to check with auth off or for a super user."""
    principal = current_principal()
    if principal is None or principal.super_user:
        return
    assert _PULL_ACCESS is not None
    for check in _PULL_ACCESS.checks:
        if not check.field:
            require(check.type, "", check.action)
            continue
        names = names_at(request, check.field, when_set=check.when_set)
        if names is not None:
            for name in names or [""]:
                require(check.type, name, check.action)


class PullServicer(pull_pb2_grpc.PullServicer):
    def __init__(
        self,
        processor: PullProcessor,
        groups: ConsumerGroups,
        *,
        clock: Clock,
        deadline_margin_ms: int,
        retry_topics: RetryTopics,
        max_stream_pulls: int = 1024,
    ) -> None:
        self._processor = processor
        self._groups = groups
        self._retry_topics = retry_topics
        self._clock = clock
        self._margin_ms = deadline_margin_ms
        self._max_stream_pulls = max_stream_pulls
        self._sessions: set[PullStreamSession] = set()
        self._stopping = False

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
    async def PullStream(
        self, requests: AsyncIterator[pull_pb2.PullStreamRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pull_pb2.PullStreamResponse]:
        """Pulls as PullMessage, with no caller's deadline (a pull's own suspend time
        bounds its hold); answered as each is done. The stream ends when the client closes
        its side and every pull is answered, or when the service stops."""
        session = PullStreamSession(self._stream_pull, check=check_pull_access, max_outstanding=self._max_stream_pulls)
        await context.send_initial_metadata((STREAM_OPEN,))
        self._sessions.add(session)
        if self._stopping:
            session.finish()
        else:
            session.start(requests)
        try:
            async for answer in session.answers():
                yield answer
        finally:
            self._sessions.discard(session)
            await session.close()

    async def _stream_pull(self, request: pull_pb2.PullMessageRequest) -> pull_pb2.PullMessageResponse:
        admit_fetch()  # the caller's byte-rate quota, as PullMessage: this pull's error answer
        response = await self._processor.pull(request)
        pulled(request, response)
        charge_fetch(response)
        return response

    def finish_streams(self) -> None:
        """The service stops: streams read no more pulls and end once theirs are answered."""
        self._stopping = True
        for session in list(self._sessions):
            session.finish()

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
