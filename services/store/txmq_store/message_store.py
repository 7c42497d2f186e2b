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
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from txmq.errors import error
from txmq.protocol import (
    HALF_QUEUE_ID,
    TRANS_CHECK_GROUP,
)
from txmq.records import (
    BLANK_MAGIC,
)
from txmq.v1 import errors_pb2
from txmq_runtime.clock import SYSTEM_CLOCK, WallClock, wall_clock_ms
from txmq_runtime.clock import Clock as MonotonicClock
from txmq_runtime.settings import describe

from .admin import ConfigAdmin
from .arrivals import ArrivalHub
from .codec import (
    BLANK_SIZE,
    CorruptRecord,
    read_size_and_magic,
    split_host_port,
)
from .commitlog import CommitLog, Fsync
from .configs import (
    TRANS_HALF_TOPIC,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
    WriteQueues,
)
from .dispatch import Dispatcher
from .fileio import fsync_path, write_json_atomically
from .integrity import CorruptionLog, Quarantine, is_disk_full
from .metrics import ReplicaFigures, StoreFigures
from .model import (
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
from .send_path import SendPath
from .settings import StoreSettings
from .timer import Timers
from .transactions import Fences, Transactions

log = logging.getLogger("txmq.store")

Clock = WallClock  # milliseconds since the epoch (txmq_runtime.clock's rule)
#: Decisions read into the decision book at start at most (it is a cache: the index
#: answers the rest), so a long op queue does not slow a restart down.
WARM_DECISIONS_MAX = 20_000


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
        self._queues = WriteQueues({key: cq.max_offset for key, cq in dispatcher.queues.items()})
        self.admin = ConfigAdmin(
            settings, topics=topics, groups=groups, offsets=offsets, dispatcher=dispatcher, queues=self._queues,
            clock=clock, log_end=lambda: commitlog.write_offset, check_write=self._check_admin_write,
            state_replicated=self.state_replicated,
        )  # fmt: skip
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
        self.sender = SendPath(
            settings, clock=clock, commitlog=commitlog, dispatcher=dispatcher, admin=self.admin, queues=self._queues,
            check_open=self._check_open,
        )  # fmt: skip
        # Transaction decisions and the check loop's writes (transactions.py).
        self.transactions = self._new_transactions()
        # A replicated store group's replica (docs/replication.md): nothing beyond the
        # high watermark is dispatched. ``_held``: records in the log, not dispatched
        # yet, decoded (copied from the leader, or found beyond the checkpoint at start);
        # the leader's own appends wait in ``_undispatched`` as in sync mode.
        self.replicated = bool(settings.replica_id)
        if self.replicated:
            self.sender.gate = self
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
        self.timers = Timers(
            settings, path=paths.root / "timer" / "checkpoint", clock=clock, commitlog=commitlog,
            dispatcher=dispatcher, topics=topics, queues=self._queues, corruption=self._corruption,
            append=self.sender.append_copies, settle=self.sender.settle, read_record=self.reader.read_record,
            may_run=self._timer_may_run,
        )  # fmt: skip

    def _timer_may_run(self) -> bool:
        """Timers are delivered by the writable store only: a replicated group's leader
        once it took writes; never by a follower."""
        if self._closed or not self.sender.writable or self.commitlog.broken:
            return False
        return not self.replicated or (self.leadership is not None and self._writes_ready)

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
        store.sender.set_store_host(host, port)
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
        self.sender.start_flushing()
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
        await self.sender.stop_flushing()
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
        self.sender.set_store_host(*_resolve(address))

    def _check_admin_write(self) -> None:
        """Configuration changes and consume offsets, like records, are made on a group's
        leader only."""
        if self.replicated:
            self.check_leads()

    def _check_open(self) -> None:
        if self._closed:
            raise error(errors_pb2.CODE_SERVICE_NOT_READY, "store is shutting down")

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

    def check_leads(self) -> None:
        """A replica takes writes (records, offsets, configuration) only while it leads
        its group, enough replicas are in sync and the records it took over are held."""
        leadership = self.leadership
        if leadership is None:
            raise not_leader(*self.leader_hint)
        leadership.check_writable()
        if not self._writes_ready:
            raise error(errors_pb2.CODE_SERVICE_NOT_READY, "the new leader is not ready for writes yet")

    def appended(self, end: int) -> None:
        if not self._sync:
            self._local_durable = end
        self._advance()

    def durable(self, offset: int) -> None:
        self._local_durable = max(self._local_durable, offset)
        self._advance()

    async def wait_replicated(self, end: int) -> SendStatus:
        leadership = self.leadership
        if leadership is None:
            raise not_leader(*self.leader_hint)
        fut = leadership.wait_replicated(end)
        try:
            async with asyncio.timeout(self.settings.sync_flush_timeout_ms / 1000):
                await fut
        except TimeoutError:
            return SendStatus.FLUSH_REPLICA_TIMEOUT
        return SendStatus.OK

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
        if not held and self.sender.dispatch_appended(bound):
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
        self.leader_hint = (self.replica_id, self.sender.advertised_address)
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
        start = self.sender.drop_undispatched()
        if start is not None:
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
        if not self.sender.writable or self.commitlog.broken:
            raise error(errors_pb2.CODE_SERVICE_NOT_WRITABLE, "store stopped writing after a storage error")
        segment_end = self.commitlog.roll_next_file(offset)
        messages = check_copied(data, offset, segment_end)
        try:
            self.commitlog.append_copied(offset, data)
        except OSError as exc:
            if not is_disk_full(exc):
                self.sender.writable = False
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

    async def send(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        producer_group: str = "",
        transaction_prepared: bool = False,
        born_host: str = "",
        system: bool = False,
    ) -> list[SendResult]:
        """``SendPath.send``: the embedding API's short cut."""
        return await self.sender.send(
            messages, producer_group=producer_group, transaction_prepared=transaction_prepared, born_host=born_host,
            system=system,
        )  # fmt: skip

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


def _resolve(address: str) -> tuple[str, int]:
    """host:port -> (IP address, port)."""
    host, port = split_host_port(address)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        host = socket.gethostbyname(host)
    return host, port
