"""Long polls on one open stream per pull instance (Pull.PullStream; docs/pull.md "The
pull stream").

A unary long poll costs a whole call per wake-up; on the stream a pull is one message up
and its answer one message down. ``PullStream`` keeps one stream to one pull instance for
every pull a client makes there, from any thread: ``submit`` gives a ``StreamedPull`` (the
``grpc.Future`` a unary ``.future()`` call gives, so both kinds are handled alike), whose
result is the pull's response or its error (a ``TxmqError``: the service's answer for
that pull; the stream goes on).

A stream that breaks (the service restarted, killed, a connection reset) is opened again
at once and every pull not yet answered is sent again on it, with its id: a pull reads
from its offset and commits nothing the consumer did not ask for, so sending it twice
loses nothing and answers it once. When the stream cannot be opened again (a few tries,
``REOPEN_DELAYS_S``), the pulls waiting fail UNAVAILABLE, so their callers move on (the
next pull instance, a backoff) as after a failed unary call. A refusal a retry cannot fix
(credentials) fails them with that error. A pull service without the stream (an older
one: UNIMPLEMENTED) is asked with unary PullMessage calls from then on, the pulls
waiting included.

Threads: one reads the stream's answers (and opens it again), one expires pulls past
their deadline (it sleeps while none waits), and gRPC's own sends the requests.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from txmq.errors import TxmqError, UnavailableError, UpstreamTimeoutError
from txmq.v1 import pull_pb2, pull_pb2_grpc

log = logging.getLogger("txmq.consumer")

#: Initial metadata the pull service sends once the stream is served.
STREAM_OPEN_KEY = "txmq-pull-stream"
#: Waits before each attempt to open a broken stream again; after the last one fails,
#: the pulls waiting fail UNAVAILABLE.
REOPEN_DELAYS_S = (0.0, 0.05, 0.2, 0.5, 1.0)

_END = object()


class StreamedPull(grpc.Future):
    """One pull on a ``PullStream``. ``result()`` returns its PullMessageResponse or raises
    its ``TxmqError`` (grpc.FutureCancelledError / FutureTimeoutError as grpc's futures).
    ``cancel()`` withdraws it: the service ends its hold."""

    def __init__(self, stream: PullStream, request_id: int, request: pull_pb2.PullMessageRequest, timeout: float):
        self.request_id = request_id
        self.request = request
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self._stream = stream
        self._future: concurrent.futures.Future[pull_pb2.PullMessageResponse] = concurrent.futures.Future()
        #: The unary call asked instead, when the service does not offer the stream.
        self.unary: grpc.Future | None = None

    def cancel(self) -> bool:
        if not self._future.cancel():
            return False
        self._stream.withdraw(self)
        return True

    def cancelled(self) -> bool:
        return self._future.cancelled()

    def running(self) -> bool:
        return not self._future.done()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> pull_pb2.PullMessageResponse:
        try:
            return self._future.result(timeout)
        except concurrent.futures.CancelledError:
            raise grpc.FutureCancelledError() from None
        except concurrent.futures.TimeoutError:
            raise grpc.FutureTimeoutError() from None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return self._future.exception(timeout)
        except concurrent.futures.CancelledError:
            raise grpc.FutureCancelledError() from None
        except concurrent.futures.TimeoutError:
            raise grpc.FutureTimeoutError() from None

    def traceback(self, timeout: float | None = None) -> Any:
        exc = self.exception(timeout)
        return None if exc is None else exc.__traceback__

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        self._future.add_done_callback(lambda _: fn(self))

    def settle(self, response: pull_pb2.PullMessageResponse | None = None, err: BaseException | None = None) -> None:
        """Answer it (once; a withdrawn pull stays cancelled)."""
        try:
            if err is not None:
                self._future.set_exception(err)
            else:
                self._future.set_result(response)  # type: ignore[arg-type]
        except concurrent.futures.InvalidStateError:
            pass


class PullStream:
    """The stream to one pull instance. Thread-safe; opened on the first pull."""

    def __init__(self, stub: pull_pb2_grpc.PullStub, address: str) -> None:
        self.address = address
        self._stub = stub
        self._cond = threading.Condition()
        self._pending: dict[int, StreamedPull] = {}
        self._ids = itertools.count(1)
        self._out: queue.SimpleQueue[Any] | None = None  # the open stream's requests
        self._call: Any = None
        self._closed = False
        #: The service answered UNIMPLEMENTED: pulls go as unary calls.
        self.unsupported = False
        self._threads: list[threading.Thread] = []
        # What the two threads sleep for (so a new pull wakes them only when it matters):
        # the reader, for a first pull; the expirer, until this deadline (None: no pull).
        self._idle = True
        self._expire_at: float | None = None

    # -- the callers' side -----------------------------------------------------------------

    def submit(self, request: pull_pb2.PullMessageRequest, *, timeout: float) -> grpc.Future:
        """Send a pull; it fails ``UPSTREAM_TIMEOUT`` unless answered within ``timeout``."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the consumer is shut down")
            if self.unsupported:
                return self._stub.PullMessage.future(request, timeout=timeout)
            pull = StreamedPull(self, next(self._ids), request, timeout)
            self._pending[pull.request_id] = pull
            if self._out is not None:
                self._out.put(pull_pb2.PullStreamRequest(request_id=pull.request_id, pull=request))
            if not self._threads:
                self._start()
            elif self._idle or self._expire_at is None or pull.deadline < self._expire_at:
                self._cond.notify_all()
        return pull

    def withdraw(self, pull: StreamedPull) -> None:
        """A cancelled pull: forgotten here, withdrawn at the service."""
        with self._cond:
            if self._pending.pop(pull.request_id, None) is not None and self._out is not None:
                self._out.put(pull_pb2.PullStreamRequest(request_id=pull.request_id, cancel=True))
            unary = pull.unary
        if unary is not None:
            unary.cancel()

    def close(self) -> None:
        """End the stream; pulls waiting fail (the consumer is shutting down)."""
        with self._cond:
            self._closed = True
            pending, self._pending = list(self._pending.values()), {}
            call = self._call
            self._cond.notify_all()
        if call is not None:
            call.cancel()
        for pull in pending:
            pull.settle(err=UnavailableError("the consumer was shut down"))

    @property
    def outstanding(self) -> int:
        with self._cond:
            return len(self._pending)

    # -- the stream's side -----------------------------------------------------------------

    def _start(self) -> None:
        for target, name in ((self._run, "txmq-pull-stream"), (self._expire, "txmq-pull-stream-deadlines")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._closed and not self._pending:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                if self._closed:
                    return
            opened, err = self._serve()
            if self.unsupported or self._closed:
                return
            if err is not None and not err.retriable:  # sending them again cannot help
                self._fail_pending(err)
                failures = 0
                continue
            if opened:
                failures = 0
                continue
            failures += 1
            if failures >= len(REOPEN_DELAYS_S):
                self._fail_pending(err or UnavailableError(f"pull instance {self.address} is unreachable"))
                failures = 0
                continue
            with self._cond:
                self._cond.wait_for(lambda: self._closed, REOPEN_DELAYS_S[min(failures, len(REOPEN_DELAYS_S) - 1)])

    def _serve(self) -> tuple[bool, TxmqError | None]:
        """Open the stream, send every pull waiting and read answers until it ends.
        (opened, why it ended: None when the service ended it cleanly)."""
        out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call = self._stub.PullStream(_requests(out))
        with self._cond:
            if self._closed:
                call.cancel()
                return False, None
            self._call = call
        opened = False
        try:
            metadata = call.initial_metadata() or ()
            if any(key == STREAM_OPEN_KEY for key, _ in metadata):
                opened = True
                with self._cond:
                    self._out = out
                    for request_id in sorted(self._pending):
                        out.put(
                            pull_pb2.PullStreamRequest(request_id=request_id, pull=self._pending[request_id].request)
                        )
            for answer in call:
                self._answer(answer)
            return opened, None if opened else UnavailableError(f"pull instance {self.address} ended the stream")
        except grpc.RpcError as exc:
            if not opened and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._fall_back()
                return False, None
            err = TxmqError.from_rpc_error(exc)
            if opened and not self._closed:
                log.info("pull stream to %s broke (%s); opening it again", self.address, err)
            return opened, err
        finally:
            with self._cond:
                self._out = None
                self._call = None
            out.put(_END)
            call.cancel()

    def _answer(self, answer: pull_pb2.PullStreamResponse) -> None:
        with self._cond:
            pull = self._pending.pop(answer.request_id, None)
        if pull is None:
            return  # withdrawn, or expired
        if answer.HasField("error"):
            pull.settle(err=TxmqError.from_detail(answer.error))
        else:
            pull.settle(answer.pull)

    def _fail_pending(self, err: TxmqError) -> None:
        with self._cond:
            pending, self._pending = list(self._pending.values()), {}
        for pull in pending:
            pull.settle(err=err)

    def _fall_back(self) -> None:
        """The service has no PullStream: every pull waiting goes as a unary call."""
        log.info("pull instance %s does not offer PullStream; using unary PullMessage calls", self.address)
        with self._cond:
            self.unsupported = True
            pending, self._pending = list(self._pending.values()), {}
            self._cond.notify_all()
        for pull in pending:
            remaining = max(0.001, pull.deadline - time.monotonic())
            unary = self._stub.PullMessage.future(pull.request, timeout=remaining)
            pull.unary = unary
            if pull.cancelled():
                unary.cancel()
            unary.add_done_callback(lambda f, p=pull: _settle_from_unary(p, f))

    def _expire(self) -> None:
        """Fail the pulls past their deadline (a service that holds a pull too long)."""
        while True:
            with self._cond:
                if self._closed or self.unsupported:
                    return
                now = time.monotonic()
                expired = [p for p in self._pending.values() if p.deadline <= now]
                for pull in expired:
                    del self._pending[pull.request_id]
                    if self._out is not None:
                        self._out.put(pull_pb2.PullStreamRequest(request_id=pull.request_id, cancel=True))
                if not expired:
                    self._expire_at = min((p.deadline for p in self._pending.values()), default=None)
                    self._cond.wait(None if self._expire_at is None else self._expire_at - now)
                    self._expire_at = None
            for pull in expired:
                pull.settle(
                    err=UpstreamTimeoutError(f"pull instance {self.address} did not answer within {pull.timeout:.1f}s")
                )


def _requests(out: queue.SimpleQueue[Any]) -> Iterator[pull_pb2.PullStreamRequest]:
    """Run by gRPC's request thread: what the callers queued, until the stream ends."""
    while (item := out.get()) is not _END:
        yield item


def _settle_from_unary(pull: StreamedPull, future: grpc.Future) -> None:
    try:
        pull.settle(future.result())
    except grpc.FutureCancelledError:
        pass
    except grpc.RpcError as exc:
        pull.settle(err=TxmqError.from_rpc_error(exc))
