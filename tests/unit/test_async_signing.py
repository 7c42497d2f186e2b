"""The asyncio channels' signing (txmq.signing.async_interceptors) signs calls of every
kind, over a real socket: grpc.aio files an interceptor under the first call kind it is
an instance of, so one object of all four kinds once signed unary calls only, and with
auth on every internal stream (the gateway's SendStream and ProducerChannel, the pull
service's WatchArrivals) went out unsigned and was refused."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from txmq import signing

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _signed(context: grpc.aio.ServicerContext) -> bytes:
    metadata = dict(context.invocation_metadata() or ())
    return b"signed" if signing.AUTHORIZATION_HEADER in metadata else b"unsigned"


async def _unary_unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return _signed(context)


async def _unary_stream(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    yield _signed(context)


async def _stream_unary(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
    async for _ in requests:
        pass
    return _signed(context)


async def _stream_stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for _ in requests:
        yield _signed(context)


async def _one() -> AsyncIterator[bytes]:
    yield b"x"


async def test_every_call_kind_is_signed() -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                "t.Echo",
                {
                    "UU": grpc.unary_unary_rpc_method_handler(_unary_unary),
                    "US": grpc.unary_stream_rpc_method_handler(_unary_stream),
                    "SU": grpc.stream_unary_rpc_method_handler(_stream_unary),
                    "SS": grpc.stream_stream_rpc_method_handler(_stream_stream),
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        interceptors = signing.async_interceptors(signing.Credentials("alice", "alice-secret-0123"))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", interceptors=interceptors) as channel:
            got = {
                "UU": await channel.unary_unary("/t.Echo/UU")(b"x"),
                "US": [r async for r in channel.unary_stream("/t.Echo/US")(b"x")],
                "SU": await channel.stream_unary("/t.Echo/SU")(_one()),
                "SS": [r async for r in channel.stream_stream("/t.Echo/SS")(_one())],
            }
    finally:
        await server.stop(None)
    assert got == {"UU": b"signed", "US": [b"signed"], "SU": b"signed", "SS": [b"signed"]}
    assert signing.async_interceptors(None) == []
