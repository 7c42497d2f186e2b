"""A pull's subscription filter, parsed once: validated before the read, and matched
against arrivals to decide which held pulls a new message wakes (RocketMQ's
``isMatchedByConsumeQueue`` on the tag code, then ``isMatchedByCommitLog`` on the
properties). The store applies the same expression to the read itself.

Expressions longer than ``MAX_FILTER_EXPRESSION_BYTES`` are refused before parsing;
``load_filter`` (the pull path) compiles a long SQL92 expression that is not cached yet
on a worker thread, so that the event loop keeps serving other calls meanwhile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2
from txmq.validation import check_filter_expression_size, filter_expression_preview
from txmq_runtime.sql92 import Sql92Filter, compile_sql92, compile_sql92_async
from txmq_runtime.tags import MATCH_ALL, TagFilter, parse_tag_expression


@dataclass(frozen=True, slots=True)
class PullFilter:
    filter_type: int  # common_pb2.FilterType, UNSPECIFIED read as TAG
    expression: str
    tags: TagFilter = MATCH_ALL
    sql: Sql92Filter | None = None

    @property
    def matches_all(self) -> bool:
        return self.sql is None and self.tags.matches_all

    def matches_arrival(self, tag_code: int, properties: Mapping[str, str]) -> bool:
        if not self.tags.match_code(tag_code):
            return False
        return self.sql is None or self.sql.matches(properties)

    def to_pb(self) -> common_pb2.FilterExpression | None:
        """What the store is asked to apply; None when everything matches."""
        if self.matches_all:
            return None
        return common_pb2.FilterExpression(type=self.filter_type, expression=self.expression)


MATCH_EVERYTHING = PullFilter(common_pb2.FILTER_TYPE_TAG, "*")


def parse_filter(expression: common_pb2.FilterExpression | None, *, property_filter_enable: bool) -> PullFilter:
    """Parse a subscription as RocketMQ's FilterAPI does. Raises CODE_ILLEGAL_FILTER_EXPRESSION
    (RocketMQ SUBSCRIPTION_PARSE_FAILED) for an unknown filter type, an expression longer
    than MAX_FILTER_EXPRESSION_BYTES or one that does not parse (with the parser's message),
    then CODE_SQL92_NOT_ENABLED for a valid SQL92 expression while property filtering is
    off. Compiles in place: on an event loop, ``load_filter``."""
    if expression is None:
        return MATCH_EVERYTHING
    filter_type, text = _checked(expression)
    if filter_type == common_pb2.FILTER_TYPE_TAG:
        return _tag_filter(text)
    try:
        sql = compile_sql92(text)
    except ValueError as exc:  # Sql92SyntaxError, with the position in its message
        raise _parse_error(exc, text) from exc
    return _sql_filter(text, sql, property_filter_enable=property_filter_enable)


async def load_filter(expression: common_pb2.FilterExpression | None, *, property_filter_enable: bool) -> PullFilter:
    """``parse_filter`` for the event loop: an SQL92 expression that is long and not
    cached yet is compiled on a worker thread."""
    if expression is None:
        return MATCH_EVERYTHING
    filter_type, text = _checked(expression)
    if filter_type == common_pb2.FILTER_TYPE_TAG:
        return _tag_filter(text)
    try:
        sql = await compile_sql92_async(text)
    except ValueError as exc:
        raise _parse_error(exc, text) from exc
    return _sql_filter(text, sql, property_filter_enable=property_filter_enable)


def _checked(expression: common_pb2.FilterExpression) -> tuple[int, str]:
    """The filter type (UNSPECIFIED read as TAG) and text, of a known type and size."""
    filter_type = expression.type or common_pb2.FILTER_TYPE_TAG
    text = expression.expression
    if filter_type == common_pb2.FILTER_TYPE_TAG:
        check_filter_expression_size(text, kind="tag")
    elif filter_type == common_pb2.FILTER_TYPE_SQL92:
        check_filter_expression_size(text, kind="SQL92")
    else:
        raise error(
            errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
            f"unknown filter type {filter_type} (expected FILTER_TYPE_TAG or FILTER_TYPE_SQL92)",
            filter_type=str(filter_type),
        )
    return filter_type, text


def _tag_filter(text: str) -> PullFilter:
    try:
        tags = parse_tag_expression(text)
    except ValueError as exc:
        raise _parse_error(exc, text) from exc
    return PullFilter(common_pb2.FILTER_TYPE_TAG, text, tags=tags)


def _sql_filter(text: str, sql: Sql92Filter, *, property_filter_enable: bool) -> PullFilter:
    if not property_filter_enable:
        raise error(
            errors_pb2.CODE_SQL92_NOT_ENABLED,
            "SQL92 filtering is disabled on this pull service (property_filter_enable = false)",
        )
    return PullFilter(common_pb2.FILTER_TYPE_SQL92, text, sql=sql)


def _parse_error(exc: ValueError, text: str) -> TxmqError:
    """The parser's complaint, echoing at most the start of the expression."""
    return error(
        errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
        filter_expression_preview(str(exc)),
        expression=filter_expression_preview(text),
    )
