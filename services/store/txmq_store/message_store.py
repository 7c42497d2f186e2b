"""The message store core: RocketMQ's DefaultMessageStore, minus replication.

Everything here runs on one asyncio event loop; only fsyncs (flush.py, checkpoints,
JSON persistence) run in threads. A send validates the whole request first (nothing is
stored on a bad request), then appends synchronously (no await between validation and
append, so queue offsets follow commit-log order), then waits per the flush mode.
Results of reads are enums (GetMessageStatus); bad requests raise ``TxmqError``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import shutil
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from txmq.errors import error
from txmq.ids import encode_offset_msg_id
from txmq.protocol import (
    DELAY_PROPERTIES,
    HALF_QUEUE_ID,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OFFSET,
    TIMER_TOPIC,
    TRANS_CHECK_GROUP,
)
from txmq.records import (
    ANY_QUEUE,
    BLANK_MAGIC,
)
from txmq.v1 import errors_pb2
from txmq_runtime.clock import SYSTEM_CLOCK, WallClock, wall_clock_ms
from txmq_runtime.clock import Clock as MonotonicClock
from txmq_runtime.settings import describe

from . import metrics as store_metrics
from .admin import ConfigAdmin, not_found
from .arrivals import ArrivalHub
from .codec import (
    BLANK_SIZE,
    UNKNOWN_HOST,
    CorruptRecord,
    PreparedRecord,
    encode_host,
    read_size_and_magic,
    set_queue_id,
    split_host_port,
)
from .commitlog import CommitLog, Fsync
from .configs import (
    TRANS_HALF_TOPIC,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
    WriteQueues,
    is_system_topic,
)
from .dispatch import Dispatcher
from .fileio import fsync_path, write_json_atomically
from .flush import GroupCommit, PeriodicFlusher
from .idempotence import FirstSend, SendWindow
from .integrity import CorruptionLog, FreeSpaceGuard, Quarantine, disk_full, is_disk_full
from .metrics import ReplicaFigures, StoreFigures
from .model import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    TRANSACTION_TYPE_MASK,
    OutgoingMessage,
    QueueOffsets,
    SendResult,
    SendStatus,
    StoredMessage,
    StoreStatus,
)
from .offsets import ConsumeOffsetTable
from .reads import DEFAULT_MAX_MESSAGES, Reader
from .recovery import StorePaths, lock_data_dir, mark_running, mark_stopped, recover, write_checkpoint
from .replication import CONFIG, FENCES, OFFSETS, EpochHistory, Leadership, check_copied, config_document, not_leader
from .settings import StoreSettings
from .timer import Timers, delivery_time
from .transactions import Fences, Transactions
from .validation import (
    MessageEncoder,
    MessageLimits,
    check_group_name,
    check_topic_name,
)

log = logging.getLogger("txmq.store")

Clock = WallClock  # milliseconds since the epoch (txmq_runtime.clock's rule)
#: Decisions read into the decision book at start at most (it is a cache: the index
#: answers the rest), so a long op queue does not slow a restart down.
WARM_DECISIONS_MAX = 20_000


@dataclass(slots=True)
class Appended:
    """A batch ``MessageStore.append_records`` wrote: the records, their commit-log and
    queue offsets, for half messages (and for every record of a batch with delayed ones)
    the queue each is meant for, the commit log's end after the batch and the store time
    given to them. ``deliver_at``: per record, when a delayed one becomes visible (0: not
    delayed); empty when none is delayed."""

    records: list[PreparedRecord]
    offsets: list[int]
    queue_offsets: list[int]
    real_queues: list[tuple[str, int]]
    end: int
    store_timestamp_ms: int
    deliver_at: list[int] = field(default_factory=list)
    # Idempotent sends: messages of the batch answered with an earlier send's record
    # instead of being stored (``records`` and the lists above hold the others).
    duplicates: list[FirstSend] = field(default_factory=list)

    def reported_queue_offsets(self) -> list[int]:
        """Queue offsets as answered: -1 for a delayed record (it has none until it is
        delivered; its offset here is the timer queue's)."""
        if not self.deliver_at:
            return self.queue_offsets
        return [-1 if at else q for q, at in zip(self.queue_offsets, self.deliver_at, strict=True)]


class MessageStore:
    """Use ``await MessageStore.open(...)``; ``await store.close()`` when done."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        paths: StorePaths,
        lock_fd: int,
        clock: Clock,
        commitlog: CommitLog,
        dispatcher: Dispatcher,
        topics: TopicConfigTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumeOffsetTable,
        hub: ArrivalHub,
        crashed: bool,
        quarantine: Quarantine | None = None,
        corruption: CorruptionLog | None = None,
        held: list[StoredMessage] | None = None,
    ) -> None:
        self.settings = settings
        self.store_id = settings.resolved_store_id
        self._paths = paths
        self._lock_fd = lock_fd
        self._clock = clock
        self.commitlog = commitlog
        self._dispatcher = dispatcher
        dispatcher.read_span = commitlog.read
        dispatcher.arrival_records_max_bytes = settings.arrival_records_max_bytes
        self._hub = hub
        self.recovered_from_crash = crashed
        self.started_at_ms = clock()
        self._sync = settings.flush_mode == "sync"
        self._limits = MessageLimits(
            max_body_bytes=settings.max_message_body_bytes,
            max_properties_bytes=settings.max_properties_bytes,
            max_record_bytes=commitlog.max_record_size(),
        )
        self._queues = WriteQueues({key: cq.max_offset for key, cq in dispatcher.queues.items()})
        self.admin = ConfigAdmin(
            settings, topics=topics, groups=groups, offsets=offsets, dispatcher=dispatcher, queues=self._queues,
            clock=clock, log_end=lambda: commitlog.write_offset, check_write=self._check_admin_write,
            state_replicated=self.state_replicated,
        )  # fmt: skip
        # Sync mode: appended batches waiting for their fsync before dispatch.
        self._undispatched: deque[tuple[int, list[PreparedRecord], list[int], list[int], int]] = deque()
        self._flusher: PeriodicFlusher | None = None
        self._group_commit: GroupCommit | None = None
        self._store_host = UNKNOWN_HOST
        self._offset_msg_id_prefix = ""
        self.advertised_address = ""
        self._writable = True
        self._closed = False
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._checkpoint_lock = asyncio.Lock()
        self._unsynced: set[Path] = set()
        self._quarantine = quarantine or Quarantine(paths.quarantine)
        self._corruption = corruption or CorruptionLog()
        self.reader = Reader(
            settings, commitlog=commitlog, dispatcher=dispatcher, admin=self.admin, hub=hub,
            quarantine=self._quarantine, corruption=self._corruption, check_open=self._check_open,
        )  # fmt: skip
        self._free_space = FreeSpaceGuard(commitlog.directory, min_free_bytes=settings.disk_min_free_bytes)
        # Idempotent sends (idempotence.py): earlier sends found through the index.
        self._window = SendWindow(settings.idempotence_window_ms, lambda: self._dispatcher.index, self._read_first)
        # Transaction decisions and the check loop's writes (transactions.py).
        self.transactions = self._new_transactions()
        # A replicated store group's replica (docs/replication.md): nothing beyond the
        # high watermark is dispatched. ``_held``: records in the log, not dispatched
        # yet, decoded (copied from the leader, or found beyond the checkpoint at start);
        # the leader's own appends wait in ``_undispatched`` as in sync mode.
        self.replicated = bool(settings.replica_id)
        self.replica_id = settings.replica_id
        self.epochs = EpochHistory.load(paths.root / "replication" / "epochs.json") if self.replicated else None
        self.leadership: Leadership | None = None
        self.follower_high_watermark = 0
        self.leader_hint = ("", "")  # (replica id, address) of the leader, for NOT_LEADER
        self._held: deque[StoredMessage] = deque(held or ())
        self._local_durable = commitlog.flushed_offset if self._sync else commitlog.write_offset
        self._writes_ready = not self.replicated
        # Kept on disk (a marker file) so that a restart does not forget it.
        self._resync_marker = paths.root / "replication" / "needs_resync"
        self._needs_resync = self.replicated and self._resync_marker.exists()
        # Delayed messages (timer.py): delivered by the writable store only.
        self._delay_levels_ms = settings.delay_levels_ms
        self.timers = Timers(
            settings, path=paths.root / "timer" / "checkpoint", clock=clock, commitlog=commitlog,
            dispatcher=dispatcher, topics=topics, queues=self._queues, corruption=self._corruption,
            append=self._append_copies, settle=self.settle, read_record=self.reader.read_record,
            may_run=self._timer_may_run,
        )  # fmt: skip

    def _timer_may_run(self) -> bool:
        """Timers are delivered by the writable store only: a replicated group's leader
        once it took writes; never by a follower."""
        if self._closed or not self._writable or self.commitlog.broken:
            return False
        return not self.replicated or (self.leadership is not None and self._writes_ready)

    def _append_copies(self, copies: list[PreparedRecord]) -> Appended:
        """Timer deliveries: built by the timer, appended as any send."""
        self._check_writable()
        return self._append_prepared(copies, {}, [], self._clock())

    def _new_transactions(self) -> Transactions:
        return Transactions(
            self, cache_entries=self.settings.decision_cache_entries, fences=Fences(self._paths.config / "fences.json")
        )

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        settings: StoreSettings,
        *,
        advertised_address: str = "",
        clock: Clock = wall_clock_ms,
        fsync: Fsync = os.fdatasync,
    ) -> MessageStore:
        """Open (and recover) the store in ``settings.data_dir``. ``advertised_address``
        (host:port) goes into every record's store host and offsetMsgId; empty: the
        settings' advertised_address, else host:port. ``set_advertised_address`` may
        change it later (e.g. once a server bound port 0). ``fsync`` syncs one file
        descriptor (tests count calls)."""
        host, port = _resolve(advertised_address or settings.advertised_address or f"{settings.host}:{settings.port}")
        paths = StorePaths(Path(settings.data_dir))
        lock_fd = lock_data_dir(paths)
        try:
            store = await asyncio.to_thread(cls._load, settings, paths, lock_fd, clock, fsync)
        except BaseException:
            os.close(lock_fd)
            raise
        store._set_store_host(host, port)
        store._start()
        store.transactions.horizon = store.commitlog.write_offset
        store.transactions.warm(max_entries=min(settings.decision_cache_entries, WARM_DECISIONS_MAX))
        return store

    @classmethod
    def _load(
        cls, settings: StoreSettings, paths: StorePaths, lock_fd: int, clock: Clock, fsync: Fsync
    ) -> MessageStore:
        crashed = paths.abort.exists()
        paths.config.mkdir(parents=True, exist_ok=True)
        topics = TopicConfigTable.load(paths.config / "topics.json")
        groups = SubscriptionGroupTable.load(paths.config / "subscription_groups.json")
        offsets = ConsumeOffsetTable.load(paths.config / "consumer_offsets.json")
        hub = ArrivalHub(buffer_limit=settings.arrival_watcher_buffer)
        commitlog = CommitLog.open(
            paths.commitlog,
            segment_bytes=settings.commitlog_segment_bytes,
            fsync=fsync,
            preallocate=settings.commitlog_preallocate,
        )
        dispatcher: Dispatcher | None = None
        quarantine = Quarantine(paths.quarantine)
        corruption = CorruptionLog()
        held: list[StoredMessage] | None = [] if settings.replica_id else None
        damaged: list[tuple[int, int]] | None = [] if settings.replica_id else None
        try:
            dispatcher = recover(
                paths,
                commitlog=commitlog,
                topics=topics,
                hub=hub,
                units_per_file=settings.consume_queue_units_per_file,
                index_slots=settings.index_slots_per_file,
                index_entries=settings.index_entries_per_file,
                crashed=crashed,
                quarantine=quarantine,
                corruption=corruption,
                now_ms=clock(),
                held=held,
                damaged=damaged,
            )
            store = cls(
                settings, paths=paths, lock_fd=lock_fd, clock=clock, commitlog=commitlog, dispatcher=dispatcher,
                topics=topics, groups=groups, offsets=offsets, hub=hub, crashed=crashed, quarantine=quarantine,
                corruption=corruption, held=held,
            )  # fmt: skip
            # A replica whose log was cut at damage may lack acknowledged records: it
            # does not stand for leader until it has copied its leader's log again.
            if damaged:
                store.needs_resync = True
            # Make the recovered state the new baseline before accepting writes.
            store._sync_paths(store._take_dirty())
            write_checkpoint(paths, dispatcher.dispatched_offset, now_ms=clock())
            mark_running(paths)
        except BaseException:
            if dispatcher is not None:
                dispatcher.close()
                dispatcher.index.close()
            commitlog.close()
            raise
        commitlog.preallocate_next()
        return store

    def _start(self) -> None:
        s = self.settings
        if self._sync:
            self._group_commit = GroupCommit(self.commitlog, on_durable=self._dispatch_durable)
            self._group_commit.start()
        else:
            self._flusher = PeriodicFlusher(self.commitlog, interval_s=s.flush_interval_ms / 1000)
            self._flusher.start()
        loop = asyncio.get_running_loop()
        for interval_ms, job in (
            (s.flush_consume_queue_interval_ms, self.checkpoint),
            (s.consume_offset_persist_interval_ms, self.admin.persist_offsets),
            (s.clean_files_interval_ms, self.clean_expired_files),
        ):
            self._tasks.append(loop.create_task(self._every(interval_ms, job)))
        self.timers.start()
        self._tasks.append(loop.create_task(self.timers.run(self._stop)))

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[object]]) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), interval_ms / 1000)
                return
            except TimeoutError:
                pass
            try:
                await job()
            except Exception:
                log.exception("periodic store job %s failed", getattr(job, "__name__", job))

    def end_arrival_streams(self) -> None:
        """End every arrival watch (the process is stopping): streams answer now instead
        of holding the server's grace period. Sends and reads still work."""
        self._hub.close()

    async def close(self) -> None:
        """Flush everything, persist offsets and configs, remove the abort marker."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self.timers.checkpoint_quietly()
        self._hub.close()
        if self._group_commit is not None:
            await self._group_commit.stop()
        if self._flusher is not None:
            await self._flusher.stop()
        await self.checkpoint()
        await self.admin.persist_offsets()
        self._dispatcher.close()
        self._dispatcher.index.close()
        self.commitlog.close()
        mark_stopped(self._paths)
        os.close(self._lock_fd)

    def set_advertised_address(self, address: str) -> None:
        """Where clients reach this store (host:port) from now on; a host name is
        resolved once, as records hold an IP address."""
        self._set_store_host(*_resolve(address))

    def _set_store_host(self, host: str, port: int) -> None:
        self._store_host = encode_host(host, port)
        # offsetMsgId = address | port | offset (16 hex digits, last): computed once.
        self._offset_msg_id_prefix = encode_offset_msg_id(host, port, 0)[:-16]
        self.advertised_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _check_admin_write(self) -> None:
        """Configuration changes and consume offsets, like records, are made on a group's
        leader only."""
        if self.replicated:
            self._check_leads()

    def _check_open(self) -> None:
        if self._closed:
            raise error(errors_pb2.CODE_SERVICE_NOT_READY, "store is shutting down")

    # -- sending -------------------------------------------------------------------------

    async def send(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        producer_group: str = "",
        transaction_prepared: bool = False,
        born_host: str = "",
        system: bool = False,
    ) -> list[SendResult]:
        """Store a batch (all or nothing). ``system`` sends (the transaction service)
        may write system topics and set sysflag, reconsume times and the
        prepared-transaction offset. A half message's result names its real queue and
        carries the half record's queue offset (RocketMQ tranStateTableOffset)."""
        appended = self.append_records(
            messages,
            producer_group=producer_group,
            transaction_prepared=transaction_prepared,
            born_host=born_host,
            system=system,
        )
        return self.results(appended, await self.settle(appended), transaction_prepared=transaction_prepared)

    def results(self, appended: Appended, status: SendStatus, *, transaction_prepared: bool) -> list[SendResult]:
        """The SendResult of every message of a settled batch, in batch order (earlier
        sends' results where the window answered: ``SendResult.duplicate``; delayed
        messages with their real queue, queue offset -1 and ``deliver_at_ms``)."""
        prefix = self._offset_msg_id_prefix
        records, offsets, queue_offsets = appended.records, appended.offsets, appended.queue_offsets
        if appended.deliver_at:  # delayed messages among them: answered with their real queues
            reported = appended.reported_queue_offsets()
            out = [
                SendResult(status, rec.unique_id, f"{prefix}{offset:016X}", topic, qid, qoff, offset, deliver_at_ms=at)
                for rec, offset, qoff, (topic, qid), at in zip(
                    records, offsets, reported, appended.real_queues, appended.deliver_at, strict=True
                )
            ]
        elif transaction_prepared:
            out = [
                SendResult(status, rec.unique_id, f"{prefix}{offset:016X}", topic, qid, qoff, offset, rec.unique_id)
                for rec, offset, qoff, (topic, qid) in zip(records, offsets, queue_offsets, appended.real_queues)
            ]
        else:
            out = [
                SendResult(status, rec.unique_id, f"{prefix}{offset:016X}", rec.topic, rec.queue_id, qoff, offset)
                for rec, offset, qoff in zip(records, offsets, queue_offsets)
            ]
        for first in appended.duplicates:  # in batch order: each goes where it was sent
            out.insert(first.index, self._first_result(first, status))
        return out

    def _first_result(self, first: FirstSend, status: SendStatus) -> SendResult:
        offset = first.commit_log_offset
        queue_offset, deliver_at_ms = first.queue_offset, 0
        if first.record_topic == TIMER_TOPIC:  # still waiting: no queue offset until its delivery
            queue_offset = -1
            deliver_at_ms = int(first.properties.get(PROPERTY_TIMER_DELIVER_MS, "0") or 0)
        return SendResult(
            status,
            first.unique_id,
            f"{self._offset_msg_id_prefix}{offset:016X}",
            first.topic,
            first.queue_id,
            queue_offset,
            offset,
            first.unique_id if first.prepared else "",
            duplicate=True,
            deliver_at_ms=deliver_at_ms,
        )

    def _read_first(self, offset: int) -> StoredMessage | None:
        """The record an earlier send left at ``offset`` (the window's candidates); None
        when it is gone or damaged (the send is then stored again: nothing is lost)."""
        try:
            return self.commitlog.read_record(offset, boundary=True)
        except CorruptRecord:
            return None

    @property
    def offset_msg_id_prefix(self) -> str:
        """offsetMsgId of commit-log offset N: this prefix + f"{N:016X}"."""
        return self._offset_msg_id_prefix

    async def send_records(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        producer_group: str = "",
        transaction_prepared: bool = False,
        born_host: str = "",
        system: bool = False,
    ) -> tuple[SendStatus, list[PreparedRecord], list[int], list[int], list[tuple[str, int]]]:
        """``send`` without building SendResults (the servicer builds its response from
        these): status, the records, their commit-log offsets, their queue offsets and,
        for half messages, the (topic, queue id) each is meant for."""
        appended = self.append_records(
            messages,
            producer_group=producer_group,
            transaction_prepared=transaction_prepared,
            born_host=born_host,
            system=system,
        )
        status = await self.settle(appended)
        return status, appended.records, appended.offsets, appended.queue_offsets, appended.real_queues

    def append_records(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        producer_group: str = "",
        transaction_prepared: bool = False,
        born_host: str = "",
        system: bool = False,
    ) -> Appended:
        """Validate and append a batch, all or nothing, without awaiting anything: what
        a caller checked right before calling this still holds when the records are in
        the commit log (the store is one event loop). ``settle`` the result next."""
        self._check_writable()
        s = self.settings
        if not messages:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "no messages to send")
        self._check_batch_size(len(messages), sum(len(m.body) for m in messages))
        if transaction_prepared:
            if not s.transaction_message_enable:
                raise error(
                    errors_pb2.CODE_TRANSACTION_NOT_ALLOWED, "transactional messages are disabled on this store"
                )
            check_group_name(producer_group, code=errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP)
        now = self._clock()
        encoder = MessageEncoder(limits=self._limits, born_host=_born_host(born_host), now_ms=now, system=system)
        prepare = encoder.prepare
        new_topics: dict[str, TopicConfig] = {}
        records: list[PreparedRecord] = []
        real_queues: list[tuple[str, int]] = []  # half and delayed messages: the queue it is meant for
        deliver_at: list[int] = []  # filled once a delayed message is met
        cfg: TopicConfig | None = None
        window = self._window
        duplicates: list[FirstSend] = []
        for i, msg in enumerate(messages):
            if window.enabled and not system:
                first = window.first_send(i, msg.topic, msg.unique_id, now)
                if first is not None:
                    duplicates.append(first)
                    continue
            if cfg is None or cfg.name != msg.topic:  # batches mostly share one topic
                cfg = self._topic_for_send(msg.topic, i, system=system, new_topics=new_topics)
            queue_id = msg.queue_id
            if queue_id is None or not 0 <= queue_id < cfg.write_queue_nums:  # else: as _queue_for_send
                queue_id = self._queues.queue_for_send(cfg, queue_id, i)
            sys_flag = msg.sys_flag if system else 0
            props = msg.properties
            if props and not DELAY_PROPERTIES.isdisjoint(props) and not (system and PROPERTY_TIMER_OFFSET in props):
                if transaction_prepared:
                    raise error(
                        errors_pb2.CODE_MESSAGE_TYPE_CONFLICT,
                        "a transactional message cannot be delayed (RocketMQ #10260): send it without "
                        f"{'/'.join(sorted(DELAY_PROPERTIES & props.keys()))}, or not as a transaction",
                        index=str(i),
                    )  # fmt: skip
                at = delivery_time(
                    props, now_ms=now, levels_ms=self._delay_levels_ms, max_delay_ms=s.timer_max_delay_ms, index=i
                )
                if at:
                    if not deliver_at:
                        deliver_at = [0] * len(records)
                        real_queues = [(r.topic, r.queue_id) for r in records]
                    deliver_at.append(at)
                    real_queues.append((cfg.name, queue_id))
                    extra = {
                        PROPERTY_REAL_TOPIC: cfg.name,
                        PROPERTY_REAL_QUEUE_ID: str(queue_id),
                        PROPERTY_TIMER_DELIVER_MS: str(at),
                    }
                    user = {k: v for k, v in props.items() if k not in DELAY_PROPERTIES}
                    rec = prepare(replace(msg, properties=user), i, TIMER_TOPIC, 0, extra, 0)
                    rec.tag_code = at  # the timer queue's unit holds the delivery time
                    records.append(rec)
                    continue
            if deliver_at:
                deliver_at.append(0)
                real_queues.append((cfg.name, queue_id))
            if transaction_prepared:
                real_queues.append((cfg.name, queue_id))
                extra = {
                    PROPERTY_REAL_TOPIC: cfg.name,
                    PROPERTY_REAL_QUEUE_ID: str(queue_id),
                    PROPERTY_PRODUCER_GROUP: producer_group,
                    PROPERTY_TRANSACTION_PREPARED: "true",
                }
                records.append(prepare(msg, i, TRANS_HALF_TOPIC, 0, extra, sys_flag & ~TRANSACTION_TYPE_MASK))
            else:
                records.append(prepare(msg, i, cfg.name, queue_id, None, sys_flag))
        return self._append_prepared(records, new_topics, real_queues, now, deliver_at, duplicates)

    def append_packed(
        self,
        blob: bytes,
        *,
        born_host: str = "",
        transaction_prepared: bool = False,
        producer_group: str = "",
        may_publish: Callable[[str], None] | None = None,
    ) -> Appended:
        """``append_records`` for records a producer sent in the commit-log layout
        (``Store.SendStream``): each is checked (``MessageEncoder.unpack``) and stored
        as it came, with the fields only the store knows written in. All or nothing.
        ``transaction_prepared``: stored as half messages, which ``append_records`` makes
        (their topic and properties are rewritten, so they are not taken as they came).
        ``may_publish(topic)`` raises when the caller may not publish there (ACLs): called
        once per run of records to one topic, before anything is written."""
        self._check_writable()
        now = self._clock()
        if transaction_prepared:
            halves = self._unpacked_messages(blob, may_publish, now)
            return self.append_records(
                halves, producer_group=producer_group, transaction_prepared=True, born_host=born_host
            )
        frame = bytearray(blob)  # the records are patched in place (one copy of the frame)
        new_topics: dict[str, TopicConfig] = {}
        records: list[PreparedRecord] = []
        cfg: TopicConfig | None = None
        total_body = 0
        window = self._window if self._window.enabled else None
        duplicates: list[FirstSend] = []
        for i, pos, rec in self._sent_records(frame, _born_host(born_host), now):
            if window is not None:
                first = window.first_send(i, rec.topic, rec.unique_id, now)
                if first is not None:
                    if may_publish is not None:
                        may_publish(rec.topic)  # answering reveals the first send
                    duplicates.append(first)
                    continue
            if rec.user_properties and not DELAY_PROPERTIES.isdisjoint(rec.user_properties):
                # A delayed record is rewritten to the timer topic, as a half message is.
                return self.append_records(self._unpacked_messages(blob, may_publish, now), born_host=born_host)
            total_body += len(rec.body)
            if cfg is None or cfg.name != rec.topic:
                if may_publish is not None:
                    may_publish(rec.topic)
                cfg = self._topic_for_send(rec.topic, i, system=False, new_topics=new_topics)
            queue_id = rec.queue_id
            if not queue_id < cfg.write_queue_nums:  # ANY_QUEUE (0xFFFFFFFF) or out of range
                rec.queue_id = self._queues.queue_for_send(cfg, None if queue_id == ANY_QUEUE else queue_id, i)
                set_queue_id(frame, pos, rec.queue_id)
            records.append(rec)
        self._check_batch_size(len(records), total_body)
        return self._append_prepared(records, new_topics, [], now, duplicates=duplicates)

    def _unpacked_messages(
        self, blob: bytes, may_publish: Callable[[str], None] | None, now: int
    ) -> list[OutgoingMessage]:
        """A sent frame's records as messages, for the paths that rewrite them (half and
        delayed messages: ``append_records``), once the caller may publish to each topic."""
        messages = [
            OutgoingMessage(
                rec.topic,
                bytes(rec.body),
                rec.tags,
                rec.keys,
                dict(rec.user_properties),
                rec.unique_id,
                rec.flag,
                None if rec.queue_id == ANY_QUEUE else rec.queue_id,
                rec.born_timestamp_ms,
            )
            for _, _, rec in self._sent_records(bytearray(blob), UNKNOWN_HOST, now)
        ]
        if may_publish is not None:
            for topic in {m.topic for m in messages}:
                may_publish(topic)
        return messages

    def _sent_records(self, frame: bytearray, born_host: bytes, now: int) -> Iterator[tuple[int, int, PreparedRecord]]:
        """(index, position, record) of each record of a sent frame, checked; at most
        ``max_batch_messages``."""
        if not frame:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "no records to send")
        unpack = MessageEncoder(limits=self._limits, born_host=born_host, now_ms=now, system=False).unpack
        max_messages = self.settings.max_batch_messages
        pos = i = 0
        while pos < len(frame):
            if i == max_messages:
                raise error(errors_pb2.CODE_BATCH_TOO_LARGE, f"more than {max_messages} records in one frame")
            rec = unpack(frame, pos, i)
            yield i, pos, rec
            pos += rec.size
            i += 1

    def _check_writable(self) -> None:
        self._check_open()
        if not self._writable or self.commitlog.broken:
            raise error(errors_pb2.CODE_SERVICE_NOT_WRITABLE, "store stopped writing after a storage error")
        if self.replicated:
            self._check_leads()

    def _check_leads(self) -> None:
        """A replica takes writes (records, offsets, configuration) only while it leads
        its group, enough replicas are in sync and the records it took over are held."""
        leadership = self.leadership
        if leadership is None:
            raise not_leader(*self.leader_hint)
        leadership.check_writable()
        if not self._writes_ready:
            raise error(errors_pb2.CODE_SERVICE_NOT_READY, "the new leader is not ready for writes yet")

    def _check_batch_size(self, count: int, body_bytes: int) -> None:
        s = self.settings
        if count > s.max_batch_messages:
            raise error(
                errors_pb2.CODE_BATCH_TOO_LARGE, f"{count} messages in one batch, at most {s.max_batch_messages}"
            )
        if body_bytes > s.max_batch_bytes:
            raise error(
                errors_pb2.CODE_BATCH_TOO_LARGE, f"batch bodies total {body_bytes} bytes, at most {s.max_batch_bytes}"
            )

    def _append_prepared(
        self,
        records: list[PreparedRecord],
        new_topics: dict[str, TopicConfig],
        real_queues: list[tuple[str, int]],
        now: int,
        deliver_at: list[int] | None = None,
        duplicates: list[FirstSend] | None = None,
    ) -> Appended:
        """Append validated records (topics to create in ``new_topics``); ``duplicates``:
        messages of the batch the idempotence window answered (nothing to write)."""
        if not records:  # every message was sent before: nothing to write
            return Appended([], [], [], [], self.commitlog.write_offset, now, [], duplicates or [])
        # Valid. Room on disk for the records and their queue and index entries?
        self._free_space.check(sum(rec.size for rec in records) + 64 * len(records))
        # From here on the request changes the store.
        self.admin.put_new_topics(new_topics.values())
        queue_offsets = self._queues.assign(records)
        try:
            # Consume-queue files the dispatch will write, created (and their blocks
            # reserved) first: a full disk refuses the send instead of failing dispatch.
            self._dispatcher.prepare_queues(records, queue_offsets)
            offsets = self.commitlog.append(records, queue_offsets, store_timestamp_ms=now, store_host=self._store_host)
        except OSError as exc:
            # Nothing of the batch is stored (append rolls back what it wrote).
            self._queues.unassign(records, queue_offsets)
            if is_disk_full(exc) and not self.commitlog.broken:
                log.error("send refused, the disk is full: %s", exc)
                raise disk_full(f"the store's disk is full: {exc}") from None
            self._writable = False
            log.error("commit log append failed; the store stops accepting writes: %s", exc)
            raise error(errors_pb2.CODE_STORAGE_ERROR, f"commit log write failed: {exc}") from None
        end = self.commitlog.write_offset
        if self.replicated:
            self._window.appended(records, offsets)
            self._undispatched.append((end, records, offsets, queue_offsets, now))
            if not self._sync:
                self._local_durable = end
            self._advance()
        elif self._group_commit is not None:
            self._window.appended(records, offsets)
            self._undispatched.append((end, records, offsets, queue_offsets, now))
        else:
            self._dispatcher.dispatch(records, offsets, queue_offsets, store_timestamp_ms=now, end_offset=end)
        store_metrics.count_in(records)
        return Appended(records, offsets, queue_offsets, real_queues, end, now, deliver_at or [], duplicates or [])

    async def settle(self, appended: Appended) -> SendStatus:
        """Acknowledge an append per the flush mode: async, at once; sync, once the
        group commit has fsynced it (FLUSH_DISK_TIMEOUT when that takes too long). A
        replicated group's leader then waits for the in-sync replicas to hold it
        (FLUSH_REPLICA_TIMEOUT when they do not within sync_flush_timeout_ms)."""
        status = SendStatus.OK if self._group_commit is None else await self._wait_durable(appended.end)
        if not self.replicated or status != SendStatus.OK:
            return status
        leadership = self.leadership
        if leadership is None:
            raise not_leader(*self.leader_hint)
        fut = leadership.wait_replicated(appended.end)
        try:
            async with asyncio.timeout(self.settings.sync_flush_timeout_ms / 1000):
                await fut
        except TimeoutError:
            return SendStatus.FLUSH_REPLICA_TIMEOUT
        return SendStatus.OK

    @property
    def dispatched_offset(self) -> int:
        """Records below this commit-log offset are in the consume queues and the index."""
        return self._dispatcher.dispatched_offset

    def _topic_for_send(
        self, name: str, index: int, *, system: bool, new_topics: dict[str, TopicConfig]
    ) -> TopicConfig:
        cfg = self.admin.topics.get(name) or new_topics.get(name)
        if cfg is None:
            check_topic_name(name, index=str(index))
            if is_system_topic(name) and not system:
                raise error(errors_pb2.CODE_SYSTEM_TOPIC, f"{name} is a system topic", topic=name, index=str(index))
            if not self.settings.auto_create_topic_enable:
                raise not_found(errors_pb2.CODE_TOPIC_NOT_FOUND, f"topic {name}", topic=name, index=str(index))
            n = self.settings.default_topic_queue_nums
            cfg = new_topics[name] = TopicConfig(name, n, n, since_offset=self.commitlog.write_offset)
        elif not system and cfg.is_system:
            raise error(errors_pb2.CODE_SYSTEM_TOPIC, f"{name} is a system topic", topic=name, index=str(index))
        if not cfg.writable:
            raise error(
                errors_pb2.CODE_TOPIC_NOT_WRITABLE, f"topic {name} is not writable", topic=name, index=str(index)
            )
        return cfg

    async def _wait_durable(self, end: int) -> SendStatus:
        assert self._group_commit is not None
        fut = self._group_commit.request(end)
        try:
            # On timeout ``fut`` is cancelled; the group commit skips cancelled waiters
            # and still flushes and dispatches the records.
            async with asyncio.timeout(self.settings.sync_flush_timeout_ms / 1000):
                await fut
        except TimeoutError:
            return SendStatus.FLUSH_DISK_TIMEOUT
        except OSError as exc:
            # After a failed fsync the page cache no longer says what is on disk (the
            # kernel may have dropped the pages): stop writing; a restart recovers from
            # what the disk holds.
            if self._writable:
                self._writable = False
                log.error("the store stops accepting writes after a failed fsync")
            raise error(errors_pb2.CODE_STORAGE_ERROR, f"commit log fsync failed: {exc}") from None
        return SendStatus.OK

    def _dispatch_durable(self, durable_offset: int) -> None:
        if self.replicated:
            self._local_durable = max(self._local_durable, durable_offset)
            self._advance()
            return
        pending = self._undispatched
        while pending and pending[0][0] <= durable_offset:
            end, records, offsets, queue_offsets, now = pending.popleft()
            self._dispatcher.dispatch(records, offsets, queue_offsets, store_timestamp_ms=now, end_offset=end)
            if pending:
                self._window.dispatched(records)
        if not pending:
            self._window.forget_pending()  # everything appended is in the index now

    # -- replicated store groups (docs/replication.md) -------------------------------------

    @property
    def local_log_end(self) -> int:
        """What this replica holds durably per its flush mode: what it reports to its
        leader, and its own share of the high watermark when it leads."""
        return self._local_durable

    @property
    def takes_writes(self) -> bool:
        """A replicated group's leader that took over what it inherited and opened writes."""
        return self.leadership is not None and self._writes_ready

    @property
    def high_watermark(self) -> int:
        if self.leadership is not None:
            return self.leadership.high_watermark
        return self.follower_high_watermark

    def _advance(self) -> None:
        """Dispatch what is below both this replica's durable end and the high
        watermark; a new leader becomes writable once it dispatched what it took over."""
        leadership = self.leadership
        if leadership is not None:
            leadership.local_durable(self._local_durable)
            bound = min(self._local_durable, leadership.high_watermark)
        else:
            bound = min(self._local_durable, self.follower_high_watermark)
        self._dispatch_upto(bound)
        if leadership is not None and not self._writes_ready and leadership.writes_open():
            self._open_writes()

    def _dispatch_upto(self, bound: int) -> None:
        held = self._held
        if held and held[0].commit_log_offset + held[0].store_size <= bound:
            ready = []
            while held and held[0].commit_log_offset + held[0].store_size <= bound:
                ready.append(held.popleft())
            last = ready[-1]
            self._dispatcher.dispatch_stored(ready, last.commit_log_offset + last.store_size)
        pending = self._undispatched
        while not held and pending and pending[0][0] <= bound:
            end, records, offsets, queue_offsets, now = pending.popleft()
            self._dispatcher.dispatch(records, offsets, queue_offsets, store_timestamp_ms=now, end_offset=end)
            if pending:
                self._window.dispatched(records)
            else:
                self._window.forget_pending()  # everything appended is in the index now
        if not held and not pending:
            # Past a segment's closing blank marker, which has no record to dispatch.
            reach = min(bound, self.commitlog.write_offset)
            if reach > self._dispatcher.dispatched_offset:
                self._dispatcher.dispatched_offset = reach

    def become_leader(
        self, *, epoch: int, in_sync: frozenset[str], min_in_sync: int, clock: MonotonicClock = SYSTEM_CLOCK
    ) -> Leadership:
        """This replica leads ``epoch`` (etcd says so): its epoch begins at its log's
        end. Writes open once the in-sync replicas hold everything up to there."""
        assert self.epochs is not None
        start = self.commitlog.write_offset
        if self._sync and self._local_durable < start:
            # What it copied as a follower but had not fsynced yet (a flush cut short):
            # durable now, or the new epoch could never reach its own start.
            self.commitlog.flush(start)
            self._local_durable = start
        self.epochs.begin(epoch, start)
        self._writes_ready = False
        self.leadership = Leadership(
            replica_id=self.replica_id, epoch=epoch, epoch_start=start, in_sync=in_sync,
            min_in_sync=min_in_sync, local_end=self._local_durable, clock=clock,
        )  # fmt: skip
        self.leadership.on_advance = self._advance
        self.leader_hint = (self.replica_id, self.advertised_address)
        log.info(
            "store %s replica %s leads epoch %d from offset %d (in sync: %s)",
            self.store_id, self.replica_id, epoch, start, ",".join(sorted(in_sync)),
        )  # fmt: skip
        self._advance()
        return self.leadership

    def _open_writes(self) -> None:
        """Everything this leader took over is dispatched: queue offsets continue from
        the queues, and the decision book starts from the log as at a start."""
        self._queues.restart({key: cq.max_offset for key, cq in self._dispatcher.queues.items()})
        self.transactions = self._new_transactions()
        self.transactions.horizon = self.commitlog.write_offset
        self.transactions.warm(max_entries=min(self.settings.decision_cache_entries, WARM_DECISIONS_MAX))
        self._writes_ready = True
        log.info("store %s replica %s takes writes", self.store_id, self.replica_id)

    def end_leadership(self, reason: str) -> None:
        """Stop leading: no more writes or acknowledgements. What was appended but not
        dispatched stays in the log (held) until a leader says whether it survives."""
        leadership, self.leadership = self.leadership, None
        if leadership is None:
            return
        leadership.end()
        self._writes_ready = False
        self.leader_hint = ("", "")
        self.follower_high_watermark = leadership.high_watermark
        if self._undispatched:
            start = self._undispatched[0][2][0]  # the first undispatched batch's first record
            self._undispatched.clear()
            self._window.forget_pending()  # held now: a new leader's index will say
            self._held.extend(self._read_records(start, self.commitlog.write_offset))
        log.warning("store %s replica %s no longer leads epoch %d: %s", self.store_id, self.replica_id,
                    leadership.epoch, reason)  # fmt: skip

    def _read_records(self, start: int, end: int) -> list[StoredMessage]:
        """The records from ``start`` (a record boundary) to ``end``, CRC-checked; a
        segment's closing blank marker is stepped over."""
        found: list[StoredMessage] = []
        pos = start
        while pos < end:
            # Not ``boundary``: a blank marker is "no record here" (None), not damage.
            msg = self.commitlog.read_record(pos)
            if msg is None:
                if read_size_and_magic(self.commitlog.read(pos, BLANK_SIZE) or bytes(BLANK_SIZE))[1] != BLANK_MAGIC:
                    raise CorruptRecord(f"neither a record nor a segment's blank marker at {pos}")
                pos = self.commitlog.roll_next_file(pos)
                continue
            found.append(msg)
            pos += msg.store_size
        return found

    @property
    def needs_resync(self) -> bool:
        """This replica's log lacks what its group acknowledged (cut at damage, or set
        aside for a reseed): it does not stand for leader until it holds its leader's
        high watermark again. Kept in ``replication/needs_resync`` across restarts."""
        return self._needs_resync

    @needs_resync.setter
    def needs_resync(self, value: bool) -> None:
        if value == self._needs_resync:
            return
        self._needs_resync = value
        if value:
            self._resync_marker.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomically(self._resync_marker, {"since_ms": self._clock()})
        else:
            self._resync_marker.unlink(missing_ok=True)

    def cut_log(self, end: int) -> None:
        """A follower cuts its log where it diverges from its leader's. What it cuts was
        never dispatched (the high watermark never passes a point of divergence)."""
        if end >= self.commitlog.write_offset:
            return
        if end < self._dispatcher.dispatched_offset:
            log.error(
                "store %s replica %s cuts its log to %d, below what it dispatched (%d): consume queues and "
                "index are cut too", self.store_id, self.replica_id, end, self._dispatcher.dispatched_offset,
            )  # fmt: skip
        log.warning(
            "store %s replica %s cuts its log from %d to %d (where it diverges from its leader's)",
            self.store_id, self.replica_id, self.commitlog.write_offset, end,
        )  # fmt: skip
        self._cut(end)

    def reseed(self, aside: Path) -> None:
        """A follower whose log ends before its leader's oldest segment starts over
        (docs/replication.md "Reseeding"): its commit-log segments go to ``aside``
        (hard links: nothing is copied), with its epoch history, tables and timer
        checkpoint; then the log is emptied (consume queues and index with it) and it
        needs a resync. Copying then starts at the leader's oldest segment, as for an
        empty data directory. The caller deletes ``aside`` once the replica is in sync."""
        try:
            (aside / "commitlog").mkdir(parents=True)
            for seg in self.commitlog.segments():
                os.link(seg.path, aside / "commitlog" / seg.path.name)
            for path in (self.epochs.path if self.epochs else None, *sorted(self._paths.config.glob("*.json"))):
                if path is not None and path.exists():
                    shutil.copy2(path, aside / path.name)
            fsync_path(aside / "commitlog")
            fsync_path(aside)
        except OSError:
            shutil.rmtree(aside, ignore_errors=True)  # nothing was cut: the log stays as it was
            raise
        if self.timers.timer.path.exists():  # its offsets point into the log set aside
            os.replace(self.timers.timer.path, aside / "timer-checkpoint")
        self.needs_resync = True
        self._cut(0)
        self.follower_high_watermark = 0

    def _cut(self, end: int) -> None:
        if end < self._dispatcher.dispatched_offset:
            for cq in self._dispatcher.queues.values():
                cq.truncate_from_commit_log_offset(end)
            self._dispatcher.index.repair(end)
            self._dispatcher.dispatched_offset = end
        self.commitlog.truncate(end)
        assert self.epochs is not None
        self.epochs.cut(end)
        while self._held and self._held[-1].commit_log_offset + self._held[-1].store_size > end:
            self._held.pop()
        self._local_durable = min(self._local_durable, end)

    def copy_shipment(self, offset: int, data: bytes) -> int:
        """Append bytes copied from the leader (checked whole records); returns the
        log's end. Under sync flush the caller fsyncs (``flush_copied``) before it
        reports the end."""
        self._check_open()
        if not self._writable or self.commitlog.broken:
            raise error(errors_pb2.CODE_SERVICE_NOT_WRITABLE, "store stopped writing after a storage error")
        segment_end = self.commitlog.roll_next_file(offset)
        messages = check_copied(data, offset, segment_end)
        try:
            self.commitlog.append_copied(offset, data)
        except OSError as exc:
            if not is_disk_full(exc):
                self._writable = False
            raise error(errors_pb2.CODE_STORAGE_ERROR, f"copying the leader's log failed: {exc}") from None
        self._held.extend(messages)  # not counted in rocketmq_messages_in: the leader counted them
        end = self.commitlog.write_offset
        if not self._sync:
            self._local_durable = end
            self._advance()
        return end

    async def flush_copied(self) -> int:
        """Sync flush: fsync what was copied; returns the durable end."""
        end = self.commitlog.write_offset
        await asyncio.to_thread(self.commitlog.flush, end)
        self._local_durable = max(self._local_durable, end)
        self._advance()
        return self._local_durable

    def set_follower_high_watermark(self, hw: int) -> None:
        if self.needs_resync and self._local_durable >= hw > 0:
            self.needs_resync = False
            log.info("store %s replica %s holds its leader's log again", self.store_id, self.replica_id)
        if hw > self.follower_high_watermark:
            self.follower_high_watermark = hw
            self._advance()

    def config_documents(self) -> tuple[bytes, bytes]:
        """The topic and subscription-group tables as shipped to followers."""
        return config_document(self.admin.topics.document()), config_document(self.admin.groups.document())

    async def admit_fence(self, epoch: int, half_queue_id: int) -> None:
        """``Fences.admit``; in a replicated group a mark that rose is first held by every
        in-sync follower (a new leader refuses what this one refused), then checked
        again (a newer epoch may have come meanwhile)."""
        fences = self.transactions.fences
        if fences.admit(epoch, half_queue_id) and self.replicated:
            await self.state_replicated(FENCES)
            self.transactions.fences.admit(epoch, half_queue_id)

    def fences_document(self) -> tuple[int, bytes]:
        fences = self.transactions.fences
        return fences.version, config_document(fences.document())

    def offsets_document(self) -> tuple[int, bytes]:
        return self.admin.offsets.version, config_document(self.admin.offsets.rows())

    @property
    def offsets_version(self) -> int:
        return self.admin.offsets.version

    async def state_replicated(self, kind: str) -> None:
        """A replicated group's leader: wait until every in-sync follower has taken the
        consume offsets (OFFSETS) or the topic and group tables (CONFIG) as they are now,
        so a failover never takes a committed offset or a configuration change back.
        UPSTREAM_TIMEOUT (retriable) after sync_flush_timeout_ms."""
        if not self.replicated:
            return
        leadership = self.leadership
        if leadership is None:
            raise not_leader(*self.leader_hint)
        version = {
            OFFSETS: self.admin.offsets.version,
            CONFIG: self.admin.config_version,
            FENCES: self.transactions.fences.version,
        }[kind]
        fut = leadership.wait_state_replicated(kind, version)
        try:
            async with asyncio.timeout(self.settings.sync_flush_timeout_ms / 1000):
                await fut
        except TimeoutError:
            what = {OFFSETS: "consume offset", CONFIG: "configuration change", FENCES: "check-loop fence"}[kind]
            raise error(
                errors_pb2.CODE_UPSTREAM_TIMEOUT,
                f"the {what} is made on the leader but its followers did not take it in time",
            ) from None

    def adopt_configs(
        self, *, topics: bytes = b"", groups: bytes = b"", offsets: bytes = b"", fences: bytes = b""
    ) -> None:
        """A follower takes its leader's configuration (shipped when it changed)."""
        self.admin.adopt(topics=topics, groups=groups, offsets=offsets)
        if fences:
            self.transactions.fences.adopt(json.loads(fences))

    def now_ms(self) -> int:
        return self._clock()

    def query_messages(
        self, *, topic: str = "", key: str = "", unique_id: str = "", max_results: int = DEFAULT_MAX_MESSAGES,
        begin_timestamp_ms: int = 0, end_timestamp_ms: int = 0,
    ) -> list[StoredMessage]:  # fmt: skip
        """``Reader.query_messages``: the embedding API's short cut."""
        return self.reader.query_messages(
            topic=topic, key=key, unique_id=unique_id, max_results=max_results,
            begin_timestamp_ms=begin_timestamp_ms, end_timestamp_ms=end_timestamp_ms,
        )  # fmt: skip

    def queue_offsets(self, topic: str, queue_id: int | None = None) -> list[QueueOffsets]:
        """``Reader.queue_offsets``: the embedding API's short cut."""
        return self.reader.queue_offsets(topic, queue_id)

    def create_topic(
        self, name: str, *, read_queue_nums: int = 0, write_queue_nums: int = 0, perm: int = 0,
        attributes: dict[str, str] | None = None,
    ) -> TopicConfig:  # fmt: skip
        """``ConfigAdmin.create_topic``: the embedding API's short cut."""
        return self.admin.create_topic(
            name, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm, attributes=attributes
        )

    def commit_consume_offset(self, *, group: str, topic: str, queue_id: int, offset: int) -> None:
        """``ConfigAdmin.commit_consume_offset``: the embedding API's short cut."""
        self.admin.commit_consume_offset(group=group, topic=topic, queue_id=queue_id, offset=offset)

    # -- durability and housekeeping -----------------------------------------------------

    def _take_dirty(self) -> list[Path]:
        for cq in self._dispatcher.queues.values():
            self._unsynced.update(cq.take_dirty())
        paths, dir_changed = self._dispatcher.index.take_dirty()
        self._unsynced.update(paths)
        if dir_changed:
            self._unsynced.add(self._paths.index)
        return list(self._unsynced)

    def _sync_paths(self, paths: list[Path]) -> None:
        for path in paths:
            try:
                fsync_path(path)
            except FileNotFoundError:
                pass  # deleted since (topic deleted, file expired)
        self._unsynced.difference_update(paths)

    async def flush(self) -> int:
        """Flush the commit log now and write a checkpoint; returns the checkpoint."""
        await asyncio.to_thread(self.commitlog.flush, self.commitlog.write_offset)
        return await self.checkpoint()

    async def checkpoint(self) -> int:
        """fsync consume queues and index, then record the commit-log offset below which
        they (and the commit log) are durable; returns it."""
        async with self._checkpoint_lock:
            dispatched = self._dispatcher.dispatched_offset
            paths = self._take_dirty()
            await asyncio.to_thread(self._sync_paths, paths)
            offset = min(dispatched, self.commitlog.flushed_offset)
            unindexed = self._dispatcher.index.unindexed_from
            if unindexed is not None:
                offset = min(offset, unindexed)  # the next start indexes from there
            await asyncio.to_thread(write_checkpoint, self._paths, offset, now_ms=self._clock())
            return offset

    async def clean_expired_files(self) -> int:
        """Delete commit-log segments older than file_reserved_time_ms (never unflushed
        or undispatched ones), then consume-queue and index files that only point into
        them. Returns the number of segments deleted."""
        reserved = self.settings.file_reserved_time_ms
        if reserved == 0:
            return 0
        keep_from = min(self._dispatcher.dispatched_offset, self.commitlog.flushed_offset)
        timers_from = self.timers.keep_from_offset()
        if timers_from is not None:
            keep_from = min(keep_from, timers_from)
        deleted = self.commitlog.delete_segments(expired_before_ms=self._clock() - reserved, keep_from=keep_from)
        if deleted:
            lo = self.commitlog.min_offset
            for cq in self._dispatcher.queues.values():
                cq.correct_min_offset(lo)
            self._dispatcher.index.delete_below(lo)
            await asyncio.to_thread(self._quarantine.forget_below, lo)
            log.info("deleted %d expired commit-log segments; min offset now %d", deleted, lo)
        return deleted

    def figures(self) -> StoreFigures:
        """What a metrics scrape reads (metrics.read_store)."""
        admin = self.admin
        progress = admin.query_consume_offset(group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID)
        half_queue = None
        if progress is None and admin.topics.get(TRANS_HALF_TOPIC) is not None:
            (q,) = self.reader.queue_offsets(TRANS_HALF_TOPIC, HALF_QUEUE_ID)
            half_queue = (q.min_offset, q.max_offset)
        replica = None
        if self.replicated:
            lead = self.leadership
            epoch = lead.epoch if lead is not None else (self.epochs.latest if self.epochs else 0)
            replica = ReplicaFigures(self.replica_id, lead, epoch, self.high_watermark)
        timer = self.timers.timer
        return StoreFigures(
            self.status(), self.settings.commitlog_segment_bytes, self.settings.data_dir,
            admin.list_consume_offsets(), progress, half_queue, timer.wheel.pending, timer.last_lag_ms, replica,
        )  # fmt: skip

    def status(self) -> StoreStatus:
        return StoreStatus(
            store_id=self.store_id,
            flush_mode=self.settings.flush_mode,
            commit_log_min_offset=self.commitlog.min_offset,
            commit_log_max_offset=self.commitlog.max_offset,
            commit_log_flushed_offset=self.commitlog.flushed_offset,
            dispatched_offset=self._dispatcher.dispatched_offset,
            segment_count=self.commitlog.segment_count,
            recovered_from_crash=self.recovered_from_crash,
            started_at_ms=self.started_at_ms,
            settings=describe(self.settings),
        )


def _born_host(address: str) -> bytes:
    """The peer's ``host:port`` as a record's born host (unknown when unparseable)."""
    try:
        return encode_host(*split_host_port(address)) if address else UNKNOWN_HOST
    except ValueError:
        return UNKNOWN_HOST


def _resolve(address: str) -> tuple[str, int]:
    """host:port -> (IP address, port)."""
    host, port = split_host_port(address)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        host = socket.gethostbyname(host)
    return host, port
