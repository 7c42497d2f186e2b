"""The consumers' value types (re-exported by ``txmq.consumer`` and ``txmq``).

Kept apart from the consumers so the private modules they use can share them without
importing ``txmq.consumer``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from txmq.message import MessageExt, SendStatus
from txmq.v1 import common_pb2, pull_pb2


class PullStatus(enum.Enum):
    """The outcome of one pull (RocketMQ's PullStatus)."""

    FOUND = pull_pb2.PULL_STATUS_FOUND
    # Nothing new at the offset: pull again later (a suspended pull was held first).
    NO_NEW_MSG = pull_pb2.PULL_STATUS_NO_NEW_MSG
    # Messages were there but none matched the filter: pull again at once from
    # ``next_begin_offset``.
    NO_MATCHED_MSG = pull_pb2.PULL_STATUS_NO_MATCHED_MSG
    # The offset is outside the queue: continue from ``next_begin_offset``.
    OFFSET_ILLEGAL = pull_pb2.PULL_STATUS_OFFSET_ILLEGAL


class ExpressionType(enum.Enum):
    """How a subscription expression is read (RocketMQ's ExpressionType)."""

    # ``*`` or ``TagA || TagB``.
    TAG = common_pb2.FILTER_TYPE_TAG
    # An SQL92 condition over message properties, e.g. ``region = 'eu' AND amount > 10``.
    SQL92 = common_pb2.FILTER_TYPE_SQL92


class ConsumeStatus(enum.Enum):
    """What a push consumer's listener returns (RocketMQ's ConsumeConcurrentlyStatus)."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    # Deliver the message(s) again later; an exception in the listener means the same.
    # Each such delivery counts towards max_reconsume_times (then: the dead-letter topic).
    RECONSUME_LATER = "RECONSUME_LATER"
    # Deliver the message(s) again later without counting the attempt (RocketMQ #10050):
    # for "not now" rather than "failed" (a dependency down, a rate limit); such a
    # message never reaches the dead-letter topic because of it.
    RECONSUME_LATER_UNCOUNTED = "RECONSUME_LATER_UNCOUNTED"


def listener_status(
    listener: Callable[[list[MessageExt]], object],
    messages: list[MessageExt],
    log: logging.Logger,
    *,
    client_id: str,
    where: object,
    then: str,
) -> ConsumeStatus:
    """Call a push consumer's listener: its ConsumeStatus; anything else it returns, or
    an exception it raises, is RECONSUME_LATER (as in RocketMQ), logged with what
    happens ``then``."""
    try:
        answer = listener(list(messages))
    except Exception:
        log.exception("consumer %s: the listener failed on %s; %s", client_id, where, then)
        return ConsumeStatus.RECONSUME_LATER
    if isinstance(answer, ConsumeStatus):
        return answer
    log.warning("consumer %s: the listener returned %r; taken as RECONSUME_LATER", client_id, answer)
    return ConsumeStatus.RECONSUME_LATER


class ConsumeFromWhere(enum.Enum):
    """Where a push consumer starts on a queue its group has never committed an offset
    for (RocketMQ's ConsumeFromWhere). Queues with a committed offset resume there."""

    # The queue's max offset: only messages stored from now on (RocketMQ's default).
    LAST_OFFSET = "LAST_OFFSET"
    # The queue's first (min) offset: everything still stored.
    FIRST_OFFSET = "FIRST_OFFSET"


@dataclass(frozen=True, slots=True)
class PullResult:
    """One pull's answer. ``messages`` holds only messages that match the filter (the
    client re-checked their tag strings); ``next_begin_offset`` is where to pull next."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SendBackResult:
    """Where a message sent back went (``PullConsumer.send_back``): ``%RETRY%<group>``
    (redelivered after a delay) or, past the retry limit, ``%DLQ%<group>``
    (``dead_lettered``). ``reconsume_times`` is the copy's count, ``msg_id`` its unique id
    (the message's own); ``duplicate``: the store had this record sent back by the group
    before and answered with that first copy. ``status``: as a send's; the copy is
    stored whatever it says (FLUSH_REPLICA_TIMEOUT: written on the leader, not yet held
    by every in-sync replica, and it may still become visible), so the send-back is done
    and is not repeated."""

    topic: str
    dead_lettered: bool
    reconsume_times: int
    msg_id: str
    offset_msg_id: str
    store_id: str
    queue_id: int
    queue_offset: int
    duplicate: bool = False
    status: SendStatus = SendStatus.OK
