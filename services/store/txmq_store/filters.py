"""Message filters for reads: a tag filter applied to consume-queue units (tag hash
codes) and a property predicate applied to records read from the commit log."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from txmq.errors import error
from txmq.v1 import errors_pb2
from txmq_runtime.sql92 import compile_sql92
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
    filter_type: FilterType, expression: str, *, property_filter_enable: bool
) -> MessageFilter | None:
    """None when everything matches. Raises CODE_ILLEGAL_FILTER_EXPRESSION for an
    expression that does not parse, CODE_SQL92_NOT_ENABLED when SQL92 is off."""
    if filter_type == FilterType.SQL92:
        if not property_filter_enable:
            raise error(errors_pb2.CODE_SQL92_NOT_ENABLED, "SQL92 filtering is disabled on this store")
        try:
            sql = compile_sql92(expression)
        except ValueError as exc:
            raise error(errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, str(exc), expression=expression) from exc
        return MessageFilter(predicate=sql.matches)
    try:
        tags = parse_tag_expression(expression)
    except ValueError as exc:
        raise error(errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, str(exc), expression=expression) from exc
    return None if tags.matches_all else MessageFilter(tags=tags)
