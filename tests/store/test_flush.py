"""Flush modes: group commit in sync mode, the periodic flush in async mode."""

from __future__ import annotations

import asyncio

import pytest

from txmq_store.model import GetMessageStatus, SendStatus

from .conftest import CountingFsync, StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def wait_until(pred, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not pred():
            await asyncio.sleep(0.005)


async def test_group_commit_shares_fsyncs_and_acks_only_after_them(stores: StoreFactory) -> None:
    fsync = CountingFsync()
    store = await stores.open(fsync=fsync, flush_mode="sync")
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"warm-up", queue_id=0)])  # creates and syncs the first segment
    fsync.calls = 0
    fsync.gate.clear()
    fsync.entered.clear()
    try:
        first = asyncio.create_task(store.send([msg(b"first", queue_id=0)]))
        await asyncio.to_thread(fsync.entered.wait, 10)  # its fsync is in progress, and held
        # The loop keeps accepting sends while that fsync runs.
        others = [asyncio.create_task(store.send([msg(b"m%d" % i, queue_id=0)])) for i in range(50)]
        await wait_until(lambda: store.commitlog.max_offset > 0 and len(store.sender._undispatched) == 51)
        assert not first.done() and not any(t.done() for t in others)
        # Consumers see only durable messages.
        r = store.reader.get_message(topic="TopicA", queue_id=0, offset=1)
        assert r.status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    finally:
        fsync.gate.set()
    results = [r for t in [first, *others] for r in await t]
    assert all(r.status == SendStatus.OK for r in results)
    assert sorted(r.queue_offset for r in results) == list(range(1, 52))
    assert fsync.calls < len(results) / 10  # one fsync for the first, one for the 50 others
    r = store.reader.get_message(topic="TopicA", queue_id=0, offset=1, max_messages=100)
    assert [m.body for m in r.messages][:2] == [b"first", b"m0"]


async def test_sync_flush_timeout(stores: StoreFactory) -> None:
    fsync = CountingFsync()
    store = await stores.open(fsync=fsync, flush_mode="sync", sync_flush_timeout_ms=20)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    fsync.gate.clear()
    try:
        (r,) = await store.send([msg(b"slow disk", queue_id=0)])
        assert r.status == SendStatus.FLUSH_DISK_TIMEOUT
    finally:
        fsync.gate.set()
    # Written, and visible once the fsync completes.
    await wait_until(lambda: store.reader.get_message(topic="TopicA", queue_id=0, offset=0).messages != [])


async def test_async_mode_acks_before_fsync_and_flushes_in_the_background(stores: StoreFactory) -> None:
    fsync = CountingFsync()
    store = await stores.open(fsync=fsync, flush_interval_ms=10)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    fsync.gate.clear()
    try:
        (r,) = await store.send([msg(b"fast", queue_id=0)])
        assert r.status == SendStatus.OK
        assert store.reader.get_message(topic="TopicA", queue_id=0, offset=0).messages[0].body == b"fast"
        assert store.commitlog.flushed_offset == 0
    finally:
        fsync.gate.set()
    await wait_until(lambda: store.commitlog.flushed_offset == store.commitlog.max_offset)
    assert fsync.calls >= 1
