"""A follower dispatches the records it copies from their bytes (``walk_records`` ->
``Dispatcher.dispatch_held``), without decoding messages: its consume queues, index and
arrivals must be what the leader's own dispatch made of the same records — tags, keys,
unique ids, half and rolled-back records, timer records, a deposed leader's held ones."""

from __future__ import annotations

import asyncio
import dataclasses

from txmq_store.arrivals import Arrival, ArrivalWatcher
from txmq_store.codec import held_record, walk_records
from txmq_store.message_store import MessageStore
from txmq_store.replication import ship_span

from .conftest import StoreFactory, msg


def _messages() -> list:
    return [
        msg(b"a", topic="T", tags="TagA", keys=("k1", "k2")),
        msg(b"b", topic="T"),
        msg(b"c", topic="T", tags="Täg", keys=("ключ",), properties={"color": "red", "ünï": "välue"}),
        msg(b"d", topic="T2", keys=("k1",), properties={"TIMER_DELAY_SEC": "30"}),
        msg(b"f", topic="T2", tags="x", queue_id=1),
    ]


async def _copy(leader: MessageStore, follower: MessageStore) -> None:
    pos = follower.commitlog.write_offset
    while pos < leader.commitlog.write_offset:
        seg_end = leader.commitlog.roll_next_file(pos)
        data = leader.commitlog.read(pos, min(seg_end, leader.commitlog.write_offset) - pos) or b""
        n = ship_span(data, pos, seg_end)
        follower.replica.copy_shipment(pos, data[:n])  # type: ignore[union-attr]
        pos += n


def _queues(store: MessageStore) -> dict:
    return {
        key: [cq.unit(i) for i in range(cq.min_offset, cq.max_offset)] for key, cq in store._dispatcher.queues.items()
    }


def _index(store: MessageStore, hashes: set[int]) -> dict:
    return {h: sorted(store._dispatcher.index.lookup(h, begin_ms=0, end_ms=2**62)) for h in hashes}


async def _drain(watcher: ArrivalWatcher) -> list[Arrival]:
    """What the watcher got (the leader's records attached left out)."""
    out: list[Arrival] = []
    while True:
        try:
            batch = await asyncio.wait_for(watcher.next_batch(), 0.2)
        except TimeoutError:
            return out
        assert batch is not None and not batch.overflowed
        out += [dataclasses.replace(a, record=b"", properties=dict(a.properties)) for a in batch.arrivals]


async def test_a_follower_dispatches_what_the_leader_dispatched(stores: StoreFactory):
    leader = await stores.open("leader", replica_id="a")
    follower = await stores.open("follower", replica_id="b")
    assert leader.replica is not None and follower.replica is not None
    leader.replica.become_leader(epoch=1, in_sync=frozenset("a"), min_in_sync=1)
    for topic in ("T", "T2"):
        leader.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    with leader._hub.watch() as lw, follower._hub.watch() as fw:
        for _ in range(3):
            await leader.send(_messages())
            await leader.send([msg(b"half", topic="T", keys=("h",))], producer_group="G", transaction_prepared=True)
        await _copy(leader, follower)
        assert follower._dispatcher.dispatched_offset == 0  # nothing below the high watermark yet
        follower.replica.set_follower_high_watermark(leader.commitlog.write_offset)
        led, copied = await _drain(lw), await _drain(fw)
    assert follower._dispatcher.dispatched_offset == leader._dispatcher.dispatched_offset
    assert _queues(follower) == _queues(leader)
    assert any(key[0] != "T" and key[0] != "T2" for key in _queues(leader))  # the timer's queue too
    records = walk_records(leader.commitlog.read(0, leader.commitlog.write_offset) or b"", 0, 1 << 40)
    hashes = {h for rec in records for h, _, _ in _entries(rec)}
    assert _index(follower, hashes) == _index(leader, hashes)

    assert copied == led and len(copied) == 3 * 6  # and the half messages' queue


async def test_held_records_from_decoded_messages_are_the_walked_ones(stores: StoreFactory):
    """Recovery and a deposed leader hold decoded messages: converted, they are what the
    walk reads off the same bytes (the properties text aside, whose order may differ)."""
    store = await stores.open("leader", replica_id="a")
    assert store.replica is not None
    store.replica.become_leader(epoch=1, in_sync=frozenset("a"), min_in_sync=1)
    for topic in ("T", "T2"):
        store.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    await store.send(_messages())
    data = store.commitlog.read(0, store.commitlog.write_offset) or b""
    for rec in walk_records(data, 0, 1 << 40):
        converted = held_record(store.reader.view_message(rec.commit_log_offset))
        assert converted._replace(properties_text="") == rec._replace(properties_text="")
        assert sorted(converted.properties_text.split("\x02")) == sorted(rec.properties_text.split("\x02"))


def _entries(rec) -> list[tuple[int, int, int]]:
    from txmq_store.index import message_key_hash, unique_id_hash

    keys = rec.keys_text.split(" ") if rec.keys_text else []
    return [(unique_id_hash(rec.unique_id), 0, 0), *((message_key_hash(rec.topic, k), 0, 0) for k in keys)]
