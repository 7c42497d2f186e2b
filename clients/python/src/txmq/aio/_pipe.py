"""The send stream for asyncio: ``txmq.pipe.FrameBook`` (the coalescing the threaded
``SendPipe`` does) driven by two tasks on one ``Store.SendStream`` of ``grpc.aio``: one
writes a frame of everything waiting whenever the stream can take one, one reads the
acks and settles each entry's future."""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc

from txmq.errors import TxmqError, UnavailableError
from txmq.pipe import Entry, FrameBook, PipeSettings, _settle, closed_error
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
        except grpc.RpcError as exc:
            self._fail(TxmqError.from_rpc_error(exc))
        except asyncio.InvalidStateError:  # the call ended: the reader says why
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
