"""txmq.aio.pipe against a scripted grpc.aio SendStream call (``write`` / ``read``):
waiting entries share frames, a refused record fails only its entry, a broken stream
fails everything, a caller that gives up takes back what was not sent."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from txmq.aio.pipe import AsyncSendPipe
from txmq.errors import BadRequestError, TxmqError, UnavailableError
from txmq.pipe import PipeSettings
from txmq.v1 import errors_pb2, store_pb2


def ok_ack(frame: store_pb2.RecordFrame, n: int) -> store_pb2.RecordAck:
    return store_pb2.RecordAck(
        sequence=frame.sequence,
        status=store_pb2.SEND_STATUS_OK,
        commit_log_offsets=[100 * i for i in range(n)],
        queue_offsets=list(range(n)),
        queue_ids=[0] * n,
        offset_msg_id_prefix="P",
        store_id="s",
    )


class ScriptedCall:
    """grpc.aio's stream-stream call without a request iterator: ``write`` frames,
    ``read`` acks (EOF at the end), ``cancel``."""

    def __init__(self) -> None:
        self.frames: asyncio.Queue[store_pb2.RecordFrame] = asyncio.Queue()
        self.acks: asyncio.Queue[object] = asyncio.Queue()
        self.cancelled = False

    async def write(self, frame: store_pb2.RecordFrame) -> None:
        self.frames.put_nowait(frame)

    async def read(self) -> object:
        item = await self.acks.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        self.cancelled = True
        self.acks.put_nowait(grpc.aio.EOF)
        return True


class ScriptedStub:
    def __init__(self) -> None:
        self.call = ScriptedCall()

    def SendStream(self) -> ScriptedCall:
        return self.call


def new_pipe(**settings: object) -> tuple[AsyncSendPipe, ScriptedCall]:
    stub = ScriptedStub()
    return AsyncSendPipe(stub, producer_group="g", settings=PipeSettings(**settings)), stub.call  # type: ignore[arg-type]


async def test_entries_waiting_share_the_next_frame() -> None:
    pipe, call = new_pipe(max_in_flight_frames=1)
    first = pipe.submit(b"a", 1)
    frame = await call.frames.get()
    assert frame.records == b"a" and frame.producer_group == "g"
    later = [pipe.submit(b"%d" % i, 1) for i in range(5)]  # behind the one frame in flight
    call.acks.put_nowait(ok_ack(frame, 1))
    assert (await first.future)[1] == 0
    second = await call.frames.get()
    assert second.records == b"01234" and pipe.frames == 2
    call.acks.put_nowait(ok_ack(second, 5))
    assert [(await e.future)[1] for e in later] == [0, 1, 2, 3, 4]  # each its place in the ack
    await pipe.close()


async def test_a_refused_record_fails_its_entry_and_the_others_go_again() -> None:
    pipe, call = new_pipe(max_in_flight_frames=1)
    blocker = pipe.submit(b"x", 1)
    held = await call.frames.get()
    good, bad = pipe.submit(b"g", 1), pipe.submit(b"bb", 2)
    call.acks.put_nowait(ok_ack(held, 1))
    await blocker.future
    frame = await call.frames.get()
    refusal = BadRequestError("bad record", code=errors_pb2.CODE_ILLEGAL_MESSAGE, metadata={"index": "2"})
    call.acks.put_nowait(store_pb2.RecordAck(sequence=frame.sequence, error=refusal.to_detail()))
    with pytest.raises(BadRequestError) as info:
        await bad.future
    assert info.value.metadata["index"] == "1"  # relative to its entry
    again = await call.frames.get()
    assert again.records == b"g"
    call.acks.put_nowait(ok_ack(again, 1))
    await good.future
    await pipe.close()


async def test_a_broken_stream_fails_everything_and_the_pipe() -> None:
    pipe, call = new_pipe(max_in_flight_frames=1)
    sent = pipe.submit(b"a", 1)
    await call.frames.get()
    waiting = pipe.submit(b"b", 1)
    broken = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone")
    call.acks.put_nowait(broken)
    for entry in (sent, waiting):
        with pytest.raises(TxmqError) as info:
            await entry.future
        assert info.value.retriable
    assert pipe.failed is not None
    with pytest.raises(TxmqError):
        pipe.submit(b"c", 1)
    await pipe.close()


async def test_a_caller_that_gives_up_takes_back_what_was_not_sent() -> None:
    pipe, call = new_pipe(max_in_flight_frames=1)
    pipe.submit(b"a", 1)
    frame = await call.frames.get()
    gone, kept = pipe.submit(b"b", 1), pipe.submit(b"c", 1)
    assert pipe.withdraw(gone) and not pipe.withdraw(gone)
    call.acks.put_nowait(ok_ack(frame, 1))
    assert (await call.frames.get()).records == b"c"
    assert not kept.future.done()
    await pipe.close()
    with pytest.raises(UnavailableError):
        await kept.future
    assert call.cancelled
