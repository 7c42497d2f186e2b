"""Reading the queues for the SimpleConsumer's receives (the model: consumer.py): each
round asks the stores for their queues' bounds, sets the cursors of queues read for the
first time, reads the queues with a backlog (the batch split round robin) and, when
nothing is there, holds a pull on every queue no other receive is reading. One reader
per queue at a time is what keeps concurrent receives from getting the same message."""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Iterable
from typing import Any

from txmq.errors import TxmqError
from txmq.protocol import MESSAGE_TYPE_PRIORITY
from txmq.v1 import common_pb2, errors_pb2, pull_pb2
from txmq_gateway.backend import Backend
from txmq_gateway.consumer_inflight import InFlightTracker
from txmq_gateway.consumer_state import (
    Batch,
    ConsumerTuning,
    QueueKey,
    QueueState,
    Subscription,
    message_group,
    retrieve,
)
from txmq_runtime.backoff import BackoffPolicy
from txmq_runtime.clock import Clock

log = logging.getLogger("txmq.gateway.consumer")


class QueueReader:
    """Reads the queues of a subscription into a receive's batch: new messages are
    tracked as in flight (or, behind an earlier message of their FIFO group, wait); a
    queue whose store or pull fails is backed off."""

    def __init__(self, backend: Backend, clock: Clock, tuning: ConsumerTuning, tracker: InFlightTracker) -> None:
        self._backend = backend
        self._clock = clock
        self._tuning = tuning
        self._tracker = tracker
        self._backoff = BackoffPolicy(first_ms=tuning.error_backoff_ms, max_ms=tuning.error_backoff_max_ms)

    async def scan(self, sub: Subscription, queues: list[QueueState], batch: Batch) -> bool:
        """One round of reads without holding: ask each store for its queues' max
        offsets, then read the queues with a backlog (a share of the batch each, round
        robin), concurrently. True when a cursor moved without delivering (skipped
        messages: worth reading on at once)."""
        now = self._clock.now_ms()
        usable = [q for q in queues if q.retry_at <= now]
        if not usable:
            return False
        stores = sorted({q.store_id for q in usable})
        answers = await asyncio.gather(
            *(self._backend.queue_offsets(store_id, sub.topic) for store_id in stores), return_exceptions=True
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
        need = batch.need - len(batch.out)
        if await self._priority_topic(sub.topic):
            shares = priority_shares(backlog, need)
        else:
            shares = _shares(list(backlog), backlog, need)
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

    async def _priority_topic(self, topic: str) -> bool:
        """Whether ``topic`` holds priority messages (its route says; docs/store.md
        "Priority messages"): its higher queues are read first."""
        try:
            return any(q.message_type == MESSAGE_TYPE_PRIORITY for q in await self._backend.queues(topic))
        except TxmqError:
            return False  # no route now: the reads that follow say why

    async def _init_cursors(
        self, sub: Subscription, queues: list[QueueState], bounds: dict[QueueKey, tuple[int, int]], batch: Batch
    ) -> None:
        """Set the cursors of queues read for the first time: the group's committed
        offset, or (a new group) the queue's min offset, committed at the next flush."""
        tasks = []
        for q in queues:
            if q.init is None:
                q.init = asyncio.get_running_loop().create_task(self._init_cursor(sub, q, bounds[q.key][0]))
                q.init.add_done_callback(retrieve)
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

    async def _init_cursor(self, sub: Subscription, q: QueueState, min_offset: int) -> None:
        committed = await self._backend.query_consume_offset(
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

    def _failed(self, batch: Batch, queues: Iterable[QueueState], err: TxmqError) -> None:
        """A read (or offset query) failed: back the queues off, remember the error."""
        batch.error = err
        now = self._clock.now_ms()
        for q in queues:
            q.failures += 1
            delay = round(self._backoff.delay_ms(q.failures))
            q.retry_at = now + delay
            # A paused group (consume_enable off) is the operator's choice, not a fault:
            # its receives answer FORBIDDEN, and the log keeps quiet about it.
            level = logging.DEBUG if err.code == errors_pb2.CODE_CONSUME_DISABLED else logging.WARNING
            log.log(level, "read of %s/%d failed (%s); left alone %d ms", q.store_id, q.queue_id, err, delay)

    async def _read(self, sub: Subscription, q: QueueState, batch: Batch, *, max_messages: int, hold_ms: int) -> bool:
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
                reply = await self._backend.pull(request)
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

    def _apply(self, sub: Subscription, q: QueueState, batch: Batch, reply: pull_pb2.PullMessageResponse) -> bool:
        assert q.cursor is not None
        before = q.cursor
        delivered = len(batch.out)
        if reply.status == pull_pb2.PULL_STATUS_FOUND:
            now = self._clock.now_ms()
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
                batch.out.append(self._tracker.deliver(sub, self._tracker.track(sub, q, view), batch, now))
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

    async def hold(self, sub: Subscription, queues: list[QueueState], batch: Batch, end: int) -> None:
        """Wait for a message: held reads on every queue nobody else is reading, until
        one returns, another receive releases a queue we could not read, an in-flight
        message becomes due (or visible by a change), a FIFO message is released (its
        predecessor settled), a backed-off queue may be read again, or the polling time
        ends."""
        if any(q.ready for q in sub.queues.values()):
            return  # a FIFO message was released while this receive was reading
        loop = asyncio.get_running_loop()
        now = self._clock.now_ms()
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
        timer = loop.create_task(self._clock.sleep_ms(timeout_ms))  # the hold's end, on the clock
        waiting: list[asyncio.Future[Any]] = [*reads, *wakers, timer]
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            for task in reads:
                task.cancel()
            results = await asyncio.gather(*reads, return_exceptions=True)
        early = self._clock.now_ms() < end - self._tuning.early_answer_ms
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
                q.retry_at = self._clock.now_ms() + self._tuning.error_backoff_ms
        if not batch.out and batch.error is not None and all(q.retry_at > self._clock.now_ms() for q in queues):
            raise batch.error  # every queue failed lately


def priority_shares(backlog: dict[QueueState, int], need: int) -> dict[QueueState, int]:
    """A priority topic's split: queue N holds priority N, so the highest queues with a
    backlog take what they hold first (of every store alike), the lower ones the rest."""
    shares: dict[QueueState, int] = {}
    for q in sorted(backlog, key=lambda q: (-q.queue_id, q.store_id)):
        if need <= 0:
            break
        shares[q] = min(backlog[q], need)
        need -= shares[q]
    return shares


def _shares(order: list[QueueState], backlog: dict[QueueState, int], need: int) -> dict[QueueState, int]:
    """Split ``need`` messages over queues round robin (in ``order``), no queue getting
    more than its backlog, so one busy queue does not starve the others."""
    shares: dict[QueueState, int] = {}
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
