"""Full disks and power cuts on real file systems (docs/store.md, "Integrity and disk
faults"): a small tmpfs or loop-mounted ext4 per test (root is needed to mount; the
tests skip, saying so, where mounting is not permitted).

- A full tmpfs refuses sends with CODE_DISK_FULL; nothing of a refused batch is stored;
  a store process never dies of SIGBUS (mapped files have their blocks reserved).
- The free-space floor (disk_min_free_bytes) refuses writes before the disk is full.
- Without it, a full disk costs the periodic checkpoints one log line each, and the stop
  its checkpoint: the next start recovers.
- A power cut (ext4 shut down without flushing its journal, as fstests' godown) while a
  real store process writes with sync flush loses no acknowledged message, and the store
  starts again, also when the cut came right after an index file was created.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
from txmq_store.commitlog import CommitLog, SegmentAllocator
from txmq_store.index import IndexService, key_hash
from txmq_store.message_store import MessageStore
from txmq_store.settings import StoreSettings

from .conftest import StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 0x2  # drop what the journal has not committed: a power cut


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _mount(args: list[str], where: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    r = _run("mount", *args, str(where))
    if r.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {r.stderr.strip()}")


def _umount(where: Path) -> None:
    if _run("umount", str(where)).returncode != 0:
        _run("umount", "-l", str(where))


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (grow it with ``remount``)."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=4m", "tmpfs"], where)
    try:
        yield where
    finally:
        _umount(where)


def remount(where: Path, size: str) -> None:
    r = _run("mount", "-o", f"remount,size={size}", str(where))
    assert r.returncode == 0, r.stderr


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(mount point, image file) of a 64 MiB ext4 on a loop device, mounted."""
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 is not installed")
    image = tmp_path / "ext4.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    r = _run("mkfs.ext4", "-q", "-F", str(image))
    assert r.returncode == 0, r.stderr
    where = tmp_path / "ext4"
    where.mkdir()
    _mount(["-o", "loop", str(image)], where)
    try:
        yield where, image
    finally:
        _umount(where)


def refused_count() -> float:
    return REGISTRY.get_sample_value("txmq_store_writes_refused_disk_full_total") or 0.0


async def fill_until_refused(store: MessageStore, *, batch: int, body: bytes, queue_id: int | None = 0) -> tuple[
    list[str], list[str], TxmqError
]:  # fmt: skip
    """Send numbered batches until one is refused: (acknowledged ids, refused ids, error)."""
    acked: list[str] = []
    n = 0
    while True:
        ids = [f"U{n + i}" for i in range(batch)]
        n += batch
        try:
            await store.send([msg(body, queue_id=queue_id, unique_id=u) for u in ids])
        except TxmqError as exc:
            return acked, ids, exc
        acked += ids
        assert n < 100_000, "the file system never filled"


def ids_found(store: MessageStore, ids: list[str]) -> list[str]:
    return [u for u in ids if store.query_messages(unique_id=u)]


def queue_bodies(store: MessageStore, queue_id: int = 0) -> int:
    r = store.reader.get_message(topic="TopicA", queue_id=queue_id, offset=0, max_messages=10_000)
    n, offset = 0, 0
    while r.messages:
        n += len(r.messages)
        offset = r.next_begin_offset
        r = store.reader.get_message(topic="TopicA", queue_id=queue_id, offset=offset, max_messages=10_000)
    return n


async def test_a_full_disk_refuses_the_whole_batch_and_recovers_when_space_returns(
    tmpfs: Path, stores: StoreFactory
) -> None:
    # Sparse segments: the commit log's own pwrite meets the full disk, mid-batch.
    store = await stores.open(
        str(tmpfs / "store"), disk_min_free_bytes=0, commitlog_preallocate="none", consume_queue_units_per_file=4096
    )
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    before = refused_count()
    acked, refused, err = await fill_until_refused(store, batch=40, body=b"b" * 1000)
    assert err.code == errors_pb2.CODE_DISK_FULL and err.retriable
    assert refused_count() - before == 1
    assert ids_found(store, refused) == []  # nothing of the refused batch
    assert queue_bodies(store) == len(acked)
    # Nor after a crash: the data directory as the process leaves it.
    shutil.copytree(tmpfs / "store", stores.base / "image")
    image = await stores.open("image")
    assert ids_found(image, refused) == [] and queue_bodies(image) == len(acked)
    assert len(ids_found(image, acked)) == len(acked)

    remount(tmpfs, "8m")  # space returns: so do writes, with no gap in the queue
    (r,) = await store.send([msg(b"after", queue_id=0, unique_id="AFTER")])
    assert r.queue_offset == len(acked)
    assert store.query_messages(unique_id="AFTER")[0].queue_offset == len(acked)


async def test_the_free_space_floor_refuses_writes_before_the_disk_is_full(tmpfs: Path, stores: StoreFactory) -> None:
    remount(tmpfs, "16m")
    floor = 8 << 20
    store = await stores.open(str(tmpfs / "store"), disk_min_free_bytes=floor)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    _, refused, err = await fill_until_refused(store, batch=8, body=b"f" * 2000, queue_id=None)
    assert err.code == errors_pb2.CODE_DISK_FULL and err.retriable
    assert "disk_min_free_bytes" in err.message
    st = os.statvfs(tmpfs)
    assert st.f_bavail * st.f_frsize > floor // 2  # stopped well before full
    assert ids_found(store, refused) == []
    await store.flush()  # housekeeping still has room
    remount(tmpfs, "32m")
    await store.send([msg(b"again")])


async def test_a_store_on_a_full_disk_says_so_once_and_stops_cleanly(
    tmpfs: Path, stores: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """No free-space floor: the disk fills up for real. The checkpoint job and the
    timer's checkpoint cannot write: one line each, no traceback. The stop cannot write
    its checkpoint either: it says so, and the next start recovers."""
    caplog.set_level(logging.INFO)
    store = await stores.open(str(tmpfs / "store"), disk_min_free_bytes=0, flush_consume_queue_interval_ms=50)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    acked, _, err = await fill_until_refused(store, batch=40, body=b"b" * 1000)
    assert err.code == errors_pb2.CODE_DISK_FULL
    caplog.clear()

    def errors() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

    wanted = ("periodic store job checkpoint: the disk is full", "the timer checkpoint: the disk is full")
    for _ in range(400):  # each job fails within a round or two (50 ms) of an unloaded machine
        if all(any(m.startswith(w) for m in errors()) for w in wanted):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(1)  # about 20 more rounds of each periodic write: no more lines
    await store.close()
    lines = errors()
    assert not [r for r in caplog.records if r.exc_info], lines
    assert len([m for m in lines if m.startswith("periodic store job checkpoint: the disk is full")]) == 1, lines
    assert len([m for m in lines if m.startswith("the timer checkpoint: the disk is full")]) == 1, lines
    assert [m for m in lines if "stopping: could not write the checkpoint" in m and "next start recovers" in m]
    assert (tmpfs / "store" / "abort").exists()  # the next start recovers as after a crash

    remount(tmpfs, "8m")
    again = await stores.open(str(tmpfs / "store"), disk_min_free_bytes=0)
    assert again.recovered_from_crash
    assert ids_found(again, acked) == acked and queue_bodies(again) == len(acked)


async def test_a_segment_whose_preparation_failed_on_a_full_disk_does_not_fail_the_stop(tmpfs: Path) -> None:
    """The next segment is prepared in the background; when the disk fills under it, the
    stop that follows removes the partial file and ends normally (it once raised ENOSPC
    out of the store's close)."""
    allocator = SegmentAllocator(tmpfs, segment_bytes=8 << 20, mode="zero")  # twice the tmpfs
    allocator.request(0)
    allocator.close()
    assert os.listdir(tmpfs) == []
    assert os.statvfs(tmpfs).f_bfree == os.statvfs(tmpfs).f_blocks  # its blocks returned


WRITER = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from txmq.errors import TxmqError
    from txmq_store.message_store import MessageStore
    from txmq_store.model import OutgoingMessage, SendStatus
    from txmq_store.settings import StoreSettings

    async def main(data_dir, overrides):
        store = await MessageStore.open(StoreSettings(data_dir=data_dir, **overrides), advertised_address="127.0.0.1:1")
        try:
            store.admin.get_topic("TopicA")
        except TxmqError:
            store.create_topic("TopicA", read_queue_nums=64, write_queue_nums=64)
        print(json.dumps({"ready": True}), flush=True)
        n = 0
        while True:
            ids = [f"{os.getpid()}-{n + i}" for i in range(16)]
            n += 16
            try:
                results = await store.send([OutgoingMessage(topic="TopicA", body=b"p" * 700, unique_id=u) for u in ids])
            except TxmqError as exc:
                print(json.dumps({"error": exc.code_name}), flush=True)
                await asyncio.sleep(0.05)
                continue
            ok = [u for u, r in zip(ids, results) if r.status == SendStatus.OK]
            print(json.dumps({"acked": ok}), flush=True)

    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
    """
)


def start_writer(data_dir: Path, **overrides: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(data_dir), json.dumps(overrides)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_lines(proc: subprocess.Popen[str], until: int) -> tuple[list[str], list[dict[str, object]]]:
    """Acknowledged ids, from the writer's lines, until ``until`` ids or its end."""
    assert proc.stdout is not None
    acked: list[str] = []
    lines = []
    for line in proc.stdout:
        item = json.loads(line)
        lines.append(item)
        acked += item.get("acked", [])  # type: ignore[arg-type]
        if len(acked) >= until or "error" in item:
            break
    return acked, lines


@pytest.mark.slow
async def test_a_full_tmpfs_refuses_writes_it_does_not_kill_the_store(tmpfs: Path) -> None:
    """Mapped consume-queue and index files on a full tmpfs: SIGBUS killed the store."""
    proc = start_writer(
        tmpfs / "store", disk_min_free_bytes=0, consume_queue_units_per_file=2048, index_entries_per_file=2048,
        index_slots_per_file=512, commitlog_segment_bytes=256 << 10,
    )  # fmt: skip
    try:
        acked, lines = await asyncio.to_thread(read_lines, proc, 1_000_000)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode != -signal.SIGBUS, stderr
    assert lines and lines[-1] == {"error": "CODE_DISK_FULL"}, (lines[-3:], stderr)
    assert len(acked) > 100
    assert "Traceback" not in stderr


def power_cut(where: Path) -> None:
    fd = os.open(where, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, EXT4_GOING_FLAGS_NOLOGFLUSH.to_bytes(4, sys.byteorder))
    except OSError as exc:
        if exc.errno in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EPERM):
            pytest.skip(f"ext4 shutdown ioctl not available: {exc}")
        raise
    finally:
        os.close(fd)


@pytest.mark.slow
async def test_a_power_cut_loses_no_acknowledged_message(ext4: tuple[Path, Path], stores: StoreFactory) -> None:
    where, image = ext4
    data_dir = where / "store"
    # Small index files: cuts land right after index rolls as well.
    settings = dict(
        flush_mode="sync", commitlog_segment_bytes=1 << 20, index_entries_per_file=512, index_slots_per_file=64,
        consume_queue_units_per_file=256, flush_consume_queue_interval_ms=200, disk_min_free_bytes=0,
    )  # fmt: skip
    all_acked: list[str] = []
    for round_ in range(3):
        proc = start_writer(data_dir, **settings)
        try:
            acked, lines = await asyncio.to_thread(read_lines, proc, 300 + 200 * round_)
            power_cut(where)  # the writer keeps going: what it acknowledges from now is not counted
        finally:
            proc.kill()
            _, stderr = proc.communicate(timeout=30)
        assert lines and lines[0] == {"ready": True}, stderr  # it started after the last cut
        assert len(acked) >= 300, (lines[-3:], stderr)
        all_acked += acked
        _umount(where)
        _mount(["-o", "loop", str(image)], where)

    store = await MessageStore.open(
        stores.settings(str(data_dir), **settings),
        advertised_address="127.0.0.1:1",  # type: ignore[arg-type]
    )
    try:
        assert store.recovered_from_crash
        missing = [u for u in all_acked if not store.query_messages(unique_id=u)]
        assert missing == []
        assert sum(queue_bodies_topic(store, q) for q in range(64)) >= len(all_acked)
    finally:
        await store.close()


def queue_bodies_topic(store: MessageStore, queue_id: int) -> int:
    n, offset = 0, 0
    while True:
        r = store.reader.get_message(topic="TopicA", queue_id=queue_id, offset=offset, max_messages=10_000)
        if not r.messages:
            return n
        n += len(r.messages)
        offset = r.next_begin_offset


async def test_a_batch_failing_at_a_segment_roll_stores_nothing(stores: StoreFactory) -> None:
    """A batch larger than a segment is written in two pwrites; the second fails (an
    injected ENOSPC: the one fault a real file system will not place on cue)."""
    store = await stores.open()  # 64 KiB segments
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"before", queue_id=0, unique_id="B")])
    segments = store.commitlog.segment_count
    real = store.commitlog._pwrite
    calls: list[int] = []

    def failing_second_write(fd: int, data: bytes, at: int) -> int:
        calls.append(len(data))
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, at)

    store.commitlog._pwrite = failing_second_write  # type: ignore[method-assign]
    big = [msg(b"z" * 1000, queue_id=0, unique_id=f"Z{i}") for i in range(100)]  # ~110 KiB
    with pytest.raises(TxmqError) as info:
        await store.send(big)
    store.commitlog._pwrite = real  # type: ignore[method-assign]
    assert info.value.code == errors_pb2.CODE_DISK_FULL and len(calls) == 2
    assert store.commitlog.segment_count == segments  # the segment it rolled to is gone
    assert ids_found(store, [f"Z{i}" for i in range(100)]) == []
    shutil.copytree(store.settings.data_dir, stores.base / "image")
    image = await stores.open("image")
    assert ids_found(image, [f"Z{i}" for i in range(100)]) == [] and ids_found(image, ["B"]) == ["B"]
    assert queue_bodies(image) == 1
    (r,) = await store.send([msg(b"after", queue_id=0)])
    assert r.queue_offset == 1
    assert queue_bodies(store) == 2


async def test_a_failed_fsync_stops_writes(stores: StoreFactory, caplog: pytest.LogCaptureFixture) -> None:
    """After a failed fsync the kernel may have dropped the pages: the store answers the
    waiting sends with STORAGE_ERROR and takes no more writes (an injected EIO: the store
    takes its fsync as a parameter)."""
    failing = False

    def fsync(fd: int) -> None:
        if failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fdatasync(fd)

    store = await stores.open(flush_mode="sync", fsync=fsync)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"durable", queue_id=0)])
    failing = True
    with pytest.raises(TxmqError) as info:
        await store.send([msg(b"lost?", queue_id=0)])
    assert info.value.code == errors_pb2.CODE_STORAGE_ERROR
    failing = False
    with pytest.raises(TxmqError) as info:
        await store.send([msg(b"refused", queue_id=0)])
    assert info.value.code == errors_pb2.CODE_SERVICE_NOT_WRITABLE
    assert not [r for r in caplog.records if r.exc_info]  # one-line errors, no traceback


async def test_an_index_file_that_cannot_be_created_leaves_entries_out_not_the_store(tmpfs: Path) -> None:
    index = IndexService.load(tmpfs / "index", slots=64, capacity=16)
    filler = tmpfs / "filler"
    try:
        index.put([(key_hash(f"k{i}"), i * 100, 1_000 + i) for i in range(16)])  # the first file, full
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # the disk fills up
        try:
            with pytest.raises(OSError):
                while True:
                    os.write(fd, bytes(1 << 12))
        finally:
            os.close(fd)
        index.put([(key_hash("late"), 1_600, 2_000), (key_hash("later"), 1_700, 2_001)])  # no room for a file
        assert index.unindexed_from == 1_600
        assert list(index.lookup(key_hash("k3"), begin_ms=0, end_ms=10**12)) == [300]
        filler.unlink()
        index.put([(key_hash("after"), 1_800, 2_002)])  # room again: a new file
        assert list(index.lookup(key_hash("after"), begin_ms=0, end_ms=10**12)) == [1_800]
        assert not list((tmpfs / "index").glob("*.tmp"))
    finally:
        index.close()


def last_record(data_dir: Path, segment_bytes: int) -> tuple[Path, int, int, str]:
    """(segment file, position in it, size, unique id) of the commit log's last record."""
    log_ = CommitLog.open(data_dir / "commitlog", segment_bytes=segment_bytes, fsync=os.fdatasync, preallocate="none")
    try:
        seen: list[tuple[int, int, str]] = []
        log_.recover_end(log_.min_offset, redispatch_from=0, on_record=lambda m: seen.append(
            (m.commit_log_offset, m.store_size, m.unique_id)))  # fmt: skip
        offset, size, unique_id = seen[-1]
        return (
            data_dir / "commitlog" / f"{offset - offset % segment_bytes:020d}",
            offset % segment_bytes,
            size,
            unique_id,
        )
    finally:
        log_.close()


@pytest.mark.slow
async def test_kill_9_a_torn_tail_more_sends_and_kill_9_again_lose_nothing_else(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    settings = dict(
        commitlog_segment_bytes=1 << 20, index_entries_per_file=100_000, index_slots_per_file=1024,
        consume_queue_units_per_file=4096, flush_consume_queue_interval_ms=100, disk_min_free_bytes=0,
    )  # fmt: skip
    acked: list[str] = []
    for round_ in range(2):
        proc = start_writer(data_dir, **settings)
        try:
            got, lines = await asyncio.to_thread(read_lines, proc, 2_000)
        finally:
            proc.send_signal(signal.SIGKILL)
            _, stderr = proc.communicate(timeout=30)
        assert lines and lines[0] == {"ready": True} and len(got) >= 2_000, stderr
        acked += got
        if round_ == 0:
            # The last write torn: half of the last record never reached the disk, nor
            # anything written after it (the kill may have come just after a roll: the
            # blank marker ending the segment and the next segment, still empty, would
            # make the torn record damage in the middle of the log, kept in quarantine).
            path, at, size, torn = last_record(data_dir, 1 << 20)
            with open(path, "r+b") as f:
                f.seek(at + size // 2)
                f.write(bytes((1 << 20) - at - size // 2))
            for later in sorted(path.parent.iterdir()):
                if later.name.isdigit() and later.name > path.name:
                    later.unlink()
    store = await MessageStore.open(
        StoreSettings(data_dir=str(data_dir), **settings),  # type: ignore[arg-type]
        advertised_address="127.0.0.1:1",
    )
    try:
        assert store.recovered_from_crash
        assert [u for u in acked if u != torn and not store.query_messages(unique_id=u)] == []
        assert store.query_messages(unique_id=torn) == []  # cut with the torn tail
        assert sum(queue_bodies_topic(store, q) for q in range(64)) >= len(acked) - 1
    finally:
        await store.close()
