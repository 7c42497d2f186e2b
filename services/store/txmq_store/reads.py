"""Reads: RocketMQ's getMessage over a consume queue (``get_message``), a record by
commit-log offset or offsetMsgId (``view_message``), look-ups by key or unique id
through the index (``query_messages``), queue offsets and search by time, and arrival
watches.

Every record served is CRC-checked once and must claim the offset it was read at; a
damaged one is CODE_DATA_CORRUPTED, counted and logged once (docs/store.md "Integrity
and disk faults"). An offset a caller names counts only where the store's own dispatch
put a record (``record_at``; docs/store.md "Offsets a caller names").
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from txmq.errors import TxmqError, error
from txmq.ids import decode_offset_msg_id
from txmq.records import PHYSICAL_OFFSET_AT
from txmq.v1 import errors_pb2

from .admin import ConfigAdmin, not_found
from .arrivals import ArrivalHub, ArrivalWatcher
from .codec import (
    HEADER_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    CorruptRecord,
    decode_record,
    read_size_and_magic,
    read_store_timestamp,
    verify_record,
)
from .commitlog import CommitLog
from .consumequeue import UNIT
from .dispatch import Dispatcher
from .filters import MessageFilter
from .index import message_key_hash, unique_id_hash
from .integrity import CorruptionLog, Quarantine, corrupted
from .model import (
    PROPERTY_REAL_TOPIC,
    GetMessageResult,
    GetMessageStatus,
    QueueOffsets,
    StoredMessage,
    is_indexed,
    takes_queue_slot,
)
from .settings import StoreSettings
from .validation import check_topic_name

DEFAULT_MAX_MESSAGES = 32
MAX_QUERY_RESULTS = 1000
SCAN_BYTES = 16_000  # consume-queue bytes one read may scan at least (RocketMQ)
END_OF_TIME_MS = 2**63 - 1


class Reader:
    """The store's reads. ``check_open`` raises once the store is closing."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        commitlog: CommitLog,
        dispatcher: Dispatcher,
        admin: ConfigAdmin,
        hub: ArrivalHub,
        quarantine: Quarantine,
        corruption: CorruptionLog,
        check_open: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._commitlog = commitlog
        self._dispatcher = dispatcher
        self._admin = admin
        self._topics = admin.topics
        self._hub = hub
        self._quarantine = quarantine
        self._corruption = corruption
        self._check_open = check_open
        self._memory_window = settings.physical_memory() * settings.access_message_in_memory_max_ratio_percent // 100

    @property
    def dispatched_offset(self) -> int:
        """Records below this commit-log offset are in the consume queues and the index."""
        return self._dispatcher.dispatched_offset

    def get_message(
        self,
        *,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        message_filter: MessageFilter | None = None,
        raw: bool = False,
    ) -> GetMessageResult:
        """RocketMQ's getMessage: status and next offset rules. ``raw``: the
        result holds the records as stored (``records``), decoded only as far as an SQL92
        filter must read them, instead of decoded messages."""
        cfg = self._topics.get(topic)
        if cfg is None:
            # Unknown: a status (NO_MATCHED_LOGIC_QUEUE, as RocketMQ's store), unless the
            # name itself is illegal (empty, bad characters): ILLEGAL_TOPIC.
            check_topic_name(topic)
        if offset < 0:
            raise error(errors_pb2.CODE_ILLEGAL_OFFSET, f"offset {offset} is negative")
        if max_messages < 0:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"max_messages {max_messages} is negative")
        max_messages = max_messages or DEFAULT_MAX_MESSAGES
        if queue_id < 0 or (cfg is not None and queue_id >= cfg.read_queue_nums):
            raise error(
                errors_pb2.CODE_ILLEGAL_QUEUE_ID,
                f"queue {queue_id} of {topic} is not readable",
                topic=topic, queue_id=str(queue_id),
            )  # fmt: skip
        cq = self._dispatcher.consume_queue(topic, queue_id)
        if cq is None:
            # RocketMQ creates a queue on first access: a known topic's unwritten queue
            # is an empty queue; only an unknown one has no logic queue.
            status = GetMessageStatus.NO_MATCHED_LOGIC_QUEUE if cfg is None else GetMessageStatus.NO_MESSAGE_IN_QUEUE
            return GetMessageResult(status, 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
        units = cq.read_units(offset, max(SCAN_BYTES, max_messages * UNIT.size) // UNIT.size)
        if units is None:
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
        return self._scan(units, offset, lo, hi, max_messages, message_filter, topic=topic, queue_id=queue_id, raw=raw)

    def _scan(
        self, units: bytes, offset: int, lo: int, hi: int, max_messages: int, message_filter: MessageFilter | None,
        *, topic: str, queue_id: int, raw: bool = False,
    ) -> GetMessageResult:  # fmt: skip
        """Every record served is CRC-checked (once). A damaged one ends the batch: the
        intact messages before it are returned and the next read starts at it; a read
        that starts at it raises CODE_DATA_CORRUPTED (its metadata names the queue
        offset after it, where a consumer may resume by committing it)."""
        cl = self._commitlog
        max_phy = cl.max_offset
        memory = self._memory_window
        predicate = message_filter.predicate if message_filter else None
        tag_filter = message_filter if message_filter and message_filter.tags else None
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        taken: list[StoredMessage] = []
        records: list[bytes] = []
        count = 0
        total_bytes = 0
        next_file_start = -1
        max_phy_pulling = 0
        scanned = 0
        read = _ReadAhead(cl, self._settings.max_transfer_bytes_in_memory).read
        for phys, size, tag_code in UNIT.iter_unpack(units):
            if size == 0:
                scanned += 1  # a gap: a record recovery found damaged, its queue rebuilt
                continue
            max_phy_pulling = phys
            if next_file_start >= 0 and phys < next_file_start:
                scanned += 1
                continue
            if self._batch_full(size, max_messages, total_bytes, count, in_disk=max_phy - phys > memory):
                break
            scanned += 1
            if tag_filter is not None and not tag_filter.match_tag_code(tag_code):
                if total_bytes == 0:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            buf = read(phys, size)
            if buf is None:
                if total_bytes == 0:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_file_start = cl.roll_next_file(phys)
                continue
            try:
                msg = _checked(buf, phys, decode=not raw or predicate is not None)
            except CorruptRecord as exc:
                self._corruption.report(phys, str(exc))
                if count:
                    scanned -= 1  # the next read starts at the damaged record
                    break
                at = offset + scanned - 1
                raise corrupted(
                    phys, str(exc), topic=topic, queue_id=str(queue_id), queue_offset=str(at), next_offset=str(at + 1)
                ) from None
            if predicate is not None and not predicate(msg.all_properties()):  # type: ignore[union-attr]
                if total_bytes == 0:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            if raw:
                records.append(buf)
            else:
                taken.append(msg)  # type: ignore[arg-type]
            count += 1
            total_bytes += size
            status = GetMessageStatus.FOUND
            next_file_start = -1
        return GetMessageResult(
            status,
            offset + scanned,
            lo,
            hi,
            taken,
            suggest_pulling_from_replica=max_phy - max_phy_pulling > memory,
            records=records,
        )

    def _batch_full(self, size: int, max_messages: int, total_bytes: int, count: int, *, in_disk: bool) -> bool:
        """RocketMQ isTheBatchFull."""
        if total_bytes == 0 or count == 0:
            return False
        if count >= max_messages:
            return True
        s = self._settings
        if in_disk:
            return total_bytes + size > s.max_transfer_bytes_on_disk or count > s.max_transfer_count_on_disk - 1
        return total_bytes + size > s.max_transfer_bytes_in_memory or count > s.max_transfer_count_in_memory - 1

    def view_message(self, commit_log_offset: int) -> StoredMessage:
        """The record that begins at ``commit_log_offset`` (a caller's offset: see
        ``record_at`` for when a record counts as beginning there)."""
        if commit_log_offset < 0:
            raise error(errors_pb2.CODE_ILLEGAL_OFFSET, f"commit-log offset {commit_log_offset} is negative")
        msg = None
        if commit_log_offset < self._dispatcher.dispatched_offset:
            msg = self.record_at(commit_log_offset)
        if msg is None:
            raise not_found(
                errors_pb2.CODE_MESSAGE_NOT_FOUND, f"message at commit-log offset {commit_log_offset}",
                commit_log_offset=str(commit_log_offset),
            )  # fmt: skip
        return msg

    def view_message_by_id(self, offset_msg_id: str) -> StoredMessage:
        try:
            host, port, offset = decode_offset_msg_id(offset_msg_id)
        except ValueError as exc:
            raise error(errors_pb2.CODE_ILLEGAL_MESSAGE_ID, str(exc), offset_msg_id=offset_msg_id) from exc
        msg = self.view_message(offset)
        if (msg.store_host, msg.store_port) != (host, port):
            raise not_found(
                errors_pb2.CODE_MESSAGE_NOT_FOUND, f"message {offset_msg_id} (stored by {host}:{port})",
                offset_msg_id=offset_msg_id,
            )  # fmt: skip
        return msg

    def query_messages(
        self,
        *,
        topic: str = "",
        key: str = "",
        unique_id: str = "",
        max_results: int = DEFAULT_MAX_MESSAGES,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = 0,
    ) -> list[StoredMessage]:
        """Messages by key (topic required) or by unique id (topic optional; matches a
        half message's real topic too), stored within the time window, in commit-log
        order: the newest ``max_results`` matches."""
        if bool(key) == bool(unique_id):
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "query by exactly one of key and unique id")
        if key:
            if not topic:
                raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "a query by key needs a topic")
            check_topic_name(topic)
        if max_results < 0:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"max_results {max_results} is negative")
        limit = min(max_results or DEFAULT_MAX_MESSAGES, MAX_QUERY_RESULTS)
        begin = begin_timestamp_ms
        end = end_timestamp_ms or END_OF_TIME_MS
        index_hash = message_key_hash(topic, key) if key else unique_id_hash(unique_id)
        found: list[StoredMessage] = []
        dispatched = self._dispatcher.dispatched_offset
        damaged: TxmqError | None = None
        for offset in self._dispatcher.index.lookup(index_hash, begin_ms=begin, end_ms=end):
            try:
                msg = self.read_record(offset, boundary=True) if offset < dispatched else None
            except TxmqError as exc:  # a damaged candidate: it may or may not be a match
                damaged = damaged or exc
                continue
            if msg is None or not begin <= msg.store_timestamp_ms <= end:
                continue
            cfg = self._topics.get(msg.topic)
            if cfg is not None and offset < cfg.since_offset:
                continue  # a deleted namesake's message
            if key:
                ok = msg.topic == topic and key in msg.keys
            else:
                real = msg.properties.get(PROPERTY_REAL_TOPIC)
                ok = msg.unique_id == unique_id and (not topic or topic in (msg.topic, real))
            if ok:
                found.append(msg)
                if len(found) >= limit:
                    break
        if not found and damaged is not None:
            raise damaged  # the only candidates are damaged: "not found" would be a guess
        found.sort(key=lambda m: m.commit_log_offset)
        return found

    def indexed_below(self, unique_id: str, bound: int) -> bool:
        """Whether the index holds a candidate for ``unique_id`` (its hash: collisions
        count too) at a commit-log offset below ``bound``: a walk of one hash chain, no
        record read."""
        return self._dispatcher.index.any_below(unique_id_hash(unique_id), bound)

    def record_at(self, offset: int) -> StoredMessage | None:
        """The dispatched record that begins at ``offset``, an offset a caller named
        (ViewMessage, DecideTransactions, RequeueHalves); None when no record is known
        to begin there. Bytes that claim to be a record at ``offset`` prove nothing: a
        message's body may hold a well-formed record that claims the offset where the
        body lands. A record counts only when the store's own dispatch put it there
        (``_dispatched_at``). A record known to begin there that fails its CRC raises
        CODE_DATA_CORRUPTED (reported); so do bytes that claim to be a record there and
        fail their CRC, and a segment file that ends inside the header, unreported
        (damage or a forgery: the store cannot tell)."""
        if self._quarantine.find(offset) is not None:  # recovery found damage there
            msg = self.read_record(offset, boundary=True)
            return msg if msg is not None and self._dispatched_at(msg) else None
        cl = self._commitlog
        head = cl.read(offset, HEADER_SIZE)
        if head is None:
            return None
        if len(head) < HEADER_SIZE:  # the segment file ends there: it was cut short
            raise corrupted(offset, f"the segment file ends {len(head)} bytes into the record")
        size, magic = read_size_and_magic(head)
        if magic != MESSAGE_MAGIC or _PHYSICAL.unpack_from(head, PHYSICAL_OFFSET_AT)[0] != offset:
            return None
        buf = cl.read(offset, size) if size >= MIN_RECORD_SIZE else None
        try:
            if buf is None:
                raise CorruptRecord(f"impossible size {size} at {offset}")
            msg = decode_record(buf, verify_crc=True, expected_offset=offset)
        except CorruptRecord as exc:
            claimed = _claims(buf)
            if claimed is not None and self._dispatched_at(claimed):
                self._corruption.report(offset, str(exc))
            raise corrupted(offset, str(exc)) from None
        return msg if self._dispatched_at(msg) else None

    def _dispatched_at(self, msg: StoredMessage) -> bool:
        """Whether dispatch put the record ``msg`` claims to be at its commit-log offset.
        A record that takes a queue slot: the unit at its queue offset in the consume
        queue of its topic and queue names that offset and size (one unit read). A
        prepared record (no queue slot, indexed): the unique-id index holds an entry
        at that offset, in a live topic. A rolled-back record (no unit, not indexed):
        never (txmq writes none; only a log scan could vouch for one)."""
        offset = msg.commit_log_offset
        if takes_queue_slot(msg.sys_flag):
            cq = self._dispatcher.consume_queue(msg.topic, msg.queue_id)
            unit = cq.unit(msg.queue_offset) if cq is not None else None
            return unit is not None and unit[0] == offset and unit[1] == msg.store_size
        if not is_indexed(msg.sys_flag):
            return False
        cfg = self._topics.get(msg.topic)
        if cfg is None or offset < cfg.since_offset:
            return False
        return self._dispatcher.index.holds(unique_id_hash(msg.unique_id), offset)

    def read_record(self, offset: int, *, boundary: bool) -> StoredMessage | None:
        """commitlog.read_record, with a damaged record reported and raised as
        CODE_DATA_CORRUPTED."""
        try:
            return self._commitlog.read_record(offset, boundary=boundary)
        except CorruptRecord as exc:
            self._corruption.report(offset, str(exc))
            raise corrupted(offset, str(exc)) from None

    def queue_offsets(self, topic: str, queue_id: int | None = None) -> list[QueueOffsets]:
        cfg = self._admin.require_topic(topic)
        n = max(cfg.read_queue_nums, cfg.write_queue_nums)
        if queue_id is not None and not 0 <= queue_id < n:
            raise error(errors_pb2.CODE_ILLEGAL_QUEUE_ID, f"topic {topic} has no queue {queue_id}")
        out = []
        for q in [queue_id] if queue_id is not None else range(n):
            cq = self._dispatcher.consume_queue(topic, q)
            if cq is None:
                out.append(QueueOffsets(q, 0, 0, 0))
                continue
            last = cq.unit(cq.max_offset - 1)
            ts = self._store_timestamp(last[0]) if last else None
            out.append(QueueOffsets(q, cq.min_offset, cq.max_offset, ts or 0))
        return out

    def _store_timestamp(self, commit_log_offset: int) -> int | None:
        head = self._commitlog.read(commit_log_offset, HEADER_SIZE)
        return None if head is None else read_store_timestamp(head)

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after
        ``timestamp_ms``; the max offset when there is none."""
        cfg = self._admin.require_topic(topic)
        if not 0 <= queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
            raise error(errors_pb2.CODE_ILLEGAL_QUEUE_ID, f"topic {topic} has no queue {queue_id}")
        cq = self._dispatcher.consume_queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = cq.unit(mid)
            ts = self._store_timestamp(unit[0]) if unit else None
            if ts is None or ts < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def watch_arrivals(self, topics: Sequence[str] = ()) -> ArrivalWatcher:
        """A watcher of dispatched records (use as a context manager; iterate with
        ``next_batch``, which returns None once the store closes)."""
        self._check_open()
        return self._hub.watch(topics)


class _ReadAhead:
    """Records of a queue often follow each other in the commit log: one pread serves
    those that lie in the chunk read last."""

    __slots__ = ("_chunk", "_commitlog", "_end", "_read_ahead", "_start")

    def __init__(self, commitlog: CommitLog, read_ahead: int) -> None:
        self._commitlog = commitlog
        self._read_ahead = read_ahead
        self._chunk, self._start, self._end = b"", 0, 0

    def read(self, phys: int, size: int) -> bytes | None:
        if self._start <= phys and phys + size <= self._end:
            return self._chunk[phys - self._start : phys - self._start + size]
        buf = self._commitlog.read_ahead(phys, size, self._read_ahead)
        if buf is not None:
            self._chunk, self._start, self._end = buf, phys, phys + len(buf)
            buf = buf[:size] if len(buf) > size else buf
        return buf


def _checked(buf: bytes, phys: int, *, decode: bool) -> StoredMessage | None:
    """The record at ``phys`` CRC-checked (CorruptRecord when damaged), decoded when
    ``decode`` (a raw read decodes only for an SQL92 filter)."""
    if not decode:
        verify_record(buf, 0, phys)
        return None
    return decode_record(buf, verify_crc=True, expected_offset=phys)


_PHYSICAL = struct.Struct(">q")  # the physical offset a record claims, at PHYSICAL_OFFSET_AT


def _claims(buf: bytes | None) -> StoredMessage | None:
    """What a damaged record says it is (topic, queue, queue offset, sysflag), read
    without its CRC; None when even that does not decode."""
    if buf is None:
        return None
    try:
        return decode_record(buf, with_body=False)
    except CorruptRecord:
        return None
