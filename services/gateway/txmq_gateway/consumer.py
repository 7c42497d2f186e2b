"""The SimpleConsumer model (ReceiveMessage / AckMessage / ChangeInvisibleDuration /
ForwardMessageToDeadLetterQueue) over txmq's queues and consume offsets.

RocketMQ 5 consumers "pop" messages: a receive hands out up to ``batch_size`` messages of
a topic, each invisible to the rest of the consumer group for an *invisible duration*;
an ack removes it for good, a change of the invisible duration moves its deadline, and
a message whose deadline passes without an ack is delivered again with its
``delivery_attempt`` one higher. txmq has no pop in its stores, so this module keeps
the pop state itself, on top of plain queue reads (the pull service, with its tag/SQL92
filters and long polling) and the stores' consume offsets.

State, per (consumer group, topic), in the memory of this gateway instance:

- per queue (store id, queue id): a *cursor* (the next offset not yet read for the
  group) and the *in-flight* messages (delivered, not acked: attempt count, deadline,
  handle version);
- a heap of in-flight deadlines, to find the messages due for redelivery;
- per queue, for FIFO message groups: each group's un-acked offsets in order (its
  *chain*) and the *waiting* messages (read, held back behind an earlier message of
  their group).

Consequences, to be documented for operators:

- **One gateway instance serves a consumer group.** Two gateways serving one group
  would each read the queues from the group's committed offset and deliver the same
  messages, so each group has one owner among the replicas (ownership.py); the others
  forward the group's calls to it. An owner that loses a group calls ``drop_group``.
- **At-least-once across restarts** (and when a group moves to another gateway). The
  group's consume offset in the store is kept at the lowest offset not yet acked of
  each queue (committed in batches, every ``commit_interval_ms``, on close and when
  the group is dropped). A restarted gateway starts from there, so it redelivers
  exactly the messages that were not acked, plus acked ones above the lowest un-acked
  offset of their queue. Receipt handles do not survive a restart (they name the
  gateway's epoch): acking one answers INVALID_RECEIPT_HANDLE.
- Messages skipped by the group's filter count as consumed (RocketMQ: same); a group's
  clients are expected to subscribe with one filter.
- The state of every (group, topic) ever received from stays until the gateway stops
  (a cursor per queue; in-flight messages only until acked).
- Reading: each receive asks the stores for their queues' max offsets, reads the
  queues with a backlog (the batch split round robin), and when nothing is there holds
  a pull (long polling) on every queue no other receive of the group is reading; the
  first to answer wins and the others are cancelled. One reader per queue at a time is
  what keeps concurrent receives from getting the same message.

Choices, compared with the RocketMQ 5 proxy (for docs/gateway.md):

- **A new group** (no committed offset on a queue) starts at the queue's *min* offset
  and commits it at once. RocketMQ's pop uses ConsumeInitMode.MAX, whose rule is: start
  at 0 when the queue's first message (offset 0) is still in memory
  (``initPopOffsetByCheckMsgInMem``, on by default), else at the last message (max - 1).
  For a young queue, which is when a new group usually appears, both start at the
  beginning; txmq has no "in memory" test, and starting at the min offset never skips
  messages. Long-lived queues differ: RocketMQ would skip the backlog.
- **Long-polling time**: like RocketMQ, a longer request is cut to the maximum
  (``max_long_polling_timeout_ms``; RocketMQ clamps to [5 s, 20 s]) and to the call's
  remaining deadline less a reserve (``time_remaining_ms``); a receive that names no
  timeout holds up to that maximum (RocketMQ: the call's deadline less half the
  request timeout, clamped likewise). A negative one is ILLEGAL_POLLING_TIME. There
  is no minimum: RocketMQ raises a short request to 5 s and answers
  ILLEGAL_POLLING_TIME when the call's deadline leaves less than that; txmq holds
  what the deadline allows (0: answer at once).
- **Batch size**: below 1 is BAD_REQUEST; above ``max_receive_batch_size`` is cut to it
  (RocketMQ cuts to 32 with a warning).
- **Invisible duration**: a receive must ask for [min, max] (ILLEGAL_INVISIBLE_TIME
  otherwise; RocketMQ: min 10 s, max 12 h); none means the default. A change may ask
  for [0, max] (RocketMQ validates changes with a minimum of 0 too, so a push consumer
  can nack with a short backoff).
- **Receipt handles** are opaque tokens naming the gateway (instance id and epoch),
  store, topic, queue, offset and a version. A handle works until its deadline; after it (expired, as
  RocketMQ's ``ReceiptHandle.isExpired``), after a change (superseded) or after a
  redelivery it answers INVALID_RECEIPT_HANDLE. A repeated ack with a handle that was
  acked a moment ago answers OK (a client retrying after a lost answer).
- **Auto-renew** (push consumers ask for it): the message stays invisible while the
  client is live, up to 3 h (RocketMQ's renewMaxTimeMillis), with no change of handle;
  ``client_gone`` (the servicer calls it when a client terminates or expires) makes
  such messages visible again after 1 s (RocketMQ's invisibleTimeMillisWhenClear).
  A change of invisible duration stops renewal (RocketMQ: same).
- **Dead letters**: a message due for its ``max_delivery_attempts + 1``-th delivery is
  sent instead to ``%DLQ%<group>`` (created on the message's store with one queue) as a
  copy keeping body, tag, keys, unique id and user properties, plus
  ``TXMQ_DLQ_ORIGIN_TOPIC`` = the original topic (RocketMQ writes RETRY_TOPIC, a name
  txmq reserves for the system); then it counts as acked. A failed send is retried 5 s
  later.
- **FIFO message groups** (RocketMQ 5 FIFO semantics per message group): a message with
  a message group (the ``__SHARDINGKEY`` property; the producer puts a group on one
  queue) is not delivered while an earlier message (lower offset, same queue) of its
  group is in flight, waiting for redelivery or being dead-lettered; the ack (or the
  dead letter) of that one releases the next, and wakes held receives. Redeliveries of
  the earlier message come first; messages without a group, and other groups, are not
  held up. RocketMQ's orderly pop locks the whole queue while any of its messages is in
  flight; txmq holds back only the group, which keeps the order of every group and
  lets the rest of the queue flow. The cursor reads past held-back messages: they wait
  in the gateway's memory (body included), at most ``MAX_WAITING_PER_QUEUE`` per queue;
  a queue with that many waiting is not read further until some are released (a stuck
  group, e.g. an auto-renewed head, would otherwise pull its whole backlog into memory;
  the price is that the queue's other groups wait too, as on RocketMQ). Waiting
  messages hold the committed offset back like in-flight ones, so a restart or a group
  moving re-reads them. Receives never deliver two messages of one group and queue at a
  time, so ``subscription.fifo`` stays false in the settings (telemetry.py): a push
  consumer's concurrent consumption already sees one message per group at a time, and
  a failure nacks it (redelivered with its successors still held back) instead of
  retrying in the client.
- Not modelled: the receive ``attempt_id`` (a retried receive gets new messages; the
  first ones come back after their invisible duration), resetting a group's offset
  while the gateway runs (restart the gateway).
- **Time**: invisibility deadlines, holds, read back-offs and the committer's period all
  run on the injected ``txmq_runtime.clock.Clock`` (``now_ms``, ``sleep_ms``); nothing
  here reads the event loop's clock, so tests drive it with a manual clock.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from txmq.errors import TxmqError
from txmq.protocol import DLQ_GROUP_TOPIC_PREFIX, PERM_READ, PROPERTY_DLQ_ORIGIN_TOPIC, is_system_property
from txmq.v1 import common_pb2, errors_pb2, pull_pb2
from txmq_gateway.backend import Backend
from txmq_gateway.convert import PROPERTY_MESSAGE_GROUP, decode_token, encode_token
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code
from txmq_runtime.backoff import BackoffPolicy
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.tags import parse_tag_expression

log = logging.getLogger("txmq.gateway.consumer")

# A dead letter names its origin in TXMQ_DLQ_ORIGIN_TOPIC. RocketMQ's RETRY_TOPIC is
# reserved for producers (the store refuses it in SendMessage); TXMQ_ names are hidden
# from v2 consumers as RocketMQ hides RETRY_TOPIC.

# How long before the call's deadline a held receive answers (time to write the answer).
DEADLINE_RESERVE_MS = 500
# Auto-renewed messages stay invisible at most this long (RocketMQ renewMaxTimeMillis).
RENEW_MAX_MS = 3 * 3_600_000
# A gone client's auto-renewed messages become visible this soon (RocketMQ
# invisibleTimeMillisWhenClear).
CLEAR_INVISIBLE_MS = 1_000
# A failed dead-letter send is retried this much later.
DLQ_RETRY_MS = 5_000
# A queue whose store or pull failed is left alone this long, doubling up to the max.
ERROR_BACKOFF_MS = 200
ERROR_BACKOFF_MAX_MS = 5_000
ERROR_BACKOFF = BackoffPolicy(first_ms=ERROR_BACKOFF_MS, max_ms=ERROR_BACKOFF_MAX_MS)
# A held read answering empty this long before its hold ends is an early answer.
EARLY_ANSWER_MS = 50
# Handles acked this recently answer a repeated ack with OK.
RECENT_ACKS = 10_000
# A receive goes round at least this often when reads only skip messages (non-matching,
# moved offsets), even past its polling time.
MIN_SCAN_ROUNDS = 3
# At most this many messages of one queue wait behind an earlier message of their FIFO
# group; with that many waiting the queue is not read further until some are released.
MAX_WAITING_PER_QUEUE = 1024


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer, invisible to the group until ``invisible_ms``
    from now unless acked."""

    view: common_pb2.MessageView
    receipt_handle: str
    delivery_attempt: int
    invisible_ms: int


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """What a receipt handle names: the gateway epoch that issued it, the message's
    queue and offset, and the version of its delivery (bumped by every redelivery and
    change, so older handles stop working); ``owner``: the instance id of the gateway
    that owned the group (for the error a handle from another gateway gets)."""

    epoch: str
    store_id: str
    topic: str
    queue_id: int
    offset: int
    version: int
    owner: str = ""

    def encode(self) -> str:
        fields: dict[str, str | int] = {
            "e": self.epoch,
            "s": self.store_id,
            "t": self.topic,
            "q": self.queue_id,
            "o": self.offset,
            "v": self.version,
        }
        if self.owner:
            fields["g"] = self.owner
        return encode_token(fields)

    @classmethod
    def decode(cls, token: str) -> ReceiptHandle:
        """ValueError when ``token`` is not a receipt handle of a gateway."""
        fields = decode_token(token)
        try:
            values = (fields["e"], fields["s"], fields["t"], fields["q"], fields["o"], fields["v"])
        except KeyError:
            raise ValueError("not a receipt handle") from None
        epoch, store_id, topic, queue_id, offset, version = values
        owner = fields.get("g", "")
        if not all(isinstance(v, str) for v in (epoch, store_id, topic, owner)) or not all(
            type(v) is int for v in (queue_id, offset, version)
        ):
            raise ValueError("not a receipt handle")
        return cls(epoch, store_id, topic, queue_id, offset, version, owner)  # type: ignore[arg-type]


QueueKey = tuple[str, int]  # (store id, queue id)


@dataclass(slots=True, eq=False)
class _InFlight:
    """A delivered, not yet acked message."""

    sub: _Subscription
    queue: _Queue
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
class _Queue:
    """One queue of the topic as the group reads it."""

    store_id: str
    queue_id: int
    cursor: int | None = None  # next offset to read; None until known
    committed: int | None = None  # what the store holds as the group's offset
    in_flight: dict[int, _InFlight] = field(default_factory=dict)
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

    @property
    def key(self) -> QueueKey:
        return (self.store_id, self.queue_id)

    @property
    def saturated(self) -> bool:
        """Too many messages wait: do not read further."""
        return len(self.waiting) >= MAX_WAITING_PER_QUEUE

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


class _Signal:
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


class _Subscription:
    """The pop state of one (group, topic)."""

    def __init__(self, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self.queues: dict[QueueKey, _Queue] = {}
        self.deadlines: list[tuple[int, int, _InFlight]] = []  # (deadline, ticket, entry)
        self.live = 0  # in-flight entries
        self.round_robin = 0
        self.released = _Signal()  # a queue stopped being read
        self.visible = _Signal()  # an in-flight message's deadline moved earlier
        self.dropped = False  # the gateway stopped owning the group (drop_group)

    def queue(self, store_id: str, queue_id: int) -> _Queue:
        q = self.queues.get((store_id, queue_id))
        if q is None:
            q = self.queues[(store_id, queue_id)] = _Queue(store_id, queue_id)
        return q


@dataclass(slots=True)
class _Batch:
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


@dataclass(frozen=True, slots=True)
class Pulled:
    """What a PullMessage answers: a v2 status, the messages, the next offset to pull."""

    code: int
    message: str
    views: list[common_pb2.MessageView]
    next_offset: int


class SimpleConsumerCore:
    """Pop semantics for v2 consumers. Thread-unsafe: one event loop. See the module
    docstring for the model and its limits."""

    def __init__(
        self,
        backend: Backend,
        settings: GatewaySettings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        commit_interval_ms: int = 1_000,
        epoch: str | None = None,
        instance_id: str = "",
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.clock = clock  # now_ms for deadlines, holds and backoff; sleep_ms for the committer
        self.commit_interval_ms = commit_interval_ms
        self.epoch = epoch or secrets.token_hex(4)
        self.instance_id = instance_id  # named in receipt handles
        self._subscriptions: dict[tuple[str, str], _Subscription] = {}
        self._versions = itertools.count(1)
        self._tickets = itertools.count(1)
        self._renewing: dict[str, set[_InFlight]] = {}
        self._recent_acks: OrderedDict[str, None] = OrderedDict()
        self._dlq_topics: set[tuple[str, str]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._flusher: asyncio.Task[None] | None = None
        self._flush_lock: asyncio.Lock | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the offset committer (also started by the first receive)."""
        if self._flusher is None and not self._closed:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop(), name="txmq-gateway-commit")

    async def close(self) -> None:
        """Stop: wake held receives (they answer what they have), stop the committer and
        dead-letter sends, and commit the offsets one last time. Call before closing the
        backend."""
        if self._closed:
            return
        self._closed = True
        for sub in self._subscriptions.values():
            sub.released.fire()
            sub.visible.fire()
        tasks = list(self._background)
        if self._flusher is not None:
            tasks.append(self._flusher)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self.flush()
        except Exception:  # best effort on the way out
            log.warning("final offset commit failed", exc_info=True)

    # -- receive ---------------------------------------------------------------------

    async def receive(
        self,
        *,
        group: str,
        topic: str,
        filter: common_pb2.FilterExpression,
        batch_size: int,
        invisible_ms: int | None,
        long_polling_timeout_ms: int | None,
        client_id: str,
        auto_renew: bool = False,
        max_delivery_attempts: int | None = None,
        time_remaining_ms: int | None = None,
    ) -> list[Delivery]:
        """Up to ``batch_size`` visible messages of ``topic`` for ``group`` (waiting up to
        the long-polling timeout when there is none); empty list: none arrived.

        Redeliveries (deadline passed without ack) come first, then new messages read
        from the group's cursors over all readable queues of the topic, round robin.
        ``auto_renew``: keep the messages invisible while ``client_id`` is live (see
        ``client_gone``). ``max_delivery_attempts``: the client's (its backoff policy),
        default the setting. ``time_remaining_ms``: what is left of the call's deadline;
        the hold ends before it."""
        if self._closed:
            raise GatewayError(Code.INTERNAL_SERVER_ERROR, "the gateway is shutting down")
        self.start()
        batch = _Batch(
            need=self._batch_size(batch_size),
            invisible_ms=self._receive_invisible_ms(invisible_ms),
            max_attempts=max_delivery_attempts or self.settings.max_delivery_attempts,
            client_id=client_id,
            auto_renew=auto_renew,
            filter=filter,
            tag_match=tag_matcher(filter),
        )
        hold_ms = self._polling_ms(long_polling_timeout_ms, time_remaining_ms)
        sub = self._subscription(group, topic)
        queues = await self._readable_queues(sub)
        end = self.clock.now_ms() + hold_ms
        rounds = 0
        while not self._closed and not sub.dropped:
            self._take_due(sub, batch)
            self._take_ready(sub, batch)
            if batch.full:
                break
            rounds += 1
            moved = await self._scan(sub, queues, batch)
            if batch.out:
                break
            if moved and (rounds < MIN_SCAN_ROUNDS or self.clock.now_ms() < end):
                continue  # only skipped messages: read on at once
            if self.clock.now_ms() >= end - 1:
                break
            await self._hold(sub, queues, batch, end)
            if batch.out:
                break
        if batch.out:
            log.debug("group %s topic %s: delivered %d to %s", group, topic, len(batch.out), client_id)
        return batch.out

    def _batch_size(self, batch_size: int) -> int:
        if batch_size < 1:
            raise GatewayError(Code.BAD_REQUEST, f"batch size must be at least 1, got {batch_size}")
        return min(batch_size, self.settings.max_receive_batch_size)

    def _receive_invisible_ms(self, invisible_ms: int | None) -> int:
        if invisible_ms is None:
            return self.settings.default_invisible_duration_ms
        low, high = self.settings.min_invisible_duration_ms, self.settings.max_invisible_duration_ms
        if not low <= invisible_ms <= high:
            raise GatewayError(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible duration {invisible_ms} ms is outside [{low}, {high}] ms",
            )
        return invisible_ms

    def _polling_ms(self, requested: int | None, time_remaining_ms: int | None) -> int:
        if requested is not None and requested < 0:
            raise GatewayError(Code.ILLEGAL_POLLING_TIME, f"long polling timeout {requested} ms is negative")
        cap = self.settings.max_long_polling_timeout_ms
        hold = cap if requested is None else min(requested, cap)
        if time_remaining_ms is not None:
            hold = min(hold, max(0, time_remaining_ms - DEADLINE_RESERVE_MS))
        return hold

    def _subscription(self, group: str, topic: str) -> _Subscription:
        sub = self._subscriptions.get((group, topic))
        if sub is None:
            sub = self._subscriptions[(group, topic)] = _Subscription(group, topic)
        return sub

    async def _readable_queues(self, sub: _Subscription) -> list[_Queue]:
        """The topic's readable queues now (the route may change between receives)."""
        queues = [
            sub.queue(data.store_id, queue_id)
            for data in await self.backend.queues(sub.topic)
            if data.perm & PERM_READ
            for queue_id in range(data.read_queue_nums)
        ]
        if not queues:
            raise GatewayError(Code.FORBIDDEN, f"topic {sub.topic!r} has no readable queue")
        return queues

    # -- redelivery ------------------------------------------------------------------

    def _take_due(self, sub: _Subscription, batch: _Batch) -> None:
        """Redeliver in-flight messages whose deadline passed (renewing auto-renewed ones,
        dead-lettering those out of attempts) until the batch is full."""
        now = self.clock.now_ms()
        heap = sub.deadlines
        while heap and not batch.full and heap[0][0] <= now:
            _, ticket, entry = heapq.heappop(heap)
            if entry.ticket != ticket or entry.forwarding or not self._current(entry):
                continue
            if self._renew(sub, entry, now):
                continue
            if entry.attempts >= batch.max_attempts:
                self._dead_letter_later(sub, entry, reason=f"{entry.attempts} deliveries without ack")
                continue
            entry.attempts += 1
            batch.out.append(self._deliver(sub, entry, batch, now))
        self._compact(sub)

    def _renew(self, sub: _Subscription, entry: _InFlight, now: int) -> bool:
        """Extend an auto-renewed message whose deadline passed; False when it is not
        (or no longer) renewed."""
        if entry.renew_client is None:
            return False
        if now >= entry.renew_until_ms:
            self._stop_renewing(entry)
            return False
        if entry.deadline_ms <= now:
            self._schedule(sub, entry, min(now + entry.invisible_ms, entry.renew_until_ms))
        return True

    def _schedule(self, sub: _Subscription, entry: _InFlight, deadline_ms: int) -> None:
        entry.deadline_ms = deadline_ms
        entry.ticket = next(self._tickets)
        heapq.heappush(sub.deadlines, (deadline_ms, entry.ticket, entry))

    def _compact(self, sub: _Subscription) -> None:
        """Drop dead heap entries when they dominate (acked or rescheduled messages)."""
        if len(sub.deadlines) > 2 * sub.live + 64:
            sub.deadlines = [(e.deadline_ms, e.ticket, e) for q in sub.queues.values() for e in q.in_flight.values()]
            heapq.heapify(sub.deadlines)

    def _take_ready(self, sub: _Subscription, batch: _Batch) -> None:
        """Deliver FIFO messages whose predecessor in their group was settled, until the
        batch is full."""
        now = self.clock.now_ms()
        for q in list(sub.queues.values()):
            if batch.full:
                return
            if not q.ready:
                continue
            was_saturated = q.saturated
            while q.ready and not batch.full:
                offset = next(iter(q.ready))
                del q.ready[offset]
                view = q.waiting.pop(offset)
                batch.out.append(self._deliver(sub, self._in_flight(sub, q, view), batch, now))
            if was_saturated and not q.saturated:
                sub.released.fire()  # the queue may be read again

    def _in_flight(self, sub: _Subscription, q: _Queue, view: common_pb2.MessageView) -> _InFlight:
        """A message's first delivery: track it as in flight."""
        offset = view.queue_offset
        entry = _InFlight(
            sub=sub, queue=q, offset=offset, view=view, attempts=1, version=0, deadline_ms=0, invisible_ms=0,
            message_group=message_group(view),
        )  # fmt: skip
        q.in_flight[offset] = entry
        sub.live += 1
        return entry

    def _release(self, sub: _Subscription, entry: _InFlight) -> None:
        """``entry`` (of a FIFO group) is settled: the next message of its group, if one
        waits, becomes deliverable (held receives are woken)."""
        q = entry.queue
        chain = q.chains.get(entry.message_group)
        if chain is None:
            return
        i = bisect.bisect_left(chain, entry.offset)
        if i < len(chain) and chain[i] == entry.offset:
            del chain[i]
        if not chain:
            del q.chains[entry.message_group]
            return
        head = chain[0]
        if head in q.waiting and head not in q.ready:
            q.ready[head] = None
            sub.visible.fire()

    @staticmethod
    def _current(entry: _InFlight) -> bool:
        return entry.queue.in_flight.get(entry.offset) is entry

    def _deliver(self, sub: _Subscription, entry: _InFlight, batch: _Batch, now: int) -> Delivery:
        """(Re)issue ``entry`` to a consumer: a new version, handle and deadline."""
        entry.version = next(self._versions)
        entry.invisible_ms = batch.invisible_ms
        self._stop_renewing(entry)
        if batch.auto_renew and batch.client_id:
            entry.renew_client = batch.client_id
            entry.renew_until_ms = now + RENEW_MAX_MS
            self._renewing.setdefault(batch.client_id, set()).add(entry)
        self._schedule(sub, entry, now + batch.invisible_ms)
        return Delivery(
            view=entry.view,
            receipt_handle=self._handle(sub, entry),
            delivery_attempt=entry.attempts,
            invisible_ms=batch.invisible_ms,
        )

    def _handle(self, sub: _Subscription, entry: _InFlight) -> str:
        q = entry.queue
        return ReceiptHandle(
            self.epoch, q.store_id, sub.topic, q.queue_id, entry.offset, entry.version, self.instance_id
        ).encode()

    def _stop_renewing(self, entry: _InFlight) -> None:
        if entry.renew_client is not None:
            held = self._renewing.get(entry.renew_client)
            if held is not None:
                held.discard(entry)
                if not held:
                    del self._renewing[entry.renew_client]
            entry.renew_client = None

    # -- reading ---------------------------------------------------------------------

    async def _scan(self, sub: _Subscription, queues: list[_Queue], batch: _Batch) -> bool:
        """One round of reads without holding: ask each store for its queues' max
        offsets, then read the queues with a backlog (a share of the batch each, round
        robin), concurrently. True when a cursor moved without delivering (skipped
        messages: worth reading on at once)."""
        now = self.clock.now_ms()
        usable = [q for q in queues if q.retry_at <= now]
        if not usable:
            return False
        stores = sorted({q.store_id for q in usable})
        answers = await asyncio.gather(
            *(self.backend.queue_offsets(store_id, sub.topic) for store_id in stores), return_exceptions=True
        )
        bounds: dict[QueueKey, tuple[int, int]] = {}
        failed: list[TxmqError] = []
        for store_id, answer in zip(stores, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, TxmqError):
                    raise answer
                failed.append(answer)
                self._failed(batch, [q for q in usable if q.store_id == store_id], answer)
                continue
            for queue_id, (low, high) in answer.items():
                bounds[(store_id, queue_id)] = (low, high)
        if failed and len(failed) == len(stores):
            if batch.out:
                return False
            raise failed[0]
        await self._init_cursors(sub, [q for q in usable if q.cursor is None and q.key in bounds], bounds, batch)

        start = sub.round_robin % len(usable)
        sub.round_robin += 1
        ordered = usable[start:] + usable[:start]
        backlog = {
            q: max(1, bounds[q.key][1] - q.cursor)
            for q in ordered
            if not q.busy
            and not q.saturated
            and q.cursor is not None
            and q.key in bounds
            and q.cursor != bounds[q.key][1]
        }
        if not backlog:
            return False
        shares = _shares(list(backlog), backlog, batch.need - len(batch.out))
        for q in shares:
            q.busy = True
        results = await asyncio.gather(
            *(self._read(sub, q, batch, max_messages=n, hold_ms=0) for q, n in shares.items()),
            return_exceptions=True,
        )
        moved = False
        errors = 0
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, TxmqError):
                    errors += 1
                    continue
                raise result
            moved = moved or result
        if errors == len(results) and not batch.out and batch.error is not None:
            raise batch.error
        return moved

    async def _init_cursors(
        self, sub: _Subscription, queues: list[_Queue], bounds: dict[QueueKey, tuple[int, int]], batch: _Batch
    ) -> None:
        """Set the cursors of queues read for the first time: the group's committed
        offset, or (a new group) the queue's min offset, committed at the next flush."""
        tasks = []
        for q in queues:
            if q.init is None:
                q.init = asyncio.get_running_loop().create_task(self._init_cursor(sub, q, bounds[q.key][0]))
                q.init.add_done_callback(_retrieve)
            tasks.append(q.init)
        # Shared by concurrent receives: one going away must not cancel it for the others.
        results = await asyncio.gather(*(asyncio.shield(t) for t in tasks), return_exceptions=True)
        for q, result in zip(queues, results, strict=True):
            if q.init is not None and q.init.done():
                q.init = None
            if isinstance(result, TxmqError):
                self._failed(batch, [q], result)
            elif isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result

    async def _init_cursor(self, sub: _Subscription, q: _Queue, min_offset: int) -> None:
        committed = await self.backend.query_consume_offset(
            q.store_id, group=sub.group, topic=sub.topic, queue_id=q.queue_id
        )
        if q.cursor is not None:
            return
        if committed is None:
            q.cursor = min_offset
            log.info(
                "group %s has no offset on %s/%s/%d: starting at the min offset %d",
                sub.group, q.store_id, sub.topic, q.queue_id, min_offset,
            )  # fmt: skip
        else:
            q.cursor = q.committed = committed

    def _failed(self, batch: _Batch, queues: Iterable[_Queue], err: TxmqError) -> None:
        """A read (or offset query) failed: back the queues off, remember the error."""
        batch.error = err
        now = self.clock.now_ms()
        for q in queues:
            q.failures += 1
            delay = round(ERROR_BACKOFF.delay_ms(q.failures))
            q.retry_at = now + delay
            # A paused group (consume_enable off) is the operator's choice, not a fault:
            # its receives answer FORBIDDEN, and the log keeps quiet about it.
            level = logging.DEBUG if err.code == errors_pb2.CODE_CONSUME_DISABLED else logging.WARNING
            log.log(level, "read of %s/%d failed (%s); left alone %d ms", q.store_id, q.queue_id, err, delay)

    async def _read(self, sub: _Subscription, q: _Queue, batch: _Batch, *, max_messages: int, hold_ms: int) -> bool:
        """Read ``q`` (already marked busy) from its cursor, take what the batch still
        needs, and release it. The answer is applied with no ``await`` between the reply
        and the release, so no other receive reads the same offsets. True when the cursor
        moved without delivering anything. Errors back the queue off and are re-raised."""
        assert q.busy and q.cursor is not None
        offset = q.cursor
        request = pull_pb2.PullMessageRequest(
            consumer_group=sub.group,
            queue=common_pb2.MessageQueue(topic=sub.topic, store_id=q.store_id, queue_id=q.queue_id),
            queue_offset=offset,
            max_messages=max_messages,
            filter=batch.filter,
            suspend=hold_ms > 0,
            suspend_timeout_ms=hold_ms,
            client_id=batch.client_id,
        )
        try:
            try:
                reply = await self.backend.pull(request)
            except TxmqError as err:
                self._failed(batch, [q], err)
                raise
            q.failures = 0
            if q.cursor != offset:  # cannot happen while busy; never apply a stale read
                log.error("cursor of %s/%d moved during a read", q.store_id, q.queue_id)
                return False
            return self._apply(sub, q, batch, reply)
        finally:
            q.busy = False
            sub.released.fire()

    def _apply(self, sub: _Subscription, q: _Queue, batch: _Batch, reply: pull_pb2.PullMessageResponse) -> bool:
        assert q.cursor is not None
        before = q.cursor
        delivered = len(batch.out)
        if reply.status == pull_pb2.PULL_STATUS_FOUND:
            now = self.clock.now_ms()
            next_offset = reply.next_begin_offset
            for view in reply.messages:
                offset = view.queue_offset
                if offset < before:
                    continue
                if batch.tag_match is not None and not batch.tag_match(view.message.tags):
                    continue  # a tag hash collision: not for this group, counts as consumed
                if offset in q.in_flight or offset in q.waiting:
                    continue  # only after a cursor went back (OFFSET_ILLEGAL); never twice
                group = message_group(view)
                chain = q.chains.get(group) if group else None
                if chain is not None:  # an earlier message of its group is not settled
                    if q.saturated:
                        next_offset = offset
                        break
                    bisect.insort(chain, offset)
                    q.waiting[offset] = view
                    continue
                if batch.full:
                    next_offset = offset
                    break
                if group:
                    q.chains[group] = [offset]
                batch.out.append(self._deliver(sub, self._in_flight(sub, q, view), batch, now))
            else:
                if reply.messages:
                    next_offset = max(next_offset, reply.messages[-1].queue_offset + 1)
            q.cursor = max(next_offset, before)
        elif reply.status in (
            pull_pb2.PULL_STATUS_NO_NEW_MSG,
            pull_pb2.PULL_STATUS_NO_MATCHED_MSG,
            pull_pb2.PULL_STATUS_OFFSET_ILLEGAL,
        ):
            if reply.next_begin_offset != before:
                if reply.status == pull_pb2.PULL_STATUS_OFFSET_ILLEGAL or reply.next_begin_offset < before:
                    log.warning(
                        "group %s: offset %d of %s/%s/%d is outside the queue [%d, %d]; continuing at %d",
                        sub.group, before, q.store_id, sub.topic, q.queue_id,
                        reply.min_offset, reply.max_offset, reply.next_begin_offset,
                    )  # fmt: skip
                q.cursor = reply.next_begin_offset
        else:
            log.warning("unexpected pull status %s on %s/%d", reply.status, q.store_id, q.queue_id)
        return len(batch.out) == delivered and q.cursor != before

    async def _hold(self, sub: _Subscription, queues: list[_Queue], batch: _Batch, end: int) -> None:
        """Wait for a message: held reads on every queue nobody else is reading, until
        one returns, another receive releases a queue we could not read, an in-flight
        message becomes due (or visible by a change), a FIFO message is released (its
        predecessor settled), a backed-off queue may be read again, or the polling time
        ends."""
        if any(q.ready for q in sub.queues.values()):
            return  # a FIFO message was released while this receive was reading
        loop = asyncio.get_running_loop()
        now = self.clock.now_ms()
        timeout_ms = end - now
        if sub.deadlines:
            timeout_ms = min(timeout_ms, max(0, sub.deadlines[0][0] - now))
        backed_off = [q.retry_at for q in queues if q.retry_at > now]
        if backed_off:
            timeout_ms = min(timeout_ms, min(backed_off) - now)
        if timeout_ms <= 0:
            return
        free = [q for q in queues if not q.busy and not q.saturated and q.cursor is not None and q.retry_at <= now]
        hold_ms = end - now
        reads: list[asyncio.Task[bool]] = []
        held = free if hold_ms >= 1 else []
        for q in held:
            q.busy = True
            reads.append(loop.create_task(self._read(sub, q, batch, max_messages=batch.need, hold_ms=hold_ms)))
        wakers: list[asyncio.Future[None]] = [sub.visible.wait()]
        if len(reads) < len(queues):
            wakers.append(sub.released.wait())  # someone else reads a queue we do not
        timer = loop.create_task(self.clock.sleep_ms(timeout_ms))  # the hold's end, on the clock
        waiting: list[asyncio.Future[Any]] = [*reads, *wakers, timer]
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            for task in reads:
                task.cancel()
            results = await asyncio.gather(*reads, return_exceptions=True)
        early = self.clock.now_ms() < end - EARLY_ANSWER_MS
        for q, result in zip(held, results, strict=True):
            if isinstance(result, TxmqError):
                if not result.retriable and not batch.out:
                    raise result  # the request itself is refused (filter, group, topic)
            elif isinstance(result, BaseException):
                if not isinstance(result, asyncio.CancelledError):
                    raise result
            elif result is False and early and not batch.out:
                # Answered empty long before its hold ended (a pull instance stopping):
                # do not hold on it again at once.
                q.retry_at = self.clock.now_ms() + ERROR_BACKOFF_MS
        if not batch.out and batch.error is not None and all(q.retry_at > self.clock.now_ms() for q in queues):
            raise batch.error  # every queue failed lately

    # -- ack / change / dead letter -------------------------------------------------

    def _lookup(self, group: str, topic: str, receipt_handle: str, message_id: str) -> tuple[_Subscription, _InFlight]:
        """The in-flight message a current handle names; INVALID_RECEIPT_HANDLE when the
        handle is malformed, from another gateway epoch, superseded, or expired."""
        try:
            handle = ReceiptHandle.decode(receipt_handle)
        except ValueError:
            raise GatewayError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle is malformed") from None
        if handle.epoch != self.epoch:
            issuer = f"gateway {handle.owner}" if handle.owner else "another gateway instance"
            raise GatewayError(
                Code.INVALID_RECEIPT_HANDLE,
                f"the receipt handle was issued by {issuer} (before a restart, or before the group "
                "moved to this gateway)",
            )
        if handle.topic != topic:
            raise GatewayError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is not one of topic {topic!r}")
        sub = self._subscriptions.get((group, topic))
        q = sub.queues.get((handle.store_id, handle.queue_id)) if sub is not None else None
        entry = q.in_flight.get(handle.offset) if q is not None else None
        if sub is None or entry is None or entry.version != handle.version:
            raise GatewayError(
                Code.INVALID_RECEIPT_HANDLE,
                "the receipt handle is stale: the message was acked, redelivered or its invisible duration changed",
            )
        unique_id = entry.view.message.unique_id
        if message_id and unique_id and message_id != unique_id:
            raise GatewayError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is not one of message {message_id}")
        now = self.clock.now_ms()
        self._renew(sub, entry, now)
        if entry.deadline_ms <= now:
            raise GatewayError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle is expired")
        return sub, entry

    def _settle(self, sub: _Subscription, entry: _InFlight) -> None:
        """Consumed: forget it (its offset no longer holds the group's offset back)."""
        if self._current(entry):
            del entry.queue.in_flight[entry.offset]
            sub.live -= 1
            if entry.message_group:
                self._release(sub, entry)
        self._stop_renewing(entry)
        entry.ticket = 0

    def _remember_ack(self, receipt_handle: str) -> None:
        self._recent_acks[receipt_handle] = None
        if len(self._recent_acks) > RECENT_ACKS:
            self._recent_acks.popitem(last=False)

    async def ack(self, *, group: str, topic: str, receipt_handle: str, message_id: str) -> None:
        """Consumed: never deliver it to the group again."""
        if receipt_handle in self._recent_acks:
            return  # a retried ack
        sub, entry = self._lookup(group, topic, receipt_handle, message_id)
        self._settle(sub, entry)
        self._remember_ack(receipt_handle)

    async def change_invisible_duration(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str, invisible_ms: int
    ) -> str:
        """Invisible for ``invisible_ms`` from now; returns the new receipt handle (the
        old one stops working). Stops auto-renewal of the message."""
        high = self.settings.max_invisible_duration_ms
        if not 0 <= invisible_ms <= high:
            raise GatewayError(
                Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is outside [0, {high}] ms"
            )
        sub, entry = self._lookup(group, topic, receipt_handle, message_id)
        self._stop_renewing(entry)
        entry.version = next(self._versions)
        entry.invisible_ms = invisible_ms
        self._schedule(sub, entry, self.clock.now_ms() + invisible_ms)
        self._compact(sub)
        sub.visible.fire()
        return self._handle(sub, entry)

    async def forward_to_dead_letter_queue(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str
    ) -> None:
        """Move the message to %DLQ%<group> and ack it."""
        sub, entry = self._lookup(group, topic, receipt_handle, message_id)
        entry.forwarding = True
        try:
            await self._send_dead_letter(sub, entry)
        except BaseException:
            entry.forwarding = False
            if self._current(entry):  # its deadline may have been dropped meanwhile
                self._schedule(sub, entry, entry.deadline_ms)
            raise
        entry.forwarding = False
        self._settle(sub, entry)
        self._remember_ack(receipt_handle)
        log.info(
            "group %s: message %s of %s forwarded to %s%s on request",
            group, entry.view.message.unique_id, topic, DLQ_GROUP_TOPIC_PREFIX, group,
        )  # fmt: skip

    def _dead_letter_later(self, sub: _Subscription, entry: _InFlight, *, reason: str) -> None:
        entry.forwarding = True
        task = asyncio.get_running_loop().create_task(self._dead_letter(sub, entry, reason))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _dead_letter(self, sub: _Subscription, entry: _InFlight, reason: str) -> None:
        try:
            await self._send_dead_letter(sub, entry)
        except Exception as exc:  # noqa: BLE001 - retried
            entry.forwarding = False
            if self._current(entry):
                self._schedule(sub, entry, self.clock.now_ms() + DLQ_RETRY_MS)
                sub.visible.fire()
            log.warning(
                "group %s: dead-lettering message %s of %s failed (%s); retried in %d ms",
                sub.group, entry.view.message.unique_id, sub.topic, exc, DLQ_RETRY_MS,
            )  # fmt: skip
            return
        entry.forwarding = False
        self._settle(sub, entry)
        log.info(
            "group %s: message %s of %s moved to %s%s (%s)",
            sub.group, entry.view.message.unique_id, sub.topic, DLQ_GROUP_TOPIC_PREFIX, sub.group, reason,
        )  # fmt: skip

    async def _send_dead_letter(self, sub: _Subscription, entry: _InFlight) -> None:
        """Send a copy of the message to %DLQ%<group> on the store that holds it."""
        store_id = entry.queue.store_id
        dlq = DLQ_GROUP_TOPIC_PREFIX + sub.group
        if (store_id, dlq) not in self._dlq_topics:
            await self.backend.ensure_topic(store_id, dlq, queue_nums=1)
            self._dlq_topics.add((store_id, dlq))
        await self.backend.send(store_id, dead_letter_copy(entry.view, dlq, sub.topic))

    # -- pull consumers: PullMessage / UpdateOffset ---------------------------------

    async def pull(
        self,
        *,
        group: str,
        store_id: str,
        topic: str,
        queue_id: int,
        offset: int,
        batch_size: int,
        filter: common_pb2.FilterExpression,
        long_polling_timeout_ms: int | None,
        time_remaining_ms: int | None,
        client_id: str = "",
    ) -> Pulled:
        """One read of a queue from ``offset`` for a pull consumer (the client keeps its
        offsets: nothing is committed, nothing becomes invisible), held up to the polling
        time when nothing is there, as a receive is (``_polling_ms``). A batch size of 0
        means 32 (RocketMQ's pull default)."""
        if not group:
            raise GatewayError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group is required")
        if offset < 0:
            raise GatewayError(Code.ILLEGAL_OFFSET, f"offset {offset} is negative")
        need = self._batch_size(batch_size or 32)
        hold = self._polling_ms(long_polling_timeout_ms, time_remaining_ms)
        reply = await self.backend.pull(
            pull_pb2.PullMessageRequest(
                consumer_group=group,
                queue=common_pb2.MessageQueue(topic=topic, store_id=store_id, queue_id=queue_id),
                queue_offset=offset,
                max_messages=need,
                filter=filter,
                suspend=hold > 0,
                suspend_timeout_ms=hold,
                client_id=client_id,
            )
        )
        if reply.status == pull_pb2.PULL_STATUS_OFFSET_ILLEGAL:
            return Pulled(
                Code.ILLEGAL_OFFSET,
                f"offset {offset} is outside queue {queue_id} of {topic} on {store_id} "
                f"[{reply.min_offset}, {reply.max_offset}]; next_offset is where to go on",
                [],
                reply.next_begin_offset,
            )
        if reply.status != pull_pb2.PULL_STATUS_FOUND:
            return Pulled(Code.MESSAGE_NOT_FOUND, "no new message", [], max(reply.next_begin_offset, offset))
        match = tag_matcher(filter)
        views = [v for v in reply.messages if v.queue_offset >= offset and (match is None or match(v.message.tags))][
            :need
        ]
        next_offset = reply.next_begin_offset
        if reply.messages:
            next_offset = max(next_offset, reply.messages[-1].queue_offset + 1)
        if len(views) == need and views[-1].queue_offset + 1 < next_offset:
            next_offset = views[-1].queue_offset + 1  # the rest is for the next pull
        if not views:
            return Pulled(Code.MESSAGE_NOT_FOUND, "no matching message", [], max(next_offset, offset))
        return Pulled(Code.OK, "OK", views, next_offset)

    async def update_offset(self, *, group: str, store_id: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit a pull consumer group's offset of a queue (0 .. the queue's max offset).
        A group this gateway serves with ReceiveMessage keeps its own offsets (the lowest
        un-acked message of each queue, committed every ``commit_interval_ms``): refused
        with PRECONDITION_FAILED rather than overwritten at the next commit."""
        if not group:
            raise GatewayError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group is required")
        if offset < 0:
            raise GatewayError(Code.ILLEGAL_OFFSET, f"offset {offset} is negative")
        sub = self._subscriptions.get((group, topic))
        if sub is not None and not sub.dropped:
            raise GatewayError(
                Code.PRECONDITION_FAILED,
                f"group {group} receives {topic} with ReceiveMessage through this gateway, which keeps its "
                "offsets (committed from its acks); UpdateOffset is for pull consumers",
            )
        bounds = (await self.backend.queue_offsets(store_id, topic)).get(queue_id)
        if bounds is None:
            raise GatewayError(Code.BAD_REQUEST, f"topic {topic} has no queue {queue_id} on {store_id}")
        if offset > bounds[1]:
            raise GatewayError(
                Code.ILLEGAL_OFFSET, f"offset {offset} is beyond queue {queue_id}'s max offset {bounds[1]}"
            )
        await self.backend.commit_consume_offset(store_id, group=group, topic=topic, queue_id=queue_id, offset=offset)

    # -- clients ---------------------------------------------------------------------

    def in_flight(self) -> list[tuple[str, str, int]]:
        """(group, topic, messages delivered and not yet acked) per subscription (metrics)."""
        return [(group, topic, sub.live) for (group, topic), sub in self._subscriptions.items()]

    def client_gone(self, client_id: str) -> None:
        """``client_id`` terminated or expired: its auto-renewed messages become visible
        to the group again after CLEAR_INVISIBLE_MS (their handles keep working until)."""
        entries = self._renewing.pop(client_id, set())
        now = self.clock.now_ms()
        for entry in entries:
            entry.renew_client = None
            if not self._current(entry) or entry.forwarding:
                continue
            sub = entry.sub
            deadline = (
                entry.deadline_ms if now < entry.deadline_ms < now + CLEAR_INVISIBLE_MS else now + CLEAR_INVISIBLE_MS
            )
            self._schedule(sub, entry, deadline)
            sub.visible.fire()
        if entries:
            log.info("client %s gone: %d auto-renewed messages visible again soon", client_id, len(entries))

    # -- ownership -------------------------------------------------------------------

    def drop_group(self, group: str) -> None:
        """This gateway no longer owns ``group`` (another gateway may serve it now):
        forget its state, so its receipt handles answer INVALID_RECEIPT_HANDLE and a
        later claim starts again from the committed offsets; held receives of the group
        end with what they have. Its lowest un-acked offsets are committed once more in
        the background (every offset below them was acked here, so the new owner skips
        only consumed messages)."""
        dropped = [self._subscriptions.pop(key) for key in [k for k in self._subscriptions if k[0] == group]]
        for sub in dropped:
            sub.dropped = True
            for q in sub.queues.values():
                for entry in q.in_flight.values():
                    self._stop_renewing(entry)
            sub.released.fire()
            sub.visible.fire()
        if dropped and not self._closed:
            task = asyncio.get_running_loop().create_task(self.flush(dropped))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            task.add_done_callback(_retrieve)

    # -- offsets ---------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            await self.clock.sleep_ms(self.commit_interval_ms)
            try:
                await self.flush()
            except Exception:  # retried next round
                log.warning("committing consume offsets failed", exc_info=True)

    async def flush(self, subscriptions: Iterable[_Subscription] | None = None) -> None:
        """Commit every queue's lowest un-acked offset that the store does not hold yet
        (one CommitConsumeOffset per changed queue), of every subscription or of the
        ones given."""
        if self._flush_lock is None:
            self._flush_lock = asyncio.Lock()
        async with self._flush_lock:
            jobs: list[tuple[_Subscription, _Queue, int]] = []
            for sub in self._subscriptions.values() if subscriptions is None else subscriptions:
                for q in sub.queues.values():
                    target = q.commit_target()
                    if target is not None and target != q.committed:
                        jobs.append((sub, q, target))
            if not jobs:
                return
            results = await asyncio.gather(
                *(
                    self.backend.commit_consume_offset(
                        q.store_id, group=sub.group, topic=sub.topic, queue_id=q.queue_id, offset=t
                    )
                    for sub, q, t in jobs
                ),
                return_exceptions=True,
            )
            for (sub, q, target), result in zip(jobs, results, strict=True):
                if isinstance(result, BaseException):
                    log.warning(
                        "group %s: committing offset %d of %s/%s/%d failed: %s",
                        sub.group, target, q.store_id, sub.topic, q.queue_id, result,
                    )  # fmt: skip
                else:
                    q.committed = target


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a shared task's failure as seen (its awaiters handle it, or are gone)."""
    if not task.cancelled():
        task.exception()


def message_group(view: common_pb2.MessageView) -> str:
    """The FIFO message group of a message; empty: none."""
    return view.message.properties.get(PROPERTY_MESSAGE_GROUP, "")


def _shares(order: list[_Queue], backlog: dict[_Queue, int], need: int) -> dict[_Queue, int]:
    """Split ``need`` messages over queues round robin (in ``order``), no queue getting
    more than its backlog, so one busy queue does not starve the others."""
    shares: dict[_Queue, int] = {}
    left = dict(backlog)
    while need > 0 and left:
        for q in list(left):
            if need == 0:
                break
            shares[q] = shares.get(q, 0) + 1
            need -= 1
            left[q] -= 1
            if left[q] == 0:
                del left[q]
    return {q: shares[q] for q in order if q in shares}


def dead_letter_copy(view: common_pb2.MessageView, dlq_topic: str, origin_topic: str) -> common_pb2.Message:
    """The message as sent to a dead-letter topic: body, tag, keys, unique id, flag,
    born time and properties kept, minus what the system set for the original's
    delivery (REAL_TOPIC, transaction bookkeeping, ...); TXMQ_DLQ_ORIGIN_TOPIC names
    the origin."""
    src = view.message
    copy = common_pb2.Message(
        topic=dlq_topic,
        body=src.body,
        tags=src.tags,
        keys=list(src.keys),
        unique_id=src.unique_id,
        flag=src.flag,
        born_timestamp_ms=src.born_timestamp_ms or view.store_timestamp_ms,
    )
    for name, value in src.properties.items():
        if is_system_property(name):
            continue
        copy.properties[name] = value
    copy.properties[PROPERTY_DLQ_ORIGIN_TOPIC] = origin_topic
    return copy
