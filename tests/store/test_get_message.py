"""get_message: RocketMQ's statuses, next-offset rules, batch limits and filters."""

from __future__ import annotations

import pytest

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
from txmq_runtime.tags import parse_tag_expression
from txmq_store.filters import FilterType, MessageFilter, build_message_filter
from txmq_store.message_store import MessageStore
from txmq_store.model import GetMessageStatus as S

from .conftest import FakeClock, StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def fill(store: MessageStore, n: int, *, queue_id: int = 0, body: bytes = b"x" * 100, **kw: object) -> None:
    await store.send([msg(body, queue_id=queue_id, **kw) for _ in range(n)])


def get(store: MessageStore, offset: int, **kw: object):  # type: ignore[no-untyped-def]
    return store.reader.get_message(
        topic=kw.pop("topic", "TopicA"), queue_id=kw.pop("queue_id", 0), offset=offset, **kw
    )  # type: ignore[arg-type]


async def test_statuses_and_next_offsets(store: MessageStore) -> None:
    r = get(store, 3, topic="Unknown")
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_LOGIC_QUEUE, 0)
    r = get(store, 5)  # known topic, nothing written yet
    assert (r.status, r.next_begin_offset, r.max_offset) == (S.NO_MESSAGE_IN_QUEUE, 0, 0)
    await fill(store, 5)
    r = get(store, 0, max_messages=2)
    assert (r.status, r.next_begin_offset, len(r.messages)) == (S.FOUND, 2, 2)
    assert [m.queue_offset for m in r.messages] == [0, 1]
    r = get(store, 5)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (S.OFFSET_OVERFLOW_ONE, 5, 0, 5)
    r = get(store, 9)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 0)  # min == 0: back to min
    r = get(store, 4)
    assert (r.status, r.next_begin_offset, len(r.messages)) == (S.FOUND, 5, 1)


async def test_bad_requests(store: MessageStore) -> None:
    for kw, code in (
        (dict(offset=-1), errors_pb2.CODE_ILLEGAL_OFFSET),
        (dict(offset=0, queue_id=4), errors_pb2.CODE_ILLEGAL_QUEUE_ID),
        (dict(offset=0, queue_id=-1), errors_pb2.CODE_ILLEGAL_QUEUE_ID),
        (dict(offset=0, max_messages=-1), errors_pb2.CODE_ILLEGAL_ARGUMENT),
    ):
        with pytest.raises(TxmqError) as info:
            get(store, **kw)  # type: ignore[arg-type]
        assert info.value.code == code


async def test_tag_filter_and_scan_window(stores: StoreFactory) -> None:
    store = await stores.open(consume_queue_units_per_file=2000)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await fill(store, 1000, tags="TagB", body=b"b")
    await fill(store, 1, tags="TagA", body=b"a")
    tag_a = MessageFilter(tags=parse_tag_expression("TagA"))
    # At most max(16000 bytes, 32 * 20) of consume queue = 800 units per read.
    r = get(store, 0, message_filter=tag_a)
    assert (r.status, r.next_begin_offset, r.messages) == (S.NO_MATCHED_MESSAGE, 800, [])
    r = get(store, 800, message_filter=tag_a)
    assert (r.status, r.next_begin_offset, [m.body for m in r.messages]) == (S.FOUND, 1001, [b"a"])
    # A bigger max_messages widens the window to max_messages * 20 bytes.
    r = get(store, 0, message_filter=tag_a, max_messages=1000)
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 1000)
    r = get(store, 0, message_filter=tag_a, max_messages=1001)
    assert (r.status, r.next_begin_offset) == (S.FOUND, 1001)
    both = build_message_filter(FilterType.TAG, "TagA || TagB", property_filter_enable=True)
    r = get(store, 998, message_filter=both)
    assert [m.tags for m in r.messages] == ["TagB", "TagB", "TagA"]


async def test_read_stops_at_consume_queue_file_end(store: MessageStore) -> None:
    await fill(store, 70)  # 64 units per file in the test settings
    r = get(store, 60, max_messages=32)
    assert (r.status, len(r.messages), r.next_begin_offset) == (S.FOUND, 4, 64)


async def test_sql92_filter(store: MessageStore) -> None:
    await store.send([msg(b"%d" % i, queue_id=0, properties={"n": str(i)}) for i in range(10)])
    f = build_message_filter(FilterType.SQL92, "n >= 7", property_filter_enable=True)
    r = get(store, 0, message_filter=f)
    assert (r.status, [m.body for m in r.messages], r.next_begin_offset) == (S.FOUND, [b"7", b"8", b"9"], 10)
    f = build_message_filter(FilterType.SQL92, "TAGS IS NOT NULL", property_filter_enable=True)
    assert get(store, 0, message_filter=f).status == S.NO_MATCHED_MESSAGE
    with pytest.raises(TxmqError) as info:
        build_message_filter(FilterType.SQL92, "n >= 7", property_filter_enable=False)
    assert info.value.code == errors_pb2.CODE_SQL92_NOT_ENABLED
    with pytest.raises(TxmqError) as info:
        build_message_filter(FilterType.TAG, " || ", property_filter_enable=True)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION
    assert build_message_filter(FilterType.TAG, "*", property_filter_enable=True) is None


async def test_batch_limits_in_memory(stores: StoreFactory) -> None:
    store = await stores.open(max_transfer_bytes_in_memory=1000, max_transfer_count_in_memory=5)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await fill(store, 20, body=b"m" * 150)
    r = get(store, 0)
    size = r.messages[0].store_size
    assert 3 * size <= 1000 < 4 * size
    assert (len(r.messages), r.next_begin_offset, r.suggest_pulling_from_replica) == (3, 3, False)
    store2 = await stores.open("count", max_transfer_count_in_memory=5)
    store2.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await fill(store2, 20, body=b"m")
    r = get(store2, 0)
    assert (len(r.messages), r.next_begin_offset) == (5, 5)
    r = get(store2, 0, max_messages=2)
    assert (len(r.messages), r.next_begin_offset) == (2, 2)


async def test_batch_limits_on_disk(stores: StoreFactory) -> None:
    # A 0-byte memory window: everything behind the write position counts as on disk.
    store = await stores.open(physical_memory_bytes=1, max_transfer_bytes_on_disk=10_000)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await fill(store, 20, body=b"d")
    r = get(store, 0)
    assert (len(r.messages), r.next_begin_offset, r.suggest_pulling_from_replica) == (8, 8, True)
    store2 = await stores.open("bytes", physical_memory_bytes=1, max_transfer_bytes_on_disk=700)
    store2.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    await fill(store2, 20, body=b"d" * 200)
    r = get(store2, 0)
    size = r.messages[0].store_size
    assert 1 * size <= 700 < 2 * size
    assert (len(r.messages), r.next_begin_offset) == (1, 1)


async def test_offset_too_small_after_expiry(stores: StoreFactory, clock: FakeClock) -> None:
    store = await stores.open(file_reserved_time_ms=1000)
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    for _ in range(4):  # ~4 segments of 64 KiB
        await fill(store, 60, body=b"z" * 1000)
    await store.flush()
    segments = store.commitlog.segment_count
    assert await store.clean_expired_files() == 0  # nothing older than 1 s yet
    clock.advance(1001)
    assert await store.clean_expired_files() == segments - 1  # all but the one being written
    lo = store.commitlog.min_offset
    r = get(store, 0)
    assert r.status == S.OFFSET_TOO_SMALL and r.next_begin_offset == r.min_offset > 0
    first = get(store, r.min_offset, max_messages=1).messages[0]
    assert first.commit_log_offset >= lo
    r = get(store, r.max_offset + 5)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, r.max_offset)  # min > 0: to max


async def test_message_was_removing(store: MessageStore) -> None:
    await fill(store, 30, queue_id=0, body=b"r" * 1000)  # queue 0 fills the first segment
    await fill(store, 200, queue_id=1, body=b"s" * 1000)  # queue 1 the next ones
    await store.flush()
    seg_end = store.commitlog.segments()[0].end
    assert get(store, 0, queue_id=0).messages[-1].commit_log_offset < seg_end
    # The segment goes away before the consume queue is corrected (the window in which
    # RocketMQ answers MESSAGE_WAS_REMOVING).
    assert store.commitlog.delete_segments(expired_before_ms=store.now_ms() + 1, keep_from=seg_end) == 1
    r = get(store, 0, queue_id=0)
    assert (r.status, r.next_begin_offset, r.messages) == (S.MESSAGE_WAS_REMOVING, 30, [])


async def test_offset_found_null(store: MessageStore) -> None:
    await fill(store, 70)
    cq = store._dispatcher.consume_queue("TopicA", 0)
    assert cq is not None
    cq._drop(cq._files[0])  # its first file vanished, min not yet corrected
    r = get(store, 10)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_FOUND_NULL, 64)
