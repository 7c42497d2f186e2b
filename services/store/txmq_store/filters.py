"""Message filters for reads: a tag filter applied to consume-queue units (tag hash
codes) and a property predicate applied to records read from the commit log.

Expressions longer than ``MAX_FILTER_EXPRESSION_BYTES`` are refused before parsing;
``load_message_filter`` (GetMessage) compiles a long SQL92 expression that is not cached
yet on a worker thread, so that the event loop keeps serving other calls meanwhile."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from txmq.errors import TxmqError, error
from txmq.v1 import errors_pb2
from txmq.validation import check_filter_expression_size, filter_expression_preview
from txmq_runtime.sql92 import Sql92Filter, compile_sql92, compile_sql92_async
from txmq_runtime.tags import TagFilter, parse_tag_expression

from .model import PropertyPredicate


class FilterType(enum.IntEnum):
    """Values equal txmq.v1.FilterType."""

    TAG = 1
    SQL92 = 2


@dataclass(slots=True, frozen=True)
class MessageFilter:
    tags: TagFilter | None = None  # None: every tag code matches
    predicate: PropertyPredicate | None = None  # None: every record matches

    def match_tag_code(self, tag_code: int) -> bool:
        return self.tags is None or self.tags.match_code(tag_code)


def build_message_filter(
    filter_type: FilterType | int, expression: str, *, property_filter_enable: bool
) -> MessageFilter | None:
    """None when everything matches. Raises CODE_ILLEGAL_FILTER_EXPRESSION for an unknown
    filter type (0, UNSPECIFIED, reads as TAG), an expression longer than
    MAX_FILTER_EXPRESSION_BYTES or one that does not parse, CODE_SQL92_NOT_ENABLED when
    SQL92 is off. Compiles in place: on an event loop, ``load_message_filter``."""
    kind = _checked(filter_type, expression, property_filter_enable=property_filter_enable)
    if kind == FilterType.SQL92:
        try:
            sql = compile_sql92(expression)
        except ValueError as exc:
            raise _parse_error(exc, expression) from exc
        return _sql_filter(sql)
    return _tag_filter(expression)


async def load_message_filter(
    filter_type: FilterType | int, expression: str, *, property_filter_enable: bool
) -> MessageFilter | None:
    """``build_message_filter`` for the event loop: an SQL92 expression that is long and
    not cached yet is compiled on a worker thread."""
    kind = _checked(filter_type, expression, property_filter_enable=property_filter_enable)
    if kind == FilterType.SQL92:
        try:
            sql = await compile_sql92_async(expression)
        except ValueError as exc:
            raise _parse_error(exc, expression) from exc
        return _sql_filter(sql)
    return _tag_filter(expression)


def _checked(filter_type: FilterType | int, expression: str, *, property_filter_enable: bool) -> FilterType:
    """The filter's type, known, enabled, and its expression within the size limit."""
    try:
        kind = FilterType(filter_type or FilterType.TAG)
    except ValueError:
        raise error(
            errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
            f"unknown filter type {filter_type} (expected FILTER_TYPE_TAG or FILTER_TYPE_SQL92)",
            filter_type=str(filter_type),
        ) from None
    if kind == FilterType.SQL92 and not property_filter_enable:
        raise error(errors_pb2.CODE_SQL92_NOT_ENABLED, "SQL92 filtering is disabled on this store")
    check_filter_expression_size(expression, kind="SQL92" if kind == FilterType.SQL92 else "tag")
    return kind


def _sql_filter(sql: Sql92Filter) -> MessageFilter:
    return MessageFilter(predicate=sql.matches)


def _tag_filter(expression: str) -> MessageFilter | None:
    try:
        tags = parse_tag_expression(expression)
    except ValueError as exc:
        raise _parse_error(exc, expression) from exc
    return None if tags.matches_all else MessageFilter(tags=tags)


def _parse_error(exc: ValueError, expression: str) -> TxmqError:
    """The parser's complaint, echoing at most the start of the expression."""
    return error(
        errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
        filter_expression_preview(str(exc)),
        expression=filter_expression_preview(expression),
    )
