"""Errors that echo huge input still reach the client typed (issue 16): a 1 MB topic
name, a 20 KB key or a 10 000-deep expression in an error's message or metadata used to
make the trailer exceed gRPC's metadata limit, and the client got "Stream removed"
instead of the error. What goes on the wire is clipped, with a visible marker."""

from __future__ import annotations

import grpc
import pytest

from txmq.errors import (
    MAX_DETAIL_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_METADATA_VALUE_BYTES,
    METADATA_DROPPED_KEY,
    TxmqError,
    clip,
    error,
)
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.grpc_errors import rpc

HUGE = 1 << 20


class Servicer(store_pb2_grpc.StoreServicer):
    def __init__(self) -> None:
        self.raise_next: TxmqError | None = None

    @rpc
    async def GetMessage(self, request, context):  # unary -> unary
        assert self.raise_next is not None
        raise self.raise_next

    @rpc
    async def WatchArrivals(self, request, context):  # unary -> stream
        assert self.raise_next is not None
        yield store_pb2.ArrivalBatch()
        raise self.raise_next


@pytest.fixture
async def served():
    servicer = Servicer()
    server = grpc.aio.server()
    store_pb2_grpc.add_StoreServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, store_pb2_grpc.StoreStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


def _hostile() -> list[tuple[str, TxmqError]]:
    topic = "T" * HUGE
    return [
        ("1 MB topic", error(errors_pb2.CODE_ILLEGAL_TOPIC, f"topic {topic!r} is illegal", topic=topic)),
        ("20 KB key", error(errors_pb2.CODE_ILLEGAL_MESSAGE, "bad key", key="k" * 20_000, index="0")),
        (
            "10 000-deep expression",
            error(errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, "(" * 10_000 + "a = 1" + ")" * 10_000, column="1"),
        ),
        ("multi-byte text", error(errors_pb2.CODE_ILLEGAL_TOPIC, "é" * HUGE, topic="€" * HUGE)),
        (
            "many long metadata keys",
            error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT, "x" * HUGE, **{f"{i:04d}" + "k" * 200: "v" * 5000 for i in range(200)}
            ),
        ),
    ]


@pytest.mark.parametrize(("what", "err"), _hostile(), ids=[w for w, _ in _hostile()])
async def test_an_error_echoing_huge_input_reaches_the_client_typed(served, what: str, err: TxmqError) -> None:
    servicer, stub = served
    servicer.raise_next = err
    for call in ("unary", "stream"):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            if call == "unary":
                await stub.GetMessage(store_pb2.GetMessageRequest(topic="t"), timeout=10)
            else:
                async for _ in stub.WatchArrivals(store_pb2.WatchArrivalsRequest(), timeout=10):
                    pass
        assert info.value.code() == err.grpc_status, info.value.details()
        got = TxmqError.from_rpc_error(info.value)
        assert not got.transport, f"no error detail reached the client: {info.value.details()[:200]}"
        assert type(got) is type(err) and got.code == err.code
        assert len(got.message.encode()) <= MAX_MESSAGE_BYTES + 32
        if len(err.message.encode()) > MAX_MESSAGE_BYTES:
            assert got.message.endswith(f"…({len(err.message.encode())} bytes)")
            assert err.message.startswith(got.message.split("…(")[0])
        for key, value in got.metadata.items():
            assert len(value.encode()) <= MAX_METADATA_VALUE_BYTES + 32, key
        assert err.to_detail().ByteSize() <= MAX_DETAIL_BYTES
        assert len(info.value.details().encode()) < 1024


def test_clip_marks_what_it_cut_and_keeps_what_fits() -> None:
    assert clip("short", 8) == "short"
    assert clip("é" * 4, 8) == "é" * 4  # 8 bytes: fits exactly
    assert clip("abcdefghij", 4) == "abcd…(10 bytes)"
    assert clip("é" * 10, 5) == "éé…(20 bytes)"  # never half a character


def test_small_details_are_sent_unchanged() -> None:
    err = error(errors_pb2.CODE_TOPIC_NOT_FOUND, "topic T not found", topic="T", queue_id="3")
    detail = err.to_detail()
    assert (detail.message, dict(detail.metadata)) == ("topic T not found", {"topic": "T", "queue_id": "3"})
    assert err.status_details() == str(err)


def test_metadata_past_the_budget_is_left_out_and_counted() -> None:
    err = error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "m", **{f"key{i}": "v" * 1000 for i in range(100)})
    detail = err.to_detail()
    assert detail.ByteSize() <= MAX_DETAIL_BYTES
    kept = [k for k in detail.metadata if k != METADATA_DROPPED_KEY]
    assert sorted(kept) == sorted(f"key{i}" for i in range(len(kept)))  # the first ones
    assert int(detail.metadata[METADATA_DROPPED_KEY]) == 100 - len(kept)
    assert err.metadata["key99"] == "v" * 1000  # the error object keeps everything
