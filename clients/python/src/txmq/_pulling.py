"""The calls both consumers make: pulls, offsets, queue ranges, heartbeats.

``PullClient`` sits on a ``ClientCore`` (channels + routes) and adds what a consumer
needs: which pull instance serves a queue, building a PullMessage request from a
``Subscription``, turning the answer into a ``PullResult`` (with the client's tag
re-check), and the offset and membership RPCs.

Which pull instance: the topic route lists the live pull instances; they are ordered
by instance id, and a queue prefers the one at ``crc32(queue) % n``, so pulls spread
over the instances and every client picks the same one for a queue. A failed attempt
moves on to the next instance.

Long polls go on one open stream per pull instance (``txmq._pull_stream``), or as unary
PullMessage calls to a pull service that does not offer it (or when the application's
interceptors would not see the stream); pulls that answer at once are unary calls.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable, Sequence

import grpc

from txmq._client import ClientCore, call
from txmq._consumer_types import PullResult, PullStatus, SendBackResult
from txmq._convert import message_ext_from_proto, message_queue_to_proto
from txmq._failures import FailureLog, retriable
from txmq._pull_stream import PullStream
from txmq._subscription import Subscription
from txmq.errors import InternalError, NotFoundError, TxmqError, UnavailableError
from txmq.message import MessageExt, MessageQueue, SendStatus
from txmq.models import Endpoint, ServiceKind, TopicRoute
from txmq.records import decode_messages
from txmq.v1 import errors_pb2, pull_pb2, pull_pb2_grpc, store_pb2, store_pb2_grpc
from txmq.validation import check_group, check_topic

log = logging.getLogger("txmq.consumer")

# The RPC deadline of a suspended pull is its hold time plus this much: the service
# answers a held pull before the caller's deadline (docs/pull.md, deadline_margin_ms),
# so a long poll ends with an answer, not DEADLINE_EXCEEDED.
LONG_POLL_DEADLINE_MARGIN_S = 3.0


class PullClient:
    def __init__(
        self,
        core: ClientCore,
        group: str,
        *,
        timeout: float,
        commit_client_id: str = "",
        interceptors: Sequence[object] = (),
    ) -> None:
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        self.core = core
        self.group = group
        self.timeout = timeout
        # An orderly consumer's id: its commits name it, so the store refuses one on a
        # queue another client has locked (CODE_QUEUE_LOCKED). Empty: commits unfenced.
        self.commit_client_id = commit_client_id
        # Set before the core closes: a call racing the close must not open a new
        # channel (Channels would) for a long poll nobody ends.
        self.closed = False
        self.failures = FailureLog(log)
        # Long polls go on the stream only when every interceptor the application gave
        # sees it: one that only intercepts unary calls (headers, tracing) would miss them.
        self.streams = all(isinstance(i, grpc.StreamStreamClientInterceptor) for i in interceptors)
        self._streams_lock = threading.Lock()
        self._streams: dict[str, PullStream] = {}

    # -- routes ----------------------------------------------------------------------

    def route(self, topic: str) -> TopicRoute:
        check_topic(topic)
        return self.core.routes.get(topic, timeout=self.timeout)

    def mark_route_stale(self, topic: str) -> None:
        """Look the topic's route up again before its next use."""
        self.core.routes.mark_stale(topic)

    def message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues on every store, ordered (store id, queue id)."""
        route = self.route(topic)
        if not route.queues:
            raise NotFoundError(f"topic {topic!r} does not exist", code=errors_pb2.CODE_TOPIC_NOT_FOUND)
        return route.read_queues()

    def pull_addresses(self, topic: str) -> list[str]:
        """The live pull instances (ordered by instance id) a consumer of ``topic`` uses."""
        endpoints = list(self.route(topic).pull_endpoints)
        if not endpoints:
            endpoints = self.core.routes.endpoints(ServiceKind.PULL, timeout=self.timeout)
        return ordered_pull_addresses(endpoints)

    def pull_address(self, mq: MessageQueue, attempt: int = 0) -> str:
        addresses = self.pull_addresses(mq.topic)
        return addresses[(zlib.crc32(str(mq).encode()) + attempt) % len(addresses)]

    def pull_stub(self, address: str) -> pull_pb2_grpc.PullStub:
        if self.closed:
            raise RuntimeError("the consumer is shut down")
        return self.core.stub(address, pull_pb2_grpc.PullStub)

    def close(self) -> None:
        self.closed = True
        with self._streams_lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()
        self.core.close()

    def pull_stream(self, address: str) -> PullStream:
        """The open pull stream to ``address`` (made on first use)."""
        stub = self.pull_stub(address)
        with self._streams_lock:
            stream = self._streams.get(address)
            if stream is None:
                if self.closed:
                    raise RuntimeError("the consumer is shut down")
                stream = self._streams[address] = PullStream(stub, address)
            return stream

    def pull_future(self, address: str, request: pull_pb2.PullMessageRequest, *, timeout: float) -> grpc.Future:
        """Send a pull to ``address``: a long poll on the stream, else a unary call. Its
        ``result()`` raises ``TxmqError`` (stream) or ``grpc.RpcError`` (unary)."""
        if request.suspend and self.streams:
            return self.pull_stream(address).submit(request, timeout=timeout)
        return self.pull_stub(address).PullMessage.future(request, timeout=timeout)

    # -- pulling -----------------------------------------------------------------------

    def pull_request(
        self,
        mq: MessageQueue,
        sub: Subscription,
        offset: int,
        *,
        max_nums: int,
        suspend_timeout: float | None,
        client_id: str = "",
    ) -> pull_pb2.PullMessageRequest:
        """``suspend_timeout`` None: answer at once; else hold up to that many seconds."""
        return pull_request(
            self.group, mq, sub, offset, max_nums=max_nums, suspend_timeout=suspend_timeout, client_id=client_id
        )

    def deadline(self, suspend_timeout: float | None) -> float:
        return self.timeout if suspend_timeout is None else suspend_timeout + LONG_POLL_DEADLINE_MARGIN_S

    def pull(
        self, mq: MessageQueue, sub: Subscription, offset: int, *, max_nums: int, suspend_timeout: float | None
    ) -> PullResult:
        """One blocking pull. An instance that cannot be reached (UNAVAILABLE) is
        skipped for the next one; every other error is raised."""
        request = self.pull_request(mq, sub, offset, max_nums=max_nums, suspend_timeout=suspend_timeout)
        addresses = self.pull_addresses(mq.topic)
        first = zlib.crc32(str(mq).encode())
        last_error: TxmqError | None = None
        timeout = self.deadline(suspend_timeout)
        for attempt in range(len(addresses)):
            address = addresses[(first + attempt) % len(addresses)]
            try:
                if request.suspend and self.streams:
                    response = pull_result(self.pull_stream(address).submit(request, timeout=timeout))
                else:  # a blocking unary call: answered on this thread, no hand-off
                    response = call(self.pull_stub(address).PullMessage, request, timeout=timeout)
            except UnavailableError as err:
                self.core.routes.mark_stale(mq.topic)
                last_error = err
                continue
            return to_pull_result(response, sub)
        assert last_error is not None
        raise last_error

    # -- offsets -----------------------------------------------------------------------

    def _offset_call(self, mq: MessageQueue, rpc: Callable[[pull_pb2_grpc.PullStub], Callable], request: object):
        addresses = self.pull_addresses(mq.topic)
        last_error: TxmqError | None = None
        for address in addresses:
            try:
                return call(rpc(self.pull_stub(address)), request, timeout=self.timeout)
            except UnavailableError as err:
                self.core.routes.mark_stale(mq.topic)
                last_error = err
        assert last_error is not None
        raise last_error

    def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        request = pull_pb2.UpdateConsumerOffsetRequest(
            consumer_group=self.group, queue=message_queue_to_proto(mq), offset=offset, client_id=self.commit_client_id
        )
        self._offset_call(mq, lambda stub: stub.UpdateConsumerOffset, request)

    def fetch_offset(self, mq: MessageQueue) -> int | None:
        request = pull_pb2.QueryConsumerOffsetRequest(consumer_group=self.group, queue=message_queue_to_proto(mq))
        response = self._offset_call(mq, lambda stub: stub.QueryConsumerOffset, request)
        return response.offset if response.found else None

    def queue_range(self, mq: MessageQueue) -> tuple[int, int]:
        """(min offset, max offset) of the queue, from its store."""
        route = self.route(mq.topic)
        stub = self.core.stub(route.store_address(mq.store_id), store_pb2_grpc.StoreStub)
        request = store_pb2.GetQueueOffsetsRequest(topic=mq.topic, queue_id=mq.queue_id)
        return queue_range(call(stub.GetQueueOffsets, request, timeout=self.timeout), mq)

    # -- send-back (docs/consumers.md "Retries and dead letters") -------------------------

    def store_stub(self, topic: str, store_id: str) -> store_pb2_grpc.ConsumerControlStub:
        """The ConsumerControl of the store ``store_id``, found through the route of
        ``topic`` (a topic it serves), else through the live stores."""
        try:
            address = self.route(topic).store_address(store_id)
        except NotFoundError:
            stores = self.core.routes.endpoints(ServiceKind.STORE, timeout=self.timeout)
            address = next((e.address for e in stores if e.instance_id == store_id), "")
            if not address:
                raise NotFoundError(f"store {store_id!r} is not live", code=errors_pb2.CODE_STORE_NOT_FOUND) from None
        if self.closed:
            raise RuntimeError("the consumer is shut down")
        return self.core.stub(address, store_pb2_grpc.ConsumerControlStub)

    def send_back(
        self,
        topic: str,
        message: MessageExt,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
        uncounted: bool = False,
        client_id: str = "",
    ) -> SendBackResult:
        """Have the store holding ``message`` (pulled from ``topic``) copy it to the
        group's retry topic, or its dead-letter topic past the limit."""
        request = send_back_request(
            self.group,
            message,
            delay_level=delay_level,
            max_reconsume_times=max_reconsume_times,
            uncounted=uncounted,
            client_id=client_id,
        )
        stub = self.store_stub(topic, message.store_id)
        try:
            response = call(stub.SendBack, request, timeout=self.timeout)
        except UnavailableError:
            self.core.routes.mark_stale(topic)
            raise
        return send_back_result(response)

    # -- membership ----------------------------------------------------------------------

    def heartbeat(
        self,
        addresses: list[str],
        client_id: str,
        topics: list[str],
        *,
        leaving: bool = False,
        subscriptions: Sequence[Subscription] = (),
    ) -> list[str] | None:
        """Heartbeat every pull instance in ``addresses`` (``leaving``: tell them this
        consumer is gone); the union of the live consumer ids they report (membership
        is per instance), or None when none answered. An error a retry cannot fix is
        raised (CODE_SUBSCRIPTION_CONFLICT when ``subscriptions`` differ from another
        live member's); others are logged (bounded, see ``_failures``)."""
        request = pull_pb2.ConsumerHeartbeatRequest(
            consumer_group=self.group,
            client_id=client_id,
            topics=topics,
            leaving=leaving,
            subscriptions=[pull_pb2.Subscription(topic=sub.topic, filter=sub.to_proto()) for sub in subscriptions],
        )
        members: set[str] = set()
        answered = False
        for address in addresses:
            what = f"heartbeat of {client_id} to pull instance {address}"
            try:
                response = call(self.pull_stub(address).ConsumerHeartbeat, request, timeout=self.timeout)
            except TxmqError as err:
                if not retriable(err):
                    raise
                self.failures.failed(("heartbeat", address), what, err)
                continue
            self.failures.recovered(("heartbeat", address), what)
            answered = True
            members.update(response.consumer_ids)
        return sorted(members) if answered else None


def pull_result(future: grpc.Future) -> pull_pb2.PullMessageResponse:
    """Wait for a pull sent with ``pull_future``; a failure as its ``TxmqError``. A
    caller that gives up (an interrupt) withdraws the pull."""
    try:
        return future.result()
    except grpc.RpcError as exc:
        raise TxmqError.from_rpc_error(exc) from exc
    except TxmqError:
        raise
    except BaseException:
        future.cancel()
        raise


def to_pull_result(response: pull_pb2.PullMessageResponse, sub: Subscription) -> PullResult:
    """The service's answer with the client's tag re-check applied. FOUND whose every
    message failed the re-check (tag hash collisions only) becomes NO_MATCHED_MSG."""
    try:
        status = PullStatus(response.status)
    except ValueError:
        raise InternalError(
            f"the pull service answered status {response.status}", code=errors_pb2.CODE_INTERNAL_ERROR
        ) from None
    if response.records:
        try:
            messages = decode_messages(response.records, response.store_id)
        except ValueError as exc:  # UnicodeDecodeError included
            raise InternalError(
                f"the pull service answered records that do not decode: {exc}", code=errors_pb2.CODE_INTERNAL_ERROR
            ) from None
    else:  # a pull service that does not pass records through
        messages = [message_ext_from_proto(v) for v in response.messages]
    if status is PullStatus.FOUND and not sub.matches_all:
        messages = [m for m in messages if sub.accepts(m)]
        if not messages:
            status = PullStatus.NO_MATCHED_MSG
    return PullResult(
        status=status,
        next_begin_offset=response.next_begin_offset,
        min_offset=response.min_offset,
        max_offset=response.max_offset,
        messages=messages,
    )


# -- what the threaded and the asyncio consumers (txmq.aio) build the same way -----------


def ordered_pull_addresses(endpoints: Sequence[Endpoint]) -> list[str]:
    """The live pull instances' addresses, ordered by instance id (every client the same)."""
    if not endpoints:
        raise UnavailableError("no pull service is live", code=errors_pb2.CODE_SERVICE_NOT_READY)
    return [e.address for e in sorted(endpoints, key=lambda e: e.instance_id)]


def pull_request(
    group: str,
    mq: MessageQueue,
    sub: Subscription,
    offset: int,
    *,
    max_nums: int,
    suspend_timeout: float | None,
    client_id: str = "",
) -> pull_pb2.PullMessageRequest:
    """``suspend_timeout`` None: answer at once; else hold up to that many seconds."""
    request = pull_pb2.PullMessageRequest(
        consumer_group=group,
        queue=message_queue_to_proto(mq),
        queue_offset=offset,
        max_messages=max_nums,
        suspend=suspend_timeout is not None,
        suspend_timeout_ms=max(1, int(suspend_timeout * 1000)) if suspend_timeout is not None else 0,
        client_id=client_id,
        raw_records=True,
    )
    if not sub.matches_all:
        request.filter.CopyFrom(sub.to_proto())
    return request


def queue_range(response: store_pb2.GetQueueOffsetsResponse, mq: MessageQueue) -> tuple[int, int]:
    """(min offset, max offset) of ``mq`` in a store's GetQueueOffsets answer."""
    for q in response.queues:
        if q.queue_id == mq.queue_id:
            return q.min_offset, q.max_offset
    raise NotFoundError(
        f"store {mq.store_id!r} has no queue {mq.queue_id} of topic {mq.topic!r}",
        code=errors_pb2.CODE_ILLEGAL_QUEUE_ID,
    )


def send_back_request(
    group: str,
    message: MessageExt,
    *,
    delay_level: int = 0,
    max_reconsume_times: int | None = None,
    uncounted: bool = False,
    client_id: str = "",
) -> store_pb2.SendBackRequest:
    request = store_pb2.SendBackRequest(
        group=group,
        commit_log_offset=message.commit_log_offset,
        unique_id=message.unique_id or "",
        delay_level=delay_level,
        uncounted=uncounted,
        client_id=client_id,
    )
    if max_reconsume_times is not None:
        request.max_reconsume_times = max_reconsume_times
    return request


def send_back_result(response: store_pb2.SendBackResponse) -> SendBackResult:
    r = response.result
    return SendBackResult(
        topic=r.queue.topic,
        dead_lettered=response.dead_lettered,
        reconsume_times=response.reconsume_times,
        msg_id=r.msg_id,
        offset_msg_id=r.offset_msg_id,
        store_id=r.queue.store_id,
        queue_id=r.queue.queue_id,
        queue_offset=r.queue_offset,
        duplicate=r.duplicate,
        # The copy is stored whatever the status (an unset one is taken as OK).
        status=SendStatus(r.status) if r.status else SendStatus.OK,
    )
