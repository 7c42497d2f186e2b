"""The data directory and start-up recovery.

    <data_dir>/
      lock                      flock'ed while a store process owns the directory
      abort                     exists while the store runs; found at start = crash
      checkpoint                JSON: commit-log offset below which consume queues and
                                index are known durable (so is the commit log)
      quarantine                JSON: damaged commit-log ranges recovery skipped (integrity.py)
      commitlog/<20 digits>     segments (commitlog.py)
      consumequeue/<topic>/<queue id>/<20 digits>   (consumequeue.py)
      index/<20 digits>         (index.py)
      config/topics.json, subscription_groups.json, consumer_offsets.json
      timer/checkpoint          JSON: the delayed-message timer's progress (timer.py)

Recovery: validate the commit log from the start of the segment holding the
checkpoint (below it everything was fsynced before the checkpoint was written; reads
verify each record's CRC, so rot there is never served either). A bad record (bad
magic, impossible size, CRC or position mismatch) is either

- the torn tail of the last write: nothing valid follows it anywhere (or it is zeros
  at or beyond the checkpoint: where the log normally ends, not searched further). It
  is the end: zero the tail from there and drop later segments, so a half-written
  record is never served and never resurfaces (one WARNING line);
- damage: valid records follow. Its byte range is quarantined (``quarantine`` file,
  one ERROR line, ``txmq_store_corrupt_records_total{where="recovery"}``), it is not
  dispatched, and the intact records after it are kept. Later starts skip a known
  range quietly. A queue unit that pointed at it answers CODE_DATA_CORRUPTED; a queue
  rebuilt from the log has a gap there (the record's queue is unknown).

Re-dispatch the records from the checkpoint to the end (idempotent), and drop
consume-queue units at or beyond the end. The index is made to match the log after
every recovery: after a crash it is cut back to the checkpoint before re-dispatch, and
when recovery cut the log below the checkpoint, to the new end (those offsets will be
written again). Without a checkpoint (missing or unreadable), with the consume-queue or
index directory deleted, or with an index file that is not one (a creation cut short),
those are rebuilt from the first record on (an index file begun after the checkpoint
is just dropped and re-dispatched).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .arrivals import ArrivalHub
from .commitlog import CommitLog
from .configs import TopicConfigTable
from .dispatch import Dispatcher
from .fileio import fsync_path, read_json, write_json_atomically
from .index import IndexService
from .integrity import CorruptionLog, Quarantine
from .model import StoredMessage

log = logging.getLogger("txmq.store.recovery")


@dataclass(slots=True, frozen=True)
class StorePaths:
    root: Path

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def abort(self) -> Path:
        return self.root / "abort"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def commitlog(self) -> Path:
        return self.root / "commitlog"

    @property
    def consumequeue(self) -> Path:
        return self.root / "consumequeue"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"


def lock_data_dir(paths: StorePaths) -> int:
    """An exclusive flock on the directory (released when the process dies)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(f"{paths.root} is in use by another store process") from None
    return fd


def read_checkpoint(paths: StorePaths) -> int | None:
    """The checkpoint, or None when there is none or it is unreadable (torn: the queues
    and index are then rebuilt, as without one)."""
    try:
        data = read_json(paths.checkpoint)
        return None if data is None else int(data["commit_log_offset"])
    except (ValueError, KeyError, TypeError) as exc:
        log.warning(
            "checkpoint file %s is unreadable (%s: %s); rebuilding consume queues and index from the commit log",
            paths.checkpoint, type(exc).__name__, exc,
        )  # fmt: skip
        return None


def write_checkpoint(paths: StorePaths, offset: int, *, now_ms: int) -> None:
    write_json_atomically(paths.checkpoint, {"commit_log_offset": offset, "written_at_ms": now_ms})


def mark_running(paths: StorePaths) -> None:
    paths.abort.write_bytes(b"")
    fsync_path(paths.root)


def mark_stopped(paths: StorePaths) -> None:
    paths.abort.unlink(missing_ok=True)
    fsync_path(paths.root)


def recover(
    paths: StorePaths,
    *,
    commitlog: CommitLog,
    topics: TopicConfigTable,
    hub: ArrivalHub,
    units_per_file: int,
    index_slots: int,
    index_entries: int,
    crashed: bool,
    quarantine: Quarantine,
    corruption: CorruptionLog,
    now_ms: int,
    held: list[StoredMessage] | None = None,
    damaged: list[tuple[int, int]] | None = None,
) -> Dispatcher:
    """Bring commit log, consume queues and index to a consistent state; returns the
    dispatcher (its ``dispatched_offset`` is the end of the commit log).

    ``held`` (a replica of a replicated store group): only records below the checkpoint
    are known to be held by the group's in-sync replicas (a replica dispatches nothing
    beyond its high watermark, and the checkpoint never passes what was dispatched), so
    the records after it are decoded into ``held``, in log order, and not dispatched;
    ``dispatched_offset`` is then the checkpoint (or the log's end when lower). Damage
    in the middle of such a replica's log is not quarantined: the log ends where the
    damage begins (the ranges go into ``damaged``) and the rest is copied again from
    the group's leader."""
    checkpoint = read_checkpoint(paths)
    if checkpoint is None:
        # Nothing says what the queues and index cover: rebuild both.
        shutil.rmtree(paths.consumequeue, ignore_errors=True)
        shutil.rmtree(paths.index, ignore_errors=True)
    rebuild_queues = checkpoint is None or not paths.consumequeue.exists()
    rebuild_index = checkpoint is None or not paths.index.exists()
    lo = commitlog.min_offset
    hi = commitlog.segments()[-1].end if commitlog.segment_count else lo
    cp = lo if checkpoint is None else min(max(checkpoint, lo), hi)
    queues_from = lo if rebuild_queues else cp

    index, rebuild_index = _load_index(
        paths, slots=index_slots, capacity=index_entries, crashed=crashed, checkpoint=cp, rebuild=rebuild_index
    )
    index_from = lo if rebuild_index else cp
    if crashed and not rebuild_index:
        index.repair(cp)  # what lies beyond the checkpoint may be partial
    dispatcher = Dispatcher.load(paths.consumequeue, units_per_file=units_per_file, index=index, hub=hub, topics=topics)

    hold_from = cp if held is not None else None

    def on_record(msg: StoredMessage) -> None:
        if hold_from is not None and msg.commit_log_offset >= hold_from:
            held.append(msg)  # type: ignore[union-attr]
            return
        dispatcher.redispatch(
            msg, to_queue=msg.commit_log_offset >= queues_from, to_index=msg.commit_log_offset >= index_from
        )

    # Validate the whole segment holding the checkpoint; re-dispatch from the checkpoint.
    scan_from = min(queues_from, index_from, _segment_start(commitlog, cp))
    end = commitlog.recover_end(
        scan_from, redispatch_from=min(queues_from, index_from), on_record=on_record,
        on_damaged=_on_damaged(quarantine, corruption, now_ms, damaged),
        durable_below=cp if checkpoint is not None else lo,
    )  # fmt: skip
    if damaged is not None:
        end = _replica_end(end, cp if checkpoint is not None else None, damaged, held)
    _end_log(commitlog, end, quarantine=quarantine, index=index, cut_index=end < cp and not rebuild_index)
    for topic in {t for t, _ in dispatcher.queues if topics.get(t) is None}:
        dispatcher.delete_topic(topic)  # left over from a deleted topic
    dispatched = end if hold_from is None else min(end, hold_from)
    if dispatched < end and not rebuild_index:
        index.repair(dispatched)
    _cut_queues(dispatcher, dispatched, min_offset=commitlog.min_offset)
    log.info(
        "recovered (%s): commit log %d..%d, checkpoint %s, queues from %d, index from %d",
        "after a crash" if crashed else "clean", lo, end, checkpoint, queues_from, index_from,
    )  # fmt: skip
    return dispatcher


def _load_index(
    paths: StorePaths, *, slots: int, capacity: int, crashed: bool, checkpoint: int, rebuild: bool
) -> tuple[IndexService, bool]:
    """The index files, and whether the index is rebuilt from the log: a file that does
    not load, begun after the checkpoint of a crashed run, is dropped (re-dispatched);
    otherwise such a file means rebuilding the whole index."""
    index = IndexService.load(paths.index, slots=slots, capacity=capacity)
    if index.invalid and not rebuild:
        first = int(index.invalid[0].name)
        if crashed and first >= checkpoint:
            log.warning(
                "index file %s is not an index file (created after the checkpoint %d, cut short by a crash); "
                "rebuilding it from the commit log", index.invalid[0], checkpoint,
            )  # fmt: skip
            index.drop_from(first)
        else:
            log.warning(
                "index file %s is not an index file; rebuilding the index from the commit log", index.invalid[0]
            )
            index.close()
            shutil.rmtree(paths.index, ignore_errors=True)
            index = IndexService.load(paths.index, slots=slots, capacity=capacity)
            rebuild = True
        for path in index.invalid:
            path.unlink(missing_ok=True)
        index.invalid.clear()
    return index, rebuild


def _on_damaged(
    quarantine: Quarantine, corruption: CorruptionLog, now_ms: int, damaged: list[tuple[int, int]] | None
) -> Callable[[int, int, str], None]:
    """What recovery does with damage in the middle of the log: a lone store
    quarantines it (once; a known range quietly) and keeps the records after it; a
    replica (``damaged`` not None) notes the range: its log will end there."""

    def on_damaged(start: int, end: int, reason: str) -> None:
        known = quarantine.starting_at(start)
        if known is not None and known.end == end:
            corruption.remember(start, end)
            return  # reported when it was found
        quarantine.add(start, end, reason, now_ms=now_ms)
        corruption.report(
            start, reason, where="recovery", end=end,
            line=f"commit log bytes %d..{end} are damaged (%s); quarantined in {quarantine.path}, "
            "the intact records after them are kept",
        )  # fmt: skip

    def on_damaged_replica(start: int, end: int, reason: str) -> None:
        log.error(
            "commit log bytes %d..%d are damaged (%s); the log ends there and is copied again from the leader",
            start, end, reason,
        )  # fmt: skip
        damaged.append((start, end))  # type: ignore[union-attr]

    return on_damaged if damaged is None else on_damaged_replica


def _replica_end(
    end: int, checkpoint: int | None, damaged: list[tuple[int, int]], held: list[StoredMessage] | None
) -> int:
    """A replica's log end after recovery: where the first damage begins, and a log cut
    below its checkpoint counts as damage (``damaged`` gets it); ``held`` keeps only the
    records below the end."""
    if checkpoint is not None and end < checkpoint:
        # Cut below the checkpoint (a file cut short): records it held durably are gone.
        log.error("commit log ends at %d, below its checkpoint %d; copied again from the leader", end, checkpoint)
        damaged.append((end, checkpoint))
    if damaged:
        end = min(start for start, _ in damaged)
        if held is not None:
            held[:] = [m for m in held if m.commit_log_offset < end]
    return end


def _end_log(commitlog: CommitLog, end: int, *, quarantine: Quarantine, index: IndexService, cut_index: bool) -> None:
    """The commit log ends at ``end``, durably; ``cut_index``: it was cut below the
    checkpoint."""
    commitlog.truncate(end)
    quarantine.forget_from(end)
    if cut_index:
        # The log was cut below the checkpoint: its offsets from ``end`` on will be
        # written again, so the index must forget them now.
        index.repair(end)
    # A crashed process leaves its writes in the page cache: make them durable before
    # the checkpoint moves past them.
    commitlog.flush(end)


def _cut_queues(dispatcher: Dispatcher, dispatched: int, *, min_offset: int) -> None:
    """Consume queues end at what is dispatched and begin at the log's start."""
    for cq in dispatcher.queues.values():
        cq.truncate_from_commit_log_offset(dispatched)
        cq.correct_min_offset(min_offset)
    dispatcher.dispatched_offset = dispatched


def _segment_start(commitlog: CommitLog, offset: int) -> int:
    start = commitlog.min_offset
    for seg in commitlog.segments():
        if seg.start <= offset:
            start = seg.start
    return start
