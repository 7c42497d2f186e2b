"""Damaged data and full disks: how the store reports them.

- A record that fails its CRC (codec.py) is never served: the read answers
  ``CODE_DATA_CORRUPTED``, the record is counted in ``txmq_store_corrupt_records_total``
  and logged once (one ERROR line, no traceback) per record and process.
- Recovery quarantines a damaged record that intact ones follow (recovery.py): its
  offset range goes into ``<data_dir>/quarantine`` (JSON), it is counted with
  ``where="recovery"``, and later starts skip it quietly.
- Writes are refused with ``CODE_DISK_FULL`` while the data directory's file system has
  less than ``disk_min_free_bytes`` free (``FreeSpaceGuard``).
- Housekeeping writes a full disk refuses (checkpoints, the timer's checkpoint, consume
  offsets) are logged in one line each, no traceback, at most once a minute per write
  (``DiskFullLog``), and tried again as scheduled.

The metrics live in prometheus_client's default registry (the service's /metrics
endpoint exports it).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter

from txmq.errors import TxmqError, error
from txmq.v1 import errors_pb2

from .fileio import read_json, write_json_atomically

log = logging.getLogger("txmq.store.integrity")

CORRUPT_RECORDS = Counter(
    "txmq_store_corrupt_records_total",
    "Commit-log records found damaged (CRC mismatch), each counted once per process; "
    "where: read (a consumer or look-up met it) or recovery (quarantined at start-up).",
    ["where"],
)
WRITES_REFUSED_DISK_FULL = Counter(
    "txmq_store_writes_refused_disk_full_total",
    "Sends refused because the data directory's free space was below disk_min_free_bytes (or the disk was full).",
)

_MAX_REMEMBERED = 100_000  # damaged offsets remembered for log-once; beyond: log again
#: A housekeeping write a full disk refuses is logged at most this often.
DISK_FULL_LOG_INTERVAL_S = 60.0
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class CorruptionLog:
    """Counts and logs each damaged record once."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._ranges: list[tuple[int, int]] = []  # reported by recovery as one

    def report(self, commit_log_offset: int, reason: str, *, where: str = "read", line: str = "", end: int = 0) -> None:
        """Count and log (``line``, or a standard one) unless already reported; ``end``:
        the damaged bytes run to there (recovery), reads within them are not reported
        again."""
        if commit_log_offset in self._seen or any(a <= commit_log_offset < b for a, b in self._ranges):
            return
        self.remember(commit_log_offset, end)
        CORRUPT_RECORDS.labels(where=where).inc()
        log.error(line or "damaged record at commit-log offset %d not served: %s", commit_log_offset, reason)

    def remember(self, commit_log_offset: int, end: int = 0) -> None:
        """Mark as reported (a range quarantined at an earlier start: reported then)."""
        if len(self._seen) >= _MAX_REMEMBERED:
            self._seen.clear()
        self._seen.add(commit_log_offset)
        if end > commit_log_offset and len(self._ranges) < 1000:
            self._ranges.append((commit_log_offset, end))


def corrupted(commit_log_offset: int, reason: str, **metadata: str) -> TxmqError:
    return error(
        errors_pb2.CODE_DATA_CORRUPTED,
        f"the record at commit-log offset {commit_log_offset} is damaged on disk ({reason})",
        commit_log_offset=str(commit_log_offset),
        **metadata,
    )


def is_disk_full(exc: OSError) -> bool:
    return exc.errno in DISK_FULL_ERRNOS


def disk_full(detail: str) -> TxmqError:
    WRITES_REFUSED_DISK_FULL.inc()
    return error(errors_pb2.CODE_DISK_FULL, detail)


class FreeSpaceGuard:
    """Refuses writes while the file system of ``path`` has less than ``min_free_bytes``
    free. statvfs runs at most once per ``recheck_every`` writes, or sooner once the
    bytes written since the last look could have eaten half the margin."""

    def __init__(self, path: Path, *, min_free_bytes: int, recheck_every: int = 64) -> None:
        self._path = path
        self._min_free = min_free_bytes
        self._recheck_every = recheck_every
        self._writes = 0
        self._budget = -1  # bytes that may be written before looking again
        self.free_bytes = 0
        self.refusing = False

    def check(self, nbytes: int) -> None:
        """Raise ``CODE_DISK_FULL`` when writing ``nbytes`` more is not allowed."""
        if self._min_free <= 0:
            return
        self._writes += 1
        if self._writes >= self._recheck_every or nbytes > self._budget:
            self._look()
        if nbytes > self._budget:
            detail = (
                f"{self._path} has {self.free_bytes} bytes free, the store keeps at least {self._min_free} "
                f"(disk_min_free_bytes): writes are refused until space is freed"
            )
            if not self.refusing:
                self.refusing = True
                log.warning("%s", detail)  # once per episode; each refusal is counted
            raise disk_full(detail)
        if self.refusing:
            self.refusing = False
            log.warning("%s has %d bytes free again: writes are accepted", self._path, self.free_bytes)
        self._budget -= nbytes

    def _look(self) -> None:
        st = os.statvfs(self._path)
        self.free_bytes = st.f_bavail * st.f_frsize
        self._budget = (self.free_bytes - self._min_free) // 2
        self._writes = 0


class DiskFullLog:
    """One ERROR line, no traceback, when a full disk refuses a housekeeping write
    (``what``: the periodic checkpoint, the timer's checkpoint, ...), then none for that
    write for ``interval_s``; one line when it succeeds again."""

    def __init__(
        self, *, interval_s: float = DISK_FULL_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}  # what -> when it was last logged

    def failed(self, what: str, exc: OSError, *, then: str = "tried again as scheduled") -> None:
        now = self._clock()
        last = self._last.get(what)
        if last is not None and now - last < self._interval_s:
            return
        self._last[what] = now
        log.error("%s: the disk is full (%s); %s", what, exc.strerror or exc, then)

    def succeeded(self, what: str) -> None:
        if self._last.pop(what, None) is not None:
            log.warning("%s: written again", what)


@dataclass(slots=True, frozen=True)
class QuarantinedRange:
    start: int
    end: int
    reason: str
    found_at_ms: int


class Quarantine:
    """Offset ranges of the commit log that recovery found damaged and skipped, kept in
    ``<data_dir>/quarantine`` (JSON, written atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ranges: list[QuarantinedRange] = []
        try:
            data = read_json(path)
        except ValueError:
            log.warning("%s is unreadable; starting a new quarantine list", path)
            data = None
        for item in (data or {}).get("ranges", []):
            self.ranges.append(QuarantinedRange(int(item["start"]), int(item["end"]), str(item["reason"]),
                                                int(item["found_at_ms"])))  # fmt: skip

    def find(self, offset: int) -> QuarantinedRange | None:
        for r in self.ranges:
            if r.start <= offset < r.end:
                return r
        return None

    def starting_at(self, offset: int) -> QuarantinedRange | None:
        for r in self.ranges:
            if r.start == offset:
                return r
        return None

    def add(self, start: int, end: int, reason: str, *, now_ms: int) -> None:
        self.ranges = [r for r in self.ranges if r.start != start]
        self.ranges.append(QuarantinedRange(start, end, reason, now_ms))
        self.ranges.sort(key=lambda r: r.start)
        self.save()

    def forget_from(self, offset: int) -> None:
        """Drop ranges at or beyond ``offset`` (the log was cut there)."""
        kept = [r for r in self.ranges if r.end <= offset]
        if len(kept) != len(self.ranges):
            self.ranges = kept
            self.save()

    def forget_below(self, offset: int) -> None:
        """Drop ranges of deleted segments."""
        kept = [r for r in self.ranges if r.end > offset]
        if len(kept) != len(self.ranges):
            self.ranges = kept
            self.save()

    def save(self) -> None:
        write_json_atomically(
            self.path,
            {"ranges": [{"start": r.start, "end": r.end, "reason": r.reason, "found_at_ms": r.found_at_ms}
                        for r in self.ranges]},
        )  # fmt: skip
