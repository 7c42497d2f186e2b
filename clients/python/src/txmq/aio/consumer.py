"""``txmq.PushConsumer`` for asyncio: messages as an async iterator, or an async
listener, on the running event loop.

The consumer's background work (heartbeats, rebalances, long polls, offset commits,
send-back to ``%RETRY%`` / ``%DLQ%``, orderly locks) is the threaded ``PushConsumer``'s
own, unchanged: this front end registers a listener with it that hands each batch to
the event loop and returns the batch's status once the loop has decided it. So the
threaded rule holds as is: a queue's committed offset is the lowest message whose
listener call has not returned, and a batch's call returns only after its processing
is over; nothing is committed ahead of processing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from txmq._consumer_types import ConsumeStatus, ExpressionType
from txmq.consumer import PushConsumer as ThreadedPushConsumer
from txmq.errors import TxmqError
from txmq.message import MessageExt, MessageQueue

AsyncListener = Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]
_Delivery = tuple[list[MessageExt], "concurrent.futures.Future[ConsumeStatus]"]
_CLOSED = object()


class PushConsumer:
    """Consumes subscribed topics on the running event loop: ``async for msg in
    consumer`` or ``register_message_listener(async_fn)`` (not both).

    The keywords are ``txmq.PushConsumer``'s and mean the same (``on_error`` aside: a
    consumer stopped by an error raises it from the iterator and from ``wait()``).

    The iterator: a message is done (``CONSUME_SUCCESS``) when the next one is asked
    for, or at ``ack()``; ``reconsume_later()`` instead sends the current one back to be
    delivered again later (as a listener returning ``RECONSUME_LATER``). A cancelled
    ``__anext__`` takes nothing: the next call returns the message it would have. At
    ``close()``, a message handed out and not yet done, and those received but not
    handed out, are not committed: they are sent back uncounted
    (``RECONSUME_LATER_UNCOUNTED``) or, when their queue was released first, delivered
    again from their offset; so break out of the loop after ``ack()`` when the last
    message is done. With ``consume_message_batch_max_size`` > 1 a batch is done when
    the message after its last is asked for.

    The listener: ``await listener(messages) -> ConsumeStatus`` runs as a task on the
    loop, up to ``consume_thread_max`` at once (``orderly=True``: one per queue at a
    time, in offset order); an exception means ``RECONSUME_LATER``. ``pause()`` holds new
    batches until ``resume()`` (running ones finish; the flow control of the threaded
    consumer stops the pulls once ``pull_threshold_for_queue`` messages wait).
    """

    def __init__(self, group: str, endpoint: str, **options: Any) -> None:
        self._engine = ThreadedPushConsumer(group, endpoint, on_error=self._on_error, **options)
        self.group = group
        self.client_id = self._engine.client_id
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: AsyncListener | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._batch: deque[MessageExt] = deque()
        self._answer: concurrent.futures.Future[ConsumeStatus] | None = None
        self._status = ConsumeStatus.CONSUME_SUCCESS
        self._closing = False
        self._error: TxmqError | None = None
        self._running = asyncio.Event()
        self._running.set()

    # -- configuration -------------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str = "*", expression_type: ExpressionType = ExpressionType.TAG
    ) -> None:
        """``txmq.PushConsumer.subscribe`` (before ``start``; after it, it asks the cluster)."""
        self._engine.subscribe(topic, expression, expression_type)

    def unsubscribe(self, topic: str) -> None:
        self._engine.unsubscribe(topic)

    def register_message_listener(self, listener: AsyncListener) -> None:
        """``await listener(messages) -> ConsumeStatus`` for every batch (instead of
        iterating)."""
        if not callable(listener):
            raise TypeError("the listener must be an async callable")
        self._listener = listener

    def assignment(self) -> set[MessageQueue]:
        return self._engine.assignment()

    @property
    def paused(self) -> bool:
        """Paused here (``pause()``) or by the cluster (``txmq group pause``)."""
        return not self._running.is_set() or self._engine.paused

    def pause(self) -> None:
        """Hand out no new batch (listener or iterator) until ``resume()``."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Check the subscriptions against the cluster and start consuming (raises as
        ``txmq.PushConsumer.start``)."""
        self._loop = asyncio.get_running_loop()
        self._engine.register_message_listener(self._on_batch)
        await asyncio.to_thread(self._engine.start)

    async def close(self) -> None:
        """Stop: what is not done is not committed (see the class docstring); running
        listener tasks finish; offsets are committed and the group told, as
        ``txmq.PushConsumer.shutdown`` does. Idempotent."""
        if not self._closing:
            self._closing = True
            self._finish(ConsumeStatus.RECONSUME_LATER_UNCOUNTED)
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is not _CLOSED:
                    item[1].set_result(ConsumeStatus.RECONSUME_LATER_UNCOUNTED)
            self._queue.put_nowait(_CLOSED)  # wakes an __anext__ waiting
        await asyncio.to_thread(self._engine.shutdown)

    async def wait(self) -> None:
        """Until the consumer stops; raises the error that stopped it, if one did."""
        await asyncio.to_thread(self._engine.wait)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- the iterator --------------------------------------------------------------------

    def __aiter__(self) -> PushConsumer:
        return self

    async def __anext__(self) -> MessageExt:
        if self._batch:
            return self._batch.popleft()
        self._finish(self._status)
        if self._closing:
            raise StopAsyncIteration
        await self._running.wait()
        item = await self._queue.get()  # cancelled here: nothing taken
        if item is _CLOSED:
            self._queue.put_nowait(_CLOSED)
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        messages, self._answer = item
        self._status = ConsumeStatus.CONSUME_SUCCESS
        self._batch.extend(messages)
        return self._batch.popleft()

    def ack(self) -> None:
        """The current message is done: its offset may be committed now (with batches:
        once the last message of the batch has been handed out)."""
        if not self._batch:
            self._finish(self._status)

    def reconsume_later(self) -> None:
        """Deliver the current message (batch) again later (``RECONSUME_LATER``: sent
        back to ``%RETRY%<group>``, or to ``%DLQ%<group>`` past ``max_reconsume_times``)."""
        self._status = ConsumeStatus.RECONSUME_LATER

    def _finish(self, status: ConsumeStatus) -> None:
        answer, self._answer = self._answer, None
        if answer is not None:
            answer.set_result(status)
        self._batch.clear()
        self._status = ConsumeStatus.CONSUME_SUCCESS

    # -- the threaded consumer's side ----------------------------------------------------

    def _on_batch(self, messages: list[MessageExt]) -> ConsumeStatus:
        """The threaded consumer's listener (on its consume threads): the loop decides."""
        loop = self._loop
        assert loop is not None
        if self._listener is not None:
            return asyncio.run_coroutine_threadsafe(self._listen(self._listener, messages), loop).result()
        answer: concurrent.futures.Future[ConsumeStatus] = concurrent.futures.Future()
        loop.call_soon_threadsafe(self._deliver, messages, answer)
        return answer.result()

    def _deliver(self, messages: list[MessageExt], answer: concurrent.futures.Future[ConsumeStatus]) -> None:
        if self._closing:  # (on the loop, as close(): no batch slips past its drain)
            answer.set_result(ConsumeStatus.RECONSUME_LATER_UNCOUNTED)
        else:
            self._queue.put_nowait((messages, answer))

    async def _listen(self, listener: AsyncListener, messages: list[MessageExt]) -> ConsumeStatus:
        await self._running.wait()
        return await listener(messages)

    def _on_error(self, err: TxmqError) -> None:
        """On the threaded consumer's service thread, once it stopped on ``err``."""
        self._error = err
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._queue.put_nowait, _CLOSED)
