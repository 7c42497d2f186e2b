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
  in the gateway's memory (body included), at most ``max_waiting_per_queue`` per queue;
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

The pieces, one job each; ``SimpleConsumerCore`` (here) validates the calls, runs the
receive loop and the offset committer, and owns the state they share:

- consumer_state.py: the state (subscriptions, queues, in-flight messages, batches),
  ``ConsumerTuning`` (the timings and limits above);
- consumer_receipts.py: receipt handles, issued and resolved (``Receipts``);
- consumer_inflight.py: deadlines, auto-renewal, redelivery and settlement of delivered
  messages, FIFO release (``InFlightTracker``);
- consumer_reader.py: reading and holding on the queues for a receive (``QueueReader``);
- consumer_acks.py: ack, change of invisible duration, forward to the DLQ (``Acks``);
- consumer_dead_letters.py: the copies sent to ``%DLQ%<group>`` (``DeadLetterQueues``);
- consumer_offsets.py: committing the lowest un-acked offsets (``OffsetCommitter``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from txmq.protocol import PERM_READ
from txmq.v1 import common_pb2, pull_pb2
from txmq_gateway.backend import Backend
from txmq_gateway.consumer_acks import Acks
from txmq_gateway.consumer_dead_letters import DeadLetterQueues
from txmq_gateway.consumer_inflight import InFlightTracker
from txmq_gateway.consumer_offsets import OffsetCommitter
from txmq_gateway.consumer_reader import QueueReader
from txmq_gateway.consumer_receipts import Receipts
from txmq_gateway.consumer_state import (
    Batch,
    ConsumerTuning,
    Delivery,
    QueueState,
    Subscription,
    Subscriptions,
    retrieve,
    tag_matcher,
)
from txmq_gateway.convert import HandleSigner
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code
from txmq_runtime.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("txmq.gateway.consumer")


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
        tuning: ConsumerTuning | None = None,
        handles: HandleSigner | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.clock = clock  # now_ms for deadlines, holds and backoff; sleep_ms for the committer
        self.tuning = tuning or ConsumerTuning()
        self._subscriptions: Subscriptions = {}
        self._background: set[asyncio.Task[None]] = set()
        self._receipts = Receipts(
            self._subscriptions,
            self.tuning,
            epoch=epoch or secrets.token_hex(4),
            instance_id=instance_id,
            signer=handles or HandleSigner.ephemeral(),
        )
        dead_letters = DeadLetterQueues(backend)
        self._tracker = InFlightTracker(clock, self.tuning, self._receipts, dead_letters, self._background)
        self._reader = QueueReader(backend, clock, self.tuning, self._tracker)
        self._acks = Acks(settings, clock, self._receipts, self._tracker, dead_letters)
        self._offsets = OffsetCommitter(backend, clock, self._subscriptions, commit_interval_ms)
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the offset committer (also started by the first receive)."""
        if self._flusher is None and not self._closed:
            self._flusher = asyncio.get_running_loop().create_task(self._offsets.run(), name="txmq-gateway-commit")

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
        batch = Batch(
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
            self._tracker.take_due(sub, batch)
            self._tracker.take_ready(sub, batch)
            if batch.full:
                break
            rounds += 1
            moved = await self._reader.scan(sub, queues, batch)
            if batch.out:
                break
            if moved and (rounds < self.tuning.min_scan_rounds or self.clock.now_ms() < end):
                continue  # only skipped messages: read on at once
            if self.clock.now_ms() >= end - 1:
                break
            await self._reader.hold(sub, queues, batch, end)
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
            hold = min(hold, max(0, time_remaining_ms - self.tuning.deadline_reserve_ms))
        return hold

    def _subscription(self, group: str, topic: str) -> Subscription:
        sub = self._subscriptions.get((group, topic))
        if sub is None:
            sub = self._subscriptions[(group, topic)] = Subscription(
                group, topic, max_waiting=self.tuning.max_waiting_per_queue
            )
        return sub

    async def _readable_queues(self, sub: Subscription) -> list[QueueState]:
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

    # -- ack / change / dead letter -------------------------------------------------

    async def ack(self, *, group: str, topic: str, receipt_handle: str, message_id: str) -> None:
        """Consumed: never deliver it to the group again."""
        await self._acks.ack(group=group, topic=topic, receipt_handle=receipt_handle, message_id=message_id)

    async def change_invisible_duration(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str, invisible_ms: int
    ) -> str:
        """Invisible for ``invisible_ms`` from now; returns the new receipt handle (the
        old one stops working). Stops auto-renewal of the message."""
        return await self._acks.change_invisible_duration(
            group=group, topic=topic, receipt_handle=receipt_handle, message_id=message_id, invisible_ms=invisible_ms
        )

    async def forward_to_dead_letter_queue(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str
    ) -> None:
        """Move the message to %DLQ%<group> and ack it."""
        await self._acks.forward_to_dead_letter_queue(
            group=group, topic=topic, receipt_handle=receipt_handle, message_id=message_id
        )

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
        to the group again after ``clear_invisible_ms`` (their handles keep working until)."""
        self._tracker.client_gone(client_id)

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
            self._tracker.forget(sub)
            sub.released.fire()
            sub.visible.fire()
        if dropped and not self._closed:
            task = asyncio.get_running_loop().create_task(self.flush(dropped))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            task.add_done_callback(retrieve)

    # -- offsets ---------------------------------------------------------------------

    async def flush(self, subscriptions: Iterable[Subscription] | None = None) -> None:
        """Commit every queue's lowest un-acked offset that the store does not hold yet
        (one CommitConsumeOffset per changed queue), of every subscription or of the
        ones given."""
        await self._offsets.flush(subscriptions)
