"""A subscription: topic + filter expression, parsed once on the client.

TAG expressions are parsed as RocketMQ's ``FilterAPI.buildSubscriptionData`` does
(``*`` / empty: everything; otherwise tags split on ``||`` and trimmed). The pull
service filters on the tag *hash code* kept in the consume queue, and hash codes
collide (``"Aa"`` and ``"BB"`` share one), so the client re-checks the tag *string*
of every message it gets back and drops the ones that do not match, as RocketMQ's
``PullAPIWrapper.processPullResult`` does. SQL92 expressions are evaluated by the
service only (on the properties it reads from the commit log); no re-check is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from txmq._consumer_types import ExpressionType
from txmq.errors import BadRequestError, ForbiddenError
from txmq.message import MessageExt
from txmq.protocol import is_system_topic
from txmq.v1 import common_pb2, errors_pb2
from txmq.validation import check_filter_expression_size, check_topic

SUB_ALL = "*"


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str
    expression_type: ExpressionType
    # TAG only: the tags that match; empty: every message matches.
    tags: frozenset[str] = frozenset()

    @property
    def matches_all(self) -> bool:
        return self.expression_type is ExpressionType.TAG and not self.tags

    def to_proto(self) -> common_pb2.FilterExpression:
        return common_pb2.FilterExpression(type=self.expression_type.value, expression=self.expression)

    def accepts(self, msg: MessageExt) -> bool:
        """The client-side re-check of a message the service returned."""
        if self.expression_type is not ExpressionType.TAG or not self.tags:
            return True
        return msg.tags is not None and msg.tags in self.tags


def build_subscription(
    topic: str, expression: str | None, expression_type: ExpressionType = ExpressionType.TAG
) -> Subscription:
    """Validate and parse; a malformed TAG expression, or one longer than
    ``MAX_FILTER_EXPRESSION_BYTES`` (either type), raises ``BadRequestError``
    (``CODE_ILLEGAL_FILTER_EXPRESSION``) before any call. SQL92 syntax is checked by
    the service (the same code)."""
    check_topic(topic)
    if is_system_topic(topic):
        raise ForbiddenError(
            f"consuming system topic {topic!r} is forbidden",
            code=errors_pb2.CODE_SYSTEM_TOPIC,
            metadata={"topic": topic},
        )
    if not isinstance(expression_type, ExpressionType):
        raise TypeError(f"expression_type must be an ExpressionType, not {expression_type!r}")
    text = (expression or "").strip()
    check_filter_expression_size(text, kind="SQL92" if expression_type is ExpressionType.SQL92 else "tag")
    if expression_type is ExpressionType.SQL92:
        if not text:
            raise BadRequestError("the SQL92 expression is empty", code=errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION)
        return Subscription(topic, text, expression_type)
    if not text or text == SUB_ALL:
        return Subscription(topic, SUB_ALL, expression_type)
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags:
        raise BadRequestError(
            f"the tag expression {expression!r} names no tag",
            code=errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
            metadata={"expression": text},
        )
    return Subscription(topic, text, expression_type, tags)
