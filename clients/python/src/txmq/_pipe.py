"""Coalesced sends over one ``Store.SendStream`` per store (Kafka's record accumulator).

Callers (any number of threads) ``submit`` an entry — one message, or one batch that
must be stored all or nothing — already encoded in the commit-log layout
(``txmq.records``). The stream's request iterator, which gRPC runs on its own thread,
takes *everything* waiting when it can send the next frame: nothing waits when nothing is
in flight (``linger_ms`` 0), and the more senders are waiting, the larger the frames.
Each entry keeps its own result and error:

* an ack answers every entry of its frame (offsets sliced per entry);
* a frame refused because of one record (``metadata.index``) fails that record's entry
  (its index made relative to the entry) and puts the others back at the head of the
  queue: the store stored nothing of the frame, so they go again in the next one;
* a frame refused as a whole fails each of its entries with that error;
* a broken stream fails everything in flight and waiting (the error says whether a retry
  may help; the producer's retry loop opens a new pipe).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import grpc

from txmq.errors import TxmqError, UnavailableError
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc

log = logging.getLogger("txmq.producer")


@dataclass(slots=True, eq=False)
class Entry:
    """What one caller sends: ``count`` records back to back in ``blob``."""

    blob: bytes
    count: int
    future: Future[tuple[store_pb2.RecordAck, int]] = field(default_factory=Future)
    queued: bool = True  # not yet taken into a frame


@dataclass(frozen=True, slots=True)
class PipeSettings:
    linger_ms: float = 0.0
    max_frame_bytes: int = 64 * 1024
    max_in_flight_frames: int = 4


class SendPipe:
    """One open SendStream to one store. Thread-safe."""

    def __init__(self, stub: store_pb2_grpc.StoreStub, *, producer_group: str, settings: PipeSettings) -> None:
        self._group = producer_group
        self._settings = settings
        self._cond = threading.Condition()
        self._pending: deque[Entry] = deque()
        self._in_flight: deque[tuple[int, list[Entry]]] = deque()
        self._sequence = 0
        self._failed: TxmqError | None = None
        self._call = stub.SendStream(self._frames())
        self._reader = threading.Thread(target=self._read_acks, name="txmq-send-acks", daemon=True)
        self._reader.start()

    @property
    def failed(self) -> TxmqError | None:
        """Why the pipe stopped (then a new one is needed), or None while it works."""
        return self._failed

    def submit(self, blob: bytes, count: int) -> Entry:
        entry = Entry(blob, count)
        with self._cond:
            if self._failed is not None:
                raise self._failed
            self._pending.append(entry)
            self._cond.notify_all()
        return entry

    def withdraw(self, entry: Entry) -> bool:
        """Take back an entry not yet sent (a caller that gave up): True if it was."""
        with self._cond:
            if entry.queued:
                self._pending.remove(entry)
                entry.queued = False
                return True
        return False

    def close(self, reason: TxmqError | None = None) -> None:
        self._fail(reason or UnavailableError("the producer was shut down", code=errors_pb2.CODE_UNAVAILABLE))
        self._call.cancel()

    # -- the stream's two sides ----------------------------------------------------------

    def _frames(self) -> Iterator[store_pb2.RecordFrame]:
        """Run by gRPC's request thread: the next frame from everything waiting."""
        s = self._settings
        cond = self._cond
        while True:
            with cond:
                while self._failed is None and (not self._pending or len(self._in_flight) >= s.max_in_flight_frames):
                    cond.wait()
                if self._failed is not None:
                    return
                if s.linger_ms > 0:  # others may join until the frame is full or the time is up
                    deadline = time.monotonic() + s.linger_ms / 1000
                    while (
                        self._failed is None
                        and sum(len(e.blob) for e in self._pending) < s.max_frame_bytes
                        and (left := deadline - time.monotonic()) > 0
                    ):
                        cond.wait(left)
                    if self._failed is not None:
                        return
                    if not self._pending:
                        continue
                entries: list[Entry] = []
                size = 0
                while self._pending and (not entries or size + len(self._pending[0].blob) <= s.max_frame_bytes):
                    entry = self._pending.popleft()
                    entry.queued = False
                    entries.append(entry)
                    size += len(entry.blob)
                self._sequence += 1
                sequence = self._sequence
                self._in_flight.append((sequence, entries))
            blob = entries[0].blob if len(entries) == 1 else b"".join(e.blob for e in entries)
            yield store_pb2.RecordFrame(sequence=sequence, records=blob, producer_group=self._group)

    def _read_acks(self) -> None:
        try:
            for ack in self._call:
                with self._cond:
                    sequence, entries = self._in_flight.popleft()
                    self._cond.notify_all()  # room for another frame
                if ack.sequence != sequence:
                    raise UnavailableError(f"send stream out of order: ack {ack.sequence} for frame {sequence}")
                self._answer(entries, ack)
            err: TxmqError = UnavailableError("the store ended the send stream")
        except grpc.RpcError as exc:
            err = TxmqError.from_rpc_error(exc)
        except TxmqError as exc:
            err = exc
        self._fail(err)

    def _answer(self, entries: list[Entry], ack: store_pb2.RecordAck) -> None:
        if not ack.HasField("error"):
            start = 0
            for entry in entries:
                entry.future.set_result((ack, start))
                start += entry.count
            return
        index = ack.error.metadata.get("index", "")
        if not index.isdigit():
            for entry in entries:
                entry.future.set_exception(TxmqError.from_detail(ack.error))
            return
        # One record is to blame: its entry fails, the others go again (nothing was stored).
        at = int(index)
        again: list[Entry] = []
        for entry in entries:
            if 0 <= at < entry.count:
                err = TxmqError.from_detail(ack.error)
                err.metadata["index"] = str(at)
                entry.future.set_exception(err)
            else:
                again.append(entry)
            at -= entry.count
        with self._cond:
            if self._failed is None:
                for entry in reversed(again):
                    entry.queued = True
                    self._pending.appendleft(entry)
                self._cond.notify_all()
                return
            failed = self._failed
        for entry in again:
            entry.future.set_exception(_copy(failed))

    def _fail(self, err: TxmqError) -> None:
        with self._cond:
            if self._failed is None:
                self._failed = err
            waiting = [e for _, entries in self._in_flight for e in entries] + list(self._pending)
            self._in_flight.clear()
            self._pending.clear()
            self._cond.notify_all()
        for entry in waiting:
            entry.queued = False
            if not entry.future.done():
                entry.future.set_exception(_copy(err))


def _copy(err: TxmqError) -> TxmqError:
    """One error object per caller: each raises it in its own thread."""
    made = type(err)(err.message, code=err.code, retriable=err.retriable, metadata=dict(err.metadata))
    made.transport = err.transport
    return made
