"""The push consumer's pulls (RocketMQ's PullMessageService and the pull half of
DefaultMQPushConsumerImpl): each owned queue is long-polled, one pull in flight at a
time; a queue with too much not done waits (flow control), and so does a priority
topic's queue while a higher queue of it has messages; a failed pull is tried again
with backoff on the next pull instance; a paused group's pulls are tried again every
few seconds (docs/consumers.md "Pausing a group").

A pull is sent from the timer or the pull dispatcher thread, on the pull instance's
stream (``txmq._pull_stream``; a unary call to a service without it); its done-callback
hands the answer to the dispatcher at once, which records the messages in the queue's
``ProcessQueue``, hands them to the consume service and pulls again.
"""

from __future__ import annotations

import logging

import grpc

from txmq._backoff import delay as backoff_delay
from txmq._consumer_types import PullStatus
from txmq._process_queue import ProcessQueue
from txmq._pulling import to_pull_result
from txmq._push_context import PushContext
from txmq._subscription import Subscription
from txmq.errors import TxmqError
from txmq.message import MessageExt, MessageQueue
from txmq.v1 import errors_pb2

log = logging.getLogger("txmq.consumer")

_FLOW_CONTROL_PAUSE_S = 0.05  # RocketMQ's PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
# A queue whose pulls keep failing (retriably) waits up to this long between attempts.
_PULL_ERROR_BACKOFF_MAX_S = 30.0
# A paused group's queues are pulled again at most this long apart (RocketMQ's
# pullTimeDelayMillsWhenException), so a resumed group goes on within seconds.
_PAUSED_POLL_MAX_S = 3.0
# A priority topic's queue waiting for its higher queues looks again this soon.
_PRIORITY_PAUSE_S = 0.05


class QueuePuller:
    def __init__(self, consumer: PushContext) -> None:
        self._c = consumer
        # Queues whose last pull was refused as paused (None: the check at start was);
        # guarded by the consumer's lock.
        self._paused: set[MessageQueue | None] = set()

    def pull(self, pq: ProcessQueue) -> None:
        c = self._c
        assert c._client is not None and c._timer is not None
        config = c._config
        with pq.lock:
            if pq.dropped or not c._running:
                return
            if len(pq.pending) >= config.pull_threshold_for_queue or pq.span() >= config.consume_concurrently_max_span:
                if not pq.flow_controlled_logged:
                    log.info(
                        "consumer %s: %s paused (%d messages pending, span %d)",
                        c.client_id, pq.mq, len(pq.pending), pq.span(),
                    )  # fmt: skip
                    pq.flow_controlled_logged = True
                c._timer.call_later(_FLOW_CONTROL_PAUSE_S, c._pull, pq)
                return
            pq.flow_controlled_logged = False
            offset, attempt = pq.next_offset, pq.failures
        if pq.priority and self._higher_queues_busy(pq):
            c._timer.call_later(_PRIORITY_PAUSE_S, c._pull, pq)
            return
        with c._lock:
            sub = c._subs.get(pq.mq.topic)
        if sub is None:
            return  # unsubscribed: the next rebalance releases the queue
        try:
            address = c._client.pull_address(pq.mq, attempt)
        except TxmqError as err:
            self.pull_failed(pq, err)
            return
        request = c._client.pull_request(
            pq.mq, sub, offset, max_nums=config.pull_batch_size, suspend_timeout=config.suspend_timeout_s,
            client_id=c.client_id,
        )  # fmt: skip
        try:
            future = c._client.pull_future(address, request, timeout=c._client.deadline(config.suspend_timeout_s))
        except (RuntimeError, ValueError) as exc:  # closed meanwhile (shutdown)
            log.debug("consumer %s: pull of %s not sent: %s", c.client_id, pq.mq, exc)
            return
        with pq.lock:
            if pq.dropped:
                future.cancel()
                return
            pq.pull_call = future
        future.add_done_callback(lambda f: self._dispatch(pq, f, sub))

    def _higher_queues_busy(self, pq: ProcessQueue) -> bool:
        """Whether a higher queue of ``pq``'s priority topic on its store, owned by this
        consumer, has messages pending or in the store: then ``pq`` waits (RocketMQ 5.4's
        consumers read a priority topic's higher queues first). Reads other queues'
        fields without their locks: a stale answer only delays a pull by one pause."""
        c = self._c
        mq = pq.mq
        with c._lock:
            queues = list(c._queues.items())
        return any(
            (other.pending or other.backlog) and not other.dropped
            for m, other in queues
            if m.queue_id > mq.queue_id and m.topic == mq.topic and m.store_id == mq.store_id
        )

    def _dispatch(self, pq: ProcessQueue, future: grpc.Future, sub: Subscription) -> None:
        # Done-callbacks run on gRPC's thread: hand the work over at once.
        c = self._c
        dispatcher = c._dispatcher
        if dispatcher is None or not c._running:
            return
        try:
            dispatcher.submit(self._on_pulled_safely, pq, future, sub)
        except RuntimeError:
            pass  # shut down meanwhile

    def _on_pulled_safely(self, pq: ProcessQueue, future: grpc.Future, sub: Subscription) -> None:
        try:
            self.on_pulled(pq, future, sub)
        except Exception as exc:  # keep the queue going whatever happened
            log.exception("consumer %s: handling a pull of %s failed", self._c.client_id, pq.mq)
            self.pull_failed(pq, TxmqError(f"handling a pull failed: {exc!r}", retriable=True))

    def pull_failed(self, pq: ProcessQueue, err: TxmqError) -> None:
        c = self._c
        assert c._client is not None and c._timer is not None
        if err.code == errors_pb2.CODE_CONSUME_DISABLED and c._config.pause_on_consume_disabled:
            self._pull_paused(pq)
            return
        with pq.lock:
            if pq.dropped:
                return
            pq.failures += 1
            failures = pq.failures
        c._handle(("pull", pq.mq), f"pull of {pq.mq}", err)
        if not c._running:
            return
        c._client.core.routes.mark_stale(pq.mq.topic)
        first = c._config.pull_error_backoff_s
        # At least what a throttling refusal asks for (its retry_after_ms: a fetch quota).
        wait = backoff_delay(failures, first=first, maximum=max(first, _PULL_ERROR_BACKOFF_MAX_S), after=err)
        c._timer.call_later(wait, c._pull, pq)

    # -- a paused group (consume_enable off; docs/consumers.md "Pausing a group") ------------

    @property
    def paused(self) -> bool:
        """Whether the group's pulls are refused as paused (``pause_on_consume_disabled``)."""
        return bool(self._paused)

    def set_paused(self, mq: MessageQueue | None, paused: bool) -> None:
        """``mq``'s pulls are (not) refused as paused. The group counts as paused while
        any queue is (a pull held since before the pause still answers): one log line
        when that starts and one when it ends."""
        c = self._c
        with c._lock:
            before = bool(self._paused)
            if paused:
                self._paused.add(mq)
            else:
                self._paused.discard(mq)
                self._paused.discard(None)
                self._paused.intersection_update({None, *c._queues})  # released queues
            if bool(self._paused) is before:
                return
        if paused:
            log.warning(
                "consumer %s: group %s is paused (consume disabled); keeping its queues and offsets, "
                "pulling again every %.0fs at most until it resumes",
                c.client_id, c.group, self._paused_poll_max_s(),
            )  # fmt: skip
        else:
            log.warning("consumer %s: group %s resumed", c.client_id, c.group)

    def _paused_poll_max_s(self) -> float:
        return max(self._c._config.pull_error_backoff_s, _PAUSED_POLL_MAX_S)

    def _pull_paused(self, pq: ProcessQueue) -> None:
        """A pull refused as paused: no error, no stop; the same pull again after a backoff."""
        c = self._c
        assert c._timer is not None
        with pq.lock:
            if pq.dropped:
                return
            pq.paused_polls += 1
            polls = pq.paused_polls
        self.set_paused(pq.mq, True)
        wait = backoff_delay(polls, first=c._config.pull_error_backoff_s, maximum=self._paused_poll_max_s())
        c._timer.call_later(wait, c._pull, pq)

    # -- an answered pull (dispatcher thread) -------------------------------------------------

    def on_pulled(self, pq: ProcessQueue, future: grpc.Future, sub: Subscription) -> None:
        c = self._c
        with pq.lock:
            if pq.dropped or future.cancelled():
                return
            if pq.pull_call is future:
                pq.pull_call = None
        try:
            response = future.result()
        except grpc.RpcError as exc:
            self.pull_failed(pq, TxmqError.from_rpc_error(exc))
            return
        except TxmqError as err:  # a pull on the stream: its answer was an error
            self.pull_failed(pq, err)
            return
        except grpc.FutureCancelledError:
            return
        try:
            result = to_pull_result(response, sub)
        except TxmqError as err:
            self.pull_failed(pq, err)
            return
        batches: list[list[MessageExt]] = []
        batch_size = c._config.consume_message_batch_max_size
        with pq.lock:
            if pq.dropped:
                return
            if pq.failures:
                c._failures.recovered(("pull", pq.mq), f"consumer {c.client_id}: pull of {pq.mq}")
            pq.failures = 0
            pq.paused_polls = 0
            pq.backlog = result.status is PullStatus.FOUND and result.next_begin_offset < result.max_offset
            if result.status is PullStatus.FOUND:
                fresh = pq.take(result.messages, result.next_begin_offset)
                batches = [fresh[i : i + batch_size] for i in range(0, len(fresh), batch_size)]
            else:
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    log.warning(
                        "consumer %s: offset %d of %s is illegal (queue %d..%d); continuing at %d",
                        c.client_id, pq.next_offset, pq.mq, result.min_offset, result.max_offset,
                        result.next_begin_offset,
                    )  # fmt: skip
                    pq.next_offset = result.next_begin_offset
                else:
                    pq.next_offset = max(pq.next_offset, result.next_begin_offset)
        if self._paused:
            self.set_paused(pq.mq, False)
        for batch in batches:
            c._submit(pq, batch)
        c._pull(pq)
