"""Parsing a pull's filter once, and matching arrivals with it."""

from __future__ import annotations

import pytest

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2
from txmq_pull.filters import parse_filter
from txmq_runtime.tags import tag_hash_code


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
