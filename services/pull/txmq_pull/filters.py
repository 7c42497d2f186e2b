"""A pull's subscription filter, parsed once: validated before the read, and matched
against arrivals to decide which held pulls a new message wakes (RocketMQ's
``isMatchedByConsumeQueue`` on the tag code, then ``isMatchedByCommitLog`` on the
properties). The store applies the same expression to the read itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from txmq.errors import error
from txmq.v1 import common_pb2, errors_pb2
from txmq_runtime.sql92 import Sql92Filter, compile_sql92
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
    (RocketMQ SUBSCRIPTION_PARSE_FAILED) with the parser's message, then CODE_SQL92_NOT_ENABLED
    for a valid SQL92 expression while property filtering is off."""
    if expression is None:
        return MATCH_EVERYTHING
    filter_type = expression.type or common_pb2.FILTER_TYPE_TAG
    text = expression.expression
    if filter_type == common_pb2.FILTER_TYPE_TAG:
        try:
            tags = parse_tag_expression(text)
        except ValueError as exc:
            raise error(errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, str(exc), expression=text) from exc
        return PullFilter(filter_type, text, tags=tags)
    if filter_type == common_pb2.FILTER_TYPE_SQL92:
        try:
            sql = compile_sql92(text)
        except ValueError as exc:  # Sql92SyntaxError, with the position in its message
            raise error(errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, str(exc), expression=text) from exc
        if not property_filter_enable:
            raise error(
                errors_pb2.CODE_SQL92_NOT_ENABLED,
                "SQL92 filtering is disabled on this pull service (property_filter_enable = false)",
            )
        return PullFilter(filter_type, text, sql=sql)
    raise error(
        errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {filter_type}", filter_type=str(filter_type)
    )
