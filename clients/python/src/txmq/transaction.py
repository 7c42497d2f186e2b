"""Transactional messages (RocketMQ TransactionMQProducer / TransactionListener).

    class Orders(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            db.insert(arg)
            return LocalTransactionState.COMMIT
        def check_local_transaction(self, msg):
            return LocalTransactionState.COMMIT if db.has(msg.unique_id) else LocalTransactionState.UNKNOWN

    with TransactionProducer(group="orders", endpoint="host:port", listener=Orders()) as p:
        result = p.send_message_in_transaction(Message("Orders", b"..."), arg=order)

The half message is stored invisibly; the listener runs the local transaction; its
answer (COMMIT / ROLLBACK / UNKNOWN; an exception counts as UNKNOWN) is sent as
END_TRANSACTION. When no answer arrives, the transaction service checks a live producer
of the group through its channel: ``check_local_transaction`` runs on a bounded
executor and its answer goes back as END_TRANSACTION flagged from-check.

A COMMIT or ROLLBACK goes straight to the store that holds the half message (its
``EndTransactions``; the store is the one named in the half's send result, found in the
topic's route): the store decides (the first decision wins, atomically), so neither the
transaction service nor a check-loop leader is involved, and ENDs of concurrent threads
to one store share calls. When the store fails retriably (restarting or, in a
replicated store group, changing leader), or has no such call, the END goes as before
through any live txcheck replica, which passes it to the store, and both are retried
within ``end_transaction_timeout``: a repeated decision is answered as the first one, so
retries are safe (docs/transactions.md). UNKNOWN decides nothing and goes to txcheck,
which records it.

``query_transaction`` / ``resume_transaction`` here take a ``ClientCore``; the
producer has methods of the same names.
"""

from __future__ import annotations

import abc
import enum
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from txmq._backoff import Backoff
from txmq._channel import ProducerChannel
from txmq._client import ClientCore, call
from txmq._convert import message_ext_from_proto, send_result_from_proto
from txmq._store_ends import StoreEnds
from txmq.errors import BadRequestError, NotImplementedYetError, TxmqError, UnavailableError
from txmq.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from txmq.models import ServiceKind
from txmq.producer import Producer
from txmq.protocol import STORE_DECISIONS
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

log = logging.getLogger("txmq.transaction")


class LocalTransactionState(enum.Enum):
    COMMIT = txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT
    ROLLBACK = txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK
    UNKNOWN = txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN
    # RocketMQ's names, for its users.
    COMMIT_MESSAGE = txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT
    ROLLBACK_MESSAGE = txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK
    UNKNOW = txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN


class TransactionListener(abc.ABC):
    """The application's side of a transaction (RocketMQ TransactionListener)."""

    @abc.abstractmethod
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction for a stored half message."""

    @abc.abstractmethod
    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """Answer a check: the state of the local transaction of ``msg``
        (``msg.unique_id`` is the transaction id)."""


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """The half message's send result plus the local transaction's state
    (RocketMQ TransactionSendResult). ``transaction_id`` is the message's unique id."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOWN
    #: An error the listener raised (its state then counts as UNKNOWN).
    local_exception: BaseException | None = None


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """A transaction as QueryTransaction reports it."""

    transaction_id: str
    producer_group: str
    resolution: LocalTransactionState | None
    timeline: tuple[tuple[int, str, str], ...]  # (at_ms, kind, detail)
    half: MessageExt | None
    committed: MessageExt | None
    #: Undecided and moved to TRANS_CHECK_MAX_TIME_TOPIC after the check limit;
    #: ``resume_transaction`` checks it again.
    discarded: bool = False


class TransactionProducer(Producer):
    """A producer that also sends transactional messages (RocketMQ TransactionMQProducer).

    ``check_threads`` run checks; at most ``check_queue_size`` wait for a thread. When
    that many wait, the channel stops reading until one is taken: the transaction
    service's stream backs up and its check loop slows down to what this producer
    answers (nothing is dropped, and no check count is spent on a check never run).
    Other keyword arguments are the ``Producer``'s (``tls=`` among them: the check
    channel uses the same TLS)."""

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        listener: TransactionListener | None = None,
        check_threads: int = 1,
        check_queue_size: int = 2000,
        end_transaction_timeout: float = 3.0,
        client_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(group, endpoint, **kwargs)
        if check_threads < 1 or check_queue_size < 1:
            raise ValueError("check_threads and check_queue_size must be >= 1")
        self.listener = listener
        self.client_id = client_id or f"{group}@{uuid.uuid4().hex[:12]}"
        self._check_threads = check_threads
        self._check_slots = threading.BoundedSemaphore(check_queue_size + check_threads)
        self._end_timeout = end_transaction_timeout
        self._executor: ThreadPoolExecutor | None = None
        self._channel: ProducerChannel | None = None
        self._store_ends: dict[str, StoreEnds] = {}  # store address -> its ENDs
        self._no_store_ends: set[str] = set()  # stores without EndTransactions (older txmq)

    # -- lifecycle -------------------------------------------------------------------

    def start(self, *, wait_channel: float = 0.0) -> None:
        """Open the client and the channel for checks; ``wait_channel`` > 0 waits that
        long for the channel to open (returns either way while it keeps reconnecting).
        A channel the transaction service refuses for a reason a reconnect cannot fix
        stops reconnecting: ``channel_error`` says why, and this raises it when it
        happened within ``wait_channel``."""
        super().start()
        with self._lock:
            if self._channel is None:
                self._executor = ThreadPoolExecutor(self._check_threads, thread_name_prefix=f"txmq-check-{self.group}")
                self._channel = ProducerChannel(
                    self._started_core(), group=self.group, client_id=self.client_id, on_checks=self._on_checks
                )
                self._channel.start()
            channel = self._channel
        if wait_channel > 0:
            deadline = time.monotonic() + wait_channel
            while not channel.connected.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
                if channel.error is not None:
                    raise channel.error
                if time.monotonic() >= deadline:
                    break

    @property
    def channel_error(self) -> TxmqError | None:
        """Why the check channel stopped reconnecting (None while it is open or retrying)."""
        channel = self._channel
        return channel.error if channel is not None else None

    @property
    def channel_open(self) -> bool:
        return self._channel is not None and self._channel.connected.is_set()

    def shutdown(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
            executor, self._executor = self._executor, None
        if channel is not None:
            channel.stop()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        super().shutdown()

    def __enter__(self) -> TransactionProducer:
        self.start()
        return self

    # -- transactions ----------------------------------------------------------------

    def send_message_in_transaction(
        self, msg: Message, arg: Any = None, *, timeout: float | None = None
    ) -> TransactionSendResult:
        """Store ``msg`` as a half message, run the local transaction, end it."""
        if self.listener is None:
            raise TxmqError("a TransactionListener is required", code=errors_pb2.CODE_ILLEGAL_ARGUMENT)
        check_not_delayed(msg)
        pb = self._prepare(msg)

        def attempt(store: store_pb2_grpc.StoreStub, mq: MessageQueue, remaining: float, address: str) -> SendResult:
            # The half message on the store's send stream for halves, coalesced.
            streamed = self._send_on_stream(
                address, store, [msg], mq.queue_id, pb.born_timestamp_ms, remaining, prepared=True
            )
            if streamed is not None:
                return streamed[0]
            pb.queue_id = mq.queue_id
            request = store_pb2.SendMessageRequest(message=pb, producer_group=self.group, transaction_prepared=True)
            return send_result_from_proto(call(store.SendMessage, request, timeout=remaining).result)

        sent = self._send_with_retry(msg.topic, msg.queue_id, attempt, timeout=timeout)
        state = LocalTransactionState.UNKNOWN
        failure: BaseException | None = None
        if sent.status == SendStatus.OK:
            try:
                state = local_state(self.listener.execute_local_transaction(msg, arg), "execute_local_transaction")
            except Exception as exc:  # noqa: BLE001 - the check will ask again
                log.warning("local transaction of %s raised; state UNKNOWN: %s", sent.transaction_id, exc)
                failure = exc
        else:
            state = LocalTransactionState.ROLLBACK  # RocketMQ: a half not stored OK is rolled back
        self._end(sent, state)
        return transaction_send_result(sent, state, failure)

    def end_transaction(self, result: SendResult, state: LocalTransactionState, *, from_check: bool = False) -> None:
        """END_TRANSACTION for a half message sent earlier (raises on refusal)."""
        request = end_request(self.group, result, state, from_check=from_check)
        self._call_end(request, topic=result.message_queue.topic)

    def query_transaction(self, transaction_id: str, *, timeout: float = 5.0) -> TransactionInfo:
        """A transaction's state and timeline (QueryTransaction)."""
        return query_transaction(self._started_core(), transaction_id, timeout=timeout)

    def resume_transaction(self, transaction_id: str, *, store_id: str = "", timeout: float = 10.0) -> MessageExt:
        """Check a discarded transaction again (ResumeTransaction); returns the new half
        message. Raises ``NotFoundError`` (TRANSACTION_NOT_FOUND) when it is not
        discarded, ``ConflictError`` (TRANSACTION_ALREADY_RESOLVED) when it is decided."""
        return resume_transaction(self._started_core(), transaction_id, store_id=store_id, timeout=timeout)

    # -- internals ---------------------------------------------------------------------

    def _end(self, sent: SendResult, state: LocalTransactionState) -> None:
        try:
            self.end_transaction(sent, state)
        except TxmqError as err:
            # RocketMQ sends it one-way: a lost or refused END is settled by the check.
            log.warning("END_TRANSACTION of %s (%s) failed: %s", sent.transaction_id, state.name, err)

    def _txcheck_addresses(self, timeout: float) -> Iterator[str]:
        """The replica holding the channel first, then every live replica (each once).
        The live list (a ListEndpoints round trip) is only asked for when the first
        replica did not answer, so a healthy END_TRANSACTION costs one call."""
        channel = self._channel
        first = channel.address if channel is not None and channel.address else ""
        if first:
            yield first
        for address in txcheck_addresses(self._started_core(), timeout=timeout):
            if address != first:
                yield address

    def _call_end(self, request: txcheck_pb2.EndTransactionRequest, *, topic: str = "") -> None:
        """END_TRANSACTION: a commit or rollback of a half message of ``topic`` straight to
        its store first (``_end_at_store``). Else, or when that failed retriably: up the
        open producer channel when its replica answers ENDs there, else (or when that gave
        no answer, or a retriable refusal) as unary calls, retried on retriable errors
        (the store again, then each live replica in turn, then again after a backoff)
        until ``end_transaction_timeout``; other errors raise."""
        deadline = time.monotonic() + self._end_timeout
        direct = bool(topic and request.store_id) and request.resolution in STORE_DECISIONS
        last: TxmqError | None = None
        if direct:
            decided, last = self._store_decides(request, topic, deadline)
            if decided:
                return
            if last is not None:
                log.info("END_TRANSACTION of %s at its store: %s; through txcheck", request.transaction_id, last)
        channel = self._channel
        if channel is not None:
            result = channel.end(request, timeout=min(_STREAM_END_WAIT_S, self._end_timeout))
            if result is not None:
                if not result.HasField("error"):
                    return
                refused = TxmqError.from_detail(result.error)
                if not refused.retriable:
                    raise refused
        core = self._started_core()
        backoff = Backoff(first=_MIN_RETRY_DELAY_S, maximum=_MAX_RETRY_DELAY_S)
        retry_store = False
        while True:
            if retry_store:
                decided, refused_here = self._store_decides(request, topic, deadline)
                if decided:
                    return
                last = refused_here or last
            retry_store = direct
            for address in self._txcheck_addresses(max(0.1, deadline - time.monotonic())):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                stub = core.stub(address, txcheck_pb2_grpc.TransactionStub)
                try:
                    call(stub.EndTransaction, request, timeout=remaining)
                    return
                except TxmqError as err:
                    if not err.retriable:
                        raise
                    last = err
                    log.info("END_TRANSACTION of %s via %s: %s; retrying", request.transaction_id, address, err)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(backoff.next_delay(), remaining))
        raise last or UnavailableError("no txcheck service is live", code=errors_pb2.CODE_UNAVAILABLE)

    def _store_decides(
        self, request: txcheck_pb2.EndTransactionRequest, topic: str, deadline: float
    ) -> tuple[bool, TxmqError | None]:
        """``_end_at_store``: whether the store decided, and its retriable refusal (None
        when there was none); any other refusal raises."""
        try:
            return self._end_at_store(request, topic, deadline), None
        except TxmqError as err:
            if not err.retriable:
                raise
            return False, err

    def _end_at_store(self, request: txcheck_pb2.EndTransactionRequest, topic: str, deadline: float) -> bool:
        """One try of a COMMIT / ROLLBACK at the store holding the half message (the
        topic's route names its address): True once the store decided it or answered
        the same decision again; False where that store is not in the route or has no
        EndTransactions. Raises the store's refusal or a failed call (retriable ones
        mark the route stale: the store group may have a new leader)."""
        core = self._started_core()
        try:
            route = core.routes.get(topic, timeout=max(0.1, deadline - time.monotonic()))
            address = route.store_address(request.store_id)
        except TxmqError as err:
            log.debug("END_TRANSACTION of %s: no route to store %s: %s", request.transaction_id, request.store_id, err)
            return False
        if address in self._no_store_ends:
            return False
        decision = store_decision(request)
        try:
            result = self._ends_to(address).end(decision, max(0.0, deadline - time.monotonic()))
            if result.HasField("error"):
                raise TxmqError.from_detail(result.error)
        except NotImplementedYetError as err:
            if not err.transport:
                raise
            log.info("store %s has no EndTransactions (%s): ENDs through txcheck", address, err)
            self._no_store_ends.add(address)
            return False
        except TxmqError as err:
            if err.retriable:
                core.routes.mark_stale(topic)
            raise
        return True

    def _ends_to(self, address: str) -> StoreEnds:
        with self._lock:
            ends = self._store_ends.get(address)
            if ends is None:
                stub = self._started_core().stub(address, store_pb2_grpc.StoreStub)
                ends = self._store_ends[address] = StoreEnds(stub)
            return ends

    def _on_checks(self, checks: Sequence[txcheck_pb2.CheckTransactionState]) -> None:
        """Hand checks to the check threads; waits (the channel's reader thread) while
        ``check_queue_size`` checks are already waiting: backpressure, not drops."""
        channel = self._channel
        for check in checks:
            if not self._check_slots.acquire(blocking=False):
                if channel is not None:
                    channel.reader_waiting = True
                try:
                    while not self._check_slots.acquire(timeout=_SLOT_WAIT_S):
                        if self._executor is None or (channel is not None and channel.stopped):
                            return  # shutting down: the check loop asks again
                finally:
                    if channel is not None:
                        channel.reader_waiting = False
            executor = self._executor
            if executor is None:
                self._check_slots.release()
                return
            try:
                executor.submit(self._run_check, check)
            except RuntimeError:  # shut down meanwhile
                self._check_slots.release()
                return

    def _run_check(self, check: txcheck_pb2.CheckTransactionState) -> None:
        try:
            msg = message_ext_from_proto(check.message)
            state = LocalTransactionState.UNKNOWN
            try:
                if self.listener is not None:
                    state = local_state(self.listener.check_local_transaction(msg))
            except Exception as exc:  # noqa: BLE001 - an exception counts as UNKNOWN
                log.warning("check_local_transaction of %s raised: %s", check.transaction_id, exc)
            request = check_answer(self.group, check, state)
            channel = self._channel
            if channel is None or not channel.send(txcheck_pb2.ProducerCommand(end_transaction=request)):
                try:
                    self._call_end(request, topic=check.message.message.topic)
                except TxmqError as err:
                    log.warning("answer to the check of %s failed: %s", check.transaction_id, err)
        finally:
            self._check_slots.release()


_SLOT_WAIT_S = 0.5
#: How long an END sent up the producer channel waits for its answer before the unary call.
_STREAM_END_WAIT_S = 2.0
_MIN_RETRY_DELAY_S = 0.05
_MAX_RETRY_DELAY_S = 1.0


def txcheck_addresses(core: ClientCore, *, timeout: float) -> list[str]:
    """Addresses of the live txcheck replicas (empty when none is known)."""
    try:
        return [e.address for e in core.routes.endpoints(ServiceKind.TXCHECK, timeout=timeout)]
    except TxmqError:
        return []


def _first_answer(core: ClientCore, rpc: str, request: Any, *, timeout: float) -> Any:
    """Ask the txcheck replicas in turn until one answers; a retriable error moves on to
    the next, any other error raises."""
    deadline = time.monotonic() + timeout
    last: TxmqError | None = None
    for address in txcheck_addresses(core, timeout=timeout):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        stub = core.stub(address, txcheck_pb2_grpc.TransactionStub)
        try:
            return call(getattr(stub, rpc), request, timeout=remaining)
        except TxmqError as err:
            if not err.retriable:
                raise
            last = err
    raise last or UnavailableError("no txcheck service is live", code=errors_pb2.CODE_UNAVAILABLE)


def query_transaction(core: ClientCore, transaction_id: str, *, timeout: float = 5.0) -> TransactionInfo:
    """QueryTransaction through any live txcheck replica; a read, so retried with backoff
    while every replica fails retriably (one restarting; the channel reconnecting after
    it was down), until ``timeout``."""
    request = txcheck_pb2.QueryTransactionRequest(transaction_id=transaction_id)
    deadline = time.monotonic() + timeout
    backoff = Backoff(first=_MIN_RETRY_DELAY_S, maximum=_MAX_RETRY_DELAY_S)
    while True:
        try:
            answer = _first_answer(core, "QueryTransaction", request, timeout=max(0.1, deadline - time.monotonic()))
            return transaction_info_from_proto(answer)
        except TxmqError as err:
            remaining = deadline - time.monotonic()
            if not err.retriable or remaining <= 0:
                raise
            time.sleep(min(backoff.next_delay(), remaining))


def resume_transaction(
    core: ClientCore, transaction_id: str, *, store_id: str = "", timeout: float = 10.0
) -> MessageExt:
    """ResumeTransaction through any live txcheck replica: a transaction discarded to
    TRANS_CHECK_MAX_TIME_TOPIC goes back to the half queue with its check count reset.
    Returns the new half message (``store_id`` empty: every store that has it)."""
    request = txcheck_pb2.ResumeTransactionRequest(transaction_id=transaction_id, store_id=store_id)
    resp = _first_answer(core, "ResumeTransaction", request, timeout=timeout)
    return message_ext_from_proto(resp.half)


def transaction_info_from_proto(resp: txcheck_pb2.QueryTransactionResponse) -> TransactionInfo:
    try:
        resolution: LocalTransactionState | None = LocalTransactionState(resp.resolution)
    except ValueError:
        resolution = None
    return TransactionInfo(
        transaction_id=resp.transaction_id,
        producer_group=resp.producer_group,
        resolution=resolution,
        timeline=tuple((e.at_ms, e.kind, e.detail) for e in resp.timeline),
        half=message_ext_from_proto(resp.half) if resp.HasField("half") else None,
        committed=message_ext_from_proto(resp.committed) if resp.HasField("committed") else None,
        discarded=resp.discarded,
    )


# -- what both transactional producers (threads, txmq.aio) build the same way -------------


def check_not_delayed(msg: Message) -> None:
    """A transactional message cannot be delayed."""
    if msg.is_delayed:
        # RocketMQ #10260: a delayed half message is mishandled there; the store refuses it too.
        raise BadRequestError(
            "a transactional message cannot be delayed: send it without a delivery time or delay level, "
            "or not in a transaction",
            code=errors_pb2.CODE_MESSAGE_TYPE_CONFLICT,
        )


def local_state(state: object, what: str = "") -> LocalTransactionState:
    """A listener's answer; anything but a ``LocalTransactionState`` counts as UNKNOWN
    (logged when ``what`` names the call)."""
    if isinstance(state, LocalTransactionState):
        return state
    if what:
        log.warning("%s returned %r; counted as UNKNOWN", what, state)
    return LocalTransactionState.UNKNOWN


def transaction_send_result(
    sent: SendResult, state: LocalTransactionState, failure: BaseException | None
) -> TransactionSendResult:
    return TransactionSendResult(
        status=sent.status,
        msg_id=sent.msg_id,
        offset_msg_id=sent.offset_msg_id,
        message_queue=sent.message_queue,
        queue_offset=sent.queue_offset,
        commit_log_offset=sent.commit_log_offset,
        transaction_id=sent.transaction_id or sent.msg_id,
        duplicate=sent.duplicate,
        local_transaction_state=state,
        local_exception=failure,
    )


def end_request(
    group: str, result: SendResult, state: LocalTransactionState, *, from_check: bool = False
) -> txcheck_pb2.EndTransactionRequest:
    """END_TRANSACTION of the half message ``result`` describes."""
    return txcheck_pb2.EndTransactionRequest(
        producer_group=group,
        transaction_id=result.transaction_id or result.msg_id,
        commit_log_offset=result.commit_log_offset,
        tran_state_table_offset=result.queue_offset,
        resolution=state.value,
        from_transaction_check=from_check,
        store_id=result.message_queue.store_id,
    )


def check_answer(
    group: str, check: txcheck_pb2.CheckTransactionState, state: LocalTransactionState
) -> txcheck_pb2.EndTransactionRequest:
    """END_TRANSACTION answering ``check``."""
    return txcheck_pb2.EndTransactionRequest(
        producer_group=group,
        transaction_id=check.transaction_id,
        commit_log_offset=check.commit_log_offset,
        tran_state_table_offset=check.tran_state_table_offset,
        resolution=state.value,
        from_transaction_check=True,
        store_id=check.store_id,
    )


def store_decision(request: txcheck_pb2.EndTransactionRequest) -> store_pb2.ProducerDecision:
    """A COMMIT / ROLLBACK END as the decision the store holding the half takes."""
    return store_pb2.ProducerDecision(
        commit_log_offset=request.commit_log_offset,
        tran_state_table_offset=request.tran_state_table_offset,
        transaction_id=request.transaction_id,
        producer_group=request.producer_group,
        decision=STORE_DECISIONS[request.resolution],
        from_transaction_check=request.from_transaction_check,
    )
