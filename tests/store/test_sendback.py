"""SendBack (services/store/txmq_store/sendback.py): a failed message copied to
%RETRY%<group> with a delay level, or past the limit to %DLQ%<group>; the count is the
stored record's; uncounted send-backs; idempotence (also after a restart); refusals.
Also the servicer on a real gRPC server."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from txmq.errors import TxmqError
from txmq.protocol import (
    PROPERTY_DELAY_LEVEL,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SENDBACK_OF,
    dlq_topic,
    retry_topic,
)
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc
from txmq_store.configs import SubscriptionGroupConfig
from txmq_store.message_store import MessageStore
from txmq_store.sendback import SendBack, retry_level

from .conftest import GrpcStore, StoreFactory, grpc_server_for, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")

GROUP = "CG_RETRY"
# 6 levels, each within the timer's 1 s precision: the copies are stored at once (the timer,
# which holds longer ones, is tested in test_timer.py / test_delayed.py).
LEVELS = "1s 1s 1s 1s 1s 1s"


async def _open(stores: StoreFactory, **overrides: object) -> MessageStore:
    store = await stores.open(message_delay_levels=LEVELS, **overrides)
    if not any(t.name == "TopicA" for t in store.admin.topic_configs()):
        store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    return store


async def _sent(store: MessageStore, **kw: object) -> tuple[int, str]:
    (r,) = await store.send(
        [msg(b"payload", tags="TagA", keys=("k1", "k2"), properties={"color": "red"}, unique_id="U-1", **kw)]
    )
    return r.commit_log_offset, r.msg_id


async def test_retry_level() -> None:
    assert retry_level(0, 0, 18) == 3  # the first retry: level 3 (10 s by default)
    assert retry_level(0, 2, 18) == 5
    assert retry_level(0, 40, 18) == 18  # capped at the last level
    assert retry_level(2, 7, 18) == 2  # the caller's level wins


async def test_first_send_back_goes_to_the_retry_topic(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    core = SendBack(store)
    out = await core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid)
    assert not out.dead_lettered and not out.duplicate
    assert out.reconsume_times == 1
    assert out.result.topic == retry_topic(GROUP)
    copy = store.reader.view_message(out.result.commit_log_offset)
    assert copy.topic == retry_topic(GROUP)
    assert (copy.body, copy.tags, copy.keys, copy.unique_id) == (b"payload", "TagA", ("k1", "k2"), uid)
    assert copy.properties["color"] == "red"
    assert copy.reconsume_times == 1
    assert copy.properties[PROPERTY_RETRY_TOPIC] == "TopicA"
    assert copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] == uid
    assert copy.properties[PROPERTY_DELAY_LEVEL] == "3"
    assert copy.properties[PROPERTY_SENDBACK_OF] == f"{GROUP}@{offset}"
    # the group was created (auto_create_subscription_group), the retry topic with its queues
    assert store.admin.get_subscription_group(GROUP).retry_queue_nums == 1
    assert store.admin.get_topic(retry_topic(GROUP)).read_queue_nums == 1


async def test_counts_come_from_the_stored_record_until_the_dead_letter_topic(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    core = SendBack(store)
    seen = []
    for _ in range(4):
        out = await core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid, max_reconsume_times=3)
        seen.append((out.reconsume_times, out.dead_lettered))
        copy = store.reader.view_message(out.result.commit_log_offset)
        if not out.dead_lettered:
            assert copy.properties[PROPERTY_DELAY_LEVEL] == str(min(3 + out.reconsume_times - 1, 6))
        offset = out.result.commit_log_offset  # the consumer now fails the retry copy
    assert seen == [(1, False), (2, False), (3, False), (4, True)]
    dead = store.reader.view_message(offset)
    assert dead.topic == dlq_topic(GROUP)
    assert dead.properties[PROPERTY_DLQ_ORIGIN_TOPIC] == "TopicA"  # the first topic, not %RETRY%
    assert dead.properties[PROPERTY_RETRY_TOPIC] == "TopicA"
    assert PROPERTY_DELAY_LEVEL not in dead.properties
    assert dead.reconsume_times == 4 and dead.unique_id == uid
    assert store.admin.get_topic(dlq_topic(GROUP)).read_queue_nums == 1


async def test_the_groups_retry_max_times_is_the_default_limit(stores: StoreFactory) -> None:
    store = await _open(stores)
    store.admin.create_subscription_group(SubscriptionGroupConfig(GROUP, retry_max_times=0, retry_queue_nums=2))
    offset, uid = await _sent(store)
    out = await SendBack(store).send_back(group=GROUP, commit_log_offset=offset, unique_id=uid)
    assert out.dead_lettered and out.reconsume_times == 1


async def test_delay_level_minus_one_dead_letters_at_once(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    out = await SendBack(store).send_back(group=GROUP, commit_log_offset=offset, unique_id=uid, delay_level=-1)
    assert out.dead_lettered and out.result.topic == dlq_topic(GROUP)


async def test_explicit_level_and_retry_queue_nums(stores: StoreFactory) -> None:
    store = await _open(stores)
    store.admin.create_subscription_group(SubscriptionGroupConfig(GROUP, retry_queue_nums=3))
    offset, uid = await _sent(store)
    out = await SendBack(store).send_back(group=GROUP, commit_log_offset=offset, unique_id=uid, delay_level=6)
    assert store.reader.view_message(out.result.commit_log_offset).properties[PROPERTY_DELAY_LEVEL] == "6"
    assert store.admin.get_topic(retry_topic(GROUP)).write_queue_nums == 3


async def test_uncounted_keeps_the_count_and_never_dead_letters(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    core = SendBack(store)
    for _ in range(3):
        out = await core.send_back(
            group=GROUP, commit_log_offset=offset, unique_id=uid, max_reconsume_times=0, uncounted=True
        )
        assert not out.dead_lettered and out.reconsume_times == 0
        offset = out.result.commit_log_offset
    out = await core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid, max_reconsume_times=0)
    assert out.dead_lettered and out.reconsume_times == 1


async def test_same_record_twice_stores_one_copy(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    core = SendBack(store)
    first, again, concurrent = (
        await core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid),
        *(
            await asyncio.gather(
                core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid),
                core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid),
            )
        ),
    )
    assert not first.duplicate and again.duplicate and concurrent.duplicate
    assert again.result == first.result == concurrent.result
    assert [q.max_offset for q in store.queue_offsets(retry_topic(GROUP))] == [1]
    # another group sending the same record back gets its own copy
    other = await core.send_back(group="CG_OTHER", commit_log_offset=offset, unique_id=uid)
    assert not other.duplicate and other.result.topic == retry_topic("CG_OTHER")


async def test_concurrent_first_send_backs_store_one_copy(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    core = SendBack(store)
    outs = await asyncio.gather(
        *(core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid) for _ in range(3))
    )
    assert sum(not o.duplicate for o in outs) == 1
    assert len({o.result.commit_log_offset for o in outs}) == 1
    assert [q.max_offset for q in store.queue_offsets(retry_topic(GROUP))] == [1]


async def test_idempotent_after_a_restart(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    first = await SendBack(store).send_back(group=GROUP, commit_log_offset=offset, unique_id=uid)
    await store.close()
    stores.opened.remove(store)
    store = await _open(stores)
    again = await SendBack(store).send_back(group=GROUP, commit_log_offset=offset, unique_id=uid)
    assert again.duplicate
    assert again.result.commit_log_offset == first.result.commit_log_offset
    assert again.reconsume_times == 1 and not again.dead_lettered
    assert [q.max_offset for q in store.queue_offsets(retry_topic(GROUP))] == [1]


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("not_a_boundary", errors_pb2.CODE_MESSAGE_NOT_FOUND),
        ("wrong_id", errors_pb2.CODE_MESSAGE_NOT_FOUND),
        ("negative_offset", errors_pb2.CODE_ILLEGAL_OFFSET),
        ("empty_id", errors_pb2.CODE_ILLEGAL_ARGUMENT),
        ("bad_group", errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP),
        ("level_too_low", errors_pb2.CODE_ILLEGAL_ARGUMENT),
        ("unknown_level", errors_pb2.CODE_ILLEGAL_DELIVERY_TIME),
        ("negative_max", errors_pb2.CODE_ILLEGAL_ARGUMENT),
        ("no_group", errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND),
        ("half_message", errors_pb2.CODE_SYSTEM_TOPIC),
    ],
)
async def test_refusals_store_nothing(stores: StoreFactory, case: str, code: int) -> None:
    store = await _open(stores, auto_create_subscription_group=(case != "no_group"))
    offset, uid = await _sent(store)
    kw: dict[str, object] = dict(group=GROUP, commit_log_offset=offset, unique_id=uid)
    if case == "not_a_boundary":
        kw["commit_log_offset"] = offset + 1
    elif case == "wrong_id":
        kw["unique_id"] = "U-2"
    elif case == "negative_offset":
        kw["commit_log_offset"] = -1
    elif case == "empty_id":
        kw["unique_id"] = ""
    elif case == "bad_group":
        kw["group"] = "bad group!"
    elif case == "level_too_low":
        kw["delay_level"] = -2
    elif case == "unknown_level":
        kw["delay_level"] = 7
    elif case == "negative_max":
        kw["max_reconsume_times"] = -1
    elif case == "half_message":
        (half,) = await store.send([msg(b"h", unique_id="U-H")], producer_group="PG", transaction_prepared=True)
        kw.update(commit_log_offset=half.commit_log_offset, unique_id="U-H")
    end = store.commitlog.write_offset
    with pytest.raises(TxmqError) as exc:
        await SendBack(store).send_back(**kw)  # type: ignore[arg-type]
    assert exc.value.code == code
    assert store.commitlog.write_offset == end
    assert not any(t.name == retry_topic(GROUP) for t in store.admin.topic_configs())


async def test_servicer_send_back(stores: StoreFactory) -> None:
    store = await _open(stores)  # short levels: the copies are stored at once (not via the timer)
    async with grpc_server_for(store) as grpc_store:
        await _servicer_send_back(store, grpc_store)


async def _servicer_send_back(store: MessageStore, grpc_store: GrpcStore) -> None:
    offset, uid = await _sent(store)
    stub = store_pb2_grpc.ConsumerControlStub(grpc_store.channel)
    request = store_pb2.SendBackRequest(group=GROUP, commit_log_offset=offset, unique_id=uid, max_reconsume_times=1)
    first = await stub.SendBack(request)
    assert first.reconsume_times == 1 and not first.dead_lettered
    assert first.result.queue.topic == retry_topic(GROUP) and first.result.queue.store_id == store.store_id
    assert not first.result.duplicate
    again = await stub.SendBack(request)
    assert again.result.duplicate and again.result.commit_log_offset == first.result.commit_log_offset
    dead = await stub.SendBack(
        store_pb2.SendBackRequest(
            group=GROUP, commit_log_offset=first.result.commit_log_offset, unique_id=uid, max_reconsume_times=1
        )
    )
    assert dead.dead_lettered and dead.result.queue.topic == dlq_topic(GROUP) and dead.reconsume_times == 2
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await stub.SendBack(store_pb2.SendBackRequest(group=GROUP, commit_log_offset=offset + 3, unique_id=uid))
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_failed_send_back_fails_its_waiters_too_and_can_be_repeated(stores: StoreFactory) -> None:
    store = await _open(stores)
    offset, uid = await _sent(store)
    store.create_topic(retry_topic(GROUP), read_queue_nums=1, write_queue_nums=1, perm=4)  # read only
    core = SendBack(store)
    outs = await asyncio.gather(
        *(core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid) for _ in range(2)),
        return_exceptions=True,
    )
    assert [getattr(o, "code", None) for o in outs] == [errors_pb2.CODE_TOPIC_NOT_WRITABLE] * 2
    store.admin.update_topic(retry_topic(GROUP), perm=6)
    out = await core.send_back(group=GROUP, commit_log_offset=offset, unique_id=uid)
    assert not out.duplicate and out.reconsume_times == 1
    assert [q.max_offset for q in store.queue_offsets(retry_topic(GROUP))] == [1]
