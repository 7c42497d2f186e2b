"""txmq.aio.PushConsumer against real clusters: the async iterator gets every message,
waits on an empty topic, commits nothing ahead of processing across a kill -9 of the
store; the async listener with a retry, pause and resume."""

from __future__ import annotations

import asyncio

import pytest
from support import ServiceFactory
from support.waiting import unique_name

from txmq import Admin, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, MessageQueue, PullConsumer, TxmqError
from txmq._failures import retriable
from txmq.aio import Producer, PushConsumer

# Short intervals (tests/consumer/consumer_settings.py), so a run takes seconds.
FAST = {
    "heartbeat_interval": 0.2,
    "rebalance_interval": 1.0,
    "takeover_delay": 1.0,
    "commit_interval": 0.2,
    "retry_backoff": 0.05,
    "retry_backoff_max": 0.2,
    "pull_error_backoff": 0.2,
    "suspend_timeout": 5.0,
}
#: A bound on each test, so a bug fails it rather than hanging the run.
LIMIT_S = 90


def consumer_of(group: str, endpoint: str, topic: str, **options: object) -> PushConsumer:
    consumer = PushConsumer(group, endpoint, consume_from=ConsumeFromWhere.FIRST_OFFSET, **FAST, **options)
    consumer.subscribe(topic)
    return consumer


async def test_the_iterator_gets_every_message(bootstrap: str, topic: str) -> None:
    async with asyncio.timeout(LIMIT_S), Producer("sdk-aio-producer", bootstrap) as producer:
        sent = {(await producer.send(Message(topic, b"m%d" % i))).msg_id for i in range(20)}
        got: set[str] = set()
        async with consumer_of(unique_name("aio-iter"), bootstrap, topic) as consumer:
            async for msg in consumer:
                got.add(msg.msg_id)
                if got >= sent:
                    consumer.ack()
                    break
    assert got == sent


async def test_an_empty_topic_is_waited_on(bootstrap: str, topic: str) -> None:
    async with asyncio.timeout(LIMIT_S), consumer_of(unique_name("aio-empty"), bootstrap, topic) as consumer:
        waiting = asyncio.create_task(anext(consumer))
        async with Producer("sdk-aio-producer", bootstrap) as producer:
            result = await producer.send(Message(topic, b"late"))
        msg = await waiting
        consumer.ack()
    assert msg.msg_id == result.msg_id and msg.body == b"late"


async def test_a_cancelled_receive_takes_nothing(bootstrap: str, topic: str) -> None:
    async with asyncio.timeout(LIMIT_S), consumer_of(unique_name("aio-cancel"), bootstrap, topic) as consumer:
        waiting = asyncio.create_task(anext(consumer))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        async with Producer("sdk-aio-producer", bootstrap) as producer:
            result = await producer.send(Message(topic, b"after"))
        msg = await anext(consumer)
        consumer.ack()
    assert msg.msg_id == result.msg_id


async def test_the_async_listener_retries_and_pauses(bootstrap: str, topic: str) -> None:
    done: dict[str, int] = {}
    failed_once: set[str] = set()
    all_done = asyncio.Event()

    async def listener(messages: list[MessageExt]) -> ConsumeStatus:
        for m in messages:
            if m.body == b"m0" and m.msg_id not in failed_once:
                failed_once.add(m.msg_id)
                return ConsumeStatus.RECONSUME_LATER  # sent back, delivered again
            done[m.msg_id] = m.reconsume_times
        if len(done) == 10:
            all_done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    async with asyncio.timeout(LIMIT_S), Producer("sdk-aio-producer", bootstrap) as producer:
        consumer = consumer_of(unique_name("aio-listener"), bootstrap, topic)
        consumer.register_message_listener(listener)
        consumer.pause()
        async with consumer:
            sent = [await producer.send(Message(topic, b"m%d" % i)) for i in range(10)]
            assert consumer.paused and not done
            consumer.resume()
            await all_done.wait()
    assert set(done) == {r.msg_id for r in sent}
    assert done[sent[0].msg_id] == 1  # the retried one came back through %RETRY%


async def committed_offset(checker: PullConsumer, mq: MessageQueue) -> int | None:
    """The group's committed offset of ``mq``, asked again while the services find the
    restarted store (a retriable error of the checker, not of the consumer)."""
    while True:
        try:
            return await asyncio.to_thread(checker.fetch_offset, mq)
        except TxmqError as err:
            if not retriable(err):
                raise
            await asyncio.sleep(0.1)  # backoff: nothing to await but the services' reconnect


@pytest.mark.slow
async def test_kill_9_of_the_store_under_the_iterator_loses_nothing(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    service_factory.start("pull")
    topic, group = unique_name("aio-kill"), unique_name("aio-kill-group")
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    sent: list[bytes] = []
    consumed: list[bytes] = []
    ahead: list[str] = []
    settings = {**FAST, "heartbeat_interval": 5.0, "takeover_delay": 10.0}
    with PullConsumer(group, store.address) as checker:

        async def send(prefix: str) -> None:
            async with Producer("aio-kill-producer", store.address, send_timeout=10) as producer:
                for i in range(40):
                    sent.append(f"{prefix}-{i}".encode())
                    await producer.send(Message(topic, sent[-1], queue_id=i % 2))

        async with asyncio.timeout(LIMIT_S):
            await send("before")
            consumer = PushConsumer(group, store.address, consume_from=ConsumeFromWhere.FIRST_OFFSET, **settings)
            consumer.subscribe(topic)
            async with consumer:
                async for m in consumer:
                    # Nothing of this queue is committed past a message still being processed.
                    mq = MessageQueue(m.topic, m.store_id, m.queue_id)
                    committed = await committed_offset(checker, mq)
                    if committed is not None and committed > m.queue_offset:
                        ahead.append(f"{mq}: committed {committed} while processing {m.queue_offset}")
                    consumed.append(m.body)
                    if len(consumed) == 20:  # this one is not done yet: kill -9 the store
                        store.kill()
                        await asyncio.to_thread(store.restart)
                        await send("after")
                    if set(consumed) >= set(sent) and len(sent) == 80:
                        consumer.ack()
                        break
    assert set(consumed) == set(sent)  # nothing lost (a redelivery after the kill may repeat one)
    assert ahead == []


async def test_the_orderly_listener_keeps_each_queues_order(bootstrap: str, topic: str) -> None:
    seen: dict[int, list[int]] = {}
    busy: set[int] = set()
    overlaps: list[int] = []
    all_done = asyncio.Event()

    async def listener(messages: list[MessageExt]) -> ConsumeStatus:
        queue_id = messages[0].queue_id
        if queue_id in busy:
            overlaps.append(queue_id)
        busy.add(queue_id)
        await asyncio.sleep(0)  # let other tasks run: another batch of this queue must not
        seen.setdefault(queue_id, []).extend(m.queue_offset for m in messages)
        busy.discard(queue_id)
        if sum(map(len, seen.values())) == 40:
            all_done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    async with asyncio.timeout(LIMIT_S), Producer("sdk-aio-producer", bootstrap) as producer:
        for i in range(40):
            await producer.send(Message(topic, b"o%d" % i, queue_id=i % 2))
        consumer = consumer_of(unique_name("aio-orderly"), bootstrap, topic, orderly=True)
        consumer.register_message_listener(listener)
        async with consumer:
            await all_done.wait()
    assert seen == {0: list(range(20)), 1: list(range(20))} and overlaps == []
