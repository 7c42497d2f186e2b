"""A replicated store group's replica, as the store sees it (docs/replication.md): its
epoch history, its leadership, the high watermark bounding dispatch, the records it holds
undispatched, cutting its log where it diverges, copying its leader's log, reseeding.

Nothing beyond the high watermark is dispatched. ``_held``: records in the log, not
dispatched yet, as the fields their dispatch needs (``HeldRecord``: copied from the
leader, or found beyond the checkpoint at start); the leader's own appends wait in the
send path (``SendPath.dispatch_appended``) as under sync flush. The rules (who leads,
the in-sync set, where logs diverge) are in replication.py; etcd and the Follow stream
in group.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections import deque
from collections.abc import Callable
from pathlib import Path

from txmq.errors import error
from txmq.records import BLANK_MAGIC
from txmq.v1 import errors_pb2
from txmq_runtime.clock import SYSTEM_CLOCK
from txmq_runtime.clock import Clock as MonotonicClock

from .codec import BLANK_SIZE, CorruptRecord, HeldRecord, held_record, read_size_and_magic
from .commitlog import CommitLog
from .dispatch import Dispatcher
from .fileio import fsync_path, write_json_atomically
from .integrity import is_disk_full
from .model import SendStatus, StoredMessage
from .recovery import StorePaths
from .replication import CONFIG, FENCES, OFFSETS, EpochHistory, Leadership, check_copied, not_leader
from .send_path import SendPath
from .settings import StoreSettings

log = logging.getLogger("txmq.store")


class Replica:
    """This store as a replica of its group (the send path's ``ReplicaGate``).
    ``on_writes_open()`` runs when a new leader has dispatched what it took over, before
    it takes writes; ``timer_checkpoint`` is set aside with the log by a reseed."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        paths: StorePaths,
        clock: Callable[[], int],
        commitlog: CommitLog,
        dispatcher: Dispatcher,
        sender: SendPath,
        held: list[StoredMessage] | None,
        timer_checkpoint: Path,
        check_open: Callable[[], None],
        on_writes_open: Callable[[], None],
    ) -> None:
        self._settings = settings
        self.store_id = settings.resolved_store_id
        self.replica_id = settings.replica_id
        self._paths = paths
        self._clock = clock
        self._commitlog = commitlog
        self._dispatcher = dispatcher
        self._sender = sender
        self._timer_checkpoint = timer_checkpoint
        self._check_open = check_open
        self._on_writes_open = on_writes_open
        self._sync = settings.flush_mode == "sync"
        self.epochs = EpochHistory.load(paths.root / "replication" / "epochs.json")
        self.leadership: Leadership | None = None
        self.follower_high_watermark = 0
        self.leader_hint = ("", "")  # (replica id, address) of the leader, for NOT_LEADER
        self._held: deque[HeldRecord] = deque(map(held_record, held or ()))
        self._local_durable = commitlog.flushed_offset if self._sync else commitlog.write_offset
        self._writes_ready = False
        # Kept on disk (a marker file) so that a restart does not forget it.
        self._resync_marker = paths.root / "replication" / "needs_resync"
        self._needs_resync = self._resync_marker.exists()

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
        """The leader appended up to ``end`` (its batch waits in the send path)."""
        if not self._sync:
            self._local_durable = end
        self._advance()

    def durable(self, offset: int) -> None:
        """Sync flush: the group commit fsynced the log up to ``offset``."""
        self._local_durable = max(self._local_durable, offset)
        self._advance()

    async def wait_replicated(self, end: int) -> SendStatus:
        """A send is acknowledged once the high watermark covers it (FLUSH_REPLICA_TIMEOUT
        when the in-sync replicas do not hold it within sync_flush_timeout_ms)."""
        leadership = self.leadership
        if leadership is None:
            raise not_leader(*self.leader_hint)
        fut = leadership.wait_replicated(end)
        try:
            async with asyncio.timeout(self._settings.sync_flush_timeout_ms / 1000):
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
            self._dispatcher.dispatch_held(ready, last.commit_log_offset + last.store_size)
        if not held and self._sender.dispatch_appended(bound):
            # Past a segment's closing blank marker, which has no record to dispatch.
            reach = min(bound, self._commitlog.write_offset)
            if reach > self._dispatcher.dispatched_offset:
                self._dispatcher.dispatched_offset = reach

    def become_leader(
        self, *, epoch: int, in_sync: frozenset[str], min_in_sync: int, clock: MonotonicClock = SYSTEM_CLOCK
    ) -> Leadership:
        """This replica leads ``epoch`` (etcd says so): its epoch begins at its log's
        end. Writes open once the in-sync replicas hold everything up to there."""
        start = self._commitlog.write_offset
        if self._sync and self._local_durable < start:
            # What it copied as a follower but had not fsynced yet (a flush cut short):
            # durable now, or the new epoch could never reach its own start.
            self._commitlog.flush(start)
            self._local_durable = start
        self.epochs.begin(epoch, start)
        self._writes_ready = False
        self.leadership = Leadership(
            replica_id=self.replica_id, epoch=epoch, epoch_start=start, in_sync=in_sync,
            min_in_sync=min_in_sync, local_end=self._local_durable, clock=clock,
        )  # fmt: skip
        self.leadership.on_advance = self._advance
        self.leader_hint = (self.replica_id, self._sender.advertised_address)
        log.info(
            "store %s replica %s leads epoch %d from offset %d (in sync: %s)",
            self.store_id, self.replica_id, epoch, start, ",".join(sorted(in_sync)),
        )  # fmt: skip
        self._advance()
        return self.leadership

    def _open_writes(self) -> None:
        """Everything this leader took over is dispatched: queue offsets continue from
        the queues, and the decision book starts from the log as at a start."""
        self._on_writes_open()
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
        start = self._sender.drop_undispatched()
        if start is not None:
            self._held.extend(map(held_record, self._read_records(start, self._commitlog.write_offset)))
        log.warning("store %s replica %s no longer leads epoch %d: %s", self.store_id, self.replica_id,
                    leadership.epoch, reason)  # fmt: skip

    def _read_records(self, start: int, end: int) -> list[StoredMessage]:
        """The records from ``start`` (a record boundary) to ``end``, CRC-checked; a
        segment's closing blank marker is stepped over."""
        found: list[StoredMessage] = []
        pos = start
        while pos < end:
            # Not ``boundary``: a blank marker is "no record here" (None), not damage.
            msg = self._commitlog.read_record(pos)
            if msg is None:
                if read_size_and_magic(self._commitlog.read(pos, BLANK_SIZE) or bytes(BLANK_SIZE))[1] != BLANK_MAGIC:
                    raise CorruptRecord(f"neither a record nor a segment's blank marker at {pos}")
                pos = self._commitlog.roll_next_file(pos)
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
        if end >= self._commitlog.write_offset:
            return
        if end < self._dispatcher.dispatched_offset:
            log.error(
                "store %s replica %s cuts its log to %d, below what it dispatched (%d): consume queues and "
                "index are cut too", self.store_id, self.replica_id, end, self._dispatcher.dispatched_offset,
            )  # fmt: skip
        log.warning(
            "store %s replica %s cuts its log from %d to %d (where it diverges from its leader's)",
            self.store_id, self.replica_id, self._commitlog.write_offset, end,
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
            for seg in self._commitlog.segments():
                os.link(seg.path, aside / "commitlog" / seg.path.name)
            for path in (self.epochs.path, *sorted(self._paths.config.glob("*.json"))):
                if path.exists():
                    shutil.copy2(path, aside / path.name)
            fsync_path(aside / "commitlog")
            fsync_path(aside)
        except OSError:
            shutil.rmtree(aside, ignore_errors=True)  # nothing was cut: the log stays as it was
            raise
        if self._timer_checkpoint.exists():  # its offsets point into the log set aside
            os.replace(self._timer_checkpoint, aside / "timer-checkpoint")
        self.needs_resync = True
        self._cut(0)
        self.follower_high_watermark = 0

    def _cut(self, end: int) -> None:
        if end < self._dispatcher.dispatched_offset:
            for cq in self._dispatcher.queues.values():
                cq.truncate_from_commit_log_offset(end)
            self._dispatcher.index.repair(end)
            self._dispatcher.dispatched_offset = end
        self._commitlog.truncate(end)
        self.epochs.cut(end)
        while self._held and self._held[-1].commit_log_offset + self._held[-1].store_size > end:
            self._held.pop()
        self._local_durable = min(self._local_durable, end)

    def copy_shipment(self, offset: int, data: bytes) -> int:
        """Append bytes copied from the leader (checked whole records); returns the
        log's end. Under sync flush the caller fsyncs (``flush_copied``) before it
        reports the end."""
        self._check_open()
        if not self._sender.writable or self._commitlog.broken:
            raise error(errors_pb2.CODE_SERVICE_NOT_WRITABLE, "store stopped writing after a storage error")
        segment_end = self._commitlog.roll_next_file(offset)
        messages = check_copied(data, offset, segment_end)
        try:
            self._commitlog.append_copied(offset, data)
        except OSError as exc:
            if not is_disk_full(exc):
                self._sender.writable = False
            raise error(errors_pb2.CODE_STORAGE_ERROR, f"copying the leader's log failed: {exc}") from None
        self._held.extend(messages)  # not counted in rocketmq_messages_in: the leader counted them
        end = self._commitlog.write_offset
        if not self._sync:
            self._local_durable = end
            self._advance()
        return end

    async def flush_copied(self) -> int:
        """Sync flush: fsync what was copied; returns the durable end."""
        end = self._commitlog.write_offset
        await asyncio.to_thread(self._commitlog.flush, end)
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

    async def state_replicated(self, kind: str, version: int) -> None:
        """The leader: wait until every in-sync follower has taken the state of ``kind``
        (OFFSETS, CONFIG, FENCES) at ``version``, so a failover never takes a committed
        offset, a configuration change or a raised fence back. UPSTREAM_TIMEOUT
        (retriable) after sync_flush_timeout_ms."""
        leadership = self.leadership
        if leadership is None:
            raise not_leader(*self.leader_hint)
        fut = leadership.wait_state_replicated(kind, version)
        try:
            async with asyncio.timeout(self._settings.sync_flush_timeout_ms / 1000):
                await fut
        except TimeoutError:
            what = {OFFSETS: "consume offset", CONFIG: "configuration change", FENCES: "check-loop fence"}[kind]
            raise error(
                errors_pb2.CODE_UPSTREAM_TIMEOUT,
                f"the {what} is made on the leader but its followers did not take it in time",
            ) from None
