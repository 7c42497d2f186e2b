"""Bytes that do not parse as a method's message: INVALID_ARGUMENT with a typed detail
(CODE_BAD_REQUEST), the servicer never called, no traceback in the log — one WARNING a
minute per method and a counter (issue 16: a hostile client filled the disk with
tracebacks and got INTERNAL / UNKNOWN)."""

from __future__ import annotations

import logging

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.grpc_errors import UNPARSEABLE, RejectUnparseable, rpc

JUNK = b"\xff\xff\xff\x07garbage"


class Servicer(store_pb2_grpc.StoreServicer):
    def __init__(self) -> None:
        self.calls = 0

    @rpc
    async def GetMessage(self, request, context):  # unary -> unary
        self.calls += 1
        return store_pb2.GetMessageResponse(next_begin_offset=request.offset + 1)

    @rpc
    async def WatchArrivals(self, request, context):  # unary -> stream
        self.calls += 1
        yield store_pb2.ArrivalBatch()

    @rpc
    async def SendStream(self, request_iterator, context):  # stream -> stream
        async for frame in request_iterator:
            self.calls += 1
            yield store_pb2.RecordAck(sequence=frame.sequence)


@pytest.fixture
async def served():
    servicer = Servicer()
    server = grpc.aio.server(interceptors=[RejectUnparseable()])
    store_pb2_grpc.add_StoreServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, channel
    finally:
        await channel.close()
        await server.stop(None)


def _raw(channel: grpc.aio.Channel, method: str, kind: str):
    identity = dict(request_serializer=lambda b: b, response_deserializer=lambda b: b)
    return getattr(channel, kind)(f"/txmq.v1.Store/{method}", **identity)


async def _refused(call) -> TxmqError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    refusal = TxmqError.from_rpc_error(err.value)
    assert not refusal.transport, f"no error detail: {err.value}"
    return refusal


async def test_every_kind_of_method_refuses_bytes_that_do_not_parse(served, caplog):
    servicer, channel = served
    before = UNPARSEABLE.labels("/txmq.v1.Store/GetMessage")._value.get()
    caplog.set_level(logging.WARNING)

    for _ in range(3):
        detail = await _refused(_raw(channel, "GetMessage", "unary_unary")(JUNK, timeout=5))
        assert detail.code == errors_pb2.CODE_BAD_REQUEST and "GetMessage" in detail.message

    async def first_of(call):
        async for item in call:
            return item

    detail = await _refused(first_of(_raw(channel, "WatchArrivals", "unary_stream")(JUNK, timeout=5)))
    assert detail.code == errors_pb2.CODE_BAD_REQUEST

    good = store_pb2.RecordFrame(sequence=1).SerializeToString()

    async def frames():
        yield good
        yield JUNK

    stream = _raw(channel, "SendStream", "stream_stream")(frames(), timeout=5)
    acks = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for ack in stream:
            acks.append(store_pb2.RecordAck.FromString(ack))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [a.sequence for a in acks] == [1]  # the frame before the bad one was served

    assert servicer.calls == 1  # only the good frame reached the servicer
    assert UNPARSEABLE.labels("/txmq.v1.Store/GetMessage")._value.get() == before + 3
    get_lines = [r for r in caplog.records if "GetMessage" in r.getMessage()]
    assert len(get_lines) == 1 and get_lines[0].levelno == logging.WARNING  # once a minute, per method
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    ok = await store_pb2_grpc.StoreStub(channel).GetMessage(store_pb2.GetMessageRequest(offset=41), timeout=5)
    assert ok.next_begin_offset == 42  # parsable requests are untouched
