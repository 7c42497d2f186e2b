"""``apache.rocketmq.v2.MessagingService``: a thin layer over the gateway's cores.

Every answer carries a v2 ``Status`` (the gRPC call itself succeeds, as RocketMQ's proxy
does): authentication first, then (with auth_enabled) the user's permissions for the
call (access.py), then the core, whose GatewayError / TxmqError becomes the status.
GetOffset (a group's committed offset of a queue) and QueryOffset (a queue's first
or last offset, or the first stored at a time) read the store, for lag monitors such as
KEDA; PullMessage and UpdateOffset serve pull consumers (RocketMQ's proxy answers all
four UNIMPLEMENTED, #10434). RecallMessage cancels a
delayed message at its store. The RPC txmq does not serve (SyncLiteSubscription)
answers gRPC UNIMPLEMENTED (the generated base class does too, but by raising NotImplementedError,
which gRPC logs with a traceback on every call).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import Message

from txmq.protocol import MESSAGE_TYPE_PRIORITY
from txmq.recall import RecallHandle
from txmq.v1 import common_pb2, store_pb2
from txmq_gateway.access import Authorizer
from txmq_gateway.auth import Authenticator, header_text
from txmq_gateway.backend import Backend
from txmq_gateway.consumer import SimpleConsumerCore
from txmq_gateway.convert import to_v2_message
from txmq_gateway.names import check_names
from txmq_gateway.ownership import GroupRouter, Owner, is_forwarded
from txmq_gateway.producer import ProducerCore
from txmq_gateway.status import GatewayError, from_exception, ok, overall
from txmq_gateway.telemetry import ClientHub
from txmq_gateway.v2 import SERVICE_NAME, Code, pb, svc, svc_grpc
from txmq_runtime.auth import Principal

log = logging.getLogger("txmq.gateway.servicer")

R = TypeVar("R")

CLIENT_ID_HEADER = "x-mq-client-id"
_READ, _WRITE = 4, 2  # RocketMQ permission bits


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    """The x-mq-client-id header ("" when absent); GatewayError(BAD_REQUEST) when it is
    not printable ASCII."""
    return header_text(context.invocation_metadata(), CLIENT_ID_HEADER, Code.BAD_REQUEST)


def certificate_user(context: grpc.aio.ServicerContext) -> str | None:
    """The common name of the client certificate the TLS port verified (None: none)."""
    names = context.auth_context().get("x509_common_name") or ()
    return names[0].decode(errors="replace") if names else None


def over_tls(context: grpc.aio.ServicerContext) -> bool:
    return context.auth_context().get("transport_security_type") == [b"ssl"]


def endpoints_of(address: str) -> pb.Endpoints:
    """v2 Endpoints for host:port (IPv4, IPv6 in brackets, or a DNS name)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host.replace(".", "").isdigit() and host.count(".") == 3:
        scheme = pb.IPv4
    elif ":" in host:
        scheme = pb.IPv6
    else:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=int(port))])


#: What a queue accepts: every kind but PRIORITY, or (a priority topic's) PRIORITY only.
_ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
_PRIORITY_TYPES = (pb.PRIORITY,)


def queues_of(topic: str, queue_data: list, endpoints: pb.Endpoints) -> list[pb.MessageQueue]:
    """One v2 MessageQueue per txmq queue: broker = store (id 0, a master), reached
    through this gateway."""
    out = []
    for q in queue_data:
        broker = pb.Broker(name=q.store_id, id=0, endpoints=endpoints)
        for queue_id in range(max(q.read_queue_nums, q.write_queue_nums)):
            readable = bool(q.perm & _READ) and queue_id < q.read_queue_nums
            writable = bool(q.perm & _WRITE) and queue_id < q.write_queue_nums
            permission = {
                (True, True): pb.READ_WRITE,
                (True, False): pb.READ,
                (False, True): pb.WRITE,
                (False, False): pb.NONE,
            }[(readable, writable)]
            out.append(
                pb.MessageQueue(
                    topic=pb.Resource(name=topic),
                    id=queue_id,
                    permission=permission,
                    broker=broker,
                    accept_message_types=_PRIORITY_TYPES
                    if q.message_type == MESSAGE_TYPE_PRIORITY
                    else _ACCEPTED_TYPES,
                )
            )
    return out


def _queue_of(mq: pb.MessageQueue) -> tuple[str, str, int]:
    """(store id, topic, queue id) of a v2 MessageQueue from this gateway's routes (its
    broker is the store)."""
    if not mq.topic.name:
        raise GatewayError(Code.ILLEGAL_TOPIC, "topic is required")
    if not mq.broker.name:
        raise GatewayError(Code.BAD_REQUEST, "the message queue names no broker (take it from QueryRoute)")
    return mq.broker.name, mq.topic.name, mq.id


def filter_of(expression: pb.FilterExpression) -> common_pb2.FilterExpression:
    if expression.type == pb.SQL:
        return common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression=expression.expression)
    return common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=expression.expression or "*")


class MessagingServicer(svc_grpc.MessagingServiceServicer):
    def __init__(
        self,
        *,
        address: str,
        auth: Authenticator,
        backend: Backend,
        producer: ProducerCore,
        consumer: SimpleConsumerCore,
        clients: ClientHub,
        route_client_endpoints: bool = False,
        router: GroupRouter | None = None,
        access: Authorizer | None = None,
    ) -> None:
        self.address = address
        self.route_client_endpoints = route_client_endpoints
        #: host:port of the TLS port, when the gateway serves one.
        self.tls_address = ""
        self._background: set[asyncio.Task[None]] = set()
        self.auth = auth
        self.backend = backend
        self.producer = producer
        self.consumer = consumer
        self.clients = clients
        # Consumer-group ownership across replicas (None: this gateway serves every group).
        self.router = router
        #: Users' permissions (auth_enabled: access.py); None: authentication only.
        self.access = access

    def _admit(self, method: str, request: Message | None, context: grpc.aio.ServicerContext) -> Principal | None:
        """Authenticate the call and, with users (``access``), check that its user may make
        ``request`` (None: only authenticate, e.g. a stream whose commands are checked one
        by one). The user (None without users); GatewayError UNAUTHORIZED / FORBIDDEN,
        counted and logged, otherwise."""
        principal = None
        if self.access is None and not self.auth.enabled:
            # Authentication off: nothing to read from the call (its metadata is a tuple
            # built per read), only the names to check.
            if request is not None:
                check_names(request)
            return None
        try:
            certificate = certificate_user(context) if self.access is not None else None
            access_key = self.auth.check(context.invocation_metadata(), certificate_user=certificate)
            if self.access is not None and access_key is not None:
                principal = self.access.principal(access_key, context.peer())
                if not principal.super_user:  # super users may act for any client
                    self.clients.claim(client_id_of(context), principal.username)
                if request is not None:
                    self.access.check(method, principal, request)
        except GatewayError as err:
            if self.access is not None:
                self.access.denied(method, principal.username if principal else None, context.peer(), err)
            raise
        if request is not None:
            check_names(request)  # RocketMQ's naming rules (names.py), before any core sees them
        return principal

    def _command_check(
        self, principal: Principal | None, context: grpc.aio.ServicerContext
    ) -> Callable[[svc.TelemetryCommand], None] | None:
        """The check of each command a Telemetry stream's client sends (None: none needed)."""
        access = self.access
        if access is None or principal is None or principal.super_user:
            return None
        peer = context.peer()

        def check(command: svc.TelemetryCommand) -> None:
            try:
                access.check("Telemetry", principal, command)
            except GatewayError as err:
                access.denied("Telemetry", principal.username, peer, err)
                raise

        return check

    async def _answer(
        self,
        method: str,
        request: Message,
        context: grpc.aio.ServicerContext,
        response: Callable[[pb.Status], R],
        work: Callable[[], Awaitable[R]],
    ) -> R:
        """Authenticate and authorise (``_admit``), run ``work``; a failure becomes
        ``response(status)``."""
        try:
            self._admit(method, request, context)
            return await work()
        except Exception as exc:  # noqa: BLE001 - answered as a v2 status
            if not isinstance(exc, GatewayError):
                log.info("%s failed: %s", type(response).__name__, exc)
            return response(from_exception(exc))

    def _route_endpoints(self, access_point: pb.Endpoints, context: grpc.aio.ServicerContext) -> pb.Endpoints:
        """Where routes send clients: the access point the client used (with
        route_client_endpoints, e.g. a load balancer), else this gateway's advertised
        address -- its TLS port for a client that came in over TLS."""
        if self.route_client_endpoints and access_point.addresses:
            return access_point
        if self.tls_address and over_tls(context):
            return endpoints_of(self.tls_address)
        return endpoints_of(self.address)

    # -- route, heartbeat ----------------------------------------------------------------

    async def QueryRoute(
        self, request: svc.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> svc.QueryRouteResponse:
        async def work() -> svc.QueryRouteResponse:
            topic = request.topic.name
            if not topic:
                raise GatewayError(Code.ILLEGAL_TOPIC, "topic is required")
            endpoints = self._route_endpoints(request.endpoints, context)
            queues = queues_of(topic, await self.backend.queues(topic), endpoints)
            return svc.QueryRouteResponse(status=ok(), message_queues=queues)

        return await self._answer("QueryRoute", request, context, lambda s: svc.QueryRouteResponse(status=s), work)

    async def GetOffset(
        self, request: svc.GetOffsetRequest, context: grpc.aio.ServicerContext
    ) -> svc.GetOffsetResponse:
        async def work() -> svc.GetOffsetResponse:
            group = request.group.name
            if not group:
                raise GatewayError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group is required")
            store_id, topic, queue_id = _queue_of(request.message_queue)
            offset = await self.backend.query_consume_offset(store_id, group=group, topic=topic, queue_id=queue_id)
            if offset is None:
                raise GatewayError(
                    Code.OFFSET_NOT_FOUND, f"group {group} has no committed offset on {topic} queue {queue_id}"
                )
            return svc.GetOffsetResponse(status=ok(), offset=offset)

        return await self._answer("GetOffset", request, context, lambda s: svc.GetOffsetResponse(status=s), work)

    async def QueryOffset(
        self, request: svc.QueryOffsetRequest, context: grpc.aio.ServicerContext
    ) -> svc.QueryOffsetResponse:
        async def work() -> svc.QueryOffsetResponse:
            store_id, topic, queue_id = _queue_of(request.message_queue)
            policy = request.query_offset_policy
            if policy == pb.TIMESTAMP:
                seconds, nanos = request.timestamp.seconds, request.timestamp.nanos
                # google.protobuf.Timestamp's range (0001-01-01 .. 9999-12-31): in ms, an int64.
                if not (-62_135_596_800 <= seconds <= 253_402_300_799 and 0 <= nanos < 1_000_000_000):
                    raise GatewayError(
                        Code.BAD_REQUEST,
                        f"timestamp {seconds} s + {nanos} ns is not a valid google.protobuf.Timestamp "
                        "(0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z)",
                    )
                ts = seconds * 1000 + nanos // 1_000_000
                offset = await self.backend.search_offset(store_id, topic, queue_id, ts)
            else:
                bounds = (await self.backend.queue_offsets(store_id, topic)).get(queue_id)
                if bounds is None:
                    raise GatewayError(Code.BAD_REQUEST, f"topic {topic} has no queue {queue_id} on {store_id}")
                offset = bounds[0] if policy == pb.BEGINNING else bounds[1]
            return svc.QueryOffsetResponse(status=ok(), offset=offset)

        return await self._answer("QueryOffset", request, context, lambda s: svc.QueryOffsetResponse(status=s), work)

    async def QueryAssignment(
        self, request: svc.QueryAssignmentRequest, context: grpc.aio.ServicerContext
    ) -> svc.QueryAssignmentResponse:
        async def work() -> svc.QueryAssignmentResponse:
            # Push consumers receive from every readable queue; the gateway spreads
            # messages over the group's consumers itself, so each gets every queue.
            topic = request.topic.name
            endpoints = self._route_endpoints(request.endpoints, context)
            queues = [
                q
                for q in queues_of(topic, await self.backend.queues(topic), endpoints)
                if q.permission in (pb.READ, pb.READ_WRITE)
            ]
            return svc.QueryAssignmentResponse(
                status=ok(), assignments=[pb.Assignment(message_queue=q) for q in queues]
            )

        return await self._answer(
            "QueryAssignment", request, context, lambda s: svc.QueryAssignmentResponse(status=s), work
        )

    async def Heartbeat(
        self, request: svc.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> svc.HeartbeatResponse:
        async def work() -> svc.HeartbeatResponse:
            client_id = client_id_of(context)
            if not client_id:
                raise GatewayError(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID_HEADER} header is required")
            self.clients.heartbeat(client_id, request.client_type, request.group.name)
            await self._tell_owner("Heartbeat", request, context)
            return svc.HeartbeatResponse(status=ok())

        return await self._answer("Heartbeat", request, context, lambda s: svc.HeartbeatResponse(status=s), work)

    async def NotifyClientTermination(
        self, request: svc.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext
    ) -> svc.NotifyClientTerminationResponse:
        async def work() -> svc.NotifyClientTerminationResponse:
            self.clients.terminate(client_id_of(context), request.group.name)
            await self._tell_owner("NotifyClientTermination", request, context)
            return svc.NotifyClientTerminationResponse(status=ok())

        return await self._answer(
            "NotifyClientTermination", request, context, lambda s: svc.NotifyClientTerminationResponse(status=s), work
        )

    async def Telemetry(
        self, request_iterator: AsyncIterator[svc.TelemetryCommand], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[svc.TelemetryCommand]:
        try:
            principal = self._admit("Telemetry", None, context)
            client_id = client_id_of(context)
            if not client_id:
                raise GatewayError(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID_HEADER} header is required")
        except Exception as exc:  # noqa: BLE001 - answered as a v2 status
            if not isinstance(exc, GatewayError):
                log.info("telemetry stream refused: %s", exc)
            yield svc.TelemetryCommand(status=from_exception(exc))
            return
        # Each command the client sends is checked (its settings name topics and a group).
        check = self._command_check(principal, context)
        # aclosing: a cancelled call closes the session's producer channels at once.
        async with contextlib.aclosing(self.clients.session(client_id, request_iterator, check=check)) as commands:
            async for command in commands:
                yield command

    # -- producing -----------------------------------------------------------------------

    async def SendMessage(
        self, request: svc.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> svc.SendMessageResponse:
        return await self._answer(
            "SendMessage",
            request,
            context,
            lambda s: svc.SendMessageResponse(status=s),
            lambda: self.producer.send(request),
        )

    async def EndTransaction(
        self, request: svc.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> svc.EndTransactionResponse:
        async def work() -> svc.EndTransactionResponse:
            await self.producer.end_transaction(request)
            return svc.EndTransactionResponse(status=ok())

        return await self._answer(
            "EndTransaction", request, context, lambda s: svc.EndTransactionResponse(status=s), work
        )

    # -- consuming -----------------------------------------------------------------------

    async def _tell_owner(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        """Relay a consumer's heartbeat or termination to the gateway owning its group,
        which holds its messages (auto-renewal lasts while the client is alive there).
        Best effort: a lost one only shortens or lengthens a renewal."""
        group = request.group.name if request.HasField("group") else ""
        metadata = context.invocation_metadata()
        if self.router is None or not group or is_forwarded(metadata):
            return
        if method == "Heartbeat" and request.client_type not in (pb.SIMPLE_CONSUMER, pb.PUSH_CONSUMER):
            return
        try:
            owner = await self.router.owner(group, metadata)
            if owner is not None:
                await self.router.forward(method, request, context, owner)
        except Exception as exc:  # noqa: BLE001 - best effort
            log.debug("%s of %s not relayed to the owner of %s: %s", method, client_id_of(context), group, exc)

    async def _owner(self, group: str, context: grpc.aio.ServicerContext) -> Owner | None:
        """The gateway owning ``group`` when it is another one (forward the call to it);
        None: serve it here. A forwarded call served here counts as a sign of life of
        its client (its heartbeats go to the gateway it is connected to), so that its
        auto-renewed messages are released once it stops calling."""
        if self.router is None:
            return None
        metadata = context.invocation_metadata()
        owner = await self.router.owner(group, metadata)
        if owner is None and self.clients is not None and is_forwarded(metadata):
            self.clients.heartbeat(client_id_of(context), 0, group)
        return owner

    async def ReceiveMessage(
        self, request: svc.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[svc.ReceiveMessageResponse]:
        """The messages, one frame each, then a status frame (MESSAGE_NOT_FOUND when the
        long poll ended empty)."""
        try:
            self._admit("ReceiveMessage", request, context)
            owner = await self._owner(request.group.name, context)
            if owner is not None:
                forwarded = self.router.forward_receive(request, context, owner)  # type: ignore[union-attr]
                async with contextlib.aclosing(forwarded) as frames:
                    async for frame in frames:
                        yield frame
                return
            remaining = context.time_remaining()
            deliveries = await self.consumer.receive(
                group=request.group.name,
                topic=request.message_queue.topic.name,
                filter=filter_of(request.filter_expression),
                batch_size=request.batch_size,
                invisible_ms=request.invisible_duration.ToMilliseconds()
                if request.HasField("invisible_duration")
                else None,
                long_polling_timeout_ms=(
                    request.long_polling_timeout.ToMilliseconds() if request.HasField("long_polling_timeout") else None
                ),
                client_id=client_id_of(context),
                auto_renew=request.auto_renew,
                time_remaining_ms=None if remaining is None else int(remaining * 1000),
            )
        except Exception as exc:  # noqa: BLE001 - answered as a v2 status
            if not isinstance(exc, GatewayError):
                log.info("receive for %s failed: %s", request.group.name, exc)
            yield svc.ReceiveMessageResponse(status=from_exception(exc))
            return
        if not deliveries:
            yield svc.ReceiveMessageResponse(status=pb.Status(code=Code.MESSAGE_NOT_FOUND, message="no new message"))
            return
        try:
            for d in deliveries:
                yield svc.ReceiveMessageResponse(
                    message=to_v2_message(
                        d.view,
                        receipt_handle=d.receipt_handle,
                        delivery_attempt=d.delivery_attempt,
                        invisible_ms=d.invisible_ms,
                    )
                )
            yield svc.ReceiveMessageResponse(status=ok())
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away mid-answer: its messages are visible again now instead
            # of after their whole invisible duration (RocketMQ #9253 waits it out).
            self._release(request.group.name, request.message_queue.topic.name, deliveries)
            raise

    def _release(self, group: str, topic: str, deliveries: list) -> None:
        async def release() -> None:
            for d in deliveries:
                try:
                    await self.consumer.change_invisible_duration(
                        group=group,
                        topic=topic,
                        receipt_handle=d.receipt_handle,
                        message_id=d.view.message.unique_id,
                        invisible_ms=0,
                    )
                except Exception as exc:  # noqa: BLE001 - it comes back after its duration anyway
                    log.debug("release of %s failed: %s", d.view.message.unique_id, exc)

        task = asyncio.get_running_loop().create_task(release())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def AckMessage(
        self, request: svc.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> svc.AckMessageResponse:
        async def work() -> svc.AckMessageResponse:
            owner = await self._owner(request.group.name, context)
            if owner is not None:
                return await self.router.forward("AckMessage", request, context, owner)  # type: ignore[union-attr]
            entries = []
            for entry in request.entries:
                try:
                    await self.consumer.ack(
                        group=request.group.name,
                        topic=request.topic.name,
                        receipt_handle=entry.receipt_handle,
                        message_id=entry.message_id,
                    )
                    result = ok()
                except Exception as exc:  # noqa: BLE001 - answered per entry
                    result = from_exception(exc)
                entries.append(
                    svc.AckMessageResultEntry(
                        message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
                    )
                )
            return svc.AckMessageResponse(status=overall([e.status for e in entries], "acks"), entries=entries)

        return await self._answer("AckMessage", request, context, lambda s: svc.AckMessageResponse(status=s), work)

    async def ChangeInvisibleDuration(
        self, request: svc.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext
    ) -> svc.ChangeInvisibleDurationResponse:
        async def work() -> svc.ChangeInvisibleDurationResponse:
            owner = await self._owner(request.group.name, context)
            if owner is not None:
                return await self.router.forward("ChangeInvisibleDuration", request, context, owner)  # type: ignore[union-attr]
            handle = await self.consumer.change_invisible_duration(
                group=request.group.name,
                topic=request.topic.name,
                receipt_handle=request.receipt_handle,
                message_id=request.message_id,
                invisible_ms=request.invisible_duration.ToMilliseconds(),
            )
            return svc.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)

        return await self._answer(
            "ChangeInvisibleDuration", request, context, lambda s: svc.ChangeInvisibleDurationResponse(status=s), work
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: svc.ForwardMessageToDeadLetterQueueRequest, context: grpc.aio.ServicerContext
    ) -> svc.ForwardMessageToDeadLetterQueueResponse:
        async def work() -> svc.ForwardMessageToDeadLetterQueueResponse:
            owner = await self._owner(request.group.name, context)
            if owner is not None:
                return await self.router.forward("ForwardMessageToDeadLetterQueue", request, context, owner)  # type: ignore[union-attr]
            await self.consumer.forward_to_dead_letter_queue(
                group=request.group.name,
                topic=request.topic.name,
                receipt_handle=request.receipt_handle,
                message_id=request.message_id,
            )
            return svc.ForwardMessageToDeadLetterQueueResponse(status=ok())

        return await self._answer(
            "ForwardMessageToDeadLetterQueue",
            request,
            context,
            lambda s: svc.ForwardMessageToDeadLetterQueueResponse(status=s),
            work,
        )

    async def PullMessage(
        self, request: svc.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[svc.PullMessageResponse]:
        """A pull consumer's read of one queue from an offset: a status frame (OK,
        MESSAGE_NOT_FOUND after the long poll, ILLEGAL_OFFSET, or the refusal), then the
        messages, one frame each, then the next offset to pull (with every status that
        knows one). Nothing is committed: the client commits with UpdateOffset."""
        try:
            self._admit("PullMessage", request, context)
            store_id, topic, queue_id = _queue_of(request.message_queue)
            remaining = context.time_remaining()
            pulled = await self.consumer.pull(
                group=request.group.name,
                store_id=store_id,
                topic=topic,
                queue_id=queue_id,
                offset=request.offset,
                batch_size=request.batch_size,
                filter=filter_of(request.filter_expression),
                long_polling_timeout_ms=(
                    request.long_polling_timeout.ToMilliseconds() if request.HasField("long_polling_timeout") else None
                ),
                time_remaining_ms=None if remaining is None else int(remaining * 1000),
                client_id=client_id_of(context),
            )
        except Exception as exc:  # noqa: BLE001 - answered as a v2 status
            if not isinstance(exc, GatewayError):
                log.info("pull for %s failed: %s", request.group.name, exc)
            yield svc.PullMessageResponse(status=from_exception(exc))
            return
        yield svc.PullMessageResponse(status=pb.Status(code=pulled.code, message=pulled.message))
        for view in pulled.views:
            yield svc.PullMessageResponse(message=to_v2_message(view))
        yield svc.PullMessageResponse(next_offset=pulled.next_offset)

    async def UpdateOffset(
        self, request: svc.UpdateOffsetRequest, context: grpc.aio.ServicerContext
    ) -> svc.UpdateOffsetResponse:
        async def work() -> svc.UpdateOffsetResponse:
            owner = await self._owner(request.group.name, context)
            if owner is not None:  # it knows whether the group is receiving there
                return await self.router.forward("UpdateOffset", request, context, owner)  # type: ignore[union-attr]
            store_id, topic, queue_id = _queue_of(request.message_queue)
            await self.consumer.update_offset(
                group=request.group.name, store_id=store_id, topic=topic, queue_id=queue_id, offset=request.offset
            )
            return svc.UpdateOffsetResponse(status=ok())

        return await self._answer("UpdateOffset", request, context, lambda s: svc.UpdateOffsetResponse(status=s), work)

    async def RecallMessage(
        self, request: svc.RecallMessageRequest, context: grpc.aio.ServicerContext
    ) -> svc.RecallMessageResponse:
        """A delayed message cancelled by the recall handle its send answered (the SDK's,
        ``txmq.recall``; docs/store.md "Recall"), at the store the handle names."""

        async def work() -> svc.RecallMessageResponse:
            handle = RecallHandle.decode(request.recall_handle)
            if handle.topic != request.topic.name:
                raise GatewayError(
                    Code.BAD_REQUEST, f"the recall handle is of topic {handle.topic}, not {request.topic.name}"
                )
            answer = await self.backend.recall(handle)
            if answer.status != store_pb2.SEND_STATUS_OK:
                raise GatewayError(
                    Code.MASTER_PERSISTENCE_TIMEOUT,
                    f"recall stored with status {store_pb2.SendStatus.Name(answer.status)}: recall again to be sure",
                )
            return svc.RecallMessageResponse(status=ok(), message_id=answer.unique_id)

        return await self._answer(
            "RecallMessage", request, context, lambda s: svc.RecallMessageResponse(status=s), work
        )

    # -- not served ----------------------------------------------------------------------
    # Checked all the same (access.py): serving one later keeps it guarded.

    async def SyncLiteSubscription(
        self, request: svc.SyncLiteSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> svc.SyncLiteSubscriptionResponse:
        return await self._refuse_unserved(
            "SyncLiteSubscription", request, context, svc.SyncLiteSubscriptionResponse, "txmq has no lite topics"
        )

    async def _refuse_unserved(
        self, method: str, request: Message, context: grpc.aio.ServicerContext, response: Callable[..., R], why: str
    ) -> R:
        """A refused caller gets its v2 status; an allowed one gRPC UNIMPLEMENTED."""
        try:
            self._admit(method, request, context)
        except GatewayError as err:
            return response(status=from_exception(err))
        await _unimplemented(context, method, why)


async def _unimplemented(context: grpc.aio.ServicerContext, method: str, why: str) -> NoReturn:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"txmq's gateway does not serve {method}: {why}")
    raise AssertionError("context.abort raises")  # (its stubs do not say NoReturn)


def add_messaging_servicer(server: grpc.aio.Server, servicer: MessagingServicer) -> str:
    svc_grpc.add_MessagingServiceServicer_to_server(servicer, server)
    return SERVICE_NAME
