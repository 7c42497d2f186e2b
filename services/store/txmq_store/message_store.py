"""The message store: RocketMQ's DefaultMessageStore, as the parts it wires together.

``MessageStore.open`` recovers the data directory (recovery.py) and builds the parts:

- ``sender`` (send_path.py): the send path, from validation to the answers;
- ``reader`` (reads.py): GetMessage, ViewMessage, QueryMessages, queue offsets, arrivals;
- ``admin`` (admin.py): topics, subscription groups and consume offsets;
- ``transactions`` (transactions.py): decisions and the check loop's writes;
- ``timers`` (timer.py): delayed messages;
- ``replica`` (replica.py): this store as a replica of a replicated group (None alone).

What stays here is the store's life (open, the periodic jobs, close), durability and
housekeeping (checkpoints, retention), and the few calls that span parts. Everything
runs on one asyncio event loop; only fsyncs (flush.py, checkpoints, JSON persistence)
run in threads. Results of reads are enums (GetMessageStatus); bad requests raise
``TxmqError``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from txmq.errors import error
from txmq.protocol import HALF_QUEUE_ID, TRANS_CHECK_GROUP
from txmq.v1 import errors_pb2
from txmq_runtime.clock import WallClock, wall_clock_ms
from txmq_runtime.settings import describe

from .admin import ConfigAdmin
from .arrivals import ArrivalHub
from .codec import split_host_port
from .commitlog import CommitLog, Fsync
from .configs import TRANS_HALF_TOPIC, SubscriptionGroupTable, TopicConfig, TopicConfigTable, WriteQueues
from .dispatch import Dispatcher
from .fileio import fsync_path
from .integrity import CorruptionLog, DiskFullLog, Quarantine, is_disk_full
from .metrics import ReplicaFigures, StoreFigures
from .model import OutgoingMessage, QueueOffsets, SendResult, SendStatus, StoredMessage, StoreStatus
from .offsets import ConsumeOffsetTable
from .reads import DEFAULT_MAX_MESSAGES, Reader
from .recovery import StorePaths, lock_data_dir, mark_running, mark_stopped, recover, write_checkpoint
from .replica import Replica
from .replication import CONFIG, FENCES, OFFSETS
from .send_path import SendPath
from .settings import StoreSettings
from .timer import Timers, pending_timer
from .transactions import Fences, Transactions

log = logging.getLogger("txmq.store")

Clock = WallClock  # milliseconds since the epoch (txmq_runtime.clock's rule)
#: Decisions read into the decision book at start at most (it is a cache: the index
#: answers the rest), so a long op queue does not slow a restart down.
WARM_DECISIONS_MAX = 20_000


class MessageStore:
    """Use ``await MessageStore.open(...)``; ``await store.close()`` when done. ``send``,
    ``query_messages``, ``queue_offsets``, ``create_topic`` and
    ``commit_consume_offset`` are short cuts to the parts for code that embeds a store."""

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
        self._disk_full = DiskFullLog()
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
        # A replicated store group's replica (docs/replication.md); None: a store alone.
        timer_checkpoint = paths.root / "timer" / "checkpoint"
        self.replicated = bool(settings.replica_id)
        self.replica: Replica | None = None
        if self.replicated:
            self.replica = Replica(
                settings, paths=paths, clock=clock, commitlog=commitlog, dispatcher=dispatcher, sender=self.sender,
                held=held, timer_checkpoint=timer_checkpoint, check_open=self._check_open,
                on_writes_open=self._writes_opened,
            )  # fmt: skip
        self.sender.gate = self.replica
        # Delayed messages (timer.py): delivered by the writable store only.
        self.timers = Timers(
            settings, path=timer_checkpoint, clock=clock, commitlog=commitlog,
            dispatcher=dispatcher, topics=topics, queues=self._queues, corruption=self._corruption,
            append=self.sender.append_copies, settle=self.sender.settle, read_record=self.reader.read_record,
            may_run=self._timer_may_run, disk_full=self._disk_full,
        )  # fmt: skip

    def _timer_may_run(self) -> bool:
        """Timers are delivered by the writable store only: a replicated group's leader
        once it took writes; never by a follower."""
        if self._closed or not self.sender.writable or self.commitlog.broken:
            return False
        return self.replica is None or self.replica.takes_writes

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
            if damaged and store.replica is not None:
                store.replica.needs_resync = True
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
            name = getattr(job, "__name__", job)
            try:
                await job()
            except OSError as exc:
                if is_disk_full(exc):
                    self._disk_full.failed(f"periodic store job {name}", exc)
                else:
                    log.exception("periodic store job %s failed", name)
            except Exception:
                log.exception("periodic store job %s failed", name)
            else:
                self._disk_full.succeeded(f"periodic store job {name}")

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
        checkpointed = await self._write_at_close(self.checkpoint, "the checkpoint", "next start recovers")
        await self._write_at_close(
            self.admin.persist_offsets, "the consume offsets", "consumers resume from those written last"
        )
        self._dispatcher.close()
        self._dispatcher.index.close()
        self.commitlog.close()
        if checkpointed:
            mark_stopped(self._paths)  # else the abort marker stays: the next start recovers as after a crash
        os.close(self._lock_fd)

    async def _write_at_close(self, write: Callable[[], Awaitable[object]], what: str, then: str) -> bool:
        """A last write of the stop; a full disk refusing it does not stop the stop (one
        line says what that means). Whether it was written."""
        try:
            await write()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            log.error("store %s stopping: could not write %s (%s); %s", self.store_id, what, exc.strerror, then)
            return False
        return True

    def set_advertised_address(self, address: str) -> None:
        """Where clients reach this store (host:port) from now on; a host name is
        resolved once, as records hold an IP address."""
        self.sender.set_store_host(*_resolve(address))

    def _check_open(self) -> None:
        if self._closed:
            raise error(errors_pb2.CODE_SERVICE_NOT_READY, "store is shutting down")

    # -- calls that span parts ----------------------------------------------------------

    def _writes_opened(self) -> None:
        """A new leader dispatched everything it took over: queue offsets continue from
        the queues, and the decision book starts from the log as at a start."""
        self._queues.restart({key: cq.max_offset for key, cq in self._dispatcher.queues.items()})
        self.transactions = self._new_transactions()
        self.transactions.horizon = self.commitlog.write_offset
        self.transactions.warm(max_entries=min(self.settings.decision_cache_entries, WARM_DECISIONS_MAX))

    def _check_admin_write(self) -> None:
        """Configuration changes and consume offsets, like records, are made on a group's
        leader only."""
        if self.replica is not None:
            self.replica.check_leads()

    async def state_replicated(self, kind: str) -> None:
        """A replicated group's leader: wait until every in-sync follower has taken the
        consume offsets (OFFSETS), the topic and group tables (CONFIG) or the check
        loop's fences (FENCES) as they are now (``Replica.state_replicated``). A store
        alone: at once."""
        if self.replica is None:
            return
        version = {
            OFFSETS: self.admin.offsets.version,
            CONFIG: self.admin.config_version,
            FENCES: self.transactions.fences.version,
        }[kind]
        await self.replica.state_replicated(kind, version)

    async def admit_fence(self, epoch: int, half_queue_id: int) -> None:
        """``Fences.admit``; in a replicated group a mark that rose is first held by every
        in-sync follower (a new leader refuses what this one refused), then checked
        again (a newer epoch may have come meanwhile)."""
        fences = self.transactions.fences
        if fences.admit(epoch, half_queue_id) and self.replica is not None:
            await self.state_replicated(FENCES)
            self.transactions.fences.admit(epoch, half_queue_id)

    def adopt_configs(
        self, *, topics: bytes = b"", groups: bytes = b"", offsets: bytes = b"", fences: bytes = b""
    ) -> None:
        """A follower takes its leader's configuration (shipped when it changed)."""
        self.admin.adopt(topics=topics, groups=groups, offsets=offsets)
        if fences:
            self.transactions.fences.adopt(json.loads(fences))

    # -- for code that embeds a store ----------------------------------------------------

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

    async def recall(self, *, topic: str, commit_log_offset: int, unique_id: str) -> tuple[SendStatus, int]:
        """Cancel a delayed message named by its send's answer (``Timer.recall``):
        (how the recall settled, when it was due)."""
        self.sender.check_writable()
        timer_offset, deliver_ms = pending_timer(self.reader.view_message(commit_log_offset), topic, unique_id)
        return await self.timers.timer.recall(timer_offset, deliver_ms, unique_id), deliver_ms

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
        if self.replica is not None:
            lead = self.replica.leadership
            epoch = lead.epoch if lead is not None else self.replica.epochs.latest
            replica = ReplicaFigures(self.replica.replica_id, lead, epoch, self.replica.high_watermark)
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
