"""Priority messages (RocketMQ 5.4's RIP-80): which queue a message of a priority topic
goes to, and what is refused.

A topic whose ``message.type`` attribute is PRIORITY is a priority topic. A message on
it carries its priority in ``TXMQ_PRIORITY`` (0, the lowest, when absent), and the store
writes it to the queue of that id: queue N holds priority N, so the priorities a topic
takes are 0 .. write queue count - 1, and a consumer that reads higher queues first
sees higher priorities first (docs/store.md "Priority messages"). The queue a producer
named is not used on a priority topic.

Refused, nothing stored: a priority that is not a decimal integer in that range
(``CODE_ILLEGAL_PRIORITY``); a priority on a topic that is not a priority topic, or
together with a delay, a transaction or a message group (``CODE_MESSAGE_TYPE_CONFLICT``,
as RocketMQ's clients refuse those combinations). Retry and dead-letter topics take a
copy's priority whatever their type. System sends (send-back copies, committed copies,
timer deliveries) are never refused here: a priority topic places them by their
priority, clamped to its queues.
"""

from __future__ import annotations

from collections.abc import Mapping

from txmq.errors import error
from txmq.protocol import (
    DELAY_PROPERTIES,
    DLQ_GROUP_TOPIC_PREFIX,
    MESSAGE_TYPE_PRIORITY,
    PROPERTY_PRIORITY,
    PROPERTY_SHARDING_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_ATTRIBUTE_MESSAGE_TYPE,
)
from txmq.v1 import errors_pb2

from .configs import TopicConfig

#: The longest priority value read (RocketMQ's is an int32).
_MAX_DIGITS = 9


def priority_queue(
    cfg: TopicConfig, properties: Mapping[str, str], index: int, *, system: bool = False, prepared: bool = False
) -> int:
    """The queue of a message to priority topic ``cfg``: its priority."""
    raw = properties.get(PROPERTY_PRIORITY) if properties else None
    top = cfg.write_queue_nums - 1
    if raw is None:
        return 0
    if system:
        return min(max(_parse(raw) or 0, 0), max(top, 0))
    if prepared or PROPERTY_SHARDING_KEY in properties or not DELAY_PROPERTIES.isdisjoint(properties):
        what = "a transactional" if prepared else "a FIFO" if PROPERTY_SHARDING_KEY in properties else "a delayed"
        raise error(
            errors_pb2.CODE_MESSAGE_TYPE_CONFLICT,
            f"{what} message cannot have a priority (RocketMQ's priority messages are neither "
            "transactional, FIFO nor delayed): send it without one of them",
            index=str(index), topic=cfg.name,
        )  # fmt: skip
    value = _parse(raw)
    if value is None or not 0 <= value <= top:
        raise error(
            errors_pb2.CODE_ILLEGAL_PRIORITY,
            f"priority {raw[:32]!r} of a message to {cfg.name}: use a whole number from 0 to {top} "
            f"(the topic's {cfg.write_queue_nums} write queues)",
            index=str(index), priority=raw[:32], max_priority=str(top), topic=cfg.name,
        )  # fmt: skip
    return value


def refuse_priority(cfg: TopicConfig, index: int) -> None:
    """A producer's message with a priority to a topic that is not a priority topic:
    CODE_MESSAGE_TYPE_CONFLICT, except on retry and dead-letter topics (copies keep
    their priority)."""
    if cfg.name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        return
    raise error(
        errors_pb2.CODE_MESSAGE_TYPE_CONFLICT,
        f"topic {cfg.name} is not a priority topic: a message to it cannot have a priority "
        f"(create it with the attribute {TOPIC_ATTRIBUTE_MESSAGE_TYPE}={MESSAGE_TYPE_PRIORITY})",
        index=str(index), topic=cfg.name,
    )  # fmt: skip


def _parse(raw: str) -> int | None:
    if not raw or len(raw) > _MAX_DIGITS + 1 or not (raw.isdigit() or (raw[0] == "-" and raw[1:].isdigit())):
        return None
    return int(raw) if raw.isascii() else None
