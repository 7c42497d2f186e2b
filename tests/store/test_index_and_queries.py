"""The key/unique-id index, queries, queue offsets, offset search, consume offsets and
arrival watchers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
from txmq_store.index import IndexService, key_hash
from txmq_store.message_store import MessageStore

from .conftest import FakeClock, StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_lookups_verify_keys_despite_collisions(stores: StoreFactory) -> None:
    store = await stores.open(index_slots_per_file=1)  # every key in one chain
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await store.send([msg(b"%d" % i, keys=(f"key{i % 7}",)) for i in range(100)])
    found = store.query_messages(topic="TopicA", key="key3", max_results=100)
    assert [m.body for m in found] == [b"%d" % i for i in range(3, 100, 7)]
    assert store.query_messages(topic="TopicB", key="key3") == []


async def test_queries_across_index_files_and_time(stores: StoreFactory, clock: FakeClock) -> None:
    store = await stores.open(index_entries_per_file=50)
    store.create_topic("TopicA", read_queue_nums=2, write_queue_nums=2)
    for i in range(300):
        await store.send([msg(b"%d" % i, keys=("same",), unique_id=f"U{i}")])
        clock.advance(1000)
    assert len(list((Path(store.settings.data_dir) / "index").iterdir())) >= 12
    found = store.query_messages(topic="TopicA", key="same", max_results=1000)
    assert [m.body for m in found] == [b"%d" % i for i in range(300)]
    newest = store.query_messages(topic="TopicA", key="same", max_results=3)
    assert [m.body for m in newest] == [b"297", b"298", b"299"]
    t0 = found[0].store_timestamp_ms
    window = store.query_messages(
        topic="TopicA", key="same", begin_timestamp_ms=t0 + 10_000, end_timestamp_ms=t0 + 12_000
    )
    assert [m.body for m in window] == [b"10", b"11", b"12"]
    (u,) = store.query_messages(unique_id="U42")
    assert u.body == b"42"
    assert [m.body for m in store.query_messages(unique_id="U42", topic="TopicA")] == [b"42"]
    assert store.query_messages(unique_id="U42", topic="Other") == []
    for kw in (dict(key="k"), dict(), dict(topic="TopicA", key="k", unique_id="u")):
        with pytest.raises(TxmqError):
            store.query_messages(**kw)  # type: ignore[arg-type]


async def test_half_message_found_by_unique_id_and_real_topic(store: MessageStore) -> None:
    (half,) = await store.send([msg(b"tx", unique_id="TX-1")], transaction_prepared=True, producer_group="pg")
    (found,) = store.query_messages(unique_id="TX-1", topic="TopicA")
    assert found.commit_log_offset == half.commit_log_offset and found.topic == "RMQ_SYS_TRANS_HALF_TOPIC"


async def test_index_repair_keeps_the_durable_prefix(tmp_path: Path) -> None:
    index = IndexService.load(tmp_path, slots=4, capacity=1000)
    index.put([(key_hash(f"k{off % 30}"), off, 1_000 + off) for off in range(0, 1000, 10)])
    index.take_dirty()  # writes the header, as a checkpoint does
    index.repair(500)
    got = {k: sorted(index.lookup(key_hash(f"k{k}"), begin_ms=0, end_ms=10**12)) for k in (0, 10, 20)}
    assert got == {k: [o for o in range(0, 500, 10) if o % 30 == k] for k in (0, 10, 20)}
    index.put([(key_hash("k0"), 500, 1_500)])  # appends continue after the cut
    assert sorted(index.lookup(key_hash("k0"), begin_ms=0, end_ms=10**12))[-2:] == [480, 500]
    index.close()
    assert key_hash("") != 0


async def test_queue_offsets_and_search_by_time(store: MessageStore, clock: FakeClock) -> None:
    stamps = []
    for i in range(10):
        await store.send([msg(b"%d" % i, queue_id=1)])
        stamps.append(clock())
        clock.advance(100)
    (q,) = store.queue_offsets("TopicA", 1)
    assert (q.queue_id, q.min_offset, q.max_offset, q.last_store_timestamp_ms) == (1, 0, 10, stamps[-1])
    assert store.reader.search_offset("TopicA", 1, stamps[3]) == 3
    assert store.reader.search_offset("TopicA", 1, stamps[3] + 1) == 4
    assert store.reader.search_offset("TopicA", 1, 0) == 0
    assert store.reader.search_offset("TopicA", 1, stamps[-1] + 1) == 10
    assert store.reader.search_offset("TopicA", 0, 0) == 0
    for call, code in (
        (lambda: store.queue_offsets("Nope"), errors_pb2.CODE_TOPIC_NOT_FOUND),
        (lambda: store.queue_offsets("TopicA", 4), errors_pb2.CODE_ILLEGAL_QUEUE_ID),
        (lambda: store.reader.search_offset("bad topic", 0, 0), errors_pb2.CODE_ILLEGAL_TOPIC),
    ):
        with pytest.raises(TxmqError) as info:
            call()
        assert info.value.code == code


async def test_consume_offsets(stores: StoreFactory, clock: FakeClock) -> None:
    store = await stores.open(auto_create_subscription_group=False)
    store.create_topic("TopicA", read_queue_nums=2, write_queue_nums=2)
    with pytest.raises(TxmqError) as info:
        store.commit_consume_offset(group="cg", topic="TopicA", queue_id=0, offset=1)
    assert info.value.code == errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND
    # The transaction service's group is built in.
    store.commit_consume_offset(group="CID_SYS_RMQ_TRANS", topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0, offset=4)
    for kw, code in (
        (dict(group="", topic="TopicA", queue_id=0, offset=1), errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP),
        (dict(group="CID_SYS_RMQ_TRANS", topic="Nope", queue_id=0, offset=1), errors_pb2.CODE_TOPIC_NOT_FOUND),
        (dict(group="CID_SYS_RMQ_TRANS", topic="TopicA", queue_id=2, offset=1), errors_pb2.CODE_ILLEGAL_QUEUE_ID),
    ):
        with pytest.raises(TxmqError) as info:
            store.commit_consume_offset(**kw)  # type: ignore[arg-type]
        assert info.value.code == code
    rows = store.admin.list_consume_offsets(group="CID_SYS_RMQ_TRANS")
    assert [(r.topic, r.offset, r.updated_at_ms) for r in rows] == [("RMQ_SYS_TRANS_HALF_TOPIC", 4, clock())]
    await store.admin.persist_offsets()
    store.admin.delete_topic("TopicA")
    with pytest.raises(TxmqError) as info:
        store.admin.delete_subscription_group("CID_SYS_RMQ_TRANS")
    assert info.value.code == errors_pb2.CODE_FORBIDDEN


async def test_arrival_watchers(stores: StoreFactory) -> None:
    store = await stores.open(arrival_watcher_buffer=5)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    store.create_topic("TopicB", read_queue_nums=1, write_queue_nums=1)
    with store.reader.watch_arrivals(["TopicA"]) as only_a, store.reader.watch_arrivals() as everything:
        await store.send([msg(b"a", properties={"x": "1"}), msg(b"b", topic="TopicB")])
        batch = await only_a.next_batch()
        assert batch is not None and not batch.overflowed
        (a,) = batch.arrivals
        assert (a.topic, a.queue_offset, a.max_offset, a.properties["x"]) == ("TopicA", 0, 1, "1")
        batch = await everything.next_batch()
        assert batch is not None and [x.topic for x in batch.arrivals] == ["TopicA", "TopicB"]
        # A watcher that falls behind is told so once, instead of blocking the store.
        await store.send([msg(b"%d" % i) for i in range(6)])
        await store.send([msg(b"late")])
        batch = await only_a.next_batch()
        assert batch is not None and batch.overflowed and batch.arrivals == []
        await store.send([msg(b"after")])
        batch = await only_a.next_batch()
        assert batch is not None and not batch.overflowed and [x.queue_offset for x in batch.arrivals] == [8]
        batch = await everything.next_batch()
        assert batch is not None and batch.overflowed and batch.arrivals == []
        waiting = asyncio.create_task(everything.next_batch())
        await asyncio.sleep(0)
        assert not waiting.done()
        await store.close()
        stores.opened.remove(store)
        assert await waiting is None  # the stream ends with the store
