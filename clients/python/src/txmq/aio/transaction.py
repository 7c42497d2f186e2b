"""``txmq.TransactionProducer`` for asyncio, with an async listener:

    class Orders(AsyncTransactionListener):
        async def execute_local_transaction(self, msg, arg):
            await db.insert(arg)
            return LocalTransactionState.COMMIT
        async def check_local_transaction(self, msg):
            return LocalTransactionState.COMMIT if await db.has(msg.unique_id) else LocalTransactionState.UNKNOWN

    async with TransactionProducer("orders", "host:port", listener=Orders()) as p:
        result = await p.send_message_in_transaction(Message("Orders", b"..."), arg=order)

The half message goes on the store's send stream for halves (coalesced with other
tasks' halves), the local transaction is awaited, and its answer goes as END_TRANSACTION:
a COMMIT or ROLLBACK straight to the store holding the half (``EndTransactions``), else,
or when that store fails retriably, through the live txcheck replicas, retried within
``end_transaction_timeout`` (a repeated decision is answered like the first). The
requests are built by ``txmq.transaction``'s functions, as in the threaded producer.
Checks arrive on the producer's channel (``txmq.aio._channel``) and run as tasks, at
most ``check_concurrency`` at once; their answers go back up the channel.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
import uuid
from typing import Any

from txmq._backoff import Backoff
from txmq._convert import message_ext_from_proto, send_result_from_proto
from txmq.aio._channel import AsyncProducerChannel
from txmq.aio._client import call
from txmq.aio.producer import Producer
from txmq.errors import NotImplementedYetError, TxmqError, UnavailableError
from txmq.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from txmq.models import ServiceKind
from txmq.protocol import STORE_DECISIONS
from txmq.transaction import (
    LocalTransactionState,
    TransactionSendResult,
    check_answer,
    check_not_delayed,
    end_request,
    local_state,
    store_decision,
    transaction_send_result,
)
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

log = logging.getLogger("txmq.aio.transaction")

_MIN_RETRY_DELAY_S = 0.05
_MAX_RETRY_DELAY_S = 1.0


class AsyncTransactionListener(abc.ABC):
    """``txmq.TransactionListener`` with coroutines."""

    @abc.abstractmethod
    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction for a stored half message."""

    @abc.abstractmethod
    async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """Answer a check (``msg.unique_id`` is the transaction id)."""


class TransactionProducer(Producer):
    """A ``txmq.aio.Producer`` that also sends transactional messages. An exception of
    the listener, or an answer that is no ``LocalTransactionState``, counts as UNKNOWN
    (the check asks again). Other keyword arguments are the ``Producer``'s."""

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        listener: AsyncTransactionListener | None = None,
        check_concurrency: int = 16,
        end_transaction_timeout: float = 3.0,
        client_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(group, endpoint, **kwargs)
        if check_concurrency < 1:
            raise ValueError("check_concurrency must be >= 1")
        self.listener = listener
        self.client_id = client_id or f"{group}@{uuid.uuid4().hex[:12]}"
        self._check_slots = asyncio.Semaphore(check_concurrency)
        self._checks: set[asyncio.Task[None]] = set()
        self._end_timeout = end_transaction_timeout
        self._channel: AsyncProducerChannel | None = None
        self._no_store_ends: set[str] = set()  # stores without EndTransactions (older txmq)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Open the client and start opening the channel for checks (on the running loop)."""
        super().start()
        if self._channel is None:
            self._channel = AsyncProducerChannel(
                self._started_core(), group=self.group, client_id=self.client_id, on_check=self._on_check
            )
            self._channel.start()

    async def wait_channel(self, timeout: float) -> bool:  # noqa: ASYNC109 - returns rather than raises at the end
        """Whether the check channel opened within ``timeout`` seconds; raises the refusal
        that made it give up (``channel_error``)."""
        channel = self._channel
        if channel is None:
            raise RuntimeError("the producer is not started")
        try:
            await asyncio.wait_for(channel.connected.wait(), timeout)
        except TimeoutError:
            if channel.error is not None:
                raise channel.error from None
            return False
        return True

    @property
    def channel_error(self) -> TxmqError | None:
        """Why the check channel stopped reconnecting (None while it is open or retrying)."""
        return self._channel.error if self._channel is not None else None

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.stop()
        for task in list(self._checks):
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        await super().close()

    async def __aenter__(self) -> TransactionProducer:
        self.start()
        return self

    # -- transactions ----------------------------------------------------------------

    async def send_message_in_transaction(
        self,
        msg: Message,
        arg: Any = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline across retries
    ) -> TransactionSendResult:
        """Store ``msg`` as a half message, await the local transaction, end it."""
        if self.listener is None:
            raise TxmqError("a TransactionListener is required", code=errors_pb2.CODE_ILLEGAL_ARGUMENT)
        check_not_delayed(msg)
        pb = self._prepare(msg)

        async def attempt(
            store: store_pb2_grpc.StoreStub, mq: MessageQueue, remaining: float, address: str
        ) -> SendResult:
            streamed = await self._send_on_stream(
                address, store, [msg], mq.queue_id, pb.born_timestamp_ms, remaining, prepared=True
            )
            if streamed is not None:
                return streamed[0]
            pb.queue_id = mq.queue_id
            request = store_pb2.SendMessageRequest(message=pb, producer_group=self.group, transaction_prepared=True)
            return send_result_from_proto((await call(store.SendMessage, request, timeout=remaining)).result)

        sent = await self._send_with_retry(msg.topic, msg.queue_id, attempt, timeout=timeout)
        state = LocalTransactionState.UNKNOWN
        failure: BaseException | None = None
        if sent.status == SendStatus.OK:
            try:
                state = local_state(
                    await self.listener.execute_local_transaction(msg, arg), "execute_local_transaction"
                )
            except Exception as exc:  # noqa: BLE001 - the check will ask again
                log.warning("local transaction of %s raised; state UNKNOWN: %s", sent.transaction_id, exc)
                failure = exc
        else:
            state = LocalTransactionState.ROLLBACK  # RocketMQ: a half not stored OK is rolled back
        try:
            await self.end_transaction(sent, state)
        except TxmqError as err:  # a lost or refused END is settled by the check
            log.warning("END_TRANSACTION of %s (%s) failed: %s", sent.transaction_id, state.name, err)
        return transaction_send_result(sent, state, failure)

    async def end_transaction(
        self, result: SendResult, state: LocalTransactionState, *, from_check: bool = False
    ) -> None:
        """END_TRANSACTION for a half message sent earlier (raises on refusal)."""
        await self._call_end(end_request(self.group, result, state, from_check=from_check), result.message_queue.topic)

    # -- internals ---------------------------------------------------------------------

    async def _call_end(self, request: txcheck_pb2.EndTransactionRequest, topic: str) -> None:
        """A COMMIT / ROLLBACK to the store holding the half first; else, or when it
        failed retriably, each live txcheck replica in turn (the channel's first); again
        after a backoff, until ``end_transaction_timeout``; other errors raise."""
        deadline = time.monotonic() + self._end_timeout
        direct = bool(topic and request.store_id) and request.resolution in STORE_DECISIONS
        backoff = Backoff(first=_MIN_RETRY_DELAY_S, maximum=_MAX_RETRY_DELAY_S)
        last: TxmqError | None = None
        while True:
            try:
                if direct and await self._end_at_store(request, topic, deadline):
                    return
            except TxmqError as err:
                if not err.retriable:
                    raise
                last = err
            for address in await self._txcheck_addresses(max(0.1, deadline - time.monotonic())):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                stub = self._started_core().stub(address, txcheck_pb2_grpc.TransactionStub)
                try:
                    await call(stub.EndTransaction, request, timeout=remaining)
                    return
                except TxmqError as err:
                    if not err.retriable:
                        raise
                    last = err
                    log.info("END_TRANSACTION of %s via %s: %s; retrying", request.transaction_id, address, err)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise last or UnavailableError("no txcheck service is live", code=errors_pb2.CODE_UNAVAILABLE)
            await asyncio.sleep(min(backoff.next_delay(), remaining))

    async def _end_at_store(self, request: txcheck_pb2.EndTransactionRequest, topic: str, deadline: float) -> bool:
        """One try at the store holding the half: True once it decided (or answered the
        same decision again); False where it is not in the route or has no
        EndTransactions. Raises its refusal or a failed call."""
        core = self._started_core()
        try:
            route = await core.routes.get(topic, timeout=max(0.1, deadline - time.monotonic()))
            address = route.store_address(request.store_id)
        except TxmqError as err:
            log.debug("END_TRANSACTION of %s: no route to store %s: %s", request.transaction_id, request.store_id, err)
            return False
        if address in self._no_store_ends:
            return False
        stub = core.stub(address, store_pb2_grpc.StoreStub)
        ends = store_pb2.EndTransactionsRequest(decisions=[store_decision(request)])
        try:
            [result] = (await call(stub.EndTransactions, ends, timeout=max(0.1, deadline - time.monotonic()))).results
            if result.HasField("error"):
                raise TxmqError.from_detail(result.error)
        except NotImplementedYetError as err:
            if not err.transport:
                raise
            self._no_store_ends.add(address)
            return False
        except TxmqError as err:
            if err.retriable:
                core.routes.mark_stale(topic)  # the store group may have a new leader
            raise
        return True

    async def _txcheck_addresses(self, budget: float) -> list[str]:
        """The replica holding the channel first, then every live replica."""
        channel = self._channel
        first = [channel.address] if channel is not None and channel.address else []
        try:
            live = await self._started_core().routes.endpoints(ServiceKind.TXCHECK, timeout=budget)
        except TxmqError:
            live = []
        return list(dict.fromkeys(first + [e.address for e in live]))

    async def _on_check(self, check: txcheck_pb2.CheckTransactionState) -> None:
        """A check from the channel, run as a task; waits (so the channel reads no
        more) while ``check_concurrency`` checks run."""
        await self._check_slots.acquire()
        task = asyncio.get_running_loop().create_task(self._run_check(check))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _run_check(self, check: txcheck_pb2.CheckTransactionState) -> None:
        try:
            state = LocalTransactionState.UNKNOWN
            try:
                if self.listener is not None:
                    state = local_state(
                        await self.listener.check_local_transaction(message_ext_from_proto(check.message))
                    )
            except Exception as exc:  # noqa: BLE001 - an exception counts as UNKNOWN
                log.warning("check_local_transaction of %s raised: %s", check.transaction_id, exc)
            request = check_answer(self.group, check, state)
            channel = self._channel
            if channel is None or not channel.send(txcheck_pb2.ProducerCommand(end_transaction=request)):
                try:
                    await self._call_end(request, check.message.message.topic)
                except TxmqError as err:
                    log.warning("answer to the check of %s failed: %s", check.transaction_id, err)
        finally:
            self._check_slots.release()
