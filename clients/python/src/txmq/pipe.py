"""Coalesced sends to a store (Kafka's record accumulator): one mechanism, two drivers of
frames on one ``Store.SendStream`` per store — ``SendPipe`` for the SDK's threads, and
``txmq.aio.pipe.AsyncSendPipe`` for asyncio (the asyncio SDK and the RocketMQ gateway).

Callers ``submit`` an entry — one message, or one batch that must be stored all or
nothing — already encoded in the commit-log layout (``txmq.records``). When the stream
can take another frame, *everything* waiting goes into it: nothing waits when nothing is
in flight (``linger_ms`` 0), and the more senders are waiting, the larger the frames.
``FrameBook`` holds that state and decides, the same for both drivers; each entry keeps
its own result and error:

* an ack answers every entry of its frame (offsets sliced per entry);
* a frame refused because of one record (``metadata.index``) fails that record's entry
  (its index made relative to the entry) and puts the others back at the head of the
  queue: the store stored nothing of the frame, so they go again in the next one;
* a frame refused as a whole fails each of its entries with that error;
* a broken stream fails everything in flight and waiting (the error says whether a retry
  may help; a new pipe is opened for the retry).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from txmq.errors import TxmqError, UnavailableError
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc

#: What an entry's future gets: the ack of its frame and where its records start in it.
Acked = tuple[store_pb2.RecordAck, int]


class Outcome:
    """What a thread waits for: set once (a result or an exception), then read by
    ``result(timeout)``, raising ``TimeoutError`` when it is not set in time. A held lock
    released once set: waiting and waking cost one C-level lock operation each, where a
    ``concurrent.futures.Future`` runs a Python ``Condition`` (a new lock per wait)."""

    __slots__ = ("_error", "_unset", "_value")

    def __init__(self) -> None:
        self._unset = threading.Lock()
        self._unset.acquire()
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return not self._unset.locked()

    def set_result(self, value: Any) -> None:
        self._value = value
        self._unset.release()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._unset.release()

    def result(self, timeout: float | None = None) -> Any:
        if not self._unset.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError
        self._unset.release()  # readable again, by anyone
        if self._error is not None:
            raise self._error
        return self._value


@dataclass(slots=True, eq=False)
class Entry:
    """What one caller sends: ``count`` records back to back in ``blob``. ``future`` is an
    ``Outcome`` (threads) or an ``asyncio.Future`` (asyncio)."""

    blob: bytes
    count: int
    future: Any = field(default_factory=Outcome)
    queued: bool = True  # not yet taken into a frame


@dataclass(frozen=True, slots=True)
class PipeSettings:
    linger_ms: float = 0.0
    max_frame_bytes: int = 64 * 1024
    max_in_flight_frames: int = 4


class FrameBook:
    """Entries waiting, frames in flight, and what an ack means for them. Not locked:
    its driver serialises the calls (a lock, or the event loop)."""

    def __init__(self, settings: PipeSettings) -> None:
        self.settings = settings
        self.pending: deque[Entry] = deque()
        self.in_flight: deque[tuple[int, list[Entry]]] = deque()
        self.sequence = 0
        self.failed: TxmqError | None = None

    def add(self, entry: Entry) -> None:
        if self.failed is not None:
            raise _copy(self.failed)
        self.pending.append(entry)

    def withdraw(self, entry: Entry) -> bool:
        if entry.queued:
            self.pending.remove(entry)
            entry.queued = False
            return True
        return False

    def can_send(self) -> bool:
        return self.failed is None and bool(self.pending) and len(self.in_flight) < self.settings.max_in_flight_frames

    def full(self) -> bool:
        """The waiting entries fill a frame (a lingering frame goes at once)."""
        return sum(len(e.blob) for e in self.pending) >= self.settings.max_frame_bytes

    def take(self) -> tuple[int, bytes]:
        """The next frame, its sequence and records: waiting entries up to
        ``max_frame_bytes`` (at least one)."""
        cap = self.settings.max_frame_bytes
        entries: list[Entry] = []
        size = 0
        pending = self.pending
        while pending and (not entries or size + len(pending[0].blob) <= cap):
            entry = pending.popleft()
            entry.queued = False
            entries.append(entry)
            size += len(entry.blob)
        self.sequence += 1
        self.in_flight.append((self.sequence, entries))
        blob = entries[0].blob if len(entries) == 1 else b"".join(e.blob for e in entries)
        return self.sequence, blob

    def answer(self, ack: store_pb2.RecordAck) -> list[tuple[Entry, Acked | TxmqError]]:
        """The outcomes the ack of a frame in flight decides; entries that must go again
        are back at the head of the queue. Raises UnavailableError for an ack of no frame
        in flight (the stream is then broken)."""
        entries = self._pop(ack.sequence)
        if entries is None:
            raise UnavailableError(f"send stream: ack {ack.sequence} for no frame in flight")
        out: list[tuple[Entry, Acked | TxmqError]] = []
        if not ack.HasField("error"):
            start = 0
            for entry in entries:
                out.append((entry, (ack, start)))
                start += entry.count
            return out
        index = ack.error.metadata.get("index", "")
        if not index.isdigit():
            return [(entry, TxmqError.from_detail(ack.error)) for entry in entries]
        # One record is to blame: its entry fails, the others go again (nothing was stored).
        at = int(index)
        again: list[Entry] = []
        for entry in entries:
            if 0 <= at < entry.count:
                err = TxmqError.from_detail(ack.error)
                err.metadata["index"] = str(at)
                out.append((entry, err))
            else:
                again.append(entry)
            at -= entry.count
        if self.failed is not None:
            out += [(entry, _copy(self.failed)) for entry in again]
        else:
            for entry in reversed(again):
                entry.queued = True
                self.pending.appendleft(entry)
        return out

    def _pop(self, sequence: int) -> list[Entry] | None:
        in_flight = self.in_flight
        if in_flight and in_flight[0][0] == sequence:  # a stream's acks come in order
            return in_flight.popleft()[1]
        for i, (seq, entries) in enumerate(in_flight):
            if seq == sequence:
                del in_flight[i]
                return entries
        return None

    def fail_frame(self, sequence: int, err: TxmqError) -> list[tuple[Entry, TxmqError]]:
        """A frame whose call failed (nothing else is broken): its entries fail."""
        return [(entry, _copy(err)) for entry in self._pop(sequence) or ()]

    def fail(self, err: TxmqError) -> list[tuple[Entry, TxmqError]]:
        """Stop: every entry in flight or waiting fails with (a copy of) ``err``."""
        if self.failed is None:
            self.failed = err
        waiting = [e for _, entries in self.in_flight for e in entries] + list(self.pending)
        self.in_flight.clear()
        self.pending.clear()
        for entry in waiting:
            entry.queued = False
        return [(entry, _copy(err)) for entry in waiting]


def closed_error() -> UnavailableError:
    return UnavailableError("the producer was shut down", code=errors_pb2.CODE_UNAVAILABLE)


class SendPipe:
    """One open SendStream to one store, for threads (grpc's sync API). Thread-safe.
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
        self._cond = threading.Condition()
        self._book = FrameBook(settings)
        self._call = stub.SendStream(self._frames())
        self._reader = threading.Thread(target=self._read_acks, name="txmq-send-acks", daemon=True)
        self._reader.start()

    @property
    def failed(self) -> TxmqError | None:
        """Why the pipe stopped (then a new one is needed), or None while it works."""
        return self._book.failed

    def submit(self, blob: bytes, count: int) -> Entry:
        entry = Entry(blob, count)
        with self._cond:
            self._book.add(entry)
            # The frames thread waits until a frame can go: wake it only then (an ack
            # that frees room wakes it otherwise), each wake-up is a thread switch.
            if self._book.can_send():
                self._cond.notify_all()
        return entry

    def withdraw(self, entry: Entry) -> bool:
        """Take back an entry not yet sent (a caller that gave up): True if it was."""
        with self._cond:
            return self._book.withdraw(entry)

    def close(self, reason: TxmqError | None = None) -> None:
        self._fail(reason or closed_error())
        self._call.cancel()

    # -- the stream's two sides ----------------------------------------------------------

    def _frames(self) -> Iterator[store_pb2.RecordFrame]:
        """Run by gRPC's request thread: the next frame from everything waiting."""
        book, cond = self._book, self._cond
        linger_s = book.settings.linger_ms / 1000
        while True:
            with cond:
                while book.failed is None and not book.can_send():
                    cond.wait()
                if book.failed is not None:
                    return
                if linger_s > 0:  # others may join until the frame is full or the time is up
                    deadline = time.monotonic() + linger_s
                    while book.failed is None and not book.full() and (left := deadline - time.monotonic()) > 0:
                        cond.wait(left)
                    if not book.can_send():
                        if book.failed is not None:
                            return
                        continue
                sequence, blob = book.take()
            yield store_pb2.RecordFrame(
                sequence=sequence, records=blob, producer_group=self._group, transaction_prepared=self._prepared
            )

    def _read_acks(self) -> None:
        try:
            for ack in self._call:
                with self._cond:
                    outcomes = self._book.answer(ack)
                    if self._book.can_send():  # room for another frame, and entries waiting
                        self._cond.notify_all()
                _settle(outcomes)
            err: TxmqError = UnavailableError("the store ended the send stream")
        except grpc.RpcError as exc:
            err = TxmqError.from_rpc_error(exc)
        except TxmqError as exc:
            err = exc
        self._fail(err)

    def _fail(self, err: TxmqError) -> None:
        with self._cond:
            outcomes = self._book.fail(err)
            self._cond.notify_all()
        _settle(outcomes)


def _settle(outcomes: list[tuple[Entry, Acked | TxmqError]] | list[tuple[Entry, TxmqError]]) -> None:
    for entry, outcome in outcomes:
        future = entry.future
        if future.done():
            continue
        if isinstance(outcome, TxmqError):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _copy(err: TxmqError) -> TxmqError:
    """One error object per caller: each raises it in its own thread."""
    made = type(err)(err.message, code=err.code, retriable=err.retriable, metadata=dict(err.metadata))
    made.transport = err.transport
    return made
