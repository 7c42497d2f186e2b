"""The gateway's coalesced sends on the store's SendStream (``txmq.aio.pipe.AsyncSendPipe``
driven by ``Backend.send_normal`` / ``Backend.send(prepared=True)``), against a scripted
stream."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from txmq.aio.pipe import AsyncSendPipe
from txmq.errors import TxmqError, error
from txmq.pipe import PipeSettings
from txmq.v1 import common_pb2, errors_pb2, store_pb2
from txmq_gateway.backend import Backend


class _Stream:
    """A SendStream call whose acks the test hands out (``ack``), or ends (``end``)."""

    def __init__(self) -> None:
        self.frames: list[store_pb2.RecordFrame] = []
        self._acks: asyncio.Queue[store_pb2.RecordAck | BaseException] = asyncio.Queue()
        self.cancelled = False

    def SendStream(self) -> _Stream:
        return self

    async def write(self, frame: store_pb2.RecordFrame) -> None:
        self.frames.append(frame)

    async def read(self) -> store_pb2.RecordAck:
        item = await self._acks.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    def ack(self, **fields: object) -> None:
        self._acks.put_nowait(store_pb2.RecordAck(**fields))  # type: ignore[arg-type]

    def end(self, exc: BaseException) -> None:
        self._acks.put_nowait(exc)


class _Refused(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "refused"

    def trailing_metadata(self) -> tuple[()]:
        return ()


async def _until(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(what)


async def test_sends_waiting_while_a_frame_is_in_flight_share_the_next_frame() -> None:
    stream = _Stream()
    pipe = AsyncSendPipe(
        stream, producer_group="", settings=PipeSettings(max_in_flight_frames=1), transaction_prepared=False
    )
    first = asyncio.ensure_future(pipe.send(b"a", 1))
    await _until(lambda: len(stream.frames) == 1, "the first frame goes at once")
    rest = [asyncio.ensure_future(pipe.send(b, 1)) for b in (b"b", b"c")]
    await asyncio.sleep(0)
    assert len(stream.frames) == 1  # one frame in flight: the others wait
    stream.ack(sequence=1, commit_log_offsets=[10], queue_offsets=[0], queue_ids=[0])
    (ack, at) = await first
    assert (ack.commit_log_offsets[at], at) == (10, 0)
    await _until(lambda: len(stream.frames) == 2, "the waiting sends go as one frame")
    assert stream.frames[1].records == b"bc"
    stream.ack(sequence=2, commit_log_offsets=[11, 12], queue_offsets=[1, 2], queue_ids=[0, 0])
    assert [(a.commit_log_offsets[i], i) for a, i in await asyncio.gather(*rest)] == [(11, 0), (12, 1)]
    await pipe.close()


async def test_a_refused_record_fails_its_own_send_and_the_others_go_again() -> None:
    stream = _Stream()
    pipe = AsyncSendPipe(
        stream, producer_group="T", settings=PipeSettings(max_in_flight_frames=1), transaction_prepared=True
    )
    blocker = asyncio.ensure_future(pipe.send(b"0", 1))
    await _until(lambda: len(stream.frames) == 1, "first frame")
    assert stream.frames[0].transaction_prepared and stream.frames[0].producer_group == "T"
    sends = [asyncio.ensure_future(pipe.send(b, 1)) for b in (b"x", b"y")]
    await asyncio.sleep(0)
    stream.ack(sequence=1, commit_log_offsets=[1], queue_offsets=[0], queue_ids=[0])
    await blocker
    await _until(lambda: len(stream.frames) == 2, "second frame")
    refusal = error(errors_pb2.CODE_ILLEGAL_MESSAGE, "bad record")
    detail = refusal.to_detail()
    detail.metadata["index"] = "1"
    stream.ack(sequence=2, error=detail)
    await _until(lambda: len(stream.frames) == 3, "the other send goes again")
    assert stream.frames[2].records == b"x"
    stream.ack(sequence=3, commit_log_offsets=[2], queue_offsets=[1], queue_ids=[0])
    ok, bad = await asyncio.gather(*sends, return_exceptions=True)
    assert not isinstance(ok, BaseException) and ok[0].commit_log_offsets == [2]
    assert isinstance(bad, TxmqError) and bad.code == errors_pb2.CODE_ILLEGAL_MESSAGE
    await pipe.close()


async def test_a_broken_stream_fails_every_send_and_the_next_opens_a_new_one() -> None:
    stream = _Stream()
    backend = Backend(cluster=None, timeout_ms=5000)  # type: ignore[arg-type]
    backend.store_address = lambda store_id: "127.0.0.1:1"  # type: ignore[method-assign]
    backend.store = lambda store_id: stream  # type: ignore[method-assign,assignment,return-value]
    send = asyncio.ensure_future(backend.send_normal("s1", common_pb2.Message(topic="T", body=b"x", unique_id="U1")))
    await _until(lambda: len(stream.frames) == 1, "sent")
    stream.end(_Refused(grpc.StatusCode.UNAVAILABLE))
    with pytest.raises(TxmqError) as info:
        await send
    assert info.value.code == errors_pb2.CODE_UNAVAILABLE and info.value.retriable
    fresh = _Stream()
    backend.store = lambda store_id: fresh  # type: ignore[method-assign,assignment,return-value]
    again = asyncio.ensure_future(backend.send_normal("s1", common_pb2.Message(topic="T", body=b"x", unique_id="U1")))
    await _until(lambda: len(fresh.frames) == 1, "a new stream")
    fresh.ack(sequence=1, commit_log_offsets=[7], queue_offsets=[3], queue_ids=[1], store_id="s1")
    result = await again
    assert (result.msg_id, result.commit_log_offset, result.queue_offset, result.queue.queue_id) == ("U1", 7, 3, 1)
    await backend.close()


async def test_a_half_message_answers_with_its_unique_id_as_transaction_id() -> None:
    stream = _Stream()
    backend = Backend(cluster=None, timeout_ms=5000)  # type: ignore[arg-type]
    backend.store_address = lambda store_id: "127.0.0.1:1"  # type: ignore[method-assign]
    backend.store = lambda store_id: stream  # type: ignore[method-assign,assignment,return-value]
    message = common_pb2.Message(topic="T", body=b"x", unique_id="U9")
    send = asyncio.ensure_future(backend.send("s1", message, producer_group="T", prepared=True))
    await _until(lambda: len(stream.frames) == 1, "sent")
    assert stream.frames[0].transaction_prepared and stream.frames[0].producer_group == "T"
    stream.ack(sequence=1, commit_log_offsets=[5], queue_offsets=[2], queue_ids=[0], store_id="s1")
    result = await send
    assert (result.transaction_id, result.commit_log_offset, result.queue_offset) == ("U9", 5, 2)
    await backend.close()


class _NoStreamStore(_Stream):
    """A store that refuses the stream with ``code`` and takes unary sends."""

    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__()
        self.code = code
        self.unary: list[store_pb2.SendMessageRequest] = []

    def SendStream(self) -> _Stream:
        self.end(_Refused(self.code))
        return self

    async def SendMessage(self, request: store_pb2.SendMessageRequest, timeout: float) -> store_pb2.SendMessageResponse:  # noqa: ASYNC109 - grpc stub signature
        self.unary.append(request)
        return store_pb2.SendMessageResponse(
            result=store_pb2.SendResult(msg_id=request.message.unique_id, transaction_id=request.message.unique_id)
        )


def _backend(store: _NoStreamStore) -> Backend:
    backend = Backend(cluster=None, timeout_ms=5000)  # type: ignore[arg-type]
    backend.store_address = lambda store_id: "127.0.0.1:1"  # type: ignore[method-assign]
    backend.store = lambda store_id: store  # type: ignore[method-assign,assignment,return-value]
    return backend


async def test_a_store_without_the_stream_gets_unary_sends() -> None:
    store = _NoStreamStore(grpc.StatusCode.UNIMPLEMENTED)
    backend = _backend(store)
    half = common_pb2.Message(topic="T", body=b"x", unique_id="U1")
    result = await backend.send("s1", half, producer_group="T", prepared=True)
    assert result.transaction_id == "U1"
    assert [(r.transaction_prepared, r.producer_group) for r in store.unary] == [(True, "T")]
    await backend.send_normal("s1", common_pb2.Message(topic="T", body=b"y", unique_id="U2"))
    assert [r.message.unique_id for r in store.unary] == ["U1", "U2"]
    await backend.close()


async def test_a_stream_refused_as_unauthenticated_is_an_error_not_a_fallback() -> None:
    store = _NoStreamStore(grpc.StatusCode.UNAUTHENTICATED)
    backend = _backend(store)
    with pytest.raises(TxmqError) as caught:
        await backend.send_normal("s1", common_pb2.Message(topic="T", body=b"y", unique_id="U2"))
    assert caught.value.grpc_status == grpc.StatusCode.UNAUTHENTICATED and store.unary == []
    await backend.close()
