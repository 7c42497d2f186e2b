"""The transactional producer's channel to the transaction service: a long-lived
ProducerChannel stream the producer opens (so it can be checked from behind NAT),
reconnected with backoff when it breaks, to a txcheck instance found through the route
service (``txcheck`` endpoints).

Checks arrive one per ServerCommand or in batches (``check_batch``: the hello says this
client takes them); answers queued while the stream is busy go up as one
``end_transactions`` batch (at most ``MAX_ANSWER_BATCH``)."""

from __future__ import annotations

import itertools
import logging
import queue
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future

import grpc

from txmq._backoff import Backoff
from txmq._client import ClientCore
from txmq._failures import retriable
from txmq.errors import TxmqError
from txmq.models import ServiceKind
from txmq.v1 import txcheck_pb2, txcheck_pb2_grpc

log = logging.getLogger("txmq.transaction.channel")

# Reconnect backoff (the gateway's producer links use the same).
_RECONNECT_FIRST_S = 0.1
_RECONNECT_MAX_S = 2.0
_STOP = object()
#: Answers sent up the stream in one command at most.
MAX_ANSWER_BATCH = 256


class ProducerChannel:
    def __init__(
        self,
        core: ClientCore,
        *,
        group: str,
        client_id: str,
        on_checks: Callable[[Sequence[txcheck_pb2.CheckTransactionState]], None],
    ) -> None:
        self._core = core
        self._group = group
        self._client_id = client_id
        self._on_checks = on_checks
        self._stopped = threading.Event()
        self.connected = threading.Event()
        self._lock = threading.Lock()
        self._outgoing: queue.Queue | None = None
        self._call = None
        self.address: str | None = None
        #: Why the channel gave up: a refusal a reconnect cannot fix (txmq._failures).
        self.error: TxmqError | None = None
        #: The open stream's replica answers ENDs sent up it (initial metadata).
        self.end_results = False
        #: The reader thread waits for room among the check threads (backpressure).
        self.reader_waiting = False
        self._ids = itertools.count(1)
        self._waiting: dict[int, Future[txcheck_pb2.EndTransactionResult]] = {}
        self._thread = threading.Thread(target=self._run, name=f"txmq-channel-{group}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            out, call = self._outgoing, self._call
        if out is not None:
            out.put(_STOP)
        if call is not None:
            call.cancel()
        self._thread.join(timeout=5)

    def send(self, command: txcheck_pb2.ProducerCommand) -> bool:
        """Queue a command on the open stream; False when none is open."""
        with self._lock:
            out = self._outgoing if self.connected.is_set() else None
        if out is None:
            return False
        out.put(command)
        return True

    def end(
        self, request: txcheck_pb2.EndTransactionRequest, timeout: float
    ) -> txcheck_pb2.EndTransactionResult | None:
        """END_TRANSACTION up the open stream (cheaper than a unary call; ENDs queued
        together go as one command); its result, or None when there is no stream that
        answers ENDs or no answer came within ``timeout`` (the caller then uses the unary
        call: a repeated decision is answered like the first)."""
        if not (self.connected.is_set() and self.end_results) or self.reader_waiting:
            return None  # (a reader waiting for check threads would read the answer late)
        request_id = next(self._ids)
        fut: Future[txcheck_pb2.EndTransactionResult] = Future()
        self._waiting[request_id] = fut
        try:
            sent = txcheck_pb2.EndTransactionRequest()
            sent.CopyFrom(request)
            sent.request_id = request_id
            if not self.send(txcheck_pb2.ProducerCommand(end_transaction=sent)):
                return None
            try:
                return fut.result(timeout)
            except Exception:  # noqa: BLE001 - timed out, or the stream broke: unary next
                return None
        finally:
            self._waiting.pop(request_id, None)

    def _fail_waiting(self) -> None:
        for fut in list(self._waiting.values()):
            if not fut.done():
                fut.set_exception(ConnectionError("the producer channel closed"))

    def _requests(self, out: queue.Queue) -> Iterator[txcheck_pb2.ProducerCommand]:
        yield txcheck_pb2.ProducerCommand(
            hello=txcheck_pb2.ProducerHello(
                producer_group=self._group, client_id=self._client_id, accepts_check_batches=True
            )
        )
        while True:
            item = out.get()
            if item is _STOP:
                return
            batch = [item]
            stop = False
            while len(batch) < MAX_ANSWER_BATCH:  # whatever else is queued goes with it
                try:
                    more = out.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                batch.append(more)
            yield coalesce(batch)
            if stop:
                return

    def _addresses(self) -> list[str]:
        endpoints = self._core.routes.endpoints(ServiceKind.TXCHECK, timeout=3.0)
        addresses = [e.address for e in endpoints]
        random.shuffle(addresses)  # spread the producers of a group over the replicas
        return addresses

    def _run(self) -> None:
        backoff = Backoff(first=_RECONNECT_FIRST_S, maximum=_RECONNECT_MAX_S)
        while not self._stopped.is_set():
            try:
                addresses = self._addresses()
            except Exception as exc:  # noqa: BLE001 - retried with backoff
                log.debug("no txcheck endpoint yet: %s", exc)
                addresses = []
            for address in addresses:
                if self._stopped.is_set():
                    return
                if self._serve(address):
                    backoff.reset()
                    break
            self._stopped.wait(backoff.next_delay())

    def _serve(self, address: str) -> bool:
        """Run one stream to ``address`` until it breaks; True if it was open."""
        out: queue.Queue = queue.Queue()
        stub = self._core.stub(address, txcheck_pb2_grpc.TransactionStub)
        call = stub.ProducerChannel(self._requests(out))
        with self._lock:
            self._outgoing, self._call = out, call
        opened = False
        try:
            metadata = call.initial_metadata()  # the service answers once the channel is registered
            self.end_results = any(k == "txmq-end-results" and v == "1" for k, v in metadata or ())
            opened = True
            self.address = address
            self.connected.set()
            log.info("producer channel of %s open to %s", self._group, address)
            for command in call:
                kind = command.WhichOneof("command")
                if kind == "check":
                    self._on_checks([command.check])
                elif kind == "check_batch":
                    self._on_checks(command.check_batch.checks)
                elif kind == "end_result":
                    fut = self._waiting.get(command.end_result.request_id)
                    if fut is not None and not fut.done():
                        fut.set_result(command.end_result)
        except grpc.RpcError as exc:
            if not self._stopped.is_set():
                err = TxmqError.from_rpc_error(exc)
                if not retriable(err):  # refused for good: stop reconnecting
                    self.error = err
                    self._stopped.set()
                    log.error("producer channel of %s refused by %s; not reconnecting: %s", self._group, address, err)
                else:
                    log.info("producer channel to %s broke: %s", address, err)
        finally:
            self.connected.clear()
            self.end_results = False
            self._fail_waiting()
            with self._lock:
                self._outgoing, self._call = None, None
            out.put(_STOP)
            call.cancel()
        return opened


def coalesce(commands: list[txcheck_pb2.ProducerCommand]) -> txcheck_pb2.ProducerCommand:
    """One command for queued answers: a single one as it is, several as one batch."""
    if len(commands) == 1:
        return commands[0]
    requests: list[txcheck_pb2.EndTransactionRequest] = []
    for c in commands:
        if c.WhichOneof("command") == "end_transactions":
            requests.extend(c.end_transactions.requests)
        else:
            requests.append(c.end_transaction)
    return txcheck_pb2.ProducerCommand(end_transactions=txcheck_pb2.EndTransactionBatch(requests=requests))
