"""Consume queues: per (topic, queue id), the commit-log positions of its messages.

Layout: ``<root>/<topic>/<queue id>/<20-digit byte offset of the file's first unit>``,
each file ``units_per_file`` units of 20 bytes, big-endian:

    commit-log offset (i64) | record size (i32) | tag hash code (i64)

Unit ``n`` (queue offset ``n``) lives at byte ``20 * n`` of the queue's byte space, so
re-dispatching a record rewrites the same unit (recovery is idempotent). A unit with
size 0 was never written (or is a gap: a record recovery found damaged, in a queue
rebuilt from the log). Files are memory-mapped; they are not fsynced per send (the
commit log is the source of truth) but by the store's periodic checkpoint. A new
file's blocks are reserved (fallocate) before it is mapped, so a full disk fails its
creation instead of raising SIGBUS at a write through the map (tmpfs).
"""

from __future__ import annotations

import bisect
import mmap
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20
_pack_into = UNIT.pack_into
_unpack_from = UNIT.unpack_from


@dataclass(slots=True, eq=False)
class _File:
    start: int  # queue offset of its first unit
    units: int
    path: Path
    mm: mmap.mmap
    dirty: bool = False  # written since the last take_dirty

    @property
    def end(self) -> int:
        return self.start + self.units


class ConsumeQueue:
    def __init__(self, directory: Path, *, topic: str, queue_id: int, units_per_file: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self._files: list[_File] = []
        self._starts: list[int] = []
        self._last: _File | None = None
        self.min_offset = 0
        self.max_offset = 0
        self._dirty_dirs: set[Path] = set()  # directories with new or removed entries

    @classmethod
    def load(cls, directory: Path, *, topic: str, queue_id: int, units_per_file: int) -> ConsumeQueue:
        cq = cls(directory, topic=topic, queue_id=queue_id, units_per_file=units_per_file)
        for path in sorted(directory.iterdir()):
            if path.name.isdigit() and len(path.name) == 20:
                cq._map(path, int(path.name) // UNIT_SIZE, create=False)
        if cq._files:
            cq.min_offset = cq._files[0].start
            last = cq._files[-1]
            # Last written unit: the last non-zero byte (a written unit has size > 0).
            used = len(last.mm[:].rstrip(b"\x00"))
            cq.max_offset = last.start + (used + UNIT_SIZE - 1) // UNIT_SIZE
        return cq

    def _map(self, path: Path, start: int, *, create: bool) -> _File:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create:
                try:
                    os.posix_fallocate(fd, 0, self.units_per_file * UNIT_SIZE)
                except OSError:
                    path.unlink(missing_ok=True)
                    raise
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        f = _File(start, size // UNIT_SIZE, path, mm)
        i = bisect.bisect_left(self._starts, start)
        self._files.insert(i, f)
        self._starts.insert(i, start)
        self._last = self._files[-1]
        if create:
            self._dirty_dirs.add(self.directory)  # the new directory entry
        return f

    def close(self) -> None:
        for f in self._files:
            f.mm.close()
        self._files.clear()
        self._starts.clear()
        self._last = None

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- writing (event loop) --------------------------------------------------------

    def put(self, queue_offset: int, commit_log_offset: int, size: int, tag_code: int) -> None:
        f = self._last
        if f is None or not (f.start <= queue_offset < f.end):
            f = self._file_for_write(queue_offset)
        _pack_into(f.mm, (queue_offset - f.start) * UNIT_SIZE, commit_log_offset, size, tag_code)
        f.dirty = True
        if queue_offset >= self.max_offset:
            self.max_offset = queue_offset + 1

    def prepare(self, queue_offset: int) -> None:
        """Make sure the file for ``queue_offset`` exists (see ``put``)."""
        f = self._last
        if f is None or not (f.start <= queue_offset < f.end):
            self._file_for_write(queue_offset)

    def _file_for_write(self, queue_offset: int) -> _File:
        found = self._find(queue_offset)
        if found is not None:
            return found
        start = queue_offset - queue_offset % self.units_per_file
        if not self._files:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.min_offset = start
            # Make the new queue and topic directories durable with the first file.
            self._dirty_dirs.update((self.directory.parent, self.directory.parent.parent))
        return self._map(self.directory / f"{start * UNIT_SIZE:020d}", start, create=True)

    def _find(self, queue_offset: int) -> _File | None:
        i = bisect.bisect_right(self._starts, queue_offset) - 1
        if i < 0:
            return None
        f = self._files[i]
        return f if queue_offset < f.end else None

    # -- reading ---------------------------------------------------------------------

    def read_units(self, offset: int, max_units: int) -> bytes | None:
        """Units from ``offset`` up to the end of its file, the max offset or
        ``max_units``; None when the file holding ``offset`` is gone."""
        f = self._find(offset)
        if f is None:
            return None
        end = min(f.end, self.max_offset, offset + max_units)
        return f.mm[(offset - f.start) * UNIT_SIZE : (end - f.start) * UNIT_SIZE]

    def unit(self, offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tag code) of the unit at ``offset``."""
        if not (self.min_offset <= offset < self.max_offset):
            return None
        f = self._find(offset)
        if f is None:
            return None
        return _unpack_from(f.mm, (offset - f.start) * UNIT_SIZE)

    def roll_next_file(self, offset: int) -> int:
        return offset - offset % self.units_per_file + self.units_per_file

    # -- recovery and retention --------------------------------------------------------

    def truncate_from_commit_log_offset(self, end: int) -> None:
        """Drop units whose record starts at or beyond ``end`` (or were never written)
        at the tail of the queue."""
        new_max = self.max_offset
        while new_max > self.min_offset:
            unit = self.unit(new_max - 1)
            if unit is not None and unit[1] > 0 and unit[0] < end:
                break
            new_max -= 1
        for f in [f for f in self._files if f.end > new_max]:
            if f.start >= new_max and f is not self._files[0]:
                self._drop(f)
            else:
                at = (new_max - f.start) * UNIT_SIZE
                f.mm[at:] = bytes(len(f.mm) - at)
                f.dirty = True
        self.max_offset = new_max

    def _drop(self, f: _File) -> None:
        i = self._files.index(f)
        del self._files[i]
        del self._starts[i]
        f.mm.close()
        f.path.unlink()
        self._last = self._files[-1] if self._files else None
        self._dirty_dirs.add(self.directory)

    def correct_min_offset(self, commit_log_min_offset: int) -> None:
        """Delete files whose every unit points below the commit log's minimum and move
        the min offset to the first unit still backed by the commit log."""
        while len(self._files) > 1:
            first = self._files[0]
            last_unit = self.unit(first.end - 1)
            if last_unit is None or last_unit[0] >= commit_log_min_offset:
                break
            self._drop(first)
        lo, hi = max(self.min_offset, self._files[0].start) if self._files else 0, self.max_offset
        # Units ascend in commit-log offset: binary search the first one still present.
        # A gap (size 0: a record recovery found damaged) is judged by the unit after it.
        while lo < hi:
            mid = (lo + hi) // 2
            at, unit = mid, self.unit(mid)
            while unit is not None and unit[1] == 0 and at + 1 < hi:
                at += 1
                unit = self.unit(at)
            if unit is not None and unit[0] < commit_log_min_offset:
                lo = at + 1
            else:
                hi = mid
        self.min_offset = lo

    def take_dirty(self) -> list[Path]:
        """Files and directories changed since the last call (to fsync)."""
        dirty = [f.path for f in self._files if f.dirty]
        for f in self._files:
            f.dirty = False
        dirty.extend(self._dirty_dirs)
        self._dirty_dirs = set()
        return dirty
