"""Dispatch ("reput"): from commit-log records to consume queues, the index and the
arrival watchers. Runs on the event loop, in commit-log order: right after an append
(async flush) or after the covering fsync (sync flush), and in recovery.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path

from txmq.protocol import KEY_SEPARATOR, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_RECALL, TIMER_TOPIC
from txmq.records import PHYSICAL_OFFSET_AT, decode_properties, pop_field_properties

from .arrivals import Arrival, ArrivalHub
from .codec import HeldRecord, PreparedRecord
from .configs import TopicConfig, TopicConfigTable
from .consumequeue import ConsumeQueue
from .index import Entry, IndexService, message_key_hash, unique_id_hash
from .model import StoredMessage, is_indexed, takes_queue_slot, with_field_properties
from .validation import cached_tag_code

QueueKey = tuple[str, int]
_crc32 = zlib.crc32


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
        # Arrivals carry their records when a dispatch spans at most this many bytes and
        # ``read_span`` (the commit log's read) is set.
        self.arrival_records_max_bytes = 0
        self.read_span: Callable[[int, int], bytes | None] | None = None

    @classmethod
    def load(
        cls, root: Path, *, units_per_file: int, index: IndexService, hub: ArrivalHub, topics: TopicConfigTable
    ) -> Dispatcher:
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

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues[(topic, queue_id)] = ConsumeQueue(
            self.root / topic / str(queue_id), topic=topic, queue_id=queue_id, units_per_file=self.units_per_file
        )
        return cq

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.queues if k[0] == topic]:
            self.queues.pop(key).destroy()
        shutil.rmtree(self.root / topic, ignore_errors=True)

    def prepare_queues(self, records: list[PreparedRecord], queue_offsets: list[int]) -> None:
        """Create the consume-queue files that dispatching these records will write
        (before the records are appended: a full disk then refuses the send)."""
        key: QueueKey | None = None
        cq: ConsumeQueue | None = None
        for rec, queue_offset in zip(records, queue_offsets, strict=True):
            if not rec.takes_queue_slot:
                continue
            if key != (rec.topic, rec.queue_id):
                key = (rec.topic, rec.queue_id)
                cq = self.queues.get(key) or self._new_queue(rec.topic, rec.queue_id)
            assert cq is not None
            cq.prepare(queue_offset)

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
        # A small dispatch (a few messages: when parked consumers wait for them) carries
        # its records on the arrival stream: one read of the span just written.
        span = b""
        span_start = offsets[0] if offsets else 0
        if (
            arrivals is not None
            and self.read_span is not None
            and offsets
            and 0 < end_offset - span_start <= self.arrival_records_max_bytes
        ):
            span = self.read_span(span_start, end_offset - span_start) or b""
        queues = self.queues
        entries: list[Entry] = []
        topics_get = self.topics.get
        for rec, offset, queue_offset in zip(records, offsets, queue_offsets, strict=True):
            cfg = topics_get(rec.topic)
            if cfg is None or offset < cfg.since_offset:
                continue  # deleted while its fsync was pending (sync mode)
            if rec.takes_queue_slot:
                cq = queues.get((rec.topic, rec.queue_id)) or self._new_queue(rec.topic, rec.queue_id)
                cq.put(queue_offset, offset, rec.size, rec.tag_code)
                if arrivals is not None:
                    at = offset - span_start
                    arrivals.append(
                        Arrival(
                            rec.topic,
                            rec.queue_id,
                            queue_offset,
                            queue_offset + 1,
                            rec.tag_code,
                            rec.all_properties(),
                            store_timestamp_ms,
                            cq.min_offset,
                            _record_at(span, at, rec.size, offset),
                        )  # fmt: skip
                    )
            if rec.indexed:
                # unique_id_hash, inlined: this runs once per message
                entries.append((_crc32(f"#{rec.unique_id}".encode()) or 1, offset, store_timestamp_ms))
                if rec.keys:
                    add_key_entries(entries, rec.topic, rec.keys, offset, store_timestamp_ms)
        self.index.put(entries)
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
        if to_queue and takes_queue_slot(msg.sys_flag):
            cq = self.queues.get((msg.topic, msg.queue_id)) or self._new_queue(msg.topic, msg.queue_id)
            tag_code = unit_tag_code(msg)
            cq.put(msg.queue_offset, msg.commit_log_offset, msg.store_size, tag_code)
        if to_index and is_indexed(msg.sys_flag):
            entries = [(unique_id_hash(msg.unique_id), msg.commit_log_offset, msg.store_timestamp_ms)]
            add_key_entries(entries, msg.topic, msg.keys, msg.commit_log_offset, msg.store_timestamp_ms)
            self.index.put(entries)
        self.dispatched_offset = msg.commit_log_offset + msg.store_size

    def dispatch_held(self, records: list[HeldRecord], end_offset: int) -> None:
        """Dispatch a replica's held records (copied from its leader, or held since its
        recovery) once they are below the high watermark, waking watchers as
        ``dispatch`` does (without records attached). ``end_offset``: where the span
        these records came from ends (a segment's blank marker may follow the last).
        One pass and one index write for the whole span, from the fields the native
        codec read off the records' bytes: no message object per record."""
        arrivals: list[Arrival] | None = [] if self.hub.active else None
        entries: list[Entry] = []
        queues, topics_get = self.queues, self.topics.get
        topic: str | None = None
        cfg: TopicConfig | None = None
        for rec in records:
            offset, size, queue_id, queue_offset, sys_flag, store_ms, rec_topic, _, tags, keys_text, unique_id = rec
            if rec_topic != topic:
                topic, cfg = rec_topic, topics_get(rec_topic)
            if cfg is None or offset < cfg.since_offset:
                continue  # a deleted topic's, or a deleted namesake's
            if takes_queue_slot(sys_flag):
                cq = queues.get((rec_topic, queue_id)) or self._new_queue(rec_topic, queue_id)
                if rec_topic == TIMER_TOPIC:
                    tag_code = timer_tag_code(decode_properties(rec.properties_text))
                else:
                    tag_code = cached_tag_code(tags) if tags else 0
                cq.put(queue_offset, offset, size, tag_code)
                if arrivals is not None:
                    props = held_properties(rec)
                    arrivals.append(
                        Arrival(
                            rec_topic,
                            queue_id,
                            queue_offset,
                            queue_offset + 1,
                            tag_code,
                            props,
                            store_ms,
                            cq.min_offset,
                        )
                    )
            if is_indexed(sys_flag):
                # unique_id_hash and message_key_hash, inlined as in ``dispatch``
                entries.append((_crc32(f"#{unique_id}".encode()) or 1, offset, store_ms))
                if keys_text:
                    for key in keys_text.split(KEY_SEPARATOR):
                        entries.append((_crc32(f"{rec_topic}#{key}".encode()) or 1, offset, store_ms))
        self.index.put(entries)
        self.dispatched_offset = max(self.dispatched_offset, end_offset)
        if arrivals:
            self.hub.publish(arrivals)


def held_properties(rec: HeldRecord) -> dict[str, str]:
    """Every property of a held record, as ``StoredMessage.all_properties`` has them."""
    props = decode_properties(rec.properties_text)
    tags, keys, unique_id = pop_field_properties(props)
    return with_field_properties(props, tags=tags, keys=keys, unique_id=unique_id)


def timer_tag_code(properties: Mapping[str, str]) -> int:
    """A timer record's consume-queue tag field: its delivery time; a recall record's
    (timer.py ``Timer.recall``): the timer-queue offset of the timer it recalls."""
    try:
        recalled = properties.get(PROPERTY_TIMER_RECALL)
        return int(recalled if recalled is not None else properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
    except ValueError:
        return 0


def unit_tag_code(msg: StoredMessage) -> int:
    """The tag-hash field of a record's consume-queue unit: its tags' hash code; for a
    timer record (TIMER_TOPIC) its delivery time, so the timer reads only its queue."""
    if msg.topic == TIMER_TOPIC:
        return timer_tag_code(msg.properties)
    return cached_tag_code(msg.tags) if msg.tags else 0


def add_key_entries(entries: list[Entry], topic: str, keys: tuple[str, ...], offset: int, store_ms: int) -> None:
    entries.extend([(message_key_hash(topic, k), offset, store_ms) for k in keys])


_SIZE = struct.Struct(">I")
_PHYSICAL = struct.Struct(">q")  # at PHYSICAL_OFFSET_AT


def _record_at(span: bytes, at: int, size: int, offset: int) -> bytes:
    """The record of ``size`` bytes at ``span[at:]`` if it is the one written at
    ``offset`` (its size and physical-offset fields agree), else nothing."""
    if at < 0 or at + size > len(span) or _SIZE.unpack_from(span, at)[0] != size:
        return b""
    if _PHYSICAL.unpack_from(span, at + PHYSICAL_OFFSET_AT)[0] != offset:
        return b""
    return span[at : at + size]
