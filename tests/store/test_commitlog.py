"""Commit-log segments and consume-queue files, on real files."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from txmq_store.codec import BLANK_MAGIC, PreparedRecord, encode_host
from txmq_store.commitlog import CommitLog
from txmq_store.consumequeue import ConsumeQueue
from txmq_store.model import OutgoingMessage
from txmq_store.validation import MessageEncoder, MessageLimits

SEGMENT = 4096
HOST = encode_host("127.0.0.1", 1)


def records(n: int, *, body_bytes: int = 500) -> list[PreparedRecord]:
    limits = MessageLimits(max_body_bytes=SEGMENT, max_properties_bytes=1000, max_record_bytes=SEGMENT - 8)
    encoder = MessageEncoder(limits=limits, born_host=HOST, now_ms=1, system=False)
    return [
        encoder.prepare(OutgoingMessage(topic="T", body=bytes([i % 256]) * body_bytes), i, "T", 0, None, 0)
        for i in range(n)
    ]


def test_segments_roll_and_records_never_span(tmp_path: Path) -> None:
    log = CommitLog.open(tmp_path, segment_bytes=SEGMENT, fsync=os.fdatasync)
    recs = records(20)
    offsets = log.append(recs, list(range(20)), store_timestamp_ms=5, store_host=HOST)
    size = recs[0].size
    per_segment = (SEGMENT - 8) // size  # each record leaves room for the blank marker
    assert offsets[per_segment] == SEGMENT  # the next one starts the next segment
    assert sorted(p.name for p in tmp_path.iterdir())[:2] == ["00000000000000000000", "00000000000000004096"]
    for off in offsets:
        assert off // SEGMENT == (off + size - 1) // SEGMENT
    # The unused end of the first segment starts with a blank marker.
    blank_at = per_segment * size
    raw = (tmp_path / "00000000000000000000").read_bytes()
    assert struct.unpack_from(">II", raw, blank_at) == (SEGMENT - blank_at, BLANK_MAGIC)
    # (The allocator may be writing the next segment's ``.alloc`` file right now.)
    assert all(os.path.getsize(p) == SEGMENT for p in tmp_path.iterdir() if p.suffix != ".alloc")
    for i, off in enumerate(offsets):
        m = log.read_record(off)
        assert m is not None and m.body[0] == i and m.queue_offset == i and m.commit_log_offset == off
    assert log.read_record(offsets[1] + 1) is None  # not a record boundary
    assert log.read(log.max_offset - 4, 8) is None  # beyond the end
    assert log.roll_next_file(offsets[1]) == SEGMENT
    log.close()
    assert list(tmp_path.glob("*.alloc")) == []  # the segment prepared ahead is discarded


def test_recover_end_and_truncate(tmp_path: Path) -> None:
    log = CommitLog.open(tmp_path, segment_bytes=SEGMENT, fsync=os.fdatasync)
    offsets = log.append(records(12), list(range(12)), store_timestamp_ms=5, store_host=HOST)
    end = log.max_offset
    log.close()

    log = CommitLog.open(tmp_path, segment_bytes=SEGMENT, fsync=os.fdatasync)
    seen: list[int] = []
    assert log.recover_end(0, redispatch_from=offsets[3], on_record=lambda m: seen.append(m.queue_offset)) == end
    assert seen == list(range(3, 12))
    # Truncating at a record in the second segment drops the third segment.
    log.truncate(offsets[9])
    log.flush(offsets[9])
    assert log.max_offset == offsets[9] and log.segment_count == 2
    assert log.read_record(offsets[8]) is not None and log.read_record(offsets[9]) is None
    assert log.recover_end(0, redispatch_from=end, on_record=seen.append) == offsets[9]
    log.close()


def test_consume_queue_files(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "T" / "0", topic="T", queue_id=0, units_per_file=10)
    for q in range(25):
        cq.put(q, q * 100, 50 + q, q % 3)
    assert (cq.min_offset, cq.max_offset) == (0, 25)
    assert sorted(p.name for p in (tmp_path / "T" / "0").iterdir()) == [
        "00000000000000000000", "00000000000000000200", "00000000000000000400"
    ]  # fmt: skip
    assert cq.unit(13) == (1300, 63, 1)
    units = cq.read_units(8, 100)
    assert units is not None and len(units) == 2 * 20  # a read stops at the file end
    cq.put(3, 300, 53, 0)  # idempotent rewrite of the same unit
    cq.close()

    cq = ConsumeQueue.load(tmp_path / "T" / "0", topic="T", queue_id=0, units_per_file=10)
    assert (cq.min_offset, cq.max_offset) == (0, 25)
    cq.truncate_from_commit_log_offset(1750)  # records at 1800.. are gone
    assert cq.max_offset == 18 and cq.unit(17) == (1700, 67, 2) and cq.unit(18) is None
    assert sorted(p.name for p in (tmp_path / "T" / "0").iterdir()) == ["00000000000000000000", "00000000000000000200"]
    cq.correct_min_offset(1250)  # commit log now starts at 1250
    assert cq.min_offset == 13
    assert [p.name for p in (tmp_path / "T" / "0").iterdir()] == ["00000000000000000200"]
    assert [cq.unit(q)[0] for q in range(13, 18)] == [1300, 1400, 1500, 1600, 1700]  # type: ignore[index]
    cq.close()
