"""The producer (RocketMQ DefaultMQProducer): validate, pick a queue, send, retry."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypeVar

import grpc

from txmq._client import ClientCore, call
from txmq._convert import add_messages_to_proto, message_to_proto, send_result_from_proto, send_results_from_proto
from txmq._recalling import recall
from txmq._selector import QueueSelector
from txmq._sending import (
    SendRetry,
    WriteQueues,
    check_and_identify,
    check_and_identify_batch,
    check_batch_shape,
    encode_entry,
    results_from_ack,
)
from txmq.errors import NotImplementedYetError, TxmqError, UpstreamTimeoutError
from txmq.message import Message, MessageQueue, SendResult, SendStatus
from txmq.pipe import Entry, PipeSettings, SendPipe
from txmq.recall import RecallHandle
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq.validation import check_group

log = logging.getLogger("txmq.producer")

T = TypeVar("T")
# One attempt: (store stub, chosen queue, seconds left, store address) -> result.
Attempt = Callable[[store_pb2_grpc.StoreStub, MessageQueue, float, str], T]

DEFAULT_MAX_MESSAGE_SIZE_BYTES = 4 * 1024 * 1024  # RocketMQ's maxMessageSize
DEFAULT_MAX_FRAME_BYTES = 64 * 1024  # pipelined small frames beat large ones (docs/benchmarks.md)


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
        self._write_queues = WriteQueues()
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
        queue_id = check_batch_shape(msgs)
        topic = msgs[0].topic
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

        return self._send_with_retry(topic, queue_id, attempt, timeout=timeout)

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
        blob = encode_entry(msgs, queue_id, born_timestamp_ms)
        acked = self._await(address, pipe, pipe.submit(blob, len(msgs)), remaining)
        if acked is None:
            return None
        uids = [m.unique_id or "" for m in msgs]
        return results_from_ack(*acked, len(msgs), msgs[0].topic, uids, prepared=prepared)

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
        check_and_identify(msg, self._max_message_size_bytes)

    def _prepare_batch(self, topic: str, msgs: Sequence[Message]) -> None:
        check_and_identify_batch(topic, msgs, self._max_message_size_bytes)

    def _started_core(self) -> ClientCore:
        core = self._core
        if core is None:
            raise RuntimeError("the producer is not started: call start() or use it in a with block")
        return core

    def _send_with_retry(self, topic: str, queue_id: int | None, attempt: Attempt[T], *, timeout: float | None) -> T:
        core = self._started_core()
        budget = self._send_timeout if timeout is None else timeout
        if budget <= 0:
            raise ValueError(f"timeout must be > 0, not {budget}")
        deadline = time.monotonic() + budget
        selector = self._selectors.get(topic) or self._selectors.setdefault(topic, QueueSelector())
        retry = SendRetry(self._retry_times, deadline, topic)
        while True:
            retry.attempt()
            mq: MessageQueue | None = None
            try:
                route = core.routes.get(topic, timeout=deadline - time.monotonic())
                retry.alone = len({q.store_id for q in route.queues}) == 1
                mq = selector.select(self._write_queues.of(route, queue_id), avoid_store=retry.failed_store)
                address = route.store_address(mq.store_id)
                store = core.stub(address, store_pb2_grpc.StoreStub)
                return attempt(store, mq, deadline - time.monotonic(), address)
            except TxmqError as err:
                if mq is not None:
                    # Whatever the store said, the route may be out of date (topic deleted
                    # or made read-only there, store going away): look it up next time.
                    core.routes.mark_stale(topic)
                wait = retry.failed(err, mq)
                if wait is None:
                    raise
                if wait > 0:
                    time.sleep(wait)
