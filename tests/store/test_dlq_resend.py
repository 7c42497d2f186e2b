"""ResendDeadLetters (services/store/txmq_store/sendback.py ``DeadLetterResend``): a
group's dead letters, named by unique id, sent again to their origin topic as new
messages, each once: a second resend (sequential, concurrent, or after a restart) stores
nothing and answers the first message. Ids the store does not hold, another group's dead
letters and the original message are left out. Also the servicer on a real gRPC server."""

from __future__ import annotations

import asyncio

import pytest

from txmq.protocol import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RESEND_OF, dlq_topic
from txmq.v1 import store_pb2, store_pb2_grpc
from txmq_store.message_store import MessageStore
from txmq_store.sendback import DeadLetterResend, SendBack

from .conftest import StoreFactory, grpc_server_for, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")

GROUP = "CG_RESEND"


async def _open(stores: StoreFactory) -> MessageStore:
    store = await stores.open()
    if not any(t.name == "TopicA" for t in store.admin.topic_configs()):
        store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    return store


async def _dead_letter(store: MessageStore, group: str = GROUP) -> tuple[str, int]:
    """A message of TopicA dead-lettered by ``group``: (its unique id, the dead letter's offset)."""
    (r,) = await store.send([msg(b"poison", tags="T", keys=("k",), properties={"color": "red"}, unique_id="U-1")])
    out = await SendBack(store).send_back(
        group=group, commit_log_offset=r.commit_log_offset, unique_id=r.msg_id, delay_level=-1
    )
    assert out.dead_lettered
    return r.msg_id, out.result.commit_log_offset


def _on_topic_a(store: MessageStore) -> int:
    return sum(q.max_offset - q.min_offset for q in store.queue_offsets("TopicA"))


async def test_a_dead_letter_is_resent_once(stores: StoreFactory) -> None:
    store = await _open(stores)
    uid, letter_offset = await _dead_letter(store)
    core = DeadLetterResend(store)
    (first,) = await core.resend(group=GROUP, unique_ids=[uid])
    assert (first.dead_letter_id, first.commit_log_offset) == (uid, letter_offset)
    assert not first.result.duplicate and first.result.topic == "TopicA" and first.result.msg_id != uid
    copy = store.reader.view_message(first.result.commit_log_offset)
    assert (copy.body, copy.tags, copy.keys, copy.reconsume_times) == (b"poison", "T", ("k",), 0)
    assert copy.properties["color"] == "red" and copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] == uid
    assert copy.properties[PROPERTY_RESEND_OF] == f"{GROUP}@{letter_offset}"
    assert _on_topic_a(store) == 2  # the original and the resent message
    (again,), (c1,), (c2,) = (
        await core.resend(group=GROUP, unique_ids=[uid]),
        *(await asyncio.gather(*(core.resend(group=GROUP, unique_ids=[uid]) for _ in range(2)))),
    )
    assert again.result.duplicate and c1.result.duplicate and c2.result.duplicate
    assert {again.result.commit_log_offset, c1.result.commit_log_offset} == {first.result.commit_log_offset}
    assert again.result.msg_id == first.result.msg_id
    assert _on_topic_a(store) == 2
    # The dead letter stays; unknown ids and another group's name find nothing.
    assert [q.max_offset for q in store.queue_offsets(dlq_topic(GROUP))] == [1]
    assert await core.resend(group=GROUP, unique_ids=["NO-SUCH-ID"]) == []
    assert await core.resend(group="CG_OTHER", unique_ids=[uid]) == []


async def test_concurrent_first_resends_store_one_message(stores: StoreFactory) -> None:
    store = await _open(stores)
    uid, _ = await _dead_letter(store)
    core = DeadLetterResend(store)
    outs = await asyncio.gather(*(core.resend(group=GROUP, unique_ids=[uid, uid]) for _ in range(3)))
    assert [len(o) for o in outs] == [1, 1, 1]  # an id named twice is one dead letter
    assert sum(not o[0].result.duplicate for o in outs) == 1
    assert _on_topic_a(store) == 2


async def test_resend_is_idempotent_after_a_restart(stores: StoreFactory) -> None:
    store = await _open(stores)
    uid, _ = await _dead_letter(store)
    (first,) = await DeadLetterResend(store).resend(group=GROUP, unique_ids=[uid])
    await store.close()
    stores.opened.remove(store)
    store = await _open(stores)
    (again,) = await DeadLetterResend(store).resend(group=GROUP, unique_ids=[uid])
    assert again.result.duplicate and again.result.commit_log_offset == first.result.commit_log_offset
    assert _on_topic_a(store) == 2


async def test_servicer_resend_dead_letters(stores: StoreFactory) -> None:
    store = await _open(stores)
    uid, letter_offset = await _dead_letter(store)
    async with grpc_server_for(store) as grpc_store:
        stub = store_pb2_grpc.ConsumerControlStub(grpc_store.channel)
        request = store_pb2.ResendDeadLettersRequest(group=GROUP, unique_ids=[uid, "NO-SUCH-ID"])
        (first,) = (await stub.ResendDeadLetters(request)).resent
        assert (first.dead_letter_id, first.commit_log_offset) == (uid, letter_offset)
        assert first.result.queue.topic == "TopicA" and first.result.queue.store_id == store.store_id
        assert not first.result.duplicate
        (again,) = (await stub.ResendDeadLetters(request)).resent
        assert again.result.duplicate and again.result.msg_id == first.result.msg_id
