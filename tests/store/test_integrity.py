"""Damaged bytes on disk (docs/store.md, "Integrity and disk faults"): a damaged record is
never served (CODE_DATA_CORRUPTED, counted, logged once), recovery keeps the intact
records after one, the index matches the log after every recovery, and a torn
checkpoint or a half-created index file does not stop the store from starting.

Damage is made by editing real files: of the running store (bit rot after recovery) or
of a crash image (a copy of the data directory taken while the store runs, as
test_recovery.py does).
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from txmq.errors import TxmqError
from txmq.records import decode_messages
from txmq.v1 import errors_pb2, store_pb2
from txmq_store.consumequeue import ConsumeQueue
from txmq_store.index import HEADER, IndexFile
from txmq_store.integrity import DiskFullLog
from txmq_store.message_store import MessageStore

from .conftest import FakeClock, GrpcStore, StoreFactory, msg
from .test_recovery import crash_image, segment_file

pytestmark = pytest.mark.asyncio(loop_scope="session")

BODY = b"x" * 600  # ~100 records per 64 KiB segment


def corrupt_count(where: str) -> float:
    return REGISTRY.get_sample_value("txmq_store_corrupt_records_total", {"where": where}) or 0.0


def flip(path: Path, at: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ mask]))


def flip_in_record(store: MessageStore, root: Path, offset: int, field_at: int) -> None:
    flip(segment_file(store, root, offset), offset % store.settings.commitlog_segment_bytes + field_at)


async def send_ids(store: MessageStore, start: int, stop: int, *, body: bytes = BODY) -> list[int]:
    results = await store.send(
        [msg(body + b"%d" % i, queue_id=0, unique_id=f"U{i}", keys=(f"k{i}",)) for i in range(start, stop)]
    )
    return [r.commit_log_offset for r in results]


def read_all(store: MessageStore, offset: int = 0, *, raw: bool = False) -> tuple[list[int], TxmqError | None]:
    """Queue offsets a consumer gets from ``offset`` on, and the error that stopped it
    (``raw``: reading stored records, as the pull service does)."""
    got: list[int] = []
    while True:
        try:
            r = store.reader.get_message(topic="TopicA", queue_id=0, offset=offset, raw=raw)
        except TxmqError as exc:
            return got, exc
        if raw:
            found = [m.queue_offset for m in decode_messages(b"".join(r.records), "s")]
        else:
            found = [m.queue_offset for m in r.messages]
        if not found:
            return got, None
        got += found
        offset = r.next_begin_offset


def found_ids(store: MessageStore, ids: range) -> list[int]:
    """The ids found intact by unique id."""
    out = []
    for i in ids:
        try:
            if [m.unique_id for m in store.query_messages(unique_id=f"U{i}")] == [f"U{i}"]:
                out.append(i)
        except TxmqError as exc:
            assert exc.code == errors_pb2.CODE_DATA_CORRUPTED
    return out


@pytest.mark.parametrize("field", ["body", "queue id"])
async def test_damage_in_an_old_segment_is_an_error_never_data(
    stores: StoreFactory, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_ids(store, 0, 300)  # three segments and more
    await store.flush()
    assert store.commitlog.segment_count >= 3
    root = Path(store.settings.data_dir)
    victim = 40  # in the first segment, long validated and below the checkpoint
    flip_in_record(store, root, offsets[victim], 116 + 5 if field == "body" else 17)
    before = corrupt_count("read")

    got, err = read_all(store)
    assert got == list(range(victim))  # the intact ones before it, then the error
    assert err is not None and err.code == errors_pb2.CODE_DATA_CORRUPTED and not err.retriable
    assert err.metadata["queue_offset"] == str(victim)
    assert err.metadata["commit_log_offset"] == str(offsets[victim])
    # Raw reads (records passed through to the client) check each record the same way.
    got, raw_err = read_all(store, raw=True)
    assert got == list(range(victim)) and raw_err is not None and raw_err.code == errors_pb2.CODE_DATA_CORRUPTED
    assert raw_err.metadata == err.metadata
    # A consumer that skips it (resumes at next_offset) gets everything after it.
    got, err = read_all(store, int(err.metadata["next_offset"]))
    assert (got, err) == (list(range(victim + 1, 300)), None)
    # Every other way to the record says so too.
    for read in (
        lambda: store.reader.view_message(offsets[victim]),
        lambda: store.query_messages(unique_id=f"U{victim}"),
        lambda: store.query_messages(topic="TopicA", key=f"k{victim}"),
    ):
        with pytest.raises(TxmqError) as info:
            read()
        assert info.value.code == errors_pb2.CODE_DATA_CORRUPTED
    assert [m.queue_offset for m in store.query_messages(unique_id="U41")] == [41]
    # Counted and logged once, however often it is met; one line, no traceback.
    assert corrupt_count("read") - before == 1
    lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert str(offsets[victim]) in lines[0].getMessage()


async def test_damage_below_the_checkpoint_keeps_the_intact_records_after_it(
    stores: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_ids(store, 0, 250)
    await store.flush()  # the checkpoint covers all 250
    await send_ids(store, 250, 260)  # and some after it
    image = crash_image(store, stores)
    root = stores.base / image
    seg_bytes = store.settings.commitlog_segment_bytes
    victims = [200, 201, 245]  # two neighbours and one more, in the segment recovery validates
    assert {offsets[v] // seg_bytes for v in victims} == {store.commitlog.write_offset // seg_bytes}
    for v in victims:
        flip_in_record(store, root, offsets[v], 116 + 7)
    before, before_read = corrupt_count("recovery"), corrupt_count("read")

    caplog.clear()
    crashed = await stores.open(image)
    assert crashed.recovered_from_crash
    # Loudly: one ERROR line per damaged range, the metric, the quarantine file.
    assert corrupt_count("recovery") - before == 2  # 200+201 are one range
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2 and all("quarantined" in e for e in errors)
    ranges = json.loads((root / "quarantine").read_text())["ranges"]
    assert [(r["start"], r["end"]) for r in ranges] == [(offsets[200], offsets[202]), (offsets[245], offsets[246])]
    # Kept: every intact record, also those after the damage.
    assert found_ids(crashed, range(260)) == [i for i in range(260) if i not in victims]
    got, err = read_all(crashed)
    assert got == list(range(200)) and err is not None and err.code == errors_pb2.CODE_DATA_CORRUPTED
    got, _ = read_all(crashed, 202)
    assert got == list(range(202, 245))
    got, _ = read_all(crashed, 246)
    assert got == list(range(246, 260))
    assert corrupt_count("read") == before_read  # reported once, by recovery
    (r,) = await crashed.send([msg(b"next", queue_id=0)])
    assert r.queue_offset == 260

    # The next start skips the known ranges quietly and keeps everything.
    await crashed.close()
    stores.opened.remove(crashed)
    caplog.clear()
    again = await stores.open(image)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert found_ids(again, range(246, 260)) == list(range(246, 260))
    with pytest.raises(TxmqError) as info:
        again.reader.view_message(offsets[200])
    assert info.value.code == errors_pb2.CODE_DATA_CORRUPTED


async def test_a_rebuilt_queue_has_a_gap_where_the_damaged_record_was(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_ids(store, 0, 50)
    await store.close()
    stores.opened.remove(store)
    root = Path(store.settings.data_dir)
    flip_in_record(store, root, offsets[20], 116)
    (root / "checkpoint").unlink()  # queues and index are rebuilt from the log

    store = await stores.open()
    assert read_all(store) == ([i for i in range(50) if i != 20], None)
    (r,) = await store.send([msg(b"next", queue_id=0)])
    assert r.queue_offset == 50


@pytest.mark.parametrize(
    "where", ["above the checkpoint", "below the checkpoint", "below the checkpoint, after a clean stop"]
)
async def test_index_finds_everything_after_a_cut_log_and_a_later_crash(stores: StoreFactory, where: str) -> None:
    big_index = dict(index_entries_per_file=4096)  # old and new entries share a file
    store = await stores.open(**big_index)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_ids(store, 0, 100)
    await store.flush()
    offsets += await send_ids(store, 100, 120)
    if "clean" in where:
        await store.close()  # the checkpoint covers all 120
        stores.opened.remove(store)
        image = "store"
    else:
        image = crash_image(store, stores)
    root = stores.base / image
    # A torn tail: the log ends inside record 110 (after the checkpoint), or, below the
    # checkpoint (in its segment, where recovery validates), everything from a record
    # before it on is gone (nothing valid follows).
    seg_bytes = store.settings.commitlog_segment_bytes
    cp_segment = offsets[99] - offsets[99] % seg_bytes
    kept = 110 if where == "above the checkpoint" else min(i for i, o in enumerate(offsets) if o > cp_segment) + 2
    assert kept < 99 or where == "above the checkpoint"
    cut = offsets[kept]
    for seg in sorted((root / "commitlog").glob("?" * 20)):
        start = int(seg.name)
        if start + seg_bytes <= cut:
            continue
        with open(seg, "r+b") as f:
            at = max(cut - start, 0) + (40 if start <= cut else 0)
            f.seek(at)
            f.write(bytes(seg_bytes - at))

    first = await stores.open(image, **big_index)
    assert first.commitlog.max_offset == cut
    assert found_ids(first, range(120)) == list(range(kept))
    # New messages reuse the cut offsets; some are checkpointed, then a crash.
    await send_ids(first, 1000, 1100)
    await first.flush()
    await send_ids(first, 1100, 1150)
    second = await stores.open(crash_image(first, stores, "crash2"), **big_index)
    assert second.recovered_from_crash
    assert found_ids(second, range(kept)) == list(range(kept))
    assert found_ids(second, range(1000, 1150)) == list(range(1000, 1150))
    assert found_ids(second, range(kept, 120)) == []


async def test_torn_checkpoint_is_a_missing_one(stores: StoreFactory, caplog: pytest.LogCaptureFixture) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await send_ids(store, 0, 30)
    await store.flush()
    image = crash_image(store, stores)
    checkpoint = stores.base / image / "checkpoint"
    checkpoint.write_bytes(checkpoint.read_bytes()[:9])

    caplog.clear()
    crashed = await stores.open(image)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(checkpoint) in warnings[0].getMessage() and warnings[0].exc_info is None
    assert read_all(crashed) == (list(range(30)), None)
    assert found_ids(crashed, range(30)) == list(range(30))


async def test_index_file_cut_short_by_a_crash_is_rebuilt(
    stores: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """What a power cut right after an index roll left before index files were made whole
    before naming them: a full-size, all-zero file."""
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await send_ids(store, 0, 40)
    await store.flush()
    await send_ids(store, 40, 50)
    image = crash_image(store, stores)
    index_dir = stores.base / image / "index"
    newest = sorted(index_dir.iterdir())[-1]
    zeros = index_dir / f"{store.commitlog.write_offset - 1:020d}"  # begun after the checkpoint
    zeros.write_bytes(bytes(newest.stat().st_size))

    caplog.clear()
    crashed = await stores.open(image)
    assert found_ids(crashed, range(50)) == list(range(50))
    assert not zeros.exists()
    assert any(str(zeros) in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    await send_ids(crashed, 50, 60)
    assert found_ids(crashed, range(50, 60)) == list(range(50, 60))


async def test_invalid_index_file_below_the_checkpoint_rebuilds_the_index(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await send_ids(store, 0, 200)  # several index files (256 entries each, 2 per message)
    await store.close()
    stores.opened.remove(store)
    index_dir = Path(store.settings.data_dir) / "index"
    files = sorted(index_dir.iterdir())
    assert len(files) >= 2
    with open(files[0], "r+b") as f:
        f.write(bytes(HEADER.size))

    store = await stores.open()
    assert found_ids(store, range(200)) == list(range(200))


async def test_a_new_index_file_is_whole_on_disk_before_it_has_its_name(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / f"{0:020d}", slots=16, capacity=32, begin_offset=0, begin_ms=5)
    try:
        raw = (tmp_path / f"{0:020d}").read_bytes()
        assert len(raw) == HEADER.size + 16 * 4 + 33 * 20
        assert HEADER.unpack_from(raw)[:3] == (0x54584958, 16, 32)
        assert os.listdir(tmp_path) == [f"{0:020d}"]  # no temporary left
        # Its blocks are reserved: writes through the map never meet a full disk.
        assert os.stat(tmp_path / f"{0:020d}").st_blocks * 512 >= len(raw)
    finally:
        f.close()


async def test_a_damaged_record_over_grpc_is_a_typed_error(
    grpc_store: GrpcStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = grpc_store.store
    offsets = await send_ids(store, 0, 5)
    flip_in_record(store, Path(store.settings.data_dir), offsets[2], 116 + 3)
    r = await grpc_store.stub.GetMessage(store_pb2.GetMessageRequest(topic="TopicA", queue_id=0, offset=0))
    assert [m.queue_offset for m in r.messages] == [0, 1] and r.next_begin_offset == 2
    for call in (
        grpc_store.stub.GetMessage(store_pb2.GetMessageRequest(topic="TopicA", queue_id=0, offset=2)),
        grpc_store.stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=offsets[2])),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        err = TxmqError.from_rpc_error(info.value)
        assert err.code == errors_pb2.CODE_DATA_CORRUPTED and not err.retriable
        assert info.value.code() == grpc.StatusCode.INTERNAL
    assert not [r for r in caplog.records if r.exc_info]  # a typed error: no traceback logged


@pytest.mark.parametrize("cut", [0, 3, 39])
async def test_a_record_cut_short_is_a_typed_error_over_grpc_for_view_message_too(
    grpc_store: GrpcStore, caplog: pytest.LogCaptureFixture, cut: int
) -> None:
    """A segment file that ends inside a record's header (cut short): ViewMessage, by
    offset and by offsetMsgId, answers CODE_DATA_CORRUPTED as GetMessage and
    QueryMessages do (it used to fail untyped, with a traceback)."""
    store = grpc_store.store
    offsets = await send_ids(store, 0, 5)
    at = offsets[2] % store.settings.commitlog_segment_bytes + cut
    os.truncate(segment_file(store, Path(store.settings.data_dir), offsets[2]), at)
    msg_id = f"{store.sender.offset_msg_id_prefix}{offsets[2]:016X}"
    for call in (
        grpc_store.stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=offsets[2])),
        grpc_store.stub.ViewMessage(store_pb2.ViewMessageRequest(offset_msg_id=msg_id)),
        grpc_store.stub.GetMessage(store_pb2.GetMessageRequest(topic="TopicA", queue_id=0, offset=2)),
        grpc_store.stub.QueryMessages(store_pb2.QueryMessagesRequest(unique_id="U2")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        err = TxmqError.from_rpc_error(info.value)
        assert err.code == errors_pb2.CODE_DATA_CORRUPTED and not err.retriable, err
        assert info.value.code() == grpc.StatusCode.INTERNAL
    assert not [r for r in caplog.records if r.exc_info]  # typed errors: no traceback logged


async def test_a_damaged_store_time_does_not_expire_a_segment_early(stores: StoreFactory, clock: FakeClock) -> None:
    store = await stores.open(file_reserved_time_ms=3_600_000)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_ids(store, 0, 200)
    await store.flush()
    seg_bytes = store.settings.commitlog_segment_bytes
    second = next(o for o in offsets if o >= seg_bytes)
    assert second == seg_bytes  # the first record of the second segment dates the first
    # Bit rot in its store time (bytes 72..79) makes it look years old: 0x18B... -> 0x10B...
    assert clock() >> 32 == 0x18B
    flip(segment_file(store, Path(store.settings.data_dir), second), 75, 0x80)
    assert await store.clean_expired_files() == 0
    assert read_all(store)[0][:3] == [0, 1, 2]


async def test_expiry_steps_over_a_gap_in_a_queue(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "q", topic="T", queue_id=0, units_per_file=64)
    for n in range(10):
        if n != 8:  # a gap: recovery skipped a damaged record while rebuilding the queue
            cq.put(n, n * 100, 50, 0)
    cq.correct_min_offset(650)  # segments below commit-log offset 650 deleted
    assert cq.min_offset == 7
    cq.close()


async def test_the_export_looks_past_a_damaged_only_copy(stores: StoreFactory) -> None:
    """The export's committed-copy look-up answers "none" for a transaction whose only
    record is damaged, instead of failing the export run with a traceback."""
    from txmq_store.export import LocalSource

    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_ids(store, 0, 3)
    await store.flush()
    flip_in_record(store, Path(store.settings.data_dir), offsets[1], 116 + 5)
    with pytest.raises(TxmqError) as raised:
        store.query_messages(unique_id="U1")
    assert raised.value.code == errors_pb2.CODE_DATA_CORRUPTED
    assert await LocalSource(store).committed_copy("U1") is None


async def test_a_full_disk_is_logged_once_a_minute_per_write(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    disk_full = DiskFullLog(interval_s=60, clock=lambda: now[0])
    enospc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    for _ in range(30):
        disk_full.failed("the checkpoint", enospc)
        disk_full.failed("the timer checkpoint", enospc)
        now[0] += 1
    now[0] += 60
    disk_full.failed("the checkpoint", enospc)
    disk_full.succeeded("the checkpoint")
    disk_full.succeeded("the checkpoint")
    assert [r.getMessage() for r in caplog.records] == [
        "the checkpoint: the disk is full (No space left on device); tried again as scheduled",
        "the timer checkpoint: the disk is full (No space left on device); tried again as scheduled",
        "the checkpoint: the disk is full (No space left on device); tried again as scheduled",
        "the checkpoint: written again",
    ]
    assert not [r for r in caplog.records if r.exc_info]
