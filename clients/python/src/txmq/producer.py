"""The producer (RocketMQ DefaultMQProducer): validate, pick a queue, send, retry."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypeVar

import grpc

from txmq._backoff import delay as backoff_delay
from txmq._client import ClientCore, call
from txmq._convert import (
    SEND_STATUSES,
    add_messages_to_proto,
    message_to_proto,
    send_result_from_proto,
    send_results_from_proto,
)
from txmq._recalling import recall
from txmq._selector import QueueSelector
from txmq.errors import (
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    NotImplementedYetError,
    TooManyRequestsError,
    TxmqError,
    UpstreamTimeoutError,
)
from txmq.ids import new_unique_id, new_unique_ids
from txmq.message import Message, MessageQueue, SendResult, SendStatus
from txmq.models import TopicRoute
from txmq.pipe import Entry, PipeSettings, SendPipe
from txmq.recall import RecallHandle
from txmq.records import encode_for_send
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq.validation import check_group, check_message, check_message_content, check_send_topic

log = logging.getLogger("txmq.producer")

T = TypeVar("T")
# One attempt: (store stub, chosen queue, seconds left, store address) -> result.
Attempt = Callable[[store_pb2_grpc.StoreStub, MessageQueue, float, str], T]

DEFAULT_MAX_MESSAGE_SIZE_BYTES = 4 * 1024 * 1024  # RocketMQ's maxMessageSize
DEFAULT_MAX_FRAME_BYTES = 64 * 1024  # pipelined small frames beat large ones (docs/benchmarks.md)
_THROTTLE_BACKOFF_S = 0.05
#: A replicated store group between leaders (docs/replication.md): these refusals stored
#: nothing and the group answers again within a lease, so they are waited out (with
#: backoff, within the send's timeout) rather than counted against ``retry_times``.
_LEADER_CHANGE_CODES = frozenset(
    {errors_pb2.CODE_NOT_LEADER, errors_pb2.CODE_NOT_ENOUGH_REPLICAS, errors_pb2.CODE_SERVICE_NOT_READY}
)
_LEADER_CHANGE_BACKOFF_S = 0.1


class Producer:
    """Sends messages synchronously; thread-safe (share one per process and group).

    ``endpoint`` is any txmq service (``host:port``, or a comma-separated list): it
    answers route look-ups; messages go straight to the stores the routes name.
    ``send_timeout`` bounds a whole send, retries included (as RocketMQ's sendMsgTimeout);
    a failed attempt is retried up to ``retry_times`` more times, on another store when
    there is one, and only when the error says a retry can help. Each message gets its
    unique id before the first attempt, so a retried message keeps its id.

    Sends travel over one ``SendStream`` per store, encoded as commit-log records, and
    concurrent sends (from many threads) share its frames: a send goes at once when
    nothing is in flight, and waits to join the next frame otherwise (at most
    ``max_in_flight_frames`` frames in flight per store; ``linger_ms`` > 0 lets a send
    wait that long for others; a frame holds at most ``max_frame_bytes`` unless one
    entry is larger). ``send_batch`` stays all or nothing. With ``interceptors``, or
    ``send_stream=False``, or a store without SendStream, each send is its own unary call.
    ``tls``: TLS (and a client certificate) for every channel (``txmq.TlsConfig``).
    ``credentials``: the user every call is signed as (``txmq.Credentials``; clusters with auth on).
    """

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        max_message_size_bytes: int = DEFAULT_MAX_MESSAGE_SIZE_BYTES,
        route_refresh_interval: float = 30.0,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        send_stream: bool = True,
        linger_ms: float = 0.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_in_flight_frames: int = 4,
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        check_group(group, code=errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP)
        if linger_ms < 0 or max_frame_bytes <= 0 or max_in_flight_frames <= 0:
            raise ValueError("linger_ms must be >= 0, max_frame_bytes and max_in_flight_frames > 0")
        if send_timeout <= 0 or retry_times < 0 or max_message_size_bytes <= 0 or route_refresh_interval <= 0:
            raise ValueError(
                "send_timeout, max_message_size_bytes and route_refresh_interval must be > 0, retry_times >= 0"
            )
        self.group = group
        self.endpoint = endpoint
        self._send_timeout = send_timeout
        self._retry_times = retry_times
        self._max_message_size_bytes = max_message_size_bytes
        self._route_refresh_interval = route_refresh_interval
        self._interceptors = tuple(interceptors)
        self._tls = tls
        self._credentials = credentials
        self._lock = threading.Lock()
        self._core: ClientCore | None = None
        self._selectors: dict[str, QueueSelector] = {}
        # topic -> (its route, that route's write queues): see _write_queues.
        self._queues: dict[str, tuple[TopicRoute, list[MessageQueue]]] = {}
        self._streams = send_stream and not interceptors
        self._pipe_settings = PipeSettings(linger_ms, max_frame_bytes, max_in_flight_frames)
        self._pipes: dict[tuple[str, bool], SendPipe] = {}
        self._unary_only: set[str] = set()  # stores that answered SendStream UNIMPLEMENTED

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Open the client. Idempotent; nothing is dialled until the first send."""
        with self._lock:
            if self._core is None:
                self._core = ClientCore(
                    self.endpoint,
                    route_refresh_interval=self._route_refresh_interval,
                    interceptors=self._interceptors,
                    tls=self._tls,
                    credentials=self._credentials,
                )

    def shutdown(self) -> None:
        """Close every channel. Idempotent; ``start()`` may open the producer again."""
        with self._lock:
            core, self._core = self._core, None
            pipes, self._pipes = list(self._pipes.values()), {}
        for pipe in pipes:
            pipe.close()
        if core is not None:
            core.close()

    def __enter__(self) -> Producer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    # -- sending -----------------------------------------------------------------------

    def send(self, msg: Message, *, timeout: float | None = None) -> SendResult:
        """Send one message; ``timeout`` overrides ``send_timeout`` for this call."""
        self._check(msg)
        born_timestamp_ms = int(time.time() * 1000)

        def attempt(store: store_pb2_grpc.StoreStub, mq: MessageQueue, remaining: float, address: str) -> SendResult:
            streamed = self._send_on_stream(address, store, [msg], mq.queue_id, born_timestamp_ms, remaining)
            if streamed is not None:
                return streamed[0]
            pb = message_to_proto(msg, born_timestamp_ms=born_timestamp_ms)
            pb.queue_id = mq.queue_id
            request = store_pb2.SendMessageRequest(message=pb, producer_group=self.group)
            return send_result_from_proto(call(store.SendMessage, request, timeout=remaining).result)

        return self._send_with_retry(msg.topic, msg.queue_id, attempt, timeout=timeout)

    def send_batch(self, msgs: Sequence[Message], *, timeout: float | None = None) -> list[SendResult]:
        """Send messages of one topic to one queue in one call: all are stored, or none.
        Results are in ``msgs`` order."""
        if not msgs:
            raise BadRequestError("the batch is empty", code=errors_pb2.CODE_ILLEGAL_MESSAGE)
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise BadRequestError("the messages of a batch must share one topic", code=errors_pb2.CODE_ILLEGAL_MESSAGE)
        pinned = {m.queue_id for m in msgs}
        if len(pinned) > 1:
            raise BadRequestError(
                "the messages of a batch go to one queue; their queue_id must agree",
                code=errors_pb2.CODE_ILLEGAL_QUEUE_ID,
            )
        self._prepare_batch(topic, msgs)
        born_timestamp_ms = int(time.time() * 1000)
        request: store_pb2.SendBatchRequest | None = None

        def attempt(
            store: store_pb2_grpc.StoreStub, mq: MessageQueue, remaining: float, address: str
        ) -> list[SendResult]:
            nonlocal request
            streamed = self._send_on_stream(address, store, msgs, mq.queue_id, born_timestamp_ms, remaining)
            if streamed is not None:
                return streamed
            if request is None:  # built once the queue is known: no second pass to set it
                request = store_pb2.SendBatchRequest(producer_group=self.group)
                add_messages_to_proto(request.messages, msgs, queue_id=mq.queue_id, born_timestamp_ms=born_timestamp_ms)
            elif request.messages[0].queue_id != mq.queue_id:  # a retry on another queue
                for pb in request.messages:
                    pb.queue_id = mq.queue_id
            return send_results_from_proto(call(store.SendBatch, request, timeout=remaining).results)

        return self._send_with_retry(topic, pinned.pop(), attempt, timeout=timeout)

    # -- the send stream -----------------------------------------------------------------

    def recall(self, handle: str | RecallHandle, *, timeout: float | None = None) -> SendStatus:
        """Cancel a delayed message before it is delivered, by its send's
        ``SendResult.recall_handle`` (``txmq._recalling.recall``: what it answers and
        raises). Needs Pub on its topic."""
        return recall(self._started_core(), handle, timeout=self._send_timeout if timeout is None else timeout)

    def _pipe(self, address: str, stub: store_pb2_grpc.StoreStub, *, prepared: bool = False) -> SendPipe | None:
        """The open send stream to ``address`` (opened or reopened here; ``prepared``:
        the one for half messages), or None where sends are unary."""
        if not self._streams or address in self._unary_only:
            return None
        key = (address, prepared)
        pipe = self._pipes.get(key)  # open: most sends end here, unlocked
        if pipe is not None and pipe.failed is None:
            return pipe
        with self._lock:
            pipe = self._pipes.get(key)
            if pipe is None or pipe.failed is not None:
                if self._core is None:
                    raise RuntimeError("the producer is not started: call start() or use it in a with block")
                pipe = self._pipes[key] = SendPipe(
                    stub, producer_group=self.group, settings=self._pipe_settings, transaction_prepared=prepared
                )
            return pipe

    def _send_on_stream(
        self,
        address: str,
        stub: store_pb2_grpc.StoreStub,
        msgs: Sequence[Message],
        queue_id: int,
        born_timestamp_ms: int,
        remaining: float,
        *,
        prepared: bool = False,
    ) -> list[SendResult] | None:
        """``msgs`` (one topic, validated, with unique ids) as one entry of the store's
        send stream (``prepared``: the half messages' stream); None where sends are unary."""
        pipe = self._pipe(address, stub, prepared=prepared)
        if pipe is None:
            return None
        blob = b"".join(
            [
                encode_for_send(
                    m.topic,
                    queue_id,
                    m.body,
                    m.unique_id or "",
                    tags=m.tags,
                    keys=m.keys,
                    properties=m.properties,
                    flag=m.flag,
                    born_timestamp_ms=born_timestamp_ms,
                )
                for m in msgs
            ]
        )
        acked = self._await(address, pipe, pipe.submit(blob, len(msgs)), remaining)
        if acked is None:
            return None
        uids = [m.unique_id or "" for m in msgs]
        return _results_from_ack(*acked, len(msgs), msgs[0].topic, uids, prepared=prepared)

    def _await(
        self, address: str, pipe: SendPipe, entry: Entry, remaining: float
    ) -> tuple[store_pb2.RecordAck, int] | None:
        """The ack of ``entry`` and where its records start in it; None when the store
        has no SendStream (then the caller sends unary, now and later)."""
        try:
            return entry.future.result(timeout=max(0.0, remaining))
        except TimeoutError:
            withdrawn = pipe.withdraw(entry)
            raise UpstreamTimeoutError(
                f"no acknowledgement within {remaining:.3f}s"
                + (" (it was not sent)" if withdrawn else " (it may have been stored)")
            ) from None
        except NotImplementedYetError as err:
            if not err.transport:
                raise
            log.info("store %s has no SendStream (%s): sending unary calls", address, err)
            with self._lock:
                self._unary_only.add(address)
            return None

    # -- internals shared with the transactional producer -------------------------------

    def _prepare(self, msg: Message) -> common_pb2.Message:
        """``_check``, then the message as protobuf."""
        self._check(msg)
        return message_to_proto(msg, born_timestamp_ms=int(time.time() * 1000))

    def _check(self, msg: Message) -> None:
        """Validate and assign the unique id (on the caller's message, as RocketMQ does, so
        the caller can log it and a resend of the same object keeps it)."""
        check_message(
            topic=msg.topic,
            body=msg.body,
            tags=msg.tags,
            keys=msg.keys,
            properties=msg.properties,
            flag=msg.flag,
            max_body_bytes=self._max_message_size_bytes,
        )
        if msg.unique_id is None:
            msg.unique_id = new_unique_id()

    def _prepare_batch(self, topic: str, msgs: Sequence[Message]) -> None:
        """``_prepare`` for a batch of one topic, without building protobuf messages:
        the topic is checked once, the missing unique ids are made together."""
        check_send_topic(topic)
        limit = self._max_message_size_bytes
        for i, m in enumerate(msgs):
            try:
                check_message_content(m.body, m.tags, m.keys, m.properties, m.flag, limit)
            except TxmqError:
                # As one _prepare per message would have left them: ids on those before.
                for earlier in msgs[:i]:
                    if earlier.unique_id is None:
                        earlier.unique_id = new_unique_id()
                raise
        missing = [m for m in msgs if m.unique_id is None]
        if missing:
            for m, unique_id in zip(missing, new_unique_ids(len(missing)), strict=True):
                m.unique_id = unique_id

    def _started_core(self) -> ClientCore:
        core = self._core
        if core is None:
            raise RuntimeError("the producer is not started: call start() or use it in a with block")
        return core

    def _write_queues(self, route: TopicRoute, queue_id: int | None) -> list[MessageQueue]:
        """``_write_queues`` of a route, worked out once per route object (a refresh
        replaces the route, it does not change it)."""
        cached = self._queues.get(route.topic)
        if cached is None or cached[0] is not route:
            cached = self._queues[route.topic] = (route, _write_queues(route, None))
        queues = cached[1]
        return queues if queue_id is None else _pinned(route, queues, queue_id)

    def _send_with_retry(self, topic: str, queue_id: int | None, attempt: Attempt[T], *, timeout: float | None) -> T:
        core = self._started_core()
        budget = self._send_timeout if timeout is None else timeout
        if budget <= 0:
            raise ValueError(f"timeout must be > 0, not {budget}")
        deadline = time.monotonic() + budget
        selector = self._selectors.get(topic) or self._selectors.setdefault(topic, QueueSelector())
        failed_store: str | None = None
        attempts = 0
        waits = 0
        alone = False  # the topic lives on one store (group): no other store to retry on
        while True:
            attempts += 1
            mq: MessageQueue | None = None
            try:
                route = core.routes.get(topic, timeout=deadline - time.monotonic())
                alone = len({q.store_id for q in route.queues}) == 1
                mq = selector.select(self._write_queues(route, queue_id), avoid_store=failed_store)
                address = route.store_address(mq.store_id)
                store = core.stub(address, store_pb2_grpc.StoreStub)
                return attempt(store, mq, deadline - time.monotonic(), address)
            except TxmqError as err:
                if mq is not None:
                    # Whatever the store said, the route may be out of date (topic deleted
                    # or made read-only there, store going away): look it up next time.
                    core.routes.mark_stale(topic)
                    failed_store = mq.store_id
                if not err.retriable:
                    raise
                if err.code == errors_pb2.CODE_QUOTA_EXCEEDED and time.monotonic() < deadline:
                    # Throttled, not failed: wait what the store asks (its retry_after_ms),
                    # within the send's timeout, without counting it against retry_times.
                    attempts -= 1
                    left = deadline - time.monotonic()
                    wait = backoff_delay(1, first=_THROTTLE_BACKOFF_S, maximum=left, after=err)
                    time.sleep(max(0.0, min(left, wait)))
                    continue
                leader_change = err.code in _LEADER_CHANGE_CODES or (alone and err.unreachable and mq is not None)
                if leader_change and time.monotonic() < deadline:
                    attempts -= 1
                    waits += 1
                    failed_store = None  # the same store group, under its next leader
                    left = deadline - time.monotonic()
                    time.sleep(max(0.0, backoff_delay(waits, first=_LEADER_CHANGE_BACKOFF_S, maximum=min(left, 1.0))))
                    continue
                if attempts > self._retry_times or time.monotonic() >= deadline:
                    err.metadata["attempts"] = str(attempts)
                    raise
                log.warning("send to %s (attempt %d) failed, retrying: %s", mq or topic, attempts, err)
                if isinstance(err, TooManyRequestsError):
                    left = deadline - time.monotonic()
                    wait = backoff_delay(attempts, first=_THROTTLE_BACKOFF_S, maximum=left, after=err)
                    time.sleep(max(0.0, min(left, wait)))


def _results_from_ack(
    ack: store_pb2.RecordAck, start: int, count: int, topic: str, unique_ids: Sequence[str], *, prepared: bool = False
) -> list[SendResult]:
    """The SendResults of ``count`` records of one topic from ``start`` in ``ack``
    (``prepared``: half messages, whose transaction id is their unique id)."""
    status = SEND_STATUSES[ack.status]
    prefix, store_id = ack.offset_msg_id_prefix, ack.store_id
    offsets, queue_offsets, queue_ids = ack.commit_log_offsets, ack.queue_offsets, ack.queue_ids
    deliver_at = ack.deliver_at_ms  # empty unless a record of the frame is delayed
    queues: dict[int, MessageQueue] = {}
    out: list[SendResult] = []
    duplicates = {j - start for j in ack.duplicate_indexes} if ack.duplicate_indexes else ()
    for i in range(count):
        j = start + i
        queue_id = queue_ids[j]
        mq = queues.get(queue_id)
        if mq is None:
            mq = queues[queue_id] = MessageQueue(topic, store_id, queue_id)
        offset = offsets[j]
        uid = unique_ids[i]
        out.append(
            SendResult(
                status,
                uid,
                f"{prefix}{offset:016X}",
                mq,
                queue_offsets[j],
                offset,
                uid if prepared else None,
                i in duplicates,
                deliver_at[j] if deliver_at else 0,
            )
        )
    return out


def _write_queues(route: TopicRoute, queue_id: int | None) -> list[MessageQueue]:
    """The queues a send may pick, or the error saying why there are none."""
    if not route.queues:
        raise NotFoundError(f"topic {route.topic!r} does not exist", code=errors_pb2.CODE_TOPIC_NOT_FOUND)
    queues = route.write_queues()
    if not queues:
        raise ForbiddenError(f"topic {route.topic!r} has no writable queue", code=errors_pb2.CODE_TOPIC_NOT_WRITABLE)
    return queues if queue_id is None else _pinned(route, queues, queue_id)


def _pinned(route: TopicRoute, queues: list[MessageQueue], queue_id: int) -> list[MessageQueue]:
    """The write queues with id ``queue_id`` (a message that pins its queue)."""
    pinned = [q for q in queues if q.queue_id == queue_id]
    if not pinned:
        raise BadRequestError(
            f"topic {route.topic!r} has no writable queue {queue_id}",
            code=errors_pb2.CODE_ILLEGAL_QUEUE_ID,
            metadata={"queue_id": str(queue_id)},
        )
    return pinned
