"""The send stream for asyncio: ``txmq.pipe.FrameBook`` (the coalescing the threaded
``SendPipe`` does) driven by two tasks on one ``Store.SendStream`` of ``grpc.aio``: one
writes a frame of everything waiting whenever the stream can take one, one reads the
acks and settles each entry's future. The asyncio producer and the RocketMQ gateway
send through it.

Why a stream: a unary ``SendRecords`` per frame cost ~370-430 µs of client CPU in gRPC's
call machinery (a new HTTP/2 stream, metadata and trailers each way); a frame written on
an open stream and its ack read back ~200 µs. Each entry keeps its own outcome: an ack
answers its frame's entries, a record the store refuses fails its own entry only, a
broken stream fails everything in flight and waiting, and the caller then opens a new
pipe (``failed``)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc

from txmq.errors import TxmqError, UnavailableError
from txmq.pipe import Acked, Entry, FrameBook, PipeSettings, _settle, closed_error
from txmq.v1 import store_pb2, store_pb2_grpc


class AsyncSendPipe:
    """One open SendStream to one store, on the running event loop.
    ``transaction_prepared``: its frames hold half messages."""

    def __init__(
        self,
        stub: store_pb2_grpc.StoreStub,
        *,
        producer_group: str,
        settings: PipeSettings,
        transaction_prepared: bool = False,
    ) -> None:
        self._group = producer_group
        self._prepared = transaction_prepared
        self._book = FrameBook(settings)
        self._wake = asyncio.Event()
        self._call = stub.SendStream()
        loop = asyncio.get_running_loop()
        self._writer = loop.create_task(self._write_frames())
        self._reader = loop.create_task(self._read_acks())
        self.frames = 0  # frames written (tests)

    @property
    def failed(self) -> TxmqError | None:
        """Why the pipe stopped (then a new one is needed), or None while it works."""
        return self._book.failed

    def submit(self, blob: bytes, count: int) -> Entry:
        entry = Entry(blob, count, asyncio.get_running_loop().create_future())
        self._book.add(entry)
        if self._book.can_send():
            self._wake.set()
        return entry

    async def send(self, blob: bytes, count: int) -> Acked:
        """``submit`` and wait: the ack of the frame that carried ``blob`` and where its
        records start in it. A caller cancelled (a timeout) takes its entry back when it
        was not sent yet; one already sent gets its outcome read for nobody."""
        entry = self.submit(blob, count)
        try:
            return await asyncio.shield(entry.future)
        except asyncio.CancelledError:
            if not self.withdraw(entry):
                entry.future.add_done_callback(read_outcome)
            raise

    def withdraw(self, entry: Entry) -> bool:
        """Take back an entry not yet sent (a caller that gave up): True if it was."""
        return self._book.withdraw(entry)

    async def close(self, reason: TxmqError | None = None) -> None:
        self._fail(reason or closed_error())
        self._call.cancel()
        for task in (self._writer, self._reader):
            task.cancel()
        await asyncio.gather(self._writer, self._reader, return_exceptions=True)

    async def _write_frames(self) -> None:
        book = self._book
        linger_s = book.settings.linger_ms / 1000
        try:
            while True:
                while book.failed is None and not book.can_send():
                    self._wake.clear()
                    await self._wake.wait()
                if book.failed is not None:
                    return
                if linger_s > 0 and not await self._linger(linger_s):
                    continue
                sequence, blob = book.take()
                self.frames += 1
                await self._call.write(
                    store_pb2.RecordFrame(
                        sequence=sequence,
                        records=blob,
                        producer_group=self._group,
                        transaction_prepared=self._prepared,
                    )
                )
        except (grpc.RpcError, asyncio.InvalidStateError):
            # The call ended: the reader fails the pipe with the call's own status (a
            # failed write only says "Internal error from Core").
            return

    async def _linger(self, linger_s: float) -> bool:
        """Let others join until the frame is full or ``linger_s`` is up; whether a
        frame can still go."""
        book = self._book
        deadline = time.monotonic() + linger_s
        while book.failed is None and not book.full() and (left := deadline - time.monotonic()) > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)
        return book.can_send()

    async def _read_acks(self) -> None:
        try:
            while True:
                ack = await self._call.read()
                if ack is grpc.aio.EOF:
                    err: TxmqError = UnavailableError("the store ended the send stream")
                    break
                outcomes = self._book.answer(ack)
                if self._book.can_send():  # room for another frame, and entries waiting
                    self._wake.set()
                _settle(outcomes)
        except grpc.RpcError as exc:
            err = TxmqError.from_rpc_error(exc)
        except TxmqError as exc:
            err = exc
        self._fail(err)

    def _fail(self, err: TxmqError) -> None:
        outcomes = self._book.fail(err)
        self._wake.set()
        _settle(outcomes)


def read_outcome(future: asyncio.Future[Acked]) -> None:
    """Read the outcome of an entry its caller gave up on (asyncio logs an exception
    nobody read)."""
    if not future.cancelled():
        future.exception()
