"""Dispatch ("reput"): from commit-log records to consume queues, the index and the
arrival watchers. Runs on the event loop, in commit-log order: right after an append
(async flush) or after the covering fsync (sync flush), and in recovery.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from .arrivals import Arrival, ArrivalHub
from .codec import PreparedRecord
from .configs import TopicConfigTable
from .consumequeue import ConsumeQueue
from .index import IndexService, message_key, unique_id_key
from .model import TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, StoredMessage, takes_queue_slot
from .validation import cached_tag_code

log = logging.getLogger("txmq.store.dispatch")

QueueKey = tuple[str, int]


class Dispatcher:
    def __init__(
        self, root: Path, *, units_per_file: int, index: IndexService, hub: ArrivalHub, topics: TopicConfigTable
    ) -> None:
        self.root = root
        self.units_per_file = units_per_file
        self.index = index
        self.hub = hub
        self.topics = topics
        self.queues: dict[QueueKey, ConsumeQueue] = {}
        self.dispatched_offset = 0  # every record below is dispatched

    @classmethod
    def load(
        cls, root: Path, *, units_per_file: int, index: IndexService, hub: ArrivalHub, topics: TopicConfigTable
    ) -> "Dispatcher":
        d = cls(root, units_per_file=units_per_file, index=index, hub=hub, topics=topics)
        root.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.is_dir() and queue_dir.name.isdigit():
                    qid = int(queue_dir.name)
                    d.queues[(topic_dir.name, qid)] = ConsumeQueue.load(
                        queue_dir, topic=topic_dir.name, queue_id=qid, units_per_file=units_per_file
                    )
        return d

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.queues.clear()

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def _queue_for_write(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(
                self.root / topic / str(queue_id), topic=topic, queue_id=queue_id, units_per_file=self.units_per_file
            )
        return cq

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.queues if k[0] == topic]:
            self.queues.pop(key).destroy()
        shutil.rmtree(self.root / topic, ignore_errors=True)

    def _put(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        offset: int,
        size: int,
        tag_code: int,
        keys: tuple[str, ...],
        unique_id: str,
        store_timestamp_ms: int,
        sys_flag: int,
        *,
        to_queue: bool = True,
        to_index: bool = True,
    ) -> bool:
        """Returns whether a consume-queue unit was written."""
        queued = to_queue and takes_queue_slot(sys_flag)
        if queued:
            self._queue_for_write(topic, queue_id).put(queue_offset, offset, size, tag_code)
        # RocketMQ indexes every record but rolled-back ones.
        if to_index and sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK_TYPE:
            index_keys = [unique_id_key(unique_id)] if unique_id else []
            index_keys.extend(message_key(topic, k) for k in keys)
            if index_keys:
                self.index.put(index_keys, offset, store_timestamp_ms)
        return queued

    def dispatch(
        self,
        records: list[PreparedRecord],
        offsets: list[int],
        queue_offsets: list[int],
        *,
        store_timestamp_ms: int,
        end_offset: int,
    ) -> None:
        """Dispatch freshly appended records (``end_offset``: where the last one ends)."""
        arrivals: list[Arrival] | None = [] if self.hub.active else None
        put = self._put
        for rec, offset, queue_offset in zip(records, offsets, queue_offsets):
            queued = put(
                rec.topic, rec.queue_id, queue_offset, offset, rec.size, rec.tag_code,
                rec.keys, rec.unique_id, store_timestamp_ms, rec.sys_flag,
            )  # fmt: skip
            if queued and arrivals is not None:
                arrivals.append(
                    Arrival(
                        rec.topic, rec.queue_id, queue_offset, queue_offset + 1, rec.tag_code,
                        rec.all_properties(), store_timestamp_ms,
                    )  # fmt: skip
                )
        self.dispatched_offset = end_offset
        if arrivals:
            self.hub.publish(arrivals)

    def redispatch(self, msg: StoredMessage, *, to_queue: bool, to_index: bool) -> None:
        """Recovery: re-apply one record (idempotent for queues: a unit's position is its
        queue offset). Records of deleted topics, or of a deleted namesake of a live
        topic, are skipped."""
        cfg = self.topics.get(msg.topic)
        if cfg is None or msg.commit_log_offset < cfg.since_offset:
            return
        self._put(
            msg.topic, msg.queue_id, msg.queue_offset, msg.commit_log_offset, msg.store_size,
            cached_tag_code(msg.tags) if msg.tags else 0, msg.keys, msg.unique_id,
            msg.store_timestamp_ms, msg.sys_flag, to_queue=to_queue, to_index=to_index,
        )  # fmt: skip
        self.dispatched_offset = msg.commit_log_offset + msg.store_size
