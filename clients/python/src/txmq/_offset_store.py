"""The push consumer's offsets: where a queue starts and committing its progress
(RocketMQ's RemoteBrokerOffsetStore; docs/consumers.md "Offsets").

A queue starts at the group's committed offset; on a queue the group never committed
on, at ``consume_from`` (a retry queue: at its first message), and that start is
committed at once. Afterwards the commit point of a queue is its lowest message not
done (``ProcessQueue.commit_point``); it is committed every ``commit_interval_s``, when
the queue is released and on shutdown, only when it moved. An orderly consumer's
commits name it, and the store refuses one on a queue another client has locked
(``CODE_QUEUE_LOCKED``): the queue's lock lapsed, whatever this side trusted.
"""

from __future__ import annotations

from txmq._consumer_types import ConsumeFromWhere
from txmq._process_queue import ProcessQueue
from txmq._push_context import PushContext
from txmq.errors import TxmqError
from txmq.message import MessageQueue
from txmq.v1 import errors_pb2


class OffsetStore:
    def __init__(self, consumer: PushContext) -> None:
        self._c = consumer

    def start_offset(self, mq: MessageQueue) -> int:
        """The offset to start consuming ``mq`` at (committed first, if new)."""
        c = self._c
        assert c._client is not None
        offset = c._client.fetch_offset(mq)
        if offset is None:
            low, high = c._client.queue_range(mq)
            # A retry queue holds only this group's failed messages: all of them, always
            # (RocketMQ's computePullFromWhere starts retry topics at 0 too).
            first = c._config.consume_from is ConsumeFromWhere.FIRST_OFFSET or mq.topic == c._config.retry_topic
            offset = low if first else high
            c._client.commit_offset(mq, offset)
        return offset

    def commit_all(self) -> None:
        with self._c._lock:
            queues = list(self._c._queues.values())
        for pq in queues:
            if not pq.dropped:
                self.commit(pq)

    def commit(self, pq: ProcessQueue) -> None:
        """Commit ``pq``'s commit point if it moved. Only the service thread (and
        shutdown, after it) commits, so commits of one queue never race; orderly, also a
        batch that outlived its queue's release, after that release's commit, and only
        while the queue's lock is trusted."""
        c = self._c
        assert c._client is not None
        if c._orderly is not None and not c._orderly.may_commit(pq):
            return  # the lock lapsed: another consumer may have the queue by now
        with pq.lock:
            point = pq.commit_point()
            if point == pq.committed:
                return
        what = f"committing the offset of {pq.mq}"
        try:
            c._client.commit_offset(pq.mq, point)
        except TxmqError as err:
            if c._orderly is not None and err.code == errors_pb2.CODE_QUEUE_LOCKED:
                c._orderly.commit_refused(pq)  # the store says another client holds it
                return
            c._handle(("commit", pq.mq), what, err)
            return
        c._failures.recovered(("commit", pq.mq), f"consumer {c.client_id}: {what}")
        with pq.lock:
            pq.committed = point
