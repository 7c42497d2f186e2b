"""In-flight messages of the SimpleConsumer (the model: consumer.py): each delivered
message is invisible to its group until a deadline (a heap per subscription), renewed
while an auto-renewing client lives, redelivered or dead-lettered when the deadline
passes, and settled by an ack or a dead letter, which releases the next message of its
FIFO group."""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import logging

from txmq.protocol import DLQ_GROUP_TOPIC_PREFIX
from txmq.v1 import common_pb2
from txmq_gateway.consumer_dead_letters import DeadLetterQueues
from txmq_gateway.consumer_receipts import Receipts
from txmq_gateway.consumer_state import (
    Batch,
    ConsumerTuning,
    Delivery,
    InFlight,
    QueueState,
    Subscription,
    message_group,
)
from txmq_runtime.clock import Clock

log = logging.getLogger("txmq.gateway.consumer")


class InFlightTracker:
    """Deadlines, renewals, redeliveries and settlement of delivered messages, for every
    subscription of the core. ``background``: the core's set of background tasks (dead
    letters are sent in it; the core cancels them on close)."""

    def __init__(
        self,
        clock: Clock,
        tuning: ConsumerTuning,
        receipts: Receipts,
        dead_letters: DeadLetterQueues,
        background: set[asyncio.Task[None]],
    ) -> None:
        self._clock = clock
        self._tuning = tuning
        self._receipts = receipts
        self._dead_letters = dead_letters
        self._background = background
        self._tickets = itertools.count(1)
        self._renewing: dict[str, set[InFlight]] = {}

    # -- delivery ----------------------------------------------------------------------

    def track(self, sub: Subscription, q: QueueState, view: common_pb2.MessageView) -> InFlight:
        """A message's first delivery: track it as in flight."""
        offset = view.queue_offset
        entry = InFlight(
            sub=sub, queue=q, offset=offset, view=view, attempts=1, version=0, deadline_ms=0, invisible_ms=0,
            message_group=message_group(view),
        )  # fmt: skip
        q.in_flight[offset] = entry
        sub.live += 1
        return entry

    def deliver(self, sub: Subscription, entry: InFlight, batch: Batch, now: int) -> Delivery:
        """(Re)issue ``entry`` to a consumer: a new version, handle and deadline."""
        entry.invisible_ms = batch.invisible_ms
        self.stop_renewing(entry)
        if batch.auto_renew and batch.client_id:
            entry.renew_client = batch.client_id
            entry.renew_until_ms = now + self._tuning.renew_max_ms
            self._renewing.setdefault(batch.client_id, set()).add(entry)
        self.schedule(sub, entry, now + batch.invisible_ms)
        return Delivery(
            view=entry.view,
            receipt_handle=self._receipts.issue(sub, entry),
            delivery_attempt=entry.attempts,
            invisible_ms=batch.invisible_ms,
        )

    # -- redelivery ------------------------------------------------------------------

    def take_due(self, sub: Subscription, batch: Batch) -> None:
        """Redeliver in-flight messages whose deadline passed (renewing auto-renewed ones,
        dead-lettering those out of attempts) until the batch is full."""
        now = self._clock.now_ms()
        heap = sub.deadlines
        while heap and not batch.full and heap[0][0] <= now:
            _, ticket, entry = heapq.heappop(heap)
            if entry.ticket != ticket or entry.forwarding or not self.current(entry):
                continue
            if self.renew(sub, entry, now):
                continue
            if entry.attempts >= batch.max_attempts:
                self._dead_letter_later(sub, entry, reason=f"{entry.attempts} deliveries without ack")
                continue
            entry.attempts += 1
            batch.out.append(self.deliver(sub, entry, batch, now))
        self.compact(sub)

    def renew(self, sub: Subscription, entry: InFlight, now: int) -> bool:
        """Extend an auto-renewed message whose deadline passed; False when it is not
        (or no longer) renewed."""
        if entry.renew_client is None:
            return False
        if now >= entry.renew_until_ms:
            self.stop_renewing(entry)
            return False
        if entry.deadline_ms <= now:
            self.schedule(sub, entry, min(now + entry.invisible_ms, entry.renew_until_ms))
        return True

    def schedule(self, sub: Subscription, entry: InFlight, deadline_ms: int) -> None:
        entry.deadline_ms = deadline_ms
        entry.ticket = next(self._tickets)
        heapq.heappush(sub.deadlines, (deadline_ms, entry.ticket, entry))

    def compact(self, sub: Subscription) -> None:
        """Drop dead heap entries when they dominate (acked or rescheduled messages)."""
        if len(sub.deadlines) > 2 * sub.live + 64:
            sub.deadlines = [(e.deadline_ms, e.ticket, e) for q in sub.queues.values() for e in q.in_flight.values()]
            heapq.heapify(sub.deadlines)

    def take_ready(self, sub: Subscription, batch: Batch) -> None:
        """Deliver FIFO messages whose predecessor in their group was settled, until the
        batch is full."""
        now = self._clock.now_ms()
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
                batch.out.append(self.deliver(sub, self.track(sub, q, view), batch, now))
            if was_saturated and not q.saturated:
                sub.released.fire()  # the queue may be read again

    @staticmethod
    def current(entry: InFlight) -> bool:
        return entry.queue.in_flight.get(entry.offset) is entry

    # -- settling ----------------------------------------------------------------------

    def settle(self, sub: Subscription, entry: InFlight) -> None:
        """Consumed: forget it (its offset no longer holds the group's offset back)."""
        if self.current(entry):
            del entry.queue.in_flight[entry.offset]
            sub.live -= 1
            if entry.message_group:
                self._release(sub, entry)
        self.stop_renewing(entry)
        entry.ticket = 0

    def _release(self, sub: Subscription, entry: InFlight) -> None:
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

    def _dead_letter_later(self, sub: Subscription, entry: InFlight, *, reason: str) -> None:
        entry.forwarding = True
        task = asyncio.get_running_loop().create_task(self._dead_letter(sub, entry, reason))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _dead_letter(self, sub: Subscription, entry: InFlight, reason: str) -> None:
        retry_ms = self._tuning.dlq_retry_ms
        try:
            await self._dead_letters.send(sub, entry)
        except Exception as exc:  # noqa: BLE001 - retried
            entry.forwarding = False
            if self.current(entry):
                self.schedule(sub, entry, self._clock.now_ms() + retry_ms)
                sub.visible.fire()
            log.warning(
                "group %s: dead-lettering message %s of %s failed (%s); retried in %d ms",
                sub.group, entry.view.message.unique_id, sub.topic, exc, retry_ms,
            )  # fmt: skip
            return
        entry.forwarding = False
        self.settle(sub, entry)
        log.info(
            "group %s: message %s of %s moved to %s%s (%s)",
            sub.group, entry.view.message.unique_id, sub.topic, DLQ_GROUP_TOPIC_PREFIX, sub.group, reason,
        )  # fmt: skip

    # -- auto-renewal ----------------------------------------------------------------

    def stop_renewing(self, entry: InFlight) -> None:
        if entry.renew_client is not None:
            held = self._renewing.get(entry.renew_client)
            if held is not None:
                held.discard(entry)
                if not held:
                    del self._renewing[entry.renew_client]
            entry.renew_client = None

    def forget(self, sub: Subscription) -> None:
        """``sub`` was dropped: none of its messages is renewed any more."""
        for q in sub.queues.values():
            for entry in q.in_flight.values():
                self.stop_renewing(entry)

    def client_gone(self, client_id: str) -> None:
        """``client_id`` terminated or expired: its auto-renewed messages become visible
        to the group again after ``clear_invisible_ms`` (their handles keep working until)."""
        entries = self._renewing.pop(client_id, set())
        now = self._clock.now_ms()
        clear_ms = self._tuning.clear_invisible_ms
        for entry in entries:
            entry.renew_client = None
            if not self.current(entry) or entry.forwarding:
                continue
            sub = entry.sub
            deadline = entry.deadline_ms if now < entry.deadline_ms < now + clear_ms else now + clear_ms
            self.schedule(sub, entry, deadline)
            sub.visible.fire()
        if entries:
            log.info("client %s gone: %d auto-renewed messages visible again soon", client_id, len(entries))
