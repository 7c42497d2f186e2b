"""What a GetMessage filter may cost the store (issue 16): unknown filter types and
expressions over MAX_FILTER_EXPRESSION_BYTES are typed INVALID_ARGUMENT errors (never
INTERNAL) that echo at most the start of the expression, and a long new SQL92 expression
is compiled off the event loop while other calls are served. Over a real grpc.aio server."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.protocol import MAX_FILTER_EXPRESSION_BYTES
from txmq.v1 import common_pb2, errors_pb2, store_pb2
from txmq_runtime import sql92
from txmq_runtime.sql92 import SQL92_INLINE_COMPILE_CHARS
from txmq_store.filters import FilterType, build_message_filter, load_message_filter

from .conftest import GrpcStore

pytestmark = pytest.mark.asyncio(loop_scope="session")

GUARD_S = 10  # a hang guard, not a timing claim
TAG = common_pb2.FILTER_TYPE_TAG
SQL92 = common_pb2.FILTER_TYPE_SQL92


def get(filter_type: int, expression: str, *, queue_id: int = 0) -> store_pb2.GetMessageRequest:
    return store_pb2.GetMessageRequest(
        topic="TopicA",
        queue_id=queue_id,
        offset=0,
        filter=common_pb2.FilterExpression(type=filter_type, expression=expression),  # type: ignore[arg-type]
    )


async def refused(grpc_store: GrpcStore, request: store_pb2.GetMessageRequest) -> TxmqError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await grpc_store.stub.GetMessage(request, timeout=GUARD_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = TxmqError.from_rpc_error(info.value)
    assert err.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    return err


async def send(grpc_store: GrpcStore, *, tags: str = "", queue_id: int = 0, **properties: str) -> None:
    message = common_pb2.Message(topic="TopicA", body=b"b", tags=tags, properties=properties, queue_id=queue_id)
    await grpc_store.stub.SendMessage(store_pb2.SendMessageRequest(message=message), timeout=GUARD_S)


@pytest.mark.parametrize("filter_type", [3, 99, -1, 2**31 - 1])
async def test_an_unknown_filter_type_is_invalid_argument_not_internal(grpc_store: GrpcStore, filter_type: int) -> None:
    err = await refused(grpc_store, get(filter_type, "odd"))
    assert err.metadata == {"filter_type": str(filter_type)}
    assert "unknown filter type" in err.message


async def test_unspecified_filter_type_still_reads_as_tag(grpc_store: GrpcStore) -> None:
    await send(grpc_store, tags="odd")
    await send(grpc_store, tags="even")
    got = await grpc_store.stub.GetMessage(get(0, "odd"), timeout=GUARD_S)
    assert [m.message.tags for m in got.messages] == ["odd"]


@pytest.mark.parametrize("filter_type", [TAG, SQL92])
async def test_an_expression_over_the_limit_is_refused_without_being_echoed(
    grpc_store: GrpcStore, filter_type: int
) -> None:
    for expression in ("a = '" + "x" * MAX_FILTER_EXPRESSION_BYTES + "'", "x" * 1_000_000):
        err = await refused(grpc_store, get(filter_type, expression))
        size = len(expression)
        assert f"{size} bytes" in err.message and str(MAX_FILTER_EXPRESSION_BYTES) in err.message
        assert len(err.message) < 400
        assert err.metadata["expression_bytes"] == str(size)
        assert err.metadata["limit_bytes"] == str(MAX_FILTER_EXPRESSION_BYTES)
        assert len(err.metadata["expression"]) < 300


async def test_an_sql92_expression_at_the_limit_is_served(grpc_store: GrpcStore) -> None:
    value = "v" * (MAX_FILTER_EXPRESSION_BYTES - len("a = ''"))
    expression = f"a = '{value}'"
    assert len(expression.encode()) == MAX_FILTER_EXPRESSION_BYTES
    await send(grpc_store, queue_id=1, a=value)
    await send(grpc_store, queue_id=1, a="other")
    got = await grpc_store.stub.GetMessage(get(SQL92, expression, queue_id=1), timeout=GUARD_S)
    assert got.status == store_pb2.GET_MESSAGE_STATUS_FOUND
    assert [m.queue_offset for m in got.messages] == [0]


async def test_a_long_syntax_error_echoes_only_its_start(grpc_store: GrpcStore) -> None:
    err = await refused(grpc_store, get(SQL92, "a = 1 OR " * 1500 + "b >"))
    assert "SQL92 syntax error" in err.message
    assert len(err.metadata["expression"]) < 300
    err = await refused(grpc_store, get(TAG, " || " * 3000))
    assert len(err.message) < 300 and len(err.metadata["expression"]) < 300


async def test_a_long_new_expression_compiles_while_other_calls_are_served(
    grpc_store: GrpcStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The big filter's compile waits until another GetMessage has been answered: had
    the store compiled it on its event loop, that call could not have been."""
    await send(grpc_store, queue_id=2, tags="A", b="2")
    order: list[str] = []
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()
    real = sql92.compile_sql92_uncached

    def blocking(expression: str) -> sql92.Sql92Filter:
        if len(expression) > SQL92_INLINE_COMPILE_CHARS:
            loop.call_soon_threadsafe(started.set)
            assert release.wait(GUARD_S), "the store's event loop never ran while the filter compiled"
            order.append("compiled")
        return real(expression)

    monkeypatch.setattr(sql92, "compile_sql92_uncached", blocking)
    big = f"probe_{id(order)} = 1 OR " + "a = 1 OR " * 200 + "b = 2"
    big_call = asyncio.ensure_future(grpc_store.stub.GetMessage(get(SQL92, big, queue_id=2), timeout=GUARD_S))
    await asyncio.wait_for(started.wait(), GUARD_S)
    small = await grpc_store.stub.GetMessage(get(SQL92, "b = '2'", queue_id=2), timeout=GUARD_S)
    order.append("served another call")
    release.set()
    got = await asyncio.wait_for(big_call, GUARD_S)
    assert order == ["served another call", "compiled"]
    assert len(small.messages) == len(got.messages) == 1


async def test_filter_building_outside_grpc() -> None:
    assert build_message_filter(0, "*", property_filter_enable=True) is None
    assert build_message_filter(FilterType.TAG, "A", property_filter_enable=True) is not None
    for call in (build_message_filter, load_message_filter):
        for filter_type in (7, -3):
            with pytest.raises(TxmqError) as info:
                result = call(filter_type, "A", property_filter_enable=True)
                if asyncio.iscoroutine(result):
                    await result
            assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    f = await load_message_filter(SQL92, "n >= 7 OR " + "n = 1 OR " * 100 + "n = 2", property_filter_enable=True)
    assert f is not None and f.predicate is not None and f.predicate({"n": "8"})
    with pytest.raises(TxmqError) as info:
        await load_message_filter(SQL92, "n >= 7", property_filter_enable=False)
    assert info.value.code == errors_pb2.CODE_SQL92_NOT_ENABLED
