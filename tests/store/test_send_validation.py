"""Every send validation rule: the right code, the offending index, and a store left
exactly as it was."""

from __future__ import annotations

from typing import Any

import pytest

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2 as E
from txmq_store.message_store import MessageStore
from txmq_store.model import OutgoingMessage

from .conftest import StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")


def snapshot(store: MessageStore) -> tuple[Any, ...]:
    return (
        store.commitlog.max_offset,
        [(q.queue_id, q.max_offset) for q in store.queue_offsets("TopicA")],
        [t.name for t in store.admin.topic_configs()],
        dict(store._queues._offsets),
    )


async def expect_rejected(store: MessageStore, messages: list[OutgoingMessage], code: int, **kw: Any) -> TxmqError:
    before = snapshot(store)
    with pytest.raises(TxmqError) as info:
        await store.send(messages, **kw)
    assert info.value.code == code, info.value
    assert snapshot(store) == before
    return info.value


CASES = [
    ("empty topic", msg(topic=""), E.CODE_ILLEGAL_TOPIC),
    ("bad characters", msg(topic="a/b"), E.CODE_ILLEGAL_TOPIC),
    ("too long", msg(topic="t" * 128), E.CODE_ILLEGAL_TOPIC),
    ("system prefix", msg(topic="RMQ_SYS_TRANS_HALF_TOPIC"), E.CODE_SYSTEM_TOPIC),
    ("check max time topic", msg(topic="TRANS_CHECK_MAX_TIME_TOPIC"), E.CODE_SYSTEM_TOPIC),
    ("unknown system topic", msg(topic="RMQ_SYS_OTHER"), E.CODE_SYSTEM_TOPIC),
    ("unknown topic", msg(topic="Nope"), E.CODE_TOPIC_NOT_FOUND),
    ("queue id too big", msg(queue_id=4), E.CODE_ILLEGAL_QUEUE_ID),
    ("negative queue id", msg(queue_id=-1), E.CODE_ILLEGAL_QUEUE_ID),
    ("empty body", msg(b""), E.CODE_ILLEGAL_MESSAGE),
    ("body too large", msg(b"x" * 4097), E.CODE_MESSAGE_BODY_TOO_LARGE),
    ("properties too large", msg(properties={"p": "v" * 600}), E.CODE_MESSAGE_PROPERTIES_TOO_LARGE),
    ("separator in value", msg(properties={"p": "a\x01b"}), E.CODE_ILLEGAL_MESSAGE),
    ("separator in name", msg(properties={"p\x02": "v"}), E.CODE_ILLEGAL_MESSAGE),
    ("separator in tag", msg(tags="a\x02"), E.CODE_ILLEGAL_MESSAGE),
    ("separator in unique id", msg(unique_id="u\x01"), E.CODE_ILLEGAL_MESSAGE),
    ("space in key", msg(keys=("a b",)), E.CODE_ILLEGAL_MESSAGE),
    ("empty key", msg(keys=("",)), E.CODE_ILLEGAL_MESSAGE),
    ("reserved property", msg(properties={"TAGS": "x"}), E.CODE_ILLEGAL_MESSAGE),
    ("system-only property", msg(properties={"TRANSACTION_CHECK_TIMES": "0"}), E.CODE_ILLEGAL_MESSAGE),
    ("empty property name", msg(properties={"": "x"}), E.CODE_ILLEGAL_MESSAGE),
    ("flag beyond int32", msg(flag=2**31), E.CODE_ILLEGAL_MESSAGE),
]


@pytest.fixture
async def strict(stores: StoreFactory) -> MessageStore:
    store = await stores.open(max_message_body_bytes=4096, max_properties_bytes=600, max_batch_messages=10,
                              max_batch_bytes=20_000)  # fmt: skip
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    store.create_topic("ReadOnly", read_queue_nums=1, write_queue_nums=1, perm=4)
    await store.send([msg(b"existing", queue_id=i) for i in range(4)])
    return store


@pytest.mark.parametrize("name,bad,code", CASES, ids=[c[0] for c in CASES])
async def test_bad_message_in_a_batch(strict: MessageStore, name: str, bad: OutgoingMessage, code: int) -> None:
    err = await expect_rejected(strict, [msg(b"good"), msg(b"good"), bad], code)
    assert err.metadata["index"] == "2"


async def test_topic_rules(strict: MessageStore) -> None:
    await expect_rejected(strict, [msg(topic="ReadOnly")], E.CODE_TOPIC_NOT_WRITABLE)


async def test_record_must_fit_a_segment(stores: StoreFactory) -> None:
    store = await stores.open(commitlog_segment_bytes=64 * 1024)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    await expect_rejected(store, [msg(b"x" * (64 * 1024))], E.CODE_MESSAGE_BODY_TOO_LARGE)


async def test_batch_rules(strict: MessageStore) -> None:
    await expect_rejected(strict, [], E.CODE_ILLEGAL_ARGUMENT)
    await expect_rejected(strict, [msg()] * 11, E.CODE_BATCH_TOO_LARGE)
    await expect_rejected(strict, [msg(b"x" * 4000)] * 6, E.CODE_BATCH_TOO_LARGE)


async def test_half_message_rules(stores: StoreFactory) -> None:
    store = await stores.open(transaction_message_enable=False)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    await expect_rejected(
        store, [msg()], E.CODE_TRANSACTION_NOT_ALLOWED, transaction_prepared=True, producer_group="pg"
    )
    store = await stores.open("tx")
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    await expect_rejected(store, [msg()], E.CODE_ILLEGAL_PRODUCER_GROUP, transaction_prepared=True)
    await expect_rejected(
        store, [msg()], E.CODE_ILLEGAL_PRODUCER_GROUP, transaction_prepared=True, producer_group="a b"
    )
    await expect_rejected(
        store, [msg(queue_id=7)], E.CODE_ILLEGAL_QUEUE_ID, transaction_prepared=True, producer_group="pg"
    )


async def test_auto_create_happens_only_for_valid_batches(stores: StoreFactory) -> None:
    store = await stores.open(auto_create_topic_enable=True, default_topic_queue_nums=3)
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    changes: list[int] = []
    store.admin.add_topic_listener(lambda: changes.append(1))
    await expect_rejected(store, [msg(topic="Fresh"), msg(b"")], E.CODE_ILLEGAL_MESSAGE)
    assert changes == []
    results = await store.send([msg(topic="Fresh"), msg(topic="Fresh"), msg(topic="Fresh"), msg(topic="Fresh")])
    cfg = store.admin.get_topic("Fresh")
    assert (cfg.read_queue_nums, cfg.write_queue_nums) == (3, 3) and changes == [1]
    first = results[0].queue_id
    assert [(r.queue_id - first) % 3 for r in results] == [0, 1, 2, 0]  # round robin over write queues
    await expect_rejected(store, [msg(topic="RMQ_SYS_NEW")], E.CODE_SYSTEM_TOPIC)


async def test_system_sends_may_write_system_topics(strict: MessageStore) -> None:
    (r,) = await strict.send(
        [msg(b"op", topic="RMQ_SYS_TRANS_OP_HALF_TOPIC", tags="d", properties={"TRANSACTION_CHECK_TIMES": "2"})],
        system=True,
    )
    assert (r.topic, r.queue_id, r.queue_offset) == ("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, 0)
    assert strict.reader.view_message(r.commit_log_offset).properties == {"TRANSACTION_CHECK_TIMES": "2"}
