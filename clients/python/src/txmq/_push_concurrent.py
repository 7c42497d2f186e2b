"""Concurrent consumption of the push consumer and its retries (RocketMQ's
ConsumeMessageConcurrentlyService; docs/consumers.md "Retries and dead letters").

Batches of a queue run on any of the consume threads, in any order. A batch whose
listener does not answer ``CONSUME_SUCCESS`` is sent back to the store that holds it
(a copy on ``%RETRY%<group>``, or past ``max_reconsume_times`` on ``%DLQ%<group>``) and
counts as done; a message whose send-back failed (the store down) is delivered again
from memory after a backoff, and skipped after ``max_reconsume_times``; meanwhile the
queue's commit point stays at it.
"""

from __future__ import annotations

import logging

from txmq._backoff import delay as backoff_delay
from txmq._consumer_types import ConsumeStatus, listener_status
from txmq._process_queue import ProcessQueue
from txmq._push_context import PushContext
from txmq.errors import TxmqError
from txmq.message import MessageExt
from txmq.protocol import PROPERTY_RETRY_TOPIC, RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger("txmq.consumer")


class ConcurrentService:
    def __init__(self, consumer: PushContext) -> None:
        self._c = consumer
        self._sent_back_to: set[str] = set()  # stores this consumer sent a retry copy to

    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Run ``messages`` on a consume thread (the consumer is running)."""
        consumers = self._c._consumers
        assert consumers is not None
        try:
            consumers.submit(self._c._consume, pq, messages)
        except RuntimeError:
            pass  # shut down meanwhile: the messages stay pending, the commit point before them

    def consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        c = self._c
        assert c._listener is not None and c._timer is not None
        with pq.lock:
            if pq.dropped:
                return  # the queue moved on; whoever has it now delivers these
            pq.running += 1
        if pq.mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            _restore_topics(messages)
        status = listener_status(
            c._listener, messages, log, client_id=c.client_id, where=pq.mq, then="reconsuming later"
        )
        uncounted = status is ConsumeStatus.RECONSUME_LATER_UNCOUNTED
        sent_back: list[MessageExt] = []
        if status is not ConsumeStatus.CONSUME_SUCCESS and not pq.dropped:
            sent_back = self._send_back(pq, messages, uncounted=uncounted)
        retry: list[MessageExt] = []
        with pq.lock:
            pq.running -= 1
            if status is ConsumeStatus.CONSUME_SUCCESS:
                for m in messages:
                    pq.pending.pop(m.queue_offset, None)
            else:
                for m in sent_back:  # the store holds a copy now: done here
                    pq.pending.pop(m.queue_offset, None)
                if not pq.dropped:
                    taken = {id(m) for m in sent_back}
                    retry = self._retry_locally(pq, [m for m in messages if id(m) not in taken], uncounted)
            pq.lock.notify_all()
        config = c._config
        for m in retry:
            delay = backoff_delay(
                max(1, m.reconsume_times), first=config.retry_backoff_s, maximum=config.retry_backoff_max_s
            )
            c._timer.call_later(delay, c._submit, pq, [m])

    def _send_back(self, pq: ProcessQueue, messages: list[MessageExt], *, uncounted: bool) -> list[MessageExt]:
        """Send failed messages back to the store that holds them (RocketMQ's
        sendMessageBack): the store copies each to %RETRY%<group> (or past
        max_reconsume_times to %DLQ%<group>). Returns the ones it took; the others (the
        store down, any error) are retried locally, as RocketMQ does."""
        c = self._c
        assert c._client is not None
        sent: list[MessageExt] = []
        for m in messages:
            what = f"sending back a failed message of {pq.mq}"
            try:
                result = c._client.send_back(
                    pq.mq.topic, m, max_reconsume_times=c._config.max_reconsume_times, uncounted=uncounted,
                    client_id=c.client_id,
                )  # fmt: skip
            except (TxmqError, RuntimeError, ValueError) as err:  # RuntimeError/ValueError: closed meanwhile
                c._failures.failed(
                    ("send-back", pq.mq.store_id), f"consumer {c.client_id}: {what} (retrying it locally)",
                    err if isinstance(err, TxmqError) else TxmqError(str(err), retriable=True),
                )  # fmt: skip
                continue
            c._failures.recovered(("send-back", pq.mq.store_id), f"consumer {c.client_id}: {what}")
            if not result.dead_lettered and pq.mq.store_id not in self._sent_back_to:
                # The store may have just created the retry topic: pick its queue up now,
                # not at the next periodic rebalance.
                self._sent_back_to.add(pq.mq.store_id)
                c._client.mark_route_stale(c._config.retry_topic)
                c._request_rebalance()
            if result.dead_lettered:
                log.error(
                    "consumer %s: message %s (%s offset %d) failed %d times; moved to %s",
                    c.client_id, m.msg_id, pq.mq, m.queue_offset, result.reconsume_times, result.topic,
                )  # fmt: skip
            sent.append(m)
        return sent

    def _retry_locally(self, pq: ProcessQueue, messages: list[MessageExt], uncounted: bool) -> list[MessageExt]:
        """Under ``pq.lock``: the messages to deliver again from memory (their send-back
        failed); one that failed ``max_reconsume_times`` times is logged and skipped."""
        retry: list[MessageExt] = []
        for m in messages:
            if uncounted:
                retry.append(m)
            elif m.reconsume_times >= self._c._config.max_reconsume_times:
                log.error(
                    "consumer %s: message %s (%s offset %d) failed %d times; skipped",
                    self._c.client_id, m.msg_id, pq.mq, m.queue_offset, m.reconsume_times + 1,
                )  # fmt: skip
                pq.pending.pop(m.queue_offset, None)
            else:
                m.reconsume_times += 1
                retry.append(m)
        return retry


def _restore_topics(messages: list[MessageExt]) -> None:
    """Messages of a retry topic get back the topic they were first consumed from (the
    listener sees the original topic; reconsume_times is the record's)."""
    for m in messages:
        origin = m.properties.get(PROPERTY_RETRY_TOPIC)
        if origin:
            m.topic = origin
