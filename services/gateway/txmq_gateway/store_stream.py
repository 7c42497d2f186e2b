"""The gateway's coalesced sends to a store: txmq.pipe's ``FrameBook`` (the SDK's
accumulator) driven by asyncio over one open ``Store.SendStream``.

Why a stream: a unary ``SendRecords`` per frame cost the gateway ~370-430 µs of CPU per
frame in gRPC's call machinery (a new HTTP/2 stream, metadata and trailers each way);
a frame written on an open stream and its ack read back cost ~200 µs (sequential frames
of one 256 B record to a local store, client CPU). The sends that arrive while a frame is
in flight share the next one, as before.

Each entry keeps its own outcome (``FrameBook``): an ack answers its frame's entries, a
record the store refuses fails its own entry only, a broken stream fails everything in
flight and waiting, and the pipe is then replaced by the caller (``failed``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from txmq.errors import TxmqError, UnavailableError
from txmq.pipe import Acked, Entry, FrameBook, PipeSettings, closed_error
from txmq.v1 import store_pb2


class StreamPipe:
    """One ``SendStream`` to one store for one kind of frame: normal records, or half
    messages of one producer group (``prepared``). Opened on first use, from a running
    event loop."""

    def __init__(self, stub: Any, *, producer_group: str, prepared: bool, settings: PipeSettings) -> None:
        self._group = producer_group
        self._prepared = prepared
        self._book = FrameBook(settings)
        self._call = stub.SendStream()
        self._writer: asyncio.Task[None] | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read_acks())

    @property
    def failed(self) -> TxmqError | None:
        """Why the pipe stopped (then a new one is needed), or None while it works."""
        return self._book.failed

    async def submit(self, blob: bytes, count: int) -> Acked:
        """The ack of the frame that carried ``blob`` and where its records start in it."""
        entry = Entry(blob, count, asyncio.get_running_loop().create_future())
        self._book.add(entry)
        self._write_what_can_go()
        try:
            return await asyncio.shield(entry.future)
        except asyncio.CancelledError:
            if not self._book.withdraw(entry):  # sent: its outcome comes, for nobody
                entry.future.add_done_callback(_retrieved)
            raise

    def _write_what_can_go(self) -> None:
        # One writer at a time: gRPC takes one write on a stream at once.
        if self._writer is None and self._book.can_send():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        book = self._book
        try:
            while book.can_send():
                sequence, blob = book.take()
                await self._call.write(
                    store_pb2.RecordFrame(
                        sequence=sequence, records=blob, producer_group=self._group, transaction_prepared=self._prepared
                    )
                )
        except (grpc.RpcError, asyncio.InvalidStateError):
            # The call ended: the reader fails the pipe with the call's own status (a
            # failed write only says "Internal error from Core"); a caller that waits
            # for ever meets its timeout, which closes the pipe.
            pass
        finally:
            self._writer = None

    async def _read_acks(self) -> None:
        try:
            while True:
                ack = await self._call.read()
                if ack is grpc.aio.EOF:
                    err: TxmqError = UnavailableError("the store ended the send stream")
                    break
                _settle(self._book.answer(ack))
                self._write_what_can_go()  # room for another frame, or entries back in line
        except grpc.RpcError as exc:
            err = TxmqError.from_rpc_error(exc)
        except TxmqError as exc:
            err = exc
        except asyncio.CancelledError:
            self._fail(closed_error())
            raise
        self._fail(err)

    def _fail(self, err: TxmqError) -> None:
        _settle(self._book.fail(err))
        self._call.cancel()

    async def close(self, reason: TxmqError | None = None) -> None:
        """Fail whatever is in flight or waiting (with ``reason``) and end the stream."""
        self._fail(reason or closed_error())
        tasks = [t for t in (self._reader, self._writer) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _settle(outcomes: list[tuple[Entry, Acked | TxmqError]] | list[tuple[Entry, TxmqError]]) -> None:
    for entry, outcome in outcomes:
        if entry.future.done():
            continue
        if isinstance(outcome, TxmqError):
            entry.future.set_exception(outcome)
        else:
            entry.future.set_result(outcome)


def _retrieved(future: asyncio.Future[Acked]) -> None:
    """Read the outcome of an entry its caller gave up on (asyncio logs an exception
    nobody read)."""
    if not future.cancelled():
        future.exception()
