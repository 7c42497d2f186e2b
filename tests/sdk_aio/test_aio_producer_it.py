"""txmq.aio.Producer against the real session cluster: sends and batches read back,
concurrent sends sharing frames, the threaded producer's errors, cancellation."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from support import ServiceFactory
from support.topics import consume_all
from support.waiting import unique_name

from txmq import Admin, BadRequestError, Message, NotFoundError, PullConsumer, SendStatus
from txmq.aio import Producer
from txmq.v1 import errors_pb2


async def test_send_and_send_batch_are_read_back(bootstrap: str, topic: str, reader: PullConsumer) -> None:
    async with Producer("sdk-aio-producer", bootstrap) as producer:
        msg = Message(topic, b"one", tags="t", keys=("k1",), properties={"p": "v"})
        single = await producer.send(msg)
        batch = [Message(topic, b"b%d" % i, queue_id=2) for i in range(5)]
        results = await producer.send_batch(batch)

    assert single.status is SendStatus.OK and single.msg_id == msg.unique_id
    assert [r.message_queue.queue_id for r in results] == [2] * 5
    assert [r.queue_offset for r in results] == list(range(results[0].queue_offset, results[0].queue_offset + 5))
    assert [r.msg_id for r in results] == [m.unique_id for m in batch]
    stored = {m.msg_id: m for m in consume_all(reader, topic)}
    assert set(stored) == {single.msg_id, *(r.msg_id for r in results)}
    one = stored[single.msg_id]
    assert (one.body, one.tags, one.keys, one.properties["p"]) == (b"one", "t", ("k1",), "v")
    assert [stored[r.msg_id].body for r in results] == [m.body for m in batch]


async def test_concurrent_sends_share_frames(bootstrap: str, topic: str, reader: PullConsumer) -> None:
    async with Producer("sdk-aio-producer", bootstrap) as producer:
        await producer.send(Message(topic, b"warm-up"))  # the route and the stream are open
        (pipe,) = producer._pipes.values()
        before = pipe.frames
        sends = 64
        results = await asyncio.gather(*(producer.send(Message(topic, b"%d" % i)) for i in range(sends)))
        frames = pipe.frames - before

    # Every task queued its entry before the stream's writer ran: they went together.
    assert frames < sends
    assert len({r.commit_log_offset for r in results}) == sends
    assert Counter(r.message_queue.queue_id for r in results) == {q: sends // 4 for q in range(4)}
    stored = {m.msg_id for m in consume_all(reader, topic)}
    assert {r.msg_id for r in results} <= stored and len(stored) == sends + 1


async def test_unary_sends_without_the_stream(bootstrap: str, topic: str, reader: PullConsumer) -> None:
    async with Producer("sdk-aio-producer", bootstrap, send_stream=False) as producer:
        results = [await producer.send(Message(topic, b"u%d" % i)) for i in range(3)]
        results += await producer.send_batch([Message(topic, b"ub%d" % i) for i in range(3)])
        assert not producer._pipes
    assert {r.msg_id for r in results} == {m.msg_id for m in consume_all(reader, topic)}


async def test_the_threaded_producers_errors(bootstrap: str, topic: str) -> None:
    async with Producer("sdk-aio-producer", bootstrap) as producer:
        with pytest.raises(NotFoundError) as info:
            await producer.send(Message(f"{topic}-absent", b"x"))
        assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND
        with pytest.raises(BadRequestError):
            await producer.send_batch([])
        with pytest.raises(BadRequestError) as info:
            await producer.send(Message(topic, b"x", queue_id=99))
        assert info.value.code == errors_pb2.CODE_ILLEGAL_QUEUE_ID
    with pytest.raises(RuntimeError):
        await producer.send(Message(topic, b"closed"))


async def test_a_cancelled_send_leaves_the_producer_working(bootstrap: str, topic: str, reader: PullConsumer) -> None:
    async with Producer("sdk-aio-producer", bootstrap, max_in_flight_frames=1) as producer:
        await producer.send(Message(topic, b"warm-up"))
        tasks = [asyncio.create_task(producer.send(Message(topic, b"c%d" % i))) for i in range(20)]
        await asyncio.sleep(0)  # each task has queued its entry, none has its ack
        for task in tasks[10:]:
            task.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        after = await producer.send(Message(topic, b"after"))

    stored = {m.msg_id for m in consume_all(reader, topic)}
    sent = [r for r in done if not isinstance(r, BaseException)]
    assert len(sent) >= 10 and {r.msg_id for r in sent} <= stored
    assert after.msg_id in stored
    # A cancelled send may or may not have been stored: never twice, never half.
    assert len(stored) <= 1 + 20 + 1


async def test_a_restarted_store_gets_a_new_stream(service_factory: ServiceFactory) -> None:
    """kill -9 of the only store under an open send stream: the next send waits it out
    (no other store to fail over to) and opens a new stream."""
    store = service_factory.store()
    topic = unique_name("aio-restart")
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    async with Producer("sdk-aio-producer", store.address, send_timeout=30) as producer:
        before = await producer.send(Message(topic, b"before"))
        [old] = producer._pipes.values()
        store.kill()
        await asyncio.to_thread(store.restart)
        after = await producer.send(Message(topic, b"after"))
        [new] = producer._pipes.values()
    assert old.failed is not None and new is not old
    with Admin(store.address) as admin:
        for sent, body in ((before, b"before"), (after, b"after")):
            assert admin.query_message_by_unique_id(sent.msg_id, topic=topic).body == body


async def test_recall_a_delayed_message(bootstrap: str, topic: str, reader: PullConsumer) -> None:
    async with Producer("sdk-aio-producer", bootstrap) as producer:
        later = await producer.send(Message(topic, b"later", delivery_timestamp_ms=int(time.time() * 1000) + 60_000))
        assert await producer.recall(later.recall_handle) == SendStatus.OK
        assert await producer.recall(later.recall_handle) == SendStatus.OK
        now = await producer.send(Message(topic, b"now"))
        with pytest.raises(BadRequestError) as caught:
            await producer.recall(now.recall_handle or "txr1.x")
        assert caught.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
    assert [m.body for m in consume_all(reader, topic)] == [b"now"]
