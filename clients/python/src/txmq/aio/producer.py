"""``txmq.Producer`` for asyncio: the same validation, queue choice, retries, failover,
route refresh and errors (``txmq._sending``), over ``grpc.aio`` channels, with
concurrent sends coalesced into frames of one ``SendStream`` per store
(``txmq.aio.pipe``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TypeVar

from txmq._convert import add_messages_to_proto, message_to_proto, send_result_from_proto, send_results_from_proto
from txmq._recalling import Retry as RecallRetry
from txmq._recalling import prepare as prepare_recall
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
from txmq.aio._client import AsyncClientCore, call
from txmq.aio.pipe import AsyncSendPipe, read_outcome
from txmq.errors import NotImplementedYetError, TxmqError, UpstreamTimeoutError
from txmq.message import Message, MessageQueue, SendResult, SendStatus
from txmq.pipe import Acked, Entry, PipeSettings
from txmq.producer import DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_MESSAGE_SIZE_BYTES
from txmq.recall import RecallHandle
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq.validation import check_group

log = logging.getLogger("txmq.aio.producer")

T = TypeVar("T")
# One attempt: (store stub, chosen queue, seconds left, store address) -> result.
Attempt = Callable[[store_pb2_grpc.StoreStub, MessageQueue, float, str], Awaitable[T]]


class Producer:
    """Sends messages from coroutines of one event loop (share one per loop and group).

    The arguments and their meaning are ``txmq.Producer``'s (``interceptors`` aside: use
    ``credentials`` and ``tls``). ``send_timeout`` bounds a whole send, retries
    included; a send that times out, or whose task is cancelled, after its entry went
    out may or may not have been stored (an entry still waiting for a frame is taken
    back: never sent). A retried message keeps its unique id, so a resend after such a
    doubt is recognised by its id.

    Concurrent sends (many tasks) share frames of one ``SendStream`` per store: a send
    goes at once when nothing is in flight, and joins the next frame otherwise.
    ``send_batch`` stays all or nothing.
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
        self._tls = tls
        self._credentials = credentials
        self._core: AsyncClientCore | None = None
        self._selectors: dict[str, QueueSelector] = {}
        self._write_queues = WriteQueues()
        self._streams = send_stream
        self._pipe_settings = PipeSettings(linger_ms, max_frame_bytes, max_in_flight_frames)
        self._pipes: dict[tuple[str, bool], AsyncSendPipe] = {}
        self._unary_only: set[str] = set()  # stores that answered SendStream UNIMPLEMENTED
        self._closing: set[asyncio.Task[None]] = set()  # failed pipes being closed

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Open the client (idempotent; nothing is dialled until the first send). Call
        it on the loop that will send: the channels belong to that loop."""
        if self._core is None:
            self._core = AsyncClientCore(
                self.endpoint,
                route_refresh_interval=self._route_refresh_interval,
                tls=self._tls,
                credentials=self._credentials,
            )

    async def close(self) -> None:
        """Close every stream and channel; sends still waiting fail with
        ``UnavailableError``. Idempotent; ``start()`` may open the producer again."""
        core, self._core = self._core, None
        pipes, self._pipes = list(self._pipes.values()), {}
        for pipe in pipes:
            await pipe.close()
        await asyncio.gather(*self._closing, return_exceptions=True)
        if core is not None:
            await core.close()

    async def __aenter__(self) -> Producer:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- sending -----------------------------------------------------------------------

    async def send(self, msg: Message, *, timeout: float | None = None) -> SendResult:  # noqa: ASYNC109 - a deadline across retries
        """Send one message; ``timeout`` overrides ``send_timeout`` for this call."""
        check_and_identify(msg, self._max_message_size_bytes)
        born_timestamp_ms = int(time.time() * 1000)

        async def attempt(
            store: store_pb2_grpc.StoreStub, mq: MessageQueue, remaining: float, address: str
        ) -> SendResult:
            streamed = await self._send_on_stream(address, store, [msg], mq.queue_id, born_timestamp_ms, remaining)
            if streamed is not None:
                return streamed[0]
            pb = message_to_proto(msg, born_timestamp_ms=born_timestamp_ms)
            pb.queue_id = mq.queue_id
            request = store_pb2.SendMessageRequest(message=pb, producer_group=self.group)
            return send_result_from_proto((await call(store.SendMessage, request, timeout=remaining)).result)

        return await self._send_with_retry(msg.topic, msg.queue_id, attempt, timeout=timeout)

    async def send_batch(self, msgs: Sequence[Message], *, timeout: float | None = None) -> list[SendResult]:  # noqa: ASYNC109 - a deadline across retries
        """Send messages of one topic to one queue in one call: all are stored, or none.
        Results are in ``msgs`` order."""
        queue_id = check_batch_shape(msgs)
        topic = msgs[0].topic
        check_and_identify_batch(topic, msgs, self._max_message_size_bytes)
        born_timestamp_ms = int(time.time() * 1000)

        async def attempt(
            store: store_pb2_grpc.StoreStub, mq: MessageQueue, remaining: float, address: str
        ) -> list[SendResult]:
            streamed = await self._send_on_stream(address, store, msgs, mq.queue_id, born_timestamp_ms, remaining)
            if streamed is not None:
                return streamed
            request = store_pb2.SendBatchRequest(producer_group=self.group)
            add_messages_to_proto(request.messages, msgs, queue_id=mq.queue_id, born_timestamp_ms=born_timestamp_ms)
            return send_results_from_proto((await call(store.SendBatch, request, timeout=remaining)).results)

        return await self._send_with_retry(topic, queue_id, attempt, timeout=timeout)

    async def recall(self, handle: str | RecallHandle, *, timeout: float | None = None) -> SendStatus:  # noqa: ASYNC109 - a deadline across retries
        """Cancel a delayed message before it is delivered, by its send's
        ``SendResult.recall_handle``: as the threaded ``Producer.recall``."""
        core = self._started_core()
        named, request = prepare_recall(handle)
        retry = RecallRetry(named, self._send_timeout if timeout is None else timeout)
        while True:
            try:
                route = await core.routes.get(named.topic, timeout=retry.left())
                stub = core.stub(route.store_address(named.store_id), store_pb2_grpc.StoreStub)
                return SendStatus((await call(stub.RecallMessage, request, timeout=max(0.05, retry.left()))).status)
            except TxmqError as err:
                core.routes.mark_stale(named.topic)
                await asyncio.sleep(retry.wait(err))

    # -- the send stream -----------------------------------------------------------------

    def _pipe(self, address: str, stub: store_pb2_grpc.StoreStub, *, prepared: bool) -> AsyncSendPipe | None:
        """The open send stream to ``address`` (opened or reopened here), or None where
        sends are unary."""
        if not self._streams or address in self._unary_only:
            return None
        key = (address, prepared)
        pipe = self._pipes.get(key)
        if pipe is None or pipe.failed is not None:
            if pipe is not None:  # failed: its call is cancelled and its tasks awaited aside
                closing = asyncio.get_running_loop().create_task(pipe.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            pipe = self._pipes[key] = AsyncSendPipe(
                stub, producer_group=self.group, settings=self._pipe_settings, transaction_prepared=prepared
            )
        return pipe

    async def _send_on_stream(
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
        """``msgs`` as one entry of the store's send stream; None where sends are unary."""
        pipe = self._pipe(address, stub, prepared=prepared)
        if pipe is None:
            return None
        entry = pipe.submit(encode_entry(msgs, queue_id, born_timestamp_ms), len(msgs))
        acked = await self._await(address, pipe, entry, remaining)
        if acked is None:
            return None
        uids = [m.unique_id or "" for m in msgs]
        return results_from_ack(*acked, len(msgs), msgs[0].topic, uids, prepared=prepared)

    async def _await(self, address: str, pipe: AsyncSendPipe, entry: Entry, remaining: float) -> Acked | None:
        """The ack of ``entry``; None when the store has no SendStream (then the caller
        sends unary, now and later). A caller that gives up (timeout, cancellation)
        takes its entry back if it was not sent yet."""
        future: asyncio.Future[Acked] = entry.future
        try:
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, remaining))
        except TimeoutError:
            withdrawn = pipe.withdraw(entry)
            future.add_done_callback(read_outcome)
            raise UpstreamTimeoutError(
                f"no acknowledgement within {remaining:.3f}s"
                + (" (it was not sent)" if withdrawn else " (it may have been stored)")
            ) from None
        except asyncio.CancelledError:
            pipe.withdraw(entry)
            future.add_done_callback(read_outcome)
            raise
        except NotImplementedYetError as err:
            if not err.transport:
                raise
            log.info("store %s has no SendStream (%s): sending unary calls", address, err)
            self._unary_only.add(address)
            return None

    def _prepare(self, msg: Message) -> common_pb2.Message:
        """Validate, give the unique id, and the message as protobuf (a half message)."""
        check_and_identify(msg, self._max_message_size_bytes)
        return message_to_proto(msg, born_timestamp_ms=int(time.time() * 1000))

    def _started_core(self) -> AsyncClientCore:
        core = self._core
        if core is None:
            raise RuntimeError("the producer is not started: call start() or use it in an async with block")
        return core

    async def _send_with_retry(
        self,
        topic: str,
        queue_id: int | None,
        attempt: Attempt[T],
        *,
        timeout: float | None,  # noqa: ASYNC109 - a deadline across retries
    ) -> T:
        """``txmq.Producer._send_with_retry`` with awaits: the policy is ``SendRetry``."""
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
                route = await core.routes.get(topic, timeout=deadline - time.monotonic())
                retry.alone = len({q.store_id for q in route.queues}) == 1
                mq = selector.select(self._write_queues.of(route, queue_id), avoid_store=retry.failed_store)
                address = route.store_address(mq.store_id)
                store = core.stub(address, store_pb2_grpc.StoreStub)
                return await attempt(store, mq, deadline - time.monotonic(), address)
            except TxmqError as err:
                if mq is not None:
                    core.routes.mark_stale(topic)  # the route may be out of date
                wait = retry.failed(err, mq)
                if wait is None:
                    raise
                if wait > 0:
                    await asyncio.sleep(wait)
