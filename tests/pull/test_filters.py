"""Parsing a pull's filter once, and matching arrivals with it; the bounds on what a
filter may cost (size, echo, unknown types, parsing off the event loop), in the pull
service and the SDK."""

from __future__ import annotations

import asyncio
import threading

import pytest

from txmq._consumer_types import ExpressionType
from txmq._subscription import build_subscription
from txmq.errors import BadRequestError, TxmqError
from txmq.protocol import MAX_FILTER_EXPRESSION_BYTES
from txmq.v1 import common_pb2, errors_pb2
from txmq_pull.filters import load_filter, parse_filter
from txmq_runtime import sql92
from txmq_runtime.tags import tag_hash_code

GUARD_S = 10  # a hang guard, not a timing claim


def tag(expr: str) -> common_pb2.FilterExpression:
    return common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=expr)


def sql(expr: str) -> common_pb2.FilterExpression:
    return common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression=expr)


def test_absent_star_and_empty_match_everything_and_are_not_sent_to_the_store() -> None:
    for f in (None, tag("*"), tag(""), common_pb2.FilterExpression()):
        parsed = parse_filter(f, property_filter_enable=True)
        assert parsed.matches_all
        assert parsed.to_pb() is None
        assert parsed.matches_arrival(tag_hash_code("Anything"), {})


def test_tag_filter_matches_on_the_tag_code() -> None:
    parsed = parse_filter(tag("A || B"), property_filter_enable=True)
    assert parsed.matches_arrival(tag_hash_code("A"), {})
    assert parsed.matches_arrival(tag_hash_code("B"), {})
    assert not parsed.matches_arrival(tag_hash_code("C"), {})
    assert not parsed.matches_arrival(0, {})  # no tag
    assert parsed.to_pb() == tag("A || B")


def test_unspecified_type_reads_as_tag() -> None:
    parsed = parse_filter(common_pb2.FilterExpression(expression="A"), property_filter_enable=True)
    assert parsed.matches_arrival(tag_hash_code("A"), {})
    assert not parsed.matches_arrival(tag_hash_code("B"), {})


def test_sql92_filter_matches_on_properties() -> None:
    parsed = parse_filter(sql("a > 5 AND region = 'eu'"), property_filter_enable=True)
    assert parsed.matches_arrival(0, {"a": "6", "region": "eu"})
    assert not parsed.matches_arrival(0, {"a": "5", "region": "eu"})
    assert not parsed.matches_arrival(0, {"region": "eu"})  # NULL is not TRUE
    assert not parsed.matches_arrival(0, {"a": "x", "region": "eu"})  # evaluation error: no match


@pytest.mark.parametrize("bad", [" || ", "||"])
def test_tag_expression_naming_no_tag_is_illegal(bad: str) -> None:
    with pytest.raises(TxmqError) as info:
        parse_filter(tag(bad), property_filter_enable=True)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION


def test_sql92_syntax_error_carries_the_parser_message() -> None:
    with pytest.raises(TxmqError) as info:
        parse_filter(sql("a >"), property_filter_enable=True)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    assert "SQL92 syntax error" in info.value.message
    assert info.value.metadata == {"expression": "a >"}


def test_sql92_disabled_is_checked_after_parsing() -> None:
    with pytest.raises(TxmqError) as info:
        parse_filter(sql("a > 1"), property_filter_enable=False)
    assert info.value.code == errors_pb2.CODE_SQL92_NOT_ENABLED
    with pytest.raises(TxmqError) as info:
        parse_filter(sql("a >"), property_filter_enable=False)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    # tags need no property filtering
    assert parse_filter(tag("A"), property_filter_enable=False).matches_arrival(tag_hash_code("A"), {})


def test_unknown_filter_type_is_illegal() -> None:
    with pytest.raises(TxmqError) as info:
        parse_filter(common_pb2.FilterExpression(type=7, expression="x"), property_filter_enable=True)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION


# -- bounds (issue 16) ---------------------------------------------------------------------


def sql_of_bytes(size: int, char: str = "x") -> str:
    """A valid SQL92 expression of exactly ``size`` UTF-8 bytes (``char`` of 1 or 2 bytes)."""
    head, tail = "a = '", "'"
    width = len(char.encode())
    fill = size - len(head) - len(tail)
    assert fill % width == 0
    return head + char * (fill // width) + tail


@pytest.mark.parametrize("make", [tag, sql])
def test_an_expression_over_the_size_limit_is_refused_without_being_echoed(make) -> None:  # type: ignore[no-untyped-def]
    text = "A" * (MAX_FILTER_EXPRESSION_BYTES + 1) if make is tag else sql_of_bytes(MAX_FILTER_EXPRESSION_BYTES + 1)
    with pytest.raises(TxmqError) as info:
        parse_filter(make(text), property_filter_enable=True)
    err = info.value
    assert err.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    assert f"{MAX_FILTER_EXPRESSION_BYTES + 1} bytes" in err.message
    assert str(MAX_FILTER_EXPRESSION_BYTES) in err.message
    assert len(err.message) < 400
    assert err.metadata["expression_bytes"] == str(MAX_FILTER_EXPRESSION_BYTES + 1)
    assert err.metadata["limit_bytes"] == str(MAX_FILTER_EXPRESSION_BYTES)
    assert len(err.metadata["expression"]) < 300


def test_the_limit_counts_utf8_bytes_and_an_expression_at_it_is_accepted() -> None:
    at_limit = sql_of_bytes(MAX_FILTER_EXPRESSION_BYTES)
    assert parse_filter(sql(at_limit), property_filter_enable=True).matches_arrival(0, {"a": at_limit[5:-1]})
    two_byte = sql_of_bytes(MAX_FILTER_EXPRESSION_BYTES + 2, "é")  # fewer characters than the limit
    assert len(two_byte) < MAX_FILTER_EXPRESSION_BYTES
    with pytest.raises(TxmqError) as info:
        parse_filter(sql(two_byte), property_filter_enable=True)
    assert info.value.metadata["expression_bytes"] == str(MAX_FILTER_EXPRESSION_BYTES + 2)


def test_a_long_expression_that_does_not_parse_is_echoed_only_in_part() -> None:
    bad = "a = 1 OR " * 1500 + "b >"  # under the limit, broken at the end
    with pytest.raises(TxmqError) as info:
        parse_filter(sql(bad), property_filter_enable=True)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    assert "SQL92 syntax error" in info.value.message
    assert len(info.value.metadata["expression"]) < 300
    long_tags = " || " * 3000
    with pytest.raises(TxmqError) as info:
        parse_filter(tag(long_tags), property_filter_enable=True)
    assert len(info.value.message) < 300 and len(info.value.metadata["expression"]) < 300


@pytest.mark.parametrize("filter_type", [3, 7, 1000, -1, 2**31 - 1])
def test_every_unknown_filter_type_is_illegal_and_unspecified_stays_tag(filter_type: int) -> None:
    with pytest.raises(TxmqError) as info:
        parse_filter(common_pb2.FilterExpression(type=filter_type, expression="x"), property_filter_enable=True)  # type: ignore[arg-type]
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    assert info.value.metadata == {"filter_type": str(filter_type)}
    parsed = parse_filter(common_pb2.FilterExpression(type=0, expression="x"), property_filter_enable=True)
    assert parsed.filter_type == common_pb2.FILTER_TYPE_TAG


async def test_load_filter_parses_as_parse_filter_does() -> None:
    for f in (None, tag("A || B"), sql("a > 5 AND region = 'eu'")):
        loaded = await load_filter(f, property_filter_enable=True)
        assert loaded == parse_filter(f, property_filter_enable=True)
    for bad, code in [
        (sql("a >"), errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION),
        (sql("a = 1 OR " * 200 + "b >"), errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION),  # long: parsed off the loop
        (sql(sql_of_bytes(MAX_FILTER_EXPRESSION_BYTES + 1)), errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION),
        (common_pb2.FilterExpression(type=9, expression="x"), errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION),  # type: ignore[arg-type]
    ]:
        with pytest.raises(TxmqError) as info:
            await load_filter(bad, property_filter_enable=True)
        assert info.value.code == code
    with pytest.raises(TxmqError) as info:
        await load_filter(sql("a = 1 OR " * 200 + "b = 2"), property_filter_enable=False)
    assert info.value.code == errors_pb2.CODE_SQL92_NOT_ENABLED


async def test_load_filter_compiles_a_long_new_expression_while_the_loop_serves_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compile waits for a coroutine on the loop: had it run on the loop, that
    coroutine could not have run first."""
    order: list[str] = []
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()
    real = sql92.compile_sql92_uncached

    def blocking(expression: str) -> sql92.Sql92Filter:
        loop.call_soon_threadsafe(started.set)
        assert release.wait(GUARD_S), "the event loop never ran while the filter compiled"
        order.append("compiled")
        return real(expression)

    monkeypatch.setattr(sql92, "compile_sql92_uncached", blocking)
    text = f"probe_{id(order)} = 1 OR " + "a = 1 OR " * 200 + "b = 2"
    loading = asyncio.create_task(load_filter(sql(text), property_filter_enable=True))

    async def other_call() -> None:
        await started.wait()
        order.append("served another call")
        release.set()

    await asyncio.wait_for(other_call(), GUARD_S)
    parsed = await asyncio.wait_for(loading, GUARD_S)
    assert order == ["served another call", "compiled"]
    assert parsed.matches_arrival(0, {"b": "2"})
    # now cached: no second compile
    order.clear()
    assert (await load_filter(sql(text), property_filter_enable=True)).sql is parsed.sql
    assert order == []


def test_the_sdk_refuses_an_oversized_subscription_before_any_call() -> None:
    for expression_type, text in [
        (ExpressionType.TAG, "A" * (MAX_FILTER_EXPRESSION_BYTES + 1)),
        (ExpressionType.SQL92, sql_of_bytes(MAX_FILTER_EXPRESSION_BYTES + 1)),
    ]:
        with pytest.raises(BadRequestError) as info:
            build_subscription("T", text, expression_type)
        assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
        assert len(info.value.message) < 400
    assert build_subscription("T", sql_of_bytes(MAX_FILTER_EXPRESSION_BYTES), ExpressionType.SQL92)
