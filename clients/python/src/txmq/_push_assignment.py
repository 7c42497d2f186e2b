"""The push consumer's queue assignment: the rebalance decides which queues are this
consumer's (``txmq._rebalance``: the split and the hand-over rule; orderly, the store's
queue locks), and a queue is taken on (from its committed offset, then pulled) or
released (pulls stopped, running listeners waited for, offset committed).
docs/consumers.md "Allocation" and "Hand-over".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from txmq._offset_store import OffsetStore
from txmq._process_queue import ProcessQueue
from txmq._push_context import PushContext, retry_topic_absent
from txmq._rebalance import allocate_averagely
from txmq.errors import TxmqError
from txmq.message import MessageQueue
from txmq.models import TopicRoute
from txmq.v1 import errors_pb2

log = logging.getLogger("txmq.consumer")

# Orderly mode: a queue the store would not lock yet is asked for again this soon
# (RocketMQ rebalances again after 500 ms when a lock failed).
_LOCK_RETRY_S = 0.5


class QueueAssignment:
    def __init__(self, consumer: PushContext, offsets: OffsetStore) -> None:
        self._c = consumer
        self._offsets = offsets

    def rebalance(self, now: float) -> float | None:
        """Release queues no longer mine, take new ones when the hand-over rule allows;
        returns when to try again for queues still waiting, if any."""
        c = self._c
        assert c._client is not None
        view = c._view
        if c._orderly is not None:
            for mq in c._orderly.take_lapsed():
                c._release(mq)  # locked again below, as a queue newly ours
        if not view.known or view.members is None:
            return None  # no heartbeat answered yet: keep what we have
        with c._lock:
            subs = dict(c._subs)
            owned = set(c._queues)
        retry_at: float | None = None
        for mq in sorted(mq for mq in owned if mq.topic not in subs):
            c._release(mq)
        for topic in subs:
            what = f"route of topic {topic}"
            try:
                route = c._client.route(topic)
                queues = sorted(route.read_queues())
            except TxmqError as err:
                if not retry_topic_absent(c._config, topic, err):
                    c._handle(("route", topic), what, err)
                continue
            c._failures.recovered(("route", topic), f"consumer {c.client_id}: {what}")
            mine = set(allocate_averagely(queues, list(view.members), c.client_id))
            for mq in sorted(mq for mq in owned if mq.topic == topic and mq not in mine):
                c._release(mq)
            priority = self._mark_priority(topic, route)
            # A priority topic's higher queues are taken first, so a lower one's first
            # pull already waits for them (``ProcessQueue.priority``).
            for mq in sorted(mine - owned, key=lambda m: (m.store_id, -m.queue_id if priority(m) else m.queue_id)):
                if not c._running:
                    return None
                # Orderly: the store's queue lock decides when a queue changes hands.
                if c._orderly is None and not view.may_take_over(now):
                    retry_at = view.takeover_at()
                    continue
                what = f"starting on {mq}"
                try:
                    if self.acquire(mq, priority=priority(mq)) is False:  # orderly: not locked for us yet
                        at = now + _LOCK_RETRY_S
                        retry_at = at if retry_at is None else min(retry_at, at)
                        continue
                except TxmqError as err:
                    c._handle(("acquire", mq), what, err)
                    if not c._running:
                        return None
                    at = now + c._config.pull_error_backoff_s
                    retry_at = at if retry_at is None else min(retry_at, at)
                else:
                    c._failures.recovered(("acquire", mq), f"consumer {c.client_id}: {what}")
        return retry_at

    def _mark_priority(self, topic: str, route: TopicRoute) -> Callable[[MessageQueue], bool]:
        """Mark the owned queues of ``topic`` that are a priority topic's (it may have
        become one: a retry topic, by a send-back); the same test for new queues.
        Orderly consumers read each queue in order under its lock: no hold-back (RocketMQ:
        priority topics are for concurrent consumers)."""
        c = self._c

        def priority(mq: MessageQueue) -> bool:
            return c._orderly is None and route.is_priority(mq.store_id)

        with c._lock:
            for mq, pq in c._queues.items():
                if mq.topic == topic:
                    pq.priority = priority(mq)
        return priority

    def acquire(self, mq: MessageQueue, *, priority: bool = False) -> bool:
        """Start consuming ``mq`` from its committed offset (``priority``: a queue of a
        priority topic); False when orderly and the store did not lock it for this
        consumer (yet)."""
        c = self._c
        locked_until = None
        if c._orderly is not None:
            locked_until = c._orderly.lock_new(mq)  # before the offset is read
            if locked_until is None:
                return False
        try:
            offset = self._offsets.start_offset(mq)
        except TxmqError as err:
            if c._orderly is not None and err.code == errors_pb2.CODE_QUEUE_LOCKED:
                return False  # the lock ran out already and another client took it
            raise
        pq = ProcessQueue(mq, offset)
        pq.committed = offset
        pq.priority = priority
        if c._orderly is not None and locked_until is not None:
            c._orderly.add(pq, locked_until)
        with c._lock:
            if not c._running:
                return True
            c._queues[mq] = pq
        log.info("consumer %s: consuming %s from offset %d", c.client_id, mq, offset)
        c._pull(pq)
        return True

    def release(self, mq: MessageQueue) -> None:
        """Stop pulling ``mq``, wait (bounded) for its running listeners, commit."""
        c = self._c
        with c._lock:
            pq = c._queues.pop(mq, None)
        if pq is None:
            return
        drop(pq)
        deadline = time.monotonic() + c._config.effective_takeover_delay_s
        with pq.lock:
            while pq.running and (remaining := deadline - time.monotonic()) > 0:
                pq.lock.wait(remaining)
            if pq.running:
                log.warning("consumer %s: releasing %s with %d listener(s) still running", c.client_id, mq, pq.running)
        c._commit(pq)
        if c._orderly is not None:
            c._orderly.remove(pq)  # unlock, after the commit
        c._failures.forget(("pull", mq))
        log.info("consumer %s: released %s at offset %s", c.client_id, mq, pq.committed)


def drop(pq: ProcessQueue) -> None:
    """Stop ``pq``: no more pulls (the one in flight is cancelled) and no new batches."""
    with pq.lock:
        pq.dropped = True
        call, pq.pull_call = pq.pull_call, None
    if call is not None:
        call.cancel()
