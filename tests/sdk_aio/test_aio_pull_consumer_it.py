"""txmq.aio.PullConsumer against the session cluster: pulls (at once and held),
offsets, queue ranges, send-back, a cancelled long poll."""

from __future__ import annotations

import asyncio

import pytest

from txmq import BadRequestError, Message, PullStatus
from txmq.aio import Producer, PullConsumer


async def test_pull_offsets_and_send_back(bootstrap: str, topic: str) -> None:
    async with Producer("sdk-aio-producer", bootstrap) as producer, PullConsumer("sdk-aio-pull", bootstrap) as consumer:
        sent = await producer.send_batch(
            [Message(topic, b"p%d" % i, tags="a" if i % 2 else "b", queue_id=1) for i in range(6)]
        )
        mq = sent[0].message_queue
        assert mq in await consumer.fetch_message_queues(topic)
        got = await consumer.pull(mq, "a", 0, 32, suspend=False)
        assert got.status is PullStatus.FOUND and [m.body for m in got.messages] == [b"p1", b"p3", b"p5"]
        assert got.next_begin_offset == 6
        assert (await consumer.min_offset(mq), await consumer.max_offset(mq)) == (0, 6)
        assert await consumer.fetch_offset(mq) is None
        await consumer.commit_offset(mq, 3)
        assert await consumer.fetch_offset(mq) == 3
        back = await consumer.send_back(got.messages[0], delay_level=-1)
        assert back.dead_lettered and back.topic == "%DLQ%sdk-aio-pull"
        with pytest.raises(BadRequestError):
            await consumer.pull(mq, "*", -1)


async def test_a_held_pull_is_answered_by_a_send_and_cancellable(bootstrap: str, topic: str) -> None:
    async with Producer("sdk-aio-producer", bootstrap) as producer, PullConsumer("sdk-aio-pull", bootstrap) as consumer:
        [mq, *_] = await consumer.fetch_message_queues(topic)
        held = asyncio.create_task(consumer.pull(mq, "*", 0, 32, timeout=30))
        cancelled = asyncio.create_task(consumer.pull(mq, "*", 0, 32, timeout=30))
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        sent = await producer.send(Message(topic, b"wake", queue_id=mq.queue_id))
        result = await held
    assert [m.msg_id for m in result.messages] == [sent.msg_id]
    assert result.status is PullStatus.FOUND
