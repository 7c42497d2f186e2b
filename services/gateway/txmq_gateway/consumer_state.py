"""The SimpleConsumer's state (the model: consumer.py) and its tunables.

Per (consumer group, topic) a ``Subscription``; per queue a ``QueueState`` (cursor,
in-flight messages, FIFO chains and waiting messages); per delivered message an
``InFlight``. A receive collects into a ``Batch`` and hands out ``Delivery``s.
``ConsumerTuning`` holds the timings and limits the pieces of the core share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from txmq.errors import TxmqError
from txmq.v1 import common_pb2
from txmq_gateway.convert import PROPERTY_MESSAGE_GROUP
from txmq_runtime.tags import parse_tag_expression

#: Defaults of ConsumerTuning (the reasons are in its field descriptions).
DEADLINE_RESERVE_MS = 500
RENEW_MAX_MS = 3 * 3_600_000
CLEAR_INVISIBLE_MS = 1_000
DLQ_RETRY_MS = 5_000
ERROR_BACKOFF_MS = 200
ERROR_BACKOFF_MAX_MS = 5_000
EARLY_ANSWER_MS = 50
RECENT_ACKS = 10_000
MIN_SCAN_ROUNDS = 3
# At most this many messages of one queue wait behind an earlier message of their FIFO
# group; with that many waiting the queue is not read further until some are released.
MAX_WAITING_PER_QUEUE = 1024


class ConsumerTuning(BaseModel):
    """Timings and limits of the consumer core: fixed by the model, not gateway settings
    (no flag, env var or Helm value); one frozen object the core hands its pieces."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deadline_reserve_ms: int = Field(
        default=DEADLINE_RESERVE_MS,
        ge=0,
        description="How long before the call's deadline a held receive answers (time to write the answer).",
    )
    renew_max_ms: int = Field(
        default=RENEW_MAX_MS,
        ge=1,
        description="Auto-renewed messages stay invisible at most this long (RocketMQ renewMaxTimeMillis).",
    )
    clear_invisible_ms: int = Field(
        default=CLEAR_INVISIBLE_MS,
        ge=0,
        description="A gone client's auto-renewed messages become visible this soon "
        "(RocketMQ invisibleTimeMillisWhenClear).",
    )
    dlq_retry_ms: int = Field(
        default=DLQ_RETRY_MS, ge=0, description="A failed dead-letter send is retried this much later."
    )
    error_backoff_ms: int = Field(
        default=ERROR_BACKOFF_MS,
        ge=1,
        description="A queue whose store or pull failed is left alone this long, doubling up to error_backoff_max_ms.",
    )
    error_backoff_max_ms: int = Field(
        default=ERROR_BACKOFF_MAX_MS, ge=1, description="The longest back-off of a failing queue."
    )
    early_answer_ms: int = Field(
        default=EARLY_ANSWER_MS,
        ge=0,
        description="A held read answering empty this long before its hold ends is an early answer.",
    )
    recent_acks: int = Field(
        default=RECENT_ACKS,
        ge=0,
        description="How many of the latest acked handles are remembered: a repeated ack of one answers OK.",
    )
    max_waiting_per_queue: int = Field(
        default=MAX_WAITING_PER_QUEUE,
        ge=1,
        description="FIFO: messages read past an undelivered one of their group, kept at most per queue; the "
        "queue is not read further until some move on.",
    )
    min_scan_rounds: int = Field(
        default=MIN_SCAN_ROUNDS,
        ge=1,
        description="A receive goes round at least this often when reads only skip messages (non-matching, "
        "moved offsets), even past its polling time.",
    )


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer, invisible to the group until ``invisible_ms``
    from now unless acked."""

    view: common_pb2.MessageView
    receipt_handle: str
    delivery_attempt: int
    invisible_ms: int


QueueKey = tuple[str, int]  # (store id, queue id)


@dataclass(slots=True, eq=False)
class InFlight:
    """A delivered, not yet acked message."""

    sub: Subscription
    queue: QueueState
    offset: int
    view: common_pb2.MessageView
    attempts: int
    version: int
    deadline_ms: int
    invisible_ms: int
    ticket: int = 0  # the live entry of the deadline heap
    renew_client: str | None = None
    renew_until_ms: int = 0
    forwarding: bool = False
    message_group: str = ""  # FIFO: its successors in the group wait until it is settled


@dataclass(slots=True, eq=False)
class QueueState:
    """One queue of the topic as the group reads it."""

    store_id: str
    queue_id: int
    cursor: int | None = None  # next offset to read; None until known
    committed: int | None = None  # what the store holds as the group's offset
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    busy: bool = False  # a read is in progress (one reader per queue at a time)
    retry_at: int = 0  # clock time (now_ms) before which the queue is left alone (errors)
    failures: int = 0
    init: asyncio.Task[None] | None = None
    # FIFO: message group -> its un-acked offsets here (in flight or waiting), ascending.
    chains: dict[str, list[int]] = field(default_factory=dict)
    # Read, not delivered: behind an earlier message of their group (offset -> message).
    waiting: dict[int, common_pb2.MessageView] = field(default_factory=dict)
    # Waiting messages whose predecessor is settled: deliverable, in release order.
    ready: dict[int, None] = field(default_factory=dict)
    max_waiting: int = MAX_WAITING_PER_QUEUE  # ConsumerTuning.max_waiting_per_queue

    @property
    def key(self) -> QueueKey:
        return (self.store_id, self.queue_id)

    @property
    def saturated(self) -> bool:
        """Too many messages wait: do not read further."""
        return len(self.waiting) >= self.max_waiting

    def commit_target(self) -> int | None:
        """The lowest offset not yet acked (waiting messages included): what the group's
        offset should be."""
        if self.cursor is None:
            return None
        low = self.cursor
        if self.in_flight:
            low = min(low, min(self.in_flight))
        if self.waiting:
            low = min(low, min(self.waiting))
        return low


class Signal:
    """A one-shot wake-up that is re-armed on every wait (``wait`` returns a future
    that ``fire`` resolves)."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None

    def wait(self) -> asyncio.Future[None]:
        if self._future is None or self._future.done():
            self._future = asyncio.get_running_loop().create_future()
        return self._future

    def fire(self) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(None)
        self._future = None


class Subscription:
    """The pop state of one (group, topic)."""

    def __init__(self, group: str, topic: str, *, max_waiting: int = MAX_WAITING_PER_QUEUE) -> None:
        self.group = group
        self.topic = topic
        self.max_waiting = max_waiting
        self.queues: dict[QueueKey, QueueState] = {}
        self.deadlines: list[tuple[int, int, InFlight]] = []  # (deadline, ticket, entry)
        self.live = 0  # in-flight entries
        self.round_robin = 0
        self.released = Signal()  # a queue stopped being read
        self.visible = Signal()  # an in-flight message's deadline moved earlier
        self.dropped = False  # the gateway stopped owning the group (drop_group)

    def queue(self, store_id: str, queue_id: int) -> QueueState:
        q = self.queues.get((store_id, queue_id))
        if q is None:
            q = self.queues[(store_id, queue_id)] = QueueState(store_id, queue_id, max_waiting=self.max_waiting)
        return q


Subscriptions = dict[tuple[str, str], Subscription]  # (group, topic) -> its state


@dataclass(slots=True)
class Batch:
    """What one receive collects, and how it delivers."""

    need: int
    invisible_ms: int
    max_attempts: int
    client_id: str
    auto_renew: bool
    filter: common_pb2.FilterExpression
    tag_match: Callable[[str], bool] | None
    out: list[Delivery] = field(default_factory=list)
    error: TxmqError | None = None  # the last read failure

    @property
    def full(self) -> bool:
        return len(self.out) >= self.need


def tag_matcher(expression: common_pb2.FilterExpression) -> Callable[[str], bool] | None:
    """The tag-string check of a TAG filter (the store filters on tag hash codes, which
    collide; RocketMQ clients re-check the string); None when everything matches."""
    if expression.type not in (common_pb2.FILTER_TYPE_UNSPECIFIED, common_pb2.FILTER_TYPE_TAG):
        return None
    tags = parse_tag_expression(expression.expression)
    return None if tags.matches_all else tags.match_tag


def message_group(view: common_pb2.MessageView) -> str:
    """The FIFO message group of a message; empty: none."""
    return view.message.properties.get(PROPERTY_MESSAGE_GROUP, "")


def retrieve(task: asyncio.Task[None]) -> None:
    """Mark a shared task's failure as seen (its awaiters handle it, or are gone)."""
    if not task.cancelled():
        task.exception()
