"""One Pull.PullStream call: long polls on one open stream (docs/pull.md "The pull stream").

A unary long poll costs a whole call per wake-up: headers, the held answer, trailers, and
the consumer's next call. On the stream each pull is one message up and one message down.
A ``PullStreamSession`` serves the pulls of one stream: each request becomes a task that
runs the pull exactly as PullMessage does (``pull``: validation, commit, read, hold) after
the per-pull access check (``check``), and puts its answer — the response, or the error as
an ``ErrorDetail`` — on the session's answer queue, tagged with the request's id. The
servicer writes that queue to the stream (one writer: gRPC allows one write at a time).

Rules, none of which ends the stream:

- an id that is outstanding already, a request without a pull, or more than
  ``max_outstanding`` pulls at once: that request is answered with its error;
- ``cancel``: the outstanding pull with that id is withdrawn (its hold ends, as when a
  unary caller goes away); it gets no answer;
- the client closing its side: the outstanding pulls are still answered, then the
  stream ends; ``finish`` (the service stopping) does the same without reading more.

No gRPC here: requests and answers are the pull.proto messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from txmq.errors import InternalError, TxmqError, error
from txmq.v1 import errors_pb2, pull_pb2

log = logging.getLogger("txmq.pull.stream")

Pull = Callable[[pull_pb2.PullMessageRequest], Awaitable[pull_pb2.PullMessageResponse]]
Check = Callable[[pull_pb2.PullMessageRequest], None]


class PullStreamSession:
    def __init__(self, pull: Pull, *, check: Check, max_outstanding: int) -> None:
        self._pull = pull
        self._check = check
        self._max_outstanding = max_outstanding
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._queue: asyncio.Queue[pull_pb2.PullStreamResponse | None] = asyncio.Queue()
        self._reading = True
        self._ended = False
        self._reader: asyncio.Task[None] | None = None

    @property
    def outstanding(self) -> int:
        """Pulls started and not yet answered (nor withdrawn)."""
        return len(self._tasks)

    def start(self, requests: AsyncIterator[pull_pb2.PullStreamRequest]) -> None:
        """Read ``requests`` on a task of its own (answers are written meanwhile)."""
        self._reader = asyncio.create_task(self.read(requests), name="pull-stream-reader")

    async def read(self, requests: AsyncIterator[pull_pb2.PullStreamRequest]) -> None:
        """Start a pull per request until the client closes its side."""
        try:
            async for request in requests:
                self.on_request(request)
        finally:
            self._reading = False
            self._end_if_done()

    def on_request(self, request: pull_pb2.PullStreamRequest) -> None:
        request_id = request.request_id
        if not self._reading:
            return  # finishing: the client re-sends what is unanswered on its next stream
        if request.cancel:
            task = self._tasks.pop(request_id, None)
            if task is not None:
                task.cancel()
                self._end_if_done()
            return
        if request_id in self._tasks:
            self._answer_error(
                request_id,
                error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"request id {request_id} is outstanding already"),
            )
        elif not request.HasField("pull"):
            self._answer_error(request_id, error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "a pull is required"))
        elif len(self._tasks) >= self._max_outstanding:
            self._answer_error(
                request_id,
                error(
                    errors_pb2.CODE_TOO_MANY_REQUESTS,
                    f"{len(self._tasks)} pulls are outstanding on this stream already; retry later",
                ),
            )
        else:
            self._tasks[request_id] = asyncio.create_task(self._serve(request_id, request.pull), name="pull-stream")

    async def _serve(self, request_id: int, pull: pull_pb2.PullMessageRequest) -> None:
        try:
            self._check(pull)
            answer = pull_pb2.PullStreamResponse(request_id=request_id, pull=await self._pull(pull))
        except asyncio.CancelledError:
            self._forget(request_id)
            raise
        except TxmqError as err:
            answer = pull_pb2.PullStreamResponse(request_id=request_id, error=err.to_detail())
        except Exception as exc:
            log.exception("unexpected error in a streamed pull")
            answer = pull_pb2.PullStreamResponse(
                request_id=request_id,
                error=InternalError(f"internal error in PullStream: {type(exc).__name__}: {exc}").to_detail(),
            )
        if self._forget(request_id):
            self._queue.put_nowait(answer)
            self._end_if_done()

    def _forget(self, request_id: int) -> bool:
        """Drop this task's entry; False when it was withdrawn (the id may be reused)."""
        if self._tasks.get(request_id) is asyncio.current_task():
            del self._tasks[request_id]
            return True
        return False

    def _answer_error(self, request_id: int, err: TxmqError) -> None:
        self._queue.put_nowait(pull_pb2.PullStreamResponse(request_id=request_id, error=err.to_detail()))

    def _end_if_done(self) -> None:
        if not self._reading and not self._tasks and not self._ended:
            self._ended = True
            self._queue.put_nowait(None)

    async def answers(self) -> AsyncIterator[pull_pb2.PullStreamResponse]:
        """The answers as they are ready, until the stream is done."""
        while (answer := await self._queue.get()) is not None:
            yield answer

    def finish(self) -> None:
        """Read no more requests; end once the outstanding pulls are answered."""
        self._reading = False
        if self._reader is not None:
            self._reader.cancel()
        self._end_if_done()

    async def close(self) -> None:
        """Stop reading and withdraw every outstanding pull (the client went away)."""
        tasks, self._tasks = list(self._tasks.values()), {}
        if self._reader is not None:
            tasks.append(self._reader)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
