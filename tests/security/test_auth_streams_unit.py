"""Authorize on request streams, in one process: a request a user may not make, sent
after ones it may, ends the call with its typed refusal, also when the handler reads its
requests on a task of its own while it writes answers (as Store.SendStream and
Transaction.ProducerChannel do) — without a hang, a traceback or an ERROR line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from security.fuzz import error_detail
from txmq import signing
from txmq.v1 import auth_pb2, errors_pb2, store_pb2, txcheck_pb2
from txmq_runtime.auth import Authenticator, AuthKeys, Authorize, CompiledAcl, Guard, Sealer, UserBook
from txmq_runtime.grpc_errors import RejectUnparseable, rpc
from txmq_runtime.registry import encode

USER, SECRET = "producer", "producer-secret-0123"
CALLS = 40


def _book() -> UserBook:
    keys, sealer = AuthKeys("/t"), Sealer("service-secret-0123456789")
    book = UserBook(keys, sealer)
    stored = auth_pb2.StoredUser(user=auth_pb2.User(username=USER), sealed_secret=sealer.seal(USER, SECRET))
    book.reset([(keys.user(USER), encode(stored))])
    allow = auth_pb2.Policy(
        resource="Group:ok", actions=[auth_pb2.Action.ACTION_PUB], decision=auth_pb2.Policy.DECISION_ALLOW
    )
    book.acls[USER] = CompiledAcl.of(auth_pb2.Acl(username=USER, policies=[allow]))
    return book


class Store:
    """Store.SendStream's shape: a reader task appends, the handler acks (under @rpc)."""

    @rpc
    async def SendStream(self, requests: AsyncIterator[store_pb2.RecordFrame], context: Any) -> Any:
        appended: asyncio.Queue[int | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for frame in requests:
                    appended.put_nowait(frame.sequence)
            finally:
                appended.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (sequence := await appended.get()) is not None:
                yield store_pb2.RecordAck(sequence=sequence)
            await reader
        finally:
            reader.cancel()


async def producer_channel(requests: AsyncIterator[txcheck_pb2.ProducerCommand], context: Any) -> Any:
    """Transaction.ProducerChannel's shape (no @rpc): the hello read first, then a reader
    task takes the producer's commands while the handler writes checks; the reader's end
    ends the call."""
    try:
        await anext(aiter(requests))
    except StopAsyncIteration:
        return
    await context.send_initial_metadata((("txmq-channel", "open"),))

    async def read() -> None:
        async for _ in requests:
            pass

    reader = asyncio.create_task(read())
    try:
        while not reader.done():
            yield txcheck_pb2.ServerCommand(check=txcheck_pb2.CheckTransactionState())
            await asyncio.wait({reader}, timeout=0.001)
    finally:
        reader.cancel()


def _handlers() -> list[grpc.GenericRpcHandler]:
    store = grpc.stream_stream_rpc_method_handler(
        Store().SendStream,
        request_deserializer=store_pb2.RecordFrame.FromString,
        response_serializer=store_pb2.RecordAck.SerializeToString,
    )
    channel = grpc.stream_stream_rpc_method_handler(
        producer_channel,
        request_deserializer=txcheck_pb2.ProducerCommand.FromString,
        response_serializer=txcheck_pb2.ServerCommand.SerializeToString,
    )
    return [
        grpc.method_handlers_generic_handler("txmq.v1.Store", {"SendStream": store}),
        grpc.method_handlers_generic_handler("txmq.v1.Transaction", {"ProducerChannel": channel}),
    ]


CASES = {
    "SendStream": [
        store_pb2.RecordFrame(sequence=1),  # no group: nothing to check
        store_pb2.RecordFrame(sequence=2, producer_group="not-mine"),
        store_pb2.RecordFrame(sequence=3, producer_group="ok"),
    ],
    "ProducerChannel": [
        txcheck_pb2.ProducerCommand(hello=txcheck_pb2.ProducerHello(producer_group="ok")),
        txcheck_pb2.ProducerCommand(
            end_transaction=txcheck_pb2.EndTransactionRequest(producer_group="not-mine", transaction_id="t")
        ),
    ],
}
PATHS = {"SendStream": "/txmq.v1.Store/SendStream", "ProducerChannel": "/txmq.v1.Transaction/ProducerChannel"}


async def _call(channel: grpc.aio.Channel, rpc_name: str) -> str:
    requests = [m.SerializeToString() for m in CASES[rpc_name]]
    metadata = signing.auth_metadata(signing.Credentials(USER, SECRET))
    call = channel.stream_stream(PATHS[rpc_name])(iter(requests), metadata=metadata, timeout=5)
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as exc:
        detail = error_detail(exc.trailing_metadata())
        code = errors_pb2.Code.Name(detail.code) if detail is not None else "no detail"
        return f"{exc.code().name}/{code}"
    return "OK"


@pytest.mark.parametrize("rpc_name", sorted(CASES))
async def test_a_refused_request_mid_stream_ends_the_call_typed(
    rpc_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    book = _book()
    authorize = Authorize(Authenticator(book, clock_skew_ms=60_000), Guard(book))
    server = grpc.aio.server(interceptors=[authorize])
    server.add_generic_rpc_handlers(_handlers())
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        with caplog.at_level(logging.WARNING):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                answers = await asyncio.gather(*(_call(channel, rpc_name) for _ in range(CALLS)))
            await asyncio.sleep(0.1)
    finally:
        await server.stop(None)
    assert set(answers) == {"PERMISSION_DENIED/CODE_ACCESS_DENIED"}, answers
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [f"{r.name}: {r.getMessage()[:200]}" for r in errors]


async def test_an_unparseable_request_mid_stream_ends_the_call_typed(caplog: pytest.LogCaptureFixture) -> None:
    """The same hazard, in the interceptor every service runs (the fuzzer met it with
    --seed 2 --requests 20000 --auth: 3 tracebacks in the store's log)."""
    server = grpc.aio.server(interceptors=[RejectUnparseable()])
    server.add_generic_rpc_handlers(_handlers())
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    requests = [store_pb2.RecordFrame(sequence=1).SerializeToString(), b"\xff\xff\xff"]
    try:
        with caplog.at_level(logging.WARNING):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.stream_stream(PATHS["SendStream"])(iter(requests), timeout=1)
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    async for _ in call:
                        pass
            await asyncio.sleep(0.1)
    finally:
        await server.stop(None)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, raised.value.code()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [f"{r.name}: {r.getMessage()[:200]}" for r in errors]
