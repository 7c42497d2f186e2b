"""Restart and crash recovery on real files.

A crash image is a copy of the data directory taken while the store runs: it holds
the abort marker, a checkpoint from the last flush and whatever the store wrote to the
page cache, as a killed process leaves them. Torn and corrupt tails are made by editing
that copy.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
from txmq_store.message_store import MessageStore
from txmq_store.model import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, GetMessageStatus

from .conftest import StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")


def crash_image(store: MessageStore, stores: StoreFactory, name: str = "crash") -> str:
    shutil.copytree(store.settings.data_dir, stores.base / name)
    return name


def bodies(store: MessageStore, queue_id: int = 0, topic: str = "TopicA") -> list[bytes]:
    """Every message of the queue, read as a consumer would (batch by batch)."""
    out: list[bytes] = []
    offset = 0
    while True:
        r = store.reader.get_message(topic=topic, queue_id=queue_id, offset=offset)
        if r.status != GetMessageStatus.FOUND:
            return out
        out += [m.body for m in r.messages]
        offset = r.next_begin_offset


async def send_numbered(store: MessageStore, start: int, stop: int, **kw: object) -> list[int]:
    results = await store.send([msg(b"m%d" % i, queue_id=0, keys=(f"k{i}",), **kw) for i in range(start, stop)])
    return [r.commit_log_offset for r in results]


def segment_file(store: MessageStore, root: Path, offset: int) -> Path:
    seg_bytes = store.settings.commitlog_segment_bytes
    return root / "commitlog" / f"{offset - offset % seg_bytes:020d}"


async def test_clean_restart_keeps_messages_offsets_and_configs(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=2, write_queue_nums=2, attributes={"message.type": "NORMAL"})
    await send_numbered(store, 0, 5)
    store.commit_consume_offset(group="cg", topic="TopicA", queue_id=0, offset=3)
    await store.close()
    stores.opened.remove(store)

    store = await stores.open()
    assert not store.recovered_from_crash
    assert store.admin.get_topic("TopicA").attributes == {"message.type": "NORMAL"}
    assert store.admin.get_subscription_group("cg").consume_enable  # auto-created by the commit
    assert store.admin.query_consume_offset(group="cg", topic="TopicA", queue_id=0) == 3
    assert bodies(store) == [b"m%d" % i for i in range(5)]
    (r,) = await store.send([msg(b"after", queue_id=0)])
    assert r.queue_offset == 5  # queue offsets continue
    assert [m.body for m in store.query_messages(topic="TopicA", key="k2")] == [b"m2"]


async def test_crash_recovers_records_after_the_checkpoint(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await send_numbered(store, 0, 10)
    await store.flush()
    await send_numbered(store, 10, 300)  # several segments beyond the checkpoint
    image = crash_image(store, stores)

    crashed = await stores.open(image)
    assert crashed.recovered_from_crash
    assert bodies(crashed) == [b"m%d" % i for i in range(300)]
    assert [m.queue_offset for m in crashed.query_messages(topic="TopicA", key="k299")] == [299]
    assert [m.body for m in crashed.query_messages(topic="TopicA", key="k5")] == [b"m5"]
    (r,) = await crashed.send([msg(b"next", queue_id=0)])
    assert r.queue_offset == 300


@pytest.mark.parametrize("how", ["zero the second half", "cut the file"])
async def test_torn_last_record_is_truncated(stores: StoreFactory, how: str) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_numbered(store, 0, 20)
    await store.flush()
    image = crash_image(store, stores)
    last, size = offsets[-1], store.reader.view_message(offsets[-1]).store_size
    path = segment_file(store, stores.base / image, last)
    cut = last % store.settings.commitlog_segment_bytes + size // 2
    if how == "cut the file":
        os.truncate(path, cut)
    else:
        with open(path, "r+b") as f:
            f.seek(cut)
            f.write(bytes(size - size // 2))

    crashed = await stores.open(image)
    assert crashed.recovered_from_crash
    assert crashed.commitlog.max_offset == last
    assert bodies(crashed) == [b"m%d" % i for i in range(19)]
    with pytest.raises(TxmqError) as info:
        crashed.reader.view_message(last)
    assert info.value.code == errors_pb2.CODE_MESSAGE_NOT_FOUND
    assert crashed.query_messages(topic="TopicA", key="k19") == []
    (r,) = await crashed.send([msg(b"new", queue_id=0)])
    assert (r.commit_log_offset, r.queue_offset) == (last, 19)
    assert bodies(crashed)[-1] == b"new"


async def test_flipped_byte_is_quarantined_and_the_records_after_it_kept(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    offsets = await send_numbered(store, 0, 10)
    await store.close()
    stores.opened.remove(store)
    # A clean shutdown, then bit rot in the 7th record's body.
    path = segment_file(store, Path(store.settings.data_dir), offsets[6])
    with open(path, "r+b") as f:
        f.seek(offsets[6] + 120)
        b = f.read(1)
        f.seek(offsets[6] + 120)
        f.write(bytes([b[0] ^ 1]))

    store = await stores.open()
    assert not store.recovered_from_crash
    assert store.commitlog.max_offset == offsets[9] + store.reader.view_message(offsets[9]).store_size
    r = store.reader.get_message(topic="TopicA", queue_id=0, offset=0)  # the intact ones before it
    assert ([m.body for m in r.messages], r.next_begin_offset) == ([b"m%d" % i for i in range(6)], 6)
    with pytest.raises(TxmqError) as info:
        store.reader.get_message(topic="TopicA", queue_id=0, offset=6)
    assert info.value.code == errors_pb2.CODE_DATA_CORRUPTED
    assert info.value.metadata["next_offset"] == "7"
    r = store.reader.get_message(topic="TopicA", queue_id=0, offset=7)
    assert [m.body for m in r.messages] == [b"m7", b"m8", b"m9"]
    # The next start keeps them too, and new sends continue the queue.
    await store.close()
    stores.opened.remove(store)
    store = await stores.open()
    assert [m.body for m in store.reader.get_message(topic="TopicA", queue_id=0, offset=7).messages] == [
        b"m7",
        b"m8",
        b"m9",
    ]
    (r2,) = await store.send([msg(b"m10", queue_id=0)])
    assert r2.queue_offset == 10


async def test_rebuild_queues_and_index_from_the_commit_log(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=3, write_queue_nums=3)
    store.create_topic("TopicB", read_queue_nums=1, write_queue_nums=1)
    for q in range(3):
        await store.send([msg(b"a%d-%d" % (q, i), queue_id=q, keys=(f"a{q}",)) for i in range(40)])
    await store.send([msg(b"b%d" % i, topic="TopicB", tags="T%d" % (i % 2)) for i in range(30)])
    expected = {q: bodies(store, q) for q in range(3)}
    unique = (await store.send([msg(b"u", topic="TopicB", unique_id="UID-X")]))[0]
    await store.close()
    stores.opened.remove(store)
    root = Path(store.settings.data_dir)

    for doomed in ("consumequeue", "index", "checkpoint"):
        path = root / doomed
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        store = await stores.open()
        assert {q: bodies(store, q) for q in range(3)} == expected
        assert bodies(store, 0, "TopicB")[-1] == b"u"
        assert len(store.query_messages(topic="TopicA", key="a1", max_results=100)) == 40
        (found,) = store.query_messages(unique_id="UID-X")
        assert found.commit_log_offset == unique.commit_log_offset
        (r,) = await store.send([msg(b"more", queue_id=2)])
        assert r.queue_offset == len(expected[2])
        expected[2].append(b"more")
        await store.close()
        stores.opened.remove(store)


async def test_deleted_topic_is_not_resurrected(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.flush()
    await send_numbered(store, 0, 5)
    store.admin.delete_topic("TopicA")
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"new life", queue_id=0)])
    image = crash_image(store, stores)  # the old records lie after the checkpoint

    crashed = await stores.open(image)
    assert bodies(crashed) == [b"new life"]
    assert crashed.query_messages(topic="TopicA", key="k1") == []
    await crashed.close()
    stores.opened.remove(crashed)
    shutil.rmtree(stores.base / image / "consumequeue")
    rebuilt = await stores.open(image)
    assert bodies(rebuilt) == [b"new life"]


async def test_transaction_types_in_queues_and_index(store: MessageStore) -> None:
    results = await store.send(
        [
            msg(b"prepared", queue_id=0, unique_id="P", sys_flag=TRANSACTION_PREPARED_TYPE),
            msg(b"rolled back", queue_id=0, unique_id="R", sys_flag=TRANSACTION_ROLLBACK_TYPE),
            msg(b"normal", queue_id=0, unique_id="N"),
        ],
        system=True,
    )
    assert [r.queue_offset for r in results] == [0, 0, 0]
    assert bodies(store) == [b"normal"]  # only NOT_TYPE / COMMIT_TYPE reach a queue
    assert [m.body for m in store.query_messages(unique_id="P")] == [b"prepared"]
    assert store.query_messages(unique_id="R") == []  # rolled back: not indexed


async def test_a_second_process_cannot_open_the_directory(stores: StoreFactory) -> None:
    await stores.open()
    with pytest.raises(RuntimeError, match="in use"):
        await stores.open()


async def test_sync_mode_crash_keeps_every_acknowledged_message(stores: StoreFactory) -> None:
    store = await stores.open(flush_mode="sync")
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.flush()
    for i in range(0, 200, 20):
        await send_numbered(store, i, i + 20)
    image = crash_image(store, stores)

    crashed = await stores.open(image, flush_mode="sync")
    assert crashed.recovered_from_crash
    assert bodies(crashed) == [b"m%d" % i for i in range(200)]
    (r,) = await crashed.send([msg(b"next", queue_id=0)])
    assert r.queue_offset == 200


async def test_offset_msg_ids_survive_a_new_address(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    (old,) = await store.send([msg(b"before")])
    store.set_advertised_address("10.0.0.7:9999")
    (new,) = await store.send([msg(b"after")])
    assert new.offset_msg_id.startswith("0A000007")
    # An id names the host that stored the message, as RocketMQ's does.
    assert store.reader.view_message_by_id(old.offset_msg_id).body == b"before"
    assert store.reader.view_message_by_id(new.offset_msg_id).store_port == 9999
    forged = old.offset_msg_id[:8] + "00000001" + old.offset_msg_id[16:]  # other port, same offset
    with pytest.raises(TxmqError) as info:
        store.reader.view_message_by_id(forged)
    assert info.value.code == errors_pb2.CODE_MESSAGE_NOT_FOUND
