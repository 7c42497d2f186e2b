"""The commit log: one append-only byte space in fixed-size segment files.

Layout: ``<dir>/<20-digit zero-padded start offset>``, each file ``segment_bytes`` long
and zero where nothing was written yet (pre-filled with zeros, or sparse). Offsets are
global: segment ``s`` holds ``[s.start, s.start + s.size)``. Records (codec.py) never
span segments; a segment ends in a record that leaves no room, or a blank marker.
``<dir>/*.alloc`` is the next segment being prepared; it is discarded at start.

Threads: everything but ``flush`` runs on the event loop. ``flush`` runs in one flusher
thread at a time; it only reads the segment list (a snapshot) and the write offset.
The allocator thread only writes its own ``.alloc`` file.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .codec import (
    BLANK_MAGIC,
    BLANK_SIZE,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    CorruptRecord,
    PreparedRecord,
    decode_record,
    encode_blank,
    encode_record,
    patch_record,
    read_size_and_magic,
    read_store_timestamp,
    verify_record,
)
from .model import StoredMessage

log = logging.getLogger("txmq.store.commitlog")

Fsync = Callable[[int], None]
# on_damaged(start, end, reason): recovery skips the damaged bytes [start, end)
OnDamaged = Callable[[int, int, str], None]
_MAGIC_BYTES = MESSAGE_MAGIC.to_bytes(4, "big")
_BLANK_MAGIC_BYTES = BLANK_MAGIC.to_bytes(4, "big")


def segment_name(start: int) -> str:
    return f"{start:020d}"


@dataclass(slots=True, eq=False)
class Segment:
    start: int
    size: int
    path: Path
    fd: int
    dir_synced: bool  # its directory entry is durable

    @property
    def end(self) -> int:
        return self.start + self.size


Preallocate = Literal["zero", "fallocate", "none"]


class SegmentAllocator:
    """Prepares the next segment file in a background thread, under a temporary name:
    ``zero`` writes zeros (and syncs them), ``fallocate`` only reserves the blocks.
    Appends to written blocks, and their fsyncs, are several times cheaper than to a
    sparse file: no block allocation or extent conversion on the way (RocketMQ
    pre-allocates and warms its next mapped file for the same reason)."""

    CHUNK = 1 << 20

    def __init__(self, directory: Path, *, segment_bytes: int, mode: Preallocate) -> None:
        self._directory = directory
        self._segment_bytes = segment_bytes
        self._mode = mode
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="txmq-segment-alloc")
        self._pending: tuple[int, Future[Path]] | None = None
        for stale in directory.glob("*.alloc"):
            stale.unlink()

    def request(self, start: int) -> None:
        if self._pending is None:
            self._pending = (start, self._executor.submit(self._fill, start))

    def take(self, start: int) -> Path | None:
        """The prepared file for the segment at ``start`` (waits if it is still being
        filled), or None when none was requested for it."""
        if self._pending is None or self._pending[0] != start:
            return None
        _, fut = self._pending
        self._pending = None
        try:
            return fut.result()
        except OSError as exc:
            log.error("pre-allocating segment %d failed: %s; the segment is created sparse", start, exc)
            (self._directory / f"{segment_name(start)}.alloc").unlink(missing_ok=True)
            return None

    def _fill(self, start: int) -> Path:
        path = self._directory / f"{segment_name(start)}.alloc"
        zeros = bytes(self.CHUNK) if self._mode == "zero" else b""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if self._mode == "fallocate":
                os.posix_fallocate(fd, 0, self._segment_bytes)
            else:
                for at in range(0, self._segment_bytes, self.CHUNK):
                    os.pwrite(fd, zeros[: self._segment_bytes - at], at)
                # Write the zeros back now, not while the segment is in use (its fsyncs
                # would wait behind them).
                os.fdatasync(fd)
        finally:
            os.close(fd)
        return path

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self._pending is not None:
            # A file being prepared is not needed any more; one whose preparation failed
            # (a full disk) is removed the same way, its error moot at a stop.
            start, fut = self._pending
            self._pending = None
            if fut.exception() is not None:
                log.info("pre-allocating segment %d failed before the stop: %s", start, fut.exception())
            (self._directory / f"{segment_name(start)}.alloc").unlink(missing_ok=True)


class CommitLog:
    def __init__(self, directory: Path, *, segment_bytes: int, fsync: Fsync, preallocate: Preallocate = "zero") -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._fsync = fsync
        self._allocator = (
            SegmentAllocator(directory, segment_bytes=segment_bytes, mode=preallocate)
            if preallocate != "none"
            else None
        )
        self._segments: list[Segment] = []
        self._starts: list[int] = []
        self.write_offset = 0  # end of the last appended record (the max offset)
        self.flushed_offset = 0  # everything below is fsynced
        self._flush_lock = threading.Lock()
        self.broken = False  # a failed append could not be rolled back
        self._pwrite = os.pwrite  # tests inject write faults here
        self._append_first: Segment | None = None  # the segment an append began in
        self._append_reach = 0  # how far that append wrote in it (segment-relative)

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, *, segment_bytes: int, fsync: Fsync, preallocate: Preallocate = "zero") -> CommitLog:
        """Open the segments found; the write offset stays at the first segment's start
        until ``recover_end`` / ``truncate`` set it."""
        directory.mkdir(parents=True, exist_ok=True)
        log_ = cls(directory, segment_bytes=segment_bytes, fsync=fsync, preallocate=preallocate)
        for path in sorted(directory.iterdir()):
            if not (path.name.isdigit() and len(path.name) == 20):
                continue
            start = int(path.name)
            if log_._segments and start != log_._segments[-1].end:
                raise RuntimeError(f"commit log gap before {path} (previous ends at {log_._segments[-1].end})")
            fd = os.open(path, os.O_RDWR)
            log_._add(Segment(start, os.fstat(fd).st_size, path, fd, dir_synced=True))
        if log_._segments and log_._segments[-1].size < segment_bytes:
            # A crash while the file system extended the last file: the missing end
            # reads as zeros, as in a preallocated segment.
            last = log_._segments[-1]
            os.ftruncate(last.fd, segment_bytes)
            last.size = segment_bytes
        if log_._segments:
            log_.write_offset = log_.flushed_offset = log_._segments[0].start
        return log_

    def close(self) -> None:
        if self._allocator is not None:
            self._allocator.close()
        for seg in self._segments:
            os.close(seg.fd)
        self._segments.clear()
        self._starts.clear()

    def preallocate_next(self) -> None:
        """Start preparing the segment the next roll (or the first append) needs."""
        if self._allocator is not None:
            self._allocator.request(self._segments[-1].end if self._segments else self.write_offset)

    # -- offsets -----------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self._segments[0].start if self._segments else self.write_offset

    @property
    def max_offset(self) -> int:
        return self.write_offset

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segments(self) -> list[Segment]:
        return list(self._segments)

    def roll_next_file(self, offset: int) -> int:
        """Start of the segment after the one ``offset`` falls into."""
        seg = self._find(offset)
        if seg is not None:
            return seg.end
        return offset + self.segment_bytes - offset % self.segment_bytes

    # -- writing -----------------------------------------------------------------------

    def max_record_size(self) -> int:
        return self.segment_bytes - BLANK_SIZE

    def append(
        self,
        records: list[PreparedRecord],
        queue_offsets: list[int],
        *,
        store_timestamp_ms: int,
        store_host: bytes,
    ) -> list[int]:
        """Append records, all or none; returns their offsets. Every record must be at
        most ``max_record_size()`` bytes (validated earlier).

        A batch that fits a segment is written with one pwrite: when it does not fit the
        rest of the current segment, the segment is closed with a blank marker first.
        Larger batches take one pwrite per segment. When a write fails (disk full, I/O
        error) everything this call wrote is zeroed and its new segments removed before
        the error is raised, so no part of the batch is served, now or after a restart;
        if that rollback fails too, ``broken`` is set."""
        start = self.write_offset
        n_segments = len(self._segments)
        try:
            return self._append(records, queue_offsets, store_timestamp_ms, store_host)
        except OSError:
            try:
                self._rollback(start, n_segments)
            except OSError as exc:
                self.broken = True
                log.error("rolling back a failed append at %d failed too: %s", start, exc)
            raise

    def _rollback(self, start: int, n_segments: int) -> None:
        for seg in self._segments[n_segments:]:
            self._remove(seg)
        self.write_offset = start
        seg = self._find(start)
        if seg is not None:
            at = start - seg.start
            # Zero what this append wrote in the segment it began in (records or a blank
            # marker): recovery then ends the log at ``start``. Only written bytes are
            # zeroed: they need no new blocks on a full disk.
            written = self._append_reach - at
            if written > 0:
                os.pwrite(seg.fd, bytes(written), at)

    def _append(
        self, records: list[PreparedRecord], queue_offsets: list[int], store_timestamp_ms: int, store_host: bytes
    ) -> list[int]:
        pos = self.write_offset
        self._append_reach = 0
        seg = self._segment_for_write(pos)
        self._append_first = seg
        seg_end = seg.end
        total = sum(rec.size for rec in records)
        if pos + total + BLANK_SIZE > seg_end and total + BLANK_SIZE <= self.segment_bytes and pos > seg.start:
            # Roll first, so the batch lands in one segment with one pwrite.
            self._write(seg, [encode_blank(seg_end - pos)], pos)
            seg = self._segment_for_write(seg_end)
            seg_end = seg.end
            pos = seg.start
        chunk_start = pos
        parts: list[bytes | memoryview] = []
        offsets: list[int] = []
        for rec, queue_offset in zip(records, queue_offsets, strict=True):
            if pos + rec.size + BLANK_SIZE > seg_end:
                if rec.size + BLANK_SIZE > self.segment_bytes:
                    raise ValueError(f"record of {rec.size} bytes cannot fit a segment")
                parts.append(encode_blank(seg_end - pos))
                self._write(seg, parts, chunk_start)
                seg = self._segment_for_write(seg_end)
                seg_end = seg.end
                pos = chunk_start = seg.start
                parts = []
            frame = rec.frame
            if frame is None:
                parts.extend(encode_record(rec, queue_offset, pos, store_timestamp_ms, store_host))
            else:  # sent in the record layout: patched where it lies
                at = rec.frame_pos
                patch_record(frame, at, queue_offset, pos, rec.born_host, store_timestamp_ms, store_host)
                parts.append(memoryview(frame)[at : at + rec.size])
            offsets.append(pos)
            pos += rec.size
        self._write(seg, parts, chunk_start)
        self.write_offset = pos
        return offsets

    def append_copied(self, offset: int, data: bytes) -> None:
        """Write bytes copied from a replication leader's log at ``offset``, which must be
        this log's end, or the start of the next segment when the end is a segment's end,
        or anywhere segment-aligned when the log is empty. The caller checked that
        ``data`` is whole records (or a segment's blank marker) within one segment.
        One pwrite; on failure what was written is zeroed (as ``append``)."""
        if not self._segments:
            if offset % self.segment_bytes:
                raise ValueError(f"an empty log cannot start at {offset} (not a segment start)")
            self.write_offset = self.flushed_offset = offset
        if offset != self.write_offset:
            raise ValueError(f"copied bytes at {offset}, but the log ends at {self.write_offset}")
        start, n_segments = self.write_offset, len(self._segments)
        self._append_reach = 0
        try:
            seg = self._segment_for_write(offset)
            if offset + len(data) > seg.end:
                raise ValueError(f"copied bytes {offset}..{offset + len(data)} cross the segment end {seg.end}")
            self._append_first = seg
            self._write(seg, [data], offset)
        except OSError:
            try:
                self._rollback(start, n_segments)
            except OSError as exc:
                self.broken = True
                log.error("rolling back a failed copy at %d failed too: %s", start, exc)
            raise
        self.write_offset = offset + len(data)

    def _write(self, seg: Segment, parts: list[bytes] | list[bytes | memoryview], offset: int) -> None:
        data = b"".join(parts)
        at = offset - seg.start
        first = seg is self._append_first
        pwrite = self._pwrite
        while data:
            n = pwrite(seg.fd, data, at)
            data = data[n:]
            at += n
            if first:
                self._append_reach = at  # segment-relative end of what reached the file

    def _segment_for_write(self, pos: int) -> Segment:
        if self._segments:
            last = self._segments[-1]
            if last.start <= pos < last.end:
                return last
            if pos != last.end:
                raise RuntimeError(f"write offset {pos} is not at the end of the last segment ({last.end})")
        path = self.directory / segment_name(pos)
        prepared = self._allocator.take(pos) if self._allocator is not None else None
        if prepared is not None:
            os.rename(prepared, path)
            fd = os.open(path, os.O_RDWR)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, self.segment_bytes)
        seg = Segment(pos, self.segment_bytes, path, fd, dir_synced=False)
        self._add(seg)
        self.preallocate_next()
        return seg

    def _add(self, seg: Segment) -> None:
        self._segments.append(seg)
        self._starts.append(seg.start)

    # -- flushing (flusher thread) -----------------------------------------------------

    def flush(self, upto: int) -> int:
        """Make ``[flushed_offset, upto)`` durable; returns the flushed offset. Safe to
        call from any thread (calls are serialised)."""
        with self._flush_lock:
            start = self.flushed_offset
            upto = min(upto, self.write_offset)  # a replica's log may have been cut since
            if upto <= start:
                return start
            for seg in list(self._segments):
                if seg.end <= start or seg.start >= upto:
                    continue
                if not seg.dir_synced:
                    self._sync_directory()
                    seg.dir_synced = True
                self._fsync(seg.fd)
            self.flushed_offset = upto
            return upto

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    # -- reading -----------------------------------------------------------------------

    def _find(self, offset: int) -> Segment | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        seg = self._segments[i]
        return seg if offset < seg.end else None

    def read(self, offset: int, size: int) -> bytes | None:
        """The bytes of a record, or None when its segment is gone or it lies beyond
        the write offset."""
        if size <= 0 or offset + size > self.write_offset:
            return None
        seg = self._find(offset)
        if seg is None or offset + size > seg.end:
            return None
        return os.pread(seg.fd, size, offset - seg.start)

    def read_ahead(self, offset: int, size: int, want: int) -> bytes | None:
        """``read(offset, size)`` that returns up to ``want`` bytes from ``offset`` when
        the segment and the write offset allow (one pread for records that follow)."""
        if size <= 0 or offset + size > self.write_offset:
            return None
        seg = self._find(offset)
        if seg is None or offset + size > seg.end:
            return None
        n = max(size, min(want, seg.end - offset, self.write_offset - offset))
        return os.pread(seg.fd, n, offset - seg.start)

    def read_record(self, offset: int, *, boundary: bool = False) -> StoredMessage | None:
        """Decode and CRC-check the record that starts exactly at ``offset``; None when
        there is none (gone or beyond the end). ``boundary``: a record is known to start
        there (the offset came from a queue or the index), so anything unreadable is a
        damaged record; otherwise bytes that do not even claim to be a record at
        ``offset`` (magic, position) are "no record here". Raises CorruptRecord for a
        damaged record."""
        head = self.read(offset, HEADER_SIZE) or self.read(offset, BLANK_SIZE)
        if head is None:
            return None
        if len(head) < BLANK_SIZE:  # the segment file ends there: it was cut short
            if boundary:
                raise CorruptRecord(f"the segment file ends {len(head)} bytes into the record at {offset}")
            return None
        size, magic = read_size_and_magic(head)
        if not boundary and (magic != MESSAGE_MAGIC or len(head) < HEADER_SIZE or _claimed_offset(head) != offset):
            return None
        buf = self.read(offset, size) if size >= MIN_RECORD_SIZE else None
        if buf is None:
            if self._find(offset) is None:
                return None  # the segment is gone
            raise CorruptRecord(f"impossible size {size} at {offset} (magic {magic:#x})")
        return decode_record(buf, verify_crc=True, expected_offset=offset)

    # -- recovery ----------------------------------------------------------------------

    def recover_end(
        self,
        start: int,
        *,
        redispatch_from: int,
        on_record: Callable[[StoredMessage], None],
        on_damaged: OnDamaged | None = None,
        durable_below: int = 0,
    ) -> int:
        """Validate records from ``start`` (a record boundary) to the end; returns the end.
        Records at or after ``redispatch_from`` are decoded and passed to ``on_record``
        in order.

        A bad record (torn, corrupt, misplaced) is told apart by what follows it:
        nothing valid anywhere after it: the torn tail of the last write, so it is the
        end; a valid record (or a segment's blank marker) after it: damage in the
        middle of the log, so ``on_damaged(start, end, reason)`` is called for the
        bytes skipped and the intact records after it are kept. Zeros at or beyond
        ``durable_below`` (the checkpoint) are the end without a look further: that is
        where the log normally ends, and the rest of its segment need not be read."""
        seg = self._find(start)
        if seg is None:
            return start
        pos = start
        i = self._segments.index(seg)
        while i < len(self._segments):
            seg = self._segments[i]
            with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                at = pos - seg.start
                while True:
                    if at + BLANK_SIZE > seg.size:
                        return seg.start + at
                    size, magic = read_size_and_magic(mm, at)
                    if magic == BLANK_MAGIC and size == seg.size - at:
                        pos = seg.end
                        break
                    try:
                        size = verify_record(mm, at, seg.start + at)
                    except CorruptRecord as exc:
                        unwritten = magic == 0 and size == 0 and seg.start + at >= durable_below
                        resume = None if unwritten or on_damaged is None else self._next_valid(i, mm, at)
                        if resume is None or on_damaged is None:
                            if magic != 0 or size != 0:
                                log.warning("commit log ends at a bad record (its torn tail): %s", exc)
                            return seg.start + at
                        on_damaged(seg.start + at, resume, str(exc))
                        if resume >= seg.end:
                            pos = resume  # a later segment's first record
                            break
                        at = resume - seg.start
                        continue
                    if seg.start + at >= redispatch_from:
                        on_record(decode_record(mm, at))
                    at += size
            nxt = self._find(pos)
            if nxt is None:
                return pos
            i = self._segments.index(nxt)
        return pos

    def _next_valid(self, i: int, mm: mmap.mmap, at: int) -> int | None:
        """Where the first valid record or blank marker after the bad bytes at ``at`` of
        segment ``i`` starts (a global offset), or None when nothing valid follows.
        Candidates are found by their magic; a record must pass its CRC and claim its
        own position, so stale or body bytes never qualify."""
        seg = self._segments[i]
        found = _scan_for_record(mm, at + 1, seg.start, seg.size)
        if found is not None:
            return seg.start + found
        for nxt in self._segments[i + 1 :]:
            with open(nxt.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m2:
                found = _scan_for_record(m2, 0, nxt.start, nxt.size)
            if found is not None:
                return nxt.start + found
        return None

    def truncate(self, end: int) -> None:
        """Make ``end`` the write offset: zero the rest of its segment, delete later
        segments. Used by recovery, before anything is appended; the bytes below
        ``end`` are not known to be durable until ``flush(end)``."""
        with self._flush_lock:  # not while a flush (a replica's, in a thread) runs
            for seg in [s for s in self._segments if s.start >= end]:
                self._remove(seg)
            seg = self._find(end)
            if seg is not None:
                at = end - seg.start
                # Shrink and regrow: the kernel zeroes the tail without writing it.
                os.ftruncate(seg.fd, at)
                os.ftruncate(seg.fd, seg.size)
                self._fsync(seg.fd)
            self._sync_directory()
            self.write_offset = end
            self.flushed_offset = min(self.flushed_offset, end)

    def _remove(self, seg: Segment) -> None:
        i = self._segments.index(seg)
        del self._segments[i]
        del self._starts[i]
        os.close(seg.fd)
        seg.path.unlink()

    # -- retention ---------------------------------------------------------------------

    def delete_segments(self, *, expired_before_ms: int, keep_from: int) -> int:
        """Delete leading segments whose records were all stored before
        ``expired_before_ms`` and that end at or below ``keep_from`` (never the segment
        being written). Returns how many.

        A segment's newest record is no newer than the first record of the next one, so
        that record's store time dates the segment (RocketMQ uses the file's mtime; a
        record time follows the store's clock). The record is CRC-checked first: a
        damaged time must not delete a segment early; a damaged record dates the segment
        by the next file's mtime instead."""
        deleted = 0
        while len(self._segments) > 1:
            seg, nxt = self._segments[0], self._segments[1]
            if seg.end > keep_from or self._segment_time_ms(nxt) >= expired_before_ms:
                break
            self._remove(seg)
            deleted += 1
        return deleted

    def _segment_time_ms(self, seg: Segment) -> int:
        """The store time of the segment's first record, or its file's mtime (the time of
        its last write, so no earlier than the record's) when that record is damaged;
        "never" for a segment with no record yet."""
        size, magic = read_size_and_magic(os.pread(seg.fd, BLANK_SIZE, 0))
        if magic == 0 and size == 0:
            return 2**63 - 1
        if magic == MESSAGE_MAGIC and MIN_RECORD_SIZE <= size <= seg.size:
            buf = os.pread(seg.fd, size, 0)
            try:
                verify_record(buf, 0, seg.start)
                return read_store_timestamp(buf)
            except CorruptRecord:
                pass
        return os.fstat(seg.fd).st_mtime_ns // 1_000_000


def _claimed_offset(head: bytes) -> int:
    return int.from_bytes(head[32:40], "big", signed=True)


def _scan_for_record(mm: mmap.mmap, at: int, seg_start: int, seg_size: int) -> int | None:
    """The first position >= ``at`` holding a valid record or the segment's blank marker."""
    search = max(at, 0) + 4
    while True:
        hits = [h for h in (mm.find(_MAGIC_BYTES, search), mm.find(_BLANK_MAGIC_BYTES, search)) if h >= 0]
        if not hits:
            return None
        hit = min(hits)
        pos = hit - 4
        size, magic = read_size_and_magic(mm, pos)
        if magic == BLANK_MAGIC:
            if size == seg_size - pos:
                return pos
        else:
            try:
                verify_record(mm, pos, seg_start + pos)
                return pos
            except CorruptRecord:
                pass
        search = hit + 1
