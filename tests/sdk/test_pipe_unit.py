"""The SDK's send pipe (txmq.pipe) against a scripted SendStream: which entries share a
frame, what happens to the others when one record is refused, a broken stream, a
caller that gives up. The store side of SendStream is tested for real in
tests/store/test_packed.py and through the Producer in test_send_stream_it.py."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest

from txmq.errors import BadRequestError, NotImplementedYetError, TxmqError, UnavailableError
from txmq.pipe import Entry, Outcome, PipeSettings, SendPipe
from txmq.v1 import errors_pb2, store_pb2

WAIT_S = 10


def ok_ack(frame: store_pb2.RecordFrame, n: int, *, first_offset: int = 0) -> store_pb2.RecordAck:
    """The store's ack of ``frame`` holding ``n`` records, stored from ``first_offset``."""
    return store_pb2.RecordAck(
        sequence=frame.sequence,
        status=store_pb2.SEND_STATUS_OK,
        commit_log_offsets=[first_offset + 100 * i for i in range(n)],
        queue_offsets=list(range(n)),
        queue_ids=[0] * n,
        offset_msg_id_prefix="P",
        store_id="s",
    )


class ScriptedCall:
    """What grpc's sync stream-stream call gives: an iterator of acks, ``cancel()``. The
    request iterator is drained on a thread of its own, as gRPC does."""

    def __init__(self, requests: Iterator[store_pb2.RecordFrame]) -> None:
        self.frames: queue.Queue[store_pb2.RecordFrame] = queue.Queue()
        self._acks: queue.Queue[store_pb2.RecordAck | BaseException | None] = queue.Queue()
        self.cancelled = threading.Event()
        threading.Thread(target=lambda: [self.frames.put(f) for f in requests], daemon=True).start()

    def next_frame(self) -> store_pb2.RecordFrame:
        return self.frames.get(timeout=WAIT_S)

    def ack(self, frame: store_pb2.RecordFrame, n: int, *, first_offset: int = 0) -> None:
        self._acks.put(ok_ack(frame, n, first_offset=first_offset))

    def refuse(self, frame: store_pb2.RecordFrame, err: TxmqError) -> None:
        self._acks.put(store_pb2.RecordAck(sequence=frame.sequence, error=err.to_detail()))

    def break_with(self, exc: BaseException) -> None:
        self._acks.put(exc)

    def cancel(self) -> None:
        self.cancelled.set()
        self._acks.put(None)

    def __iter__(self) -> Iterator[store_pb2.RecordAck]:
        while (item := self._acks.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item


class ScriptedStub:
    def __init__(self) -> None:
        self.calls: list[ScriptedCall] = []

    def SendStream(self, requests: Iterator[store_pb2.RecordFrame]) -> ScriptedCall:
        call = ScriptedCall(requests)
        self.calls.append(call)
        return call


class RpcFailure(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._code.name

    def trailing_metadata(self) -> tuple[()]:
        return ()


def raised(entry: Entry) -> TxmqError:
    with pytest.raises(TxmqError) as info:
        entry.future.result(WAIT_S)
    return info.value


def pipe(stub: ScriptedStub, **settings: object) -> SendPipe:
    return SendPipe(stub, producer_group="g", settings=PipeSettings(**settings))  # type: ignore[arg-type]


def test_an_outcome_is_set_once_and_read_by_any_thread() -> None:
    waiting = Outcome()
    assert not waiting.done()
    with pytest.raises(TimeoutError):
        waiting.result(0.01)
    with pytest.raises(TimeoutError):
        waiting.result(-1.0)  # a deadline already past: no wait, as a Future
    threading.Timer(0.05, waiting.set_result, [("acked", 0)]).start()
    assert waiting.result(WAIT_S) == ("acked", 0)
    assert waiting.done() and waiting.result(0) == ("acked", 0)  # read again
    failed = Outcome()
    failed.set_exception(UnavailableError("gone"))
    for _ in range(2):
        with pytest.raises(UnavailableError):
            failed.result(0)


def test_waiting_entries_share_the_next_frame_in_order() -> None:
    stub = ScriptedStub()
    p = pipe(stub, max_in_flight_frames=1)
    call = stub.calls[0]
    a = p.submit(b"a", 1)
    first = call.next_frame()
    assert (first.records, first.sequence, first.producer_group) == (b"a", 1, "g")
    b, c, d = p.submit(b"bb", 2), p.submit(b"c", 1), p.submit(b"d", 1)  # frame 1 is in flight: they wait
    assert call.frames.empty()
    call.ack(first, 1)
    assert a.future.result(WAIT_S)[1] == 0
    second = call.next_frame()
    assert (second.records, second.sequence) == (b"bbcd", 2)
    call.ack(second, 4)
    assert [e.future.result(WAIT_S)[1] for e in (b, c, d)] == [0, 2, 3]  # where each one's records start
    assert b.future.result(WAIT_S)[0] is c.future.result(WAIT_S)[0]


def test_a_frame_holds_at_most_max_frame_bytes_unless_one_entry_is_larger() -> None:
    stub = ScriptedStub()
    p = pipe(stub, max_in_flight_frames=1, max_frame_bytes=4)
    call = stub.calls[0]
    p.submit(b"x", 1)
    first = call.next_frame()
    p.submit(b"123456", 1), p.submit(b"ab", 1), p.submit(b"cd", 1), p.submit(b"e", 1)
    call.ack(first, 1)
    second = call.next_frame()
    call.ack(second, 1)
    third = call.next_frame()
    call.ack(third, 2)
    assert [f.records for f in (second, third, call.next_frame())] == [b"123456", b"abcd", b"e"]


def test_the_entry_of_a_refused_record_fails_the_others_go_again() -> None:
    stub = ScriptedStub()
    p = pipe(stub, max_in_flight_frames=1)
    call = stub.calls[0]
    p.submit(b"0", 1)
    first = call.next_frame()
    a, bad_batch, c = p.submit(b"a", 1), p.submit(b"xyz", 3), p.submit(b"c", 1)
    call.ack(first, 1)
    shared = call.next_frame()
    assert shared.records == b"axyzc"
    call.refuse(shared, BadRequestError("reserved", code=errors_pb2.CODE_ILLEGAL_MESSAGE, metadata={"index": "2"}))
    with pytest.raises(BadRequestError) as info:
        bad_batch.future.result(WAIT_S)
    assert info.value.metadata["index"] == "1"  # record 2 of the frame is record 1 of its batch
    again = call.next_frame()
    assert again.records == b"ac"  # nothing of the refused frame was stored: the others go again
    call.ack(again, 2)
    assert [a.future.result(WAIT_S)[1], c.future.result(WAIT_S)[1]] == [0, 1]


def test_a_frame_refused_as_a_whole_fails_each_entry() -> None:
    stub = ScriptedStub()
    p = pipe(stub, max_in_flight_frames=1)
    call = stub.calls[0]
    p.submit(b"0", 1)
    first = call.next_frame()
    a, b = p.submit(b"a", 1), p.submit(b"b", 1)
    call.ack(first, 1)
    shared = call.next_frame()
    call.refuse(shared, UnavailableError("disk full", code=errors_pb2.CODE_DISK_FULL))
    errors = [raised(e) for e in (a, b)]
    assert [e.code for e in errors] == [errors_pb2.CODE_DISK_FULL] * 2 and errors[0] is not errors[1]
    assert p.failed is None  # the stream goes on
    p.submit(b"n", 1)
    assert call.next_frame().records == b"n"


def test_a_broken_stream_fails_what_is_in_flight_and_waiting() -> None:
    stub = ScriptedStub()
    p = pipe(stub, max_in_flight_frames=1)
    call = stub.calls[0]
    in_flight = p.submit(b"a", 1)
    call.next_frame()
    waiting = p.submit(b"b", 1)
    call.break_with(RpcFailure(grpc.StatusCode.UNAVAILABLE))
    for entry in (in_flight, waiting):
        err = raised(entry)
        assert isinstance(err, UnavailableError) and err.retriable and err.transport
    assert isinstance(p.failed, UnavailableError)
    with pytest.raises(UnavailableError):
        p.submit(b"c", 1)


def test_a_store_without_send_stream_answers_unimplemented() -> None:
    stub = ScriptedStub()
    p = pipe(stub)
    entry = p.submit(b"a", 1)
    stub.calls[0].break_with(RpcFailure(grpc.StatusCode.UNIMPLEMENTED))
    err = raised(entry)
    assert (
        isinstance(err, NotImplementedYetError) and err.transport
    )  # the producer then sends unary calls to that store


def test_a_caller_that_gives_up_withdraws_what_was_not_sent() -> None:
    stub = ScriptedStub()
    p = pipe(stub, max_in_flight_frames=1)
    call = stub.calls[0]
    sent = p.submit(b"a", 1)
    first = call.next_frame()
    gave_up = p.submit(b"b", 1)
    kept = p.submit(b"c", 1)
    assert p.withdraw(gave_up) and not p.withdraw(sent)
    call.ack(first, 1)
    assert call.next_frame().records == b"c"
    assert not gave_up.future.done() and not kept.future.done()


def test_linger_lets_later_sends_join_the_first_frame() -> None:
    stub = ScriptedStub()
    p = pipe(stub, linger_ms=60_000, max_frame_bytes=3)
    call = stub.calls[0]
    p.submit(b"a", 1), p.submit(b"b", 1)
    assert call.frames.empty()  # lingering: under max_frame_bytes
    p.submit(b"c", 1)  # the frame is full: it goes at once
    assert call.next_frame().records == b"abc"


def test_close_fails_waiting_entries_and_cancels_the_call() -> None:
    stub = ScriptedStub()
    p = pipe(stub, max_in_flight_frames=1)
    call = stub.calls[0]
    p.submit(b"a", 1)
    call.next_frame()
    waiting = p.submit(b"b", 1)
    p.close()
    assert call.cancelled.is_set()
    err = raised(waiting)
    assert isinstance(err, UnavailableError) and "shut down" in str(err)
