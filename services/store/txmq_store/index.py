"""The message index: message key and unique id -> commit-log offsets.

RocketMQ-style hash-slot files: ``<dir>/<20-digit commit-log offset of the file's first
entry>``, memory-mapped, big-endian:

    header (48 bytes): magic u32 | slot count u32 | entry capacity u32 | entry count u32
                       | begin store time i64 | end store time i64
                       | begin commit-log offset i64 | end commit-log offset i64
    slots:   slot count x u32, the newest entry number whose key hashes to the slot
             (0: none)
    entries: (capacity + 1) x 20 bytes, entry 0 unused:
             key hash u32 (never 0) | commit-log offset i64
             | store time - begin store time, ms (u32) | previous entry of the slot u32

Entries are appended in commit-log order, so each slot's chain runs newest to oldest.
A file rolls when full or when its time span no longer fits the u32 time field. Hashes
collide and entries may be stale after a crash: callers verify each hit against the
record. The header is written at flush time only; everything below the store's
checkpoint is durable, the rest is repaired or rebuilt from the commit log on recovery.

A new file is made whole before it gets its name: written under ``<name>.tmp``
(blocks reserved with fallocate, so writes through the map never meet a full disk as
SIGBUS), header written and fsynced, renamed, directory fsynced. A file that still
fails to load (not an index file) is reported by ``load`` for recovery to rebuild.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("txmq.store.index")

MAGIC = 0x54584958  # "TXIX"
HEADER = struct.Struct(">IIIIqqqq")
ENTRY = struct.Struct(">IqII")
SLOT = struct.Struct(">I")
MAX_TIME_DIFF_MS = 0xFFFFFFFF

_crc32 = zlib.crc32
_HEADER_SIZE, _SLOT_SIZE, _ENTRY_SIZE = HEADER.size, SLOT.size, ENTRY.size
_pack_entry, _pack_slot, _unpack_slot = ENTRY.pack_into, SLOT.pack_into, SLOT.unpack_from


Entry = tuple[int, int, int]  # key hash, commit-log offset, store time (ms)


def key_hash(key: str) -> int:
    """Never 0, so a zeroed (lost) entry is never mistaken for one (see repair)."""
    return _crc32(key.encode("utf-8")) or 1


def message_key_hash(topic: str, key: str) -> int:
    # Dispatcher.dispatch_held inlines this: change them together.
    return key_hash(f"{topic}#{key}")


def unique_id_hash(unique_id: str) -> int:
    # Topics are never empty, so this never hashes the same string as a message key.
    # Dispatcher.dispatch and Dispatcher.dispatch_held inline this and message_key_hash:
    # change them together.
    return key_hash(f"#{unique_id}")


@dataclass(slots=True, eq=False)
class IndexFile:
    path: Path
    mm: mmap.mmap
    slots: int
    capacity: int
    count: int
    begin_ms: int
    end_ms: int
    begin_offset: int
    end_offset: int
    dirty: bool = False  # changed since the last take_dirty

    @property
    def entries_base(self) -> int:
        return HEADER.size + self.slots * SLOT.size

    @classmethod
    def create(cls, path: Path, *, slots: int, capacity: int, begin_offset: int, begin_ms: int) -> IndexFile:
        size = HEADER.size + slots * SLOT.size + (capacity + 1) * ENTRY.size
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
            os.pwrite(fd, HEADER.pack(MAGIC, slots, capacity, 0, begin_ms, begin_ms, begin_offset, begin_offset), 0)
            os.fsync(fd)
            os.rename(tmp, path)
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            mm = mmap.mmap(fd, size)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        return cls(path, mm, slots, capacity, 0, begin_ms, begin_ms, begin_offset, begin_offset)

    @classmethod
    def load(cls, path: Path) -> IndexFile:
        """Map an index file; ValueError when it is not one (e.g. all zeros)."""
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < HEADER.size:
                raise ValueError(f"{path} is not an index file ({size} bytes)")
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        magic, slots, capacity, count, begin_ms, end_ms, begin_off, end_off = HEADER.unpack_from(mm, 0)
        if magic != MAGIC or slots == 0 or len(mm) != HEADER.size + slots * SLOT.size + (capacity + 1) * ENTRY.size:
            mm.close()
            raise ValueError(f"{path} is not an index file")
        return cls(path, mm, slots, capacity, min(count, capacity), begin_ms, end_ms, begin_off, end_off)

    def write_header(self) -> None:
        HEADER.pack_into(
            self.mm, 0, MAGIC, self.slots, self.capacity, self.count,
            self.begin_ms, self.end_ms, self.begin_offset, self.end_offset,
        )  # fmt: skip

    def put(self, entries: list[Entry], start: int) -> int:
        """Append ``entries[start:]`` while they fit; returns the index of the first
        entry not taken."""
        mm, slots, n, capacity, begin_ms = self.mm, self.slots, self.count, self.capacity, self.begin_ms
        base = self.entries_base
        i = start
        for h, commit_log_offset, store_timestamp_ms in itertools.islice(entries, start, None):
            diff = store_timestamp_ms - begin_ms
            if n >= capacity or diff > MAX_TIME_DIFF_MS:
                break
            slot_at = _HEADER_SIZE + (h % slots) * _SLOT_SIZE
            n += 1
            _pack_entry(mm, base + n * _ENTRY_SIZE, h, commit_log_offset, max(0, diff), _unpack_slot(mm, slot_at)[0])
            _pack_slot(mm, slot_at, n)
            if store_timestamp_ms > self.end_ms:
                self.end_ms = store_timestamp_ms
            self.end_offset = commit_log_offset
            i += 1
        if i > start:
            self.count = n
            self.dirty = True
        return i

    def lookup(self, h: int, begin_ms: int, end_ms: int) -> Iterator[int]:
        """Commit-log offsets of entries with hash ``h`` stored in [begin_ms, end_ms],
        newest first."""
        (n,) = SLOT.unpack_from(self.mm, HEADER.size + (h % self.slots) * SLOT.size)
        base = self.entries_base
        while 0 < n <= self.count:
            eh, offset, diff, prev = ENTRY.unpack_from(self.mm, base + n * ENTRY.size)
            if eh == h and begin_ms <= self.begin_ms + diff <= end_ms:
                yield offset
            if prev >= n:  # chains only point backwards; anything else is damage
                return
            n = prev

    def recent(self, h: int, since_ms: int) -> list[int]:
        """``lookup(h, since_ms, ...)`` for the idempotence window, made for the common
        miss: no generator, and the walk stops at the first entry older than ``since_ms``
        (a chain runs from the newest entry back, in dispatch order)."""
        mm = self.mm
        (n,) = SLOT.unpack_from(mm, HEADER.size + (h % self.slots) * SLOT.size)
        out: list[int] = []
        if not n:
            return out
        base, count, begin, unpack, size = self.entries_base, self.count, self.begin_ms, ENTRY.unpack_from, ENTRY.size
        while 0 < n <= count:
            eh, offset, diff, prev = unpack(mm, base + n * size)
            if begin + diff < since_ms:
                break
            if eh == h:
                out.append(offset)
            if prev >= n:
                break
            n = prev
        return out

    def repair(self, bound: int) -> int:
        """Keep exactly the entries that point below ``bound`` (every one of them, also
        after an entry that does not: a log cut and refilled leaves offsets that go
        backwards) and rebuild slots and chains from them; returns how many entries
        were dropped."""
        base, esize = self.entries_base, ENTRY.size
        entries = list(ENTRY.iter_unpack(self.mm[base + esize : base + (self.count + 1) * esize]))
        kept = [e for e in entries if e[0] != 0 and e[1] < bound]
        dropped = len(entries) - len(kept)
        nslots = self.slots
        slots = [0] * nslots
        end_offset = kept[-1][1] if kept else self.begin_offset
        end_ms = self.begin_ms + max((e[2] for e in kept), default=0)
        if not kept or entries[len(kept) - 1] is kept[-1]:
            # A prefix (the usual case): its chains are intact; only the slots change.
            for n, e in enumerate(kept, 1):
                slots[e[0] % nslots] = n
        else:
            out = bytearray(len(kept) * esize)
            pack = ENTRY.pack_into
            for n, (h, offset, diff, _) in enumerate(kept, 1):
                s = h % nslots
                pack(out, (n - 1) * esize, h, offset, diff, slots[s])
                slots[s] = n
            self.mm[base + esize : base + esize + len(out)] = out
        tail = base + esize + len(kept) * esize
        # Entries are appended in order: the written ones end at the first zero hash
        # after the header's count (those beyond it came after the last checkpoint).
        # Zero up to there only: the rest of the file was never touched.
        hi = self.count + 1
        while hi <= self.capacity and ENTRY.unpack_from(self.mm, base + hi * esize)[0] != 0:
            hi += 1
        zero_to = max(tail, base + hi * esize)
        self.mm[tail:zero_to] = bytes(zero_to - tail)
        self.mm[HEADER.size : base] = struct.pack(f">{nslots}I", *slots)
        self.count = len(kept)
        self.end_ms = end_ms
        self.end_offset = end_offset
        self.write_header()
        self.dirty = True
        return dropped

    def close(self) -> None:
        self.mm.close()


class IndexService:
    def __init__(self, directory: Path, *, slots: int, capacity: int) -> None:
        self.directory = directory
        self.slots = slots
        self.capacity = capacity
        self._files: list[IndexFile] = []
        self._dir_dirty = False
        self.invalid: list[Path] = []
        self.unindexed_from: int | None = None  # first offset left out by a failed roll

    @classmethod
    def load(cls, directory: Path, *, slots: int, capacity: int) -> IndexService:
        """Map the files found; ``invalid`` lists those that are not index files (a
        creation cut short), for recovery to rebuild; they are not mapped."""
        directory.mkdir(parents=True, exist_ok=True)
        svc = cls(directory, slots=slots, capacity=capacity)
        for path in sorted(directory.iterdir()):
            if path.name.endswith(".tmp"):
                path.unlink()  # a creation cut short before its rename
            elif path.name.isdigit() and len(path.name) == 20:
                try:
                    svc._files.append(IndexFile.load(path))
                except ValueError:
                    svc.invalid.append(path)
        return svc

    def drop_from(self, offset: int) -> None:
        """Delete the files begun at or after ``offset``."""
        while self._files and self._files[-1].begin_offset >= offset:
            f = self._files.pop()
            f.close()
            f.path.unlink()
            self._dir_dirty = True

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files.clear()

    def repair(self, bound: int) -> int:
        """Make the index hold no entry at or beyond ``bound``: drop files begun there,
        cut the others (the newest, and any older one whose entries reach ``bound``).
        After a crash ``bound`` is the checkpoint (what lies beyond may be partial);
        after recovery cut the log, the new end (those offsets will be reused). The
        caller re-dispatches from ``bound``. Returns the entries dropped."""
        self.drop_from(bound)
        dropped = 0
        for i, f in enumerate(reversed(self._files)):
            if i == 0 or f.end_offset >= bound:
                dropped += f.repair(bound)
        return dropped

    def put(self, entries: list[Entry]) -> None:
        """Index (key hash, commit-log offset, store time) entries, in commit-log order.
        When a new file cannot be created (disk full), the entries that needed it are
        left out and ``unindexed_from`` says where: the store's checkpoint stays below
        it, so the next start indexes them again."""
        i = self._files[-1].put(entries, 0) if self._files else 0
        while i < len(entries):
            _, offset, ts = entries[i]
            try:
                f = self._roll(offset, ts)
            except OSError as exc:
                if self.unindexed_from is None:
                    self.unindexed_from = offset
                    log.error(
                        "cannot create an index file at commit-log offset %d (%s); messages from there are not "
                        "found by key or id until the store restarts", offset, exc,
                    )  # fmt: skip
                return
            i = f.put(entries, i)

    def _roll(self, begin_offset: int, begin_ms: int) -> IndexFile:
        f = IndexFile.create(
            self.directory / f"{begin_offset:020d}",
            slots=self.slots, capacity=self.capacity, begin_offset=begin_offset, begin_ms=begin_ms,
        )  # fmt: skip
        self._files.append(f)
        self._dir_dirty = True
        return f

    def any_below(self, h: int, bound: int) -> bool:
        """Whether a candidate for key hash ``h`` lies below commit-log offset
        ``bound`` (files begun at or after it are not walked)."""
        for f in reversed(self._files):
            if f.begin_offset >= bound:
                continue
            if any(offset < bound for offset in f.lookup(h, 0, 2**63 - 1)):
                return True
        return False

    def holds(self, h: int, offset: int) -> bool:
        """Whether an entry with key hash ``h`` names commit-log offset ``offset``
        exactly: a walk of one hash chain of the file that indexes ``offset`` (the last
        begun at or before it: entries go in commit-log order)."""
        for f in reversed(self._files):
            if f.begin_offset <= offset:
                return any(o == offset for o in f.lookup(h, 0, 2**63 - 1))
        return False

    def lookup(self, h: int, *, begin_ms: int, end_ms: int) -> Iterator[int]:
        """Candidate commit-log offsets for key hash ``h``, newest first, without
        repeats."""
        seen: set[int] = set()
        for f in reversed(self._files):
            if f.end_ms < begin_ms or f.begin_ms > end_ms:
                continue
            for offset in f.lookup(h, begin_ms, end_ms):
                if offset not in seen:
                    seen.add(offset)
                    yield offset

    def recent(self, h: int, since_ms: int) -> list[int]:
        """Candidate commit-log offsets for key hash ``h`` stored at ``since_ms`` or
        later, newest first (``IndexFile.recent``)."""
        out: list[int] = []
        for f in reversed(self._files):
            if f.end_ms < since_ms:
                break  # files roll in time order: the older ones are older still
            if f.count:
                out += f.recent(h, since_ms)
        return out

    def take_dirty(self) -> tuple[list[Path], bool]:
        """Write the headers of changed files; returns their paths (to fsync) and
        whether the directory changed."""
        paths = []
        for f in self._files:
            if f.dirty:
                f.write_header()
                f.dirty = False
                paths.append(f.path)
        dir_dirty, self._dir_dirty = self._dir_dirty, False
        return paths, dir_dirty

    def delete_below(self, commit_log_min_offset: int) -> int:
        """Delete files whose every entry points below the commit log's minimum."""
        deleted = 0
        while len(self._files) > 1 and self._files[1].begin_offset <= commit_log_min_offset:
            f = self._files.pop(0)
            f.close()
            f.path.unlink()
            self._dir_dirty = True
            deleted += 1
        return deleted
