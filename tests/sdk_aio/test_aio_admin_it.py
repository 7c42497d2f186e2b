"""txmq.aio.Admin against the session cluster: the threaded Admin's calls as coroutines,
their typed errors unchanged, the loop free while a call runs."""

from __future__ import annotations

import asyncio

import pytest
from support.waiting import unique_name

from txmq import Message, NotFoundError
from txmq.aio import Admin, Producer
from txmq.v1 import errors_pb2


async def test_topics_messages_and_errors(bootstrap: str) -> None:
    topic = unique_name("aio-admin")
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        assert topic in [t.name for t in await admin.list_topics()]
        async with Producer("sdk-aio-admin", bootstrap) as producer:
            sent = await producer.send(Message(topic, b"seen", keys=("k1",)))
        (found,) = await admin.query_messages_by_key(topic, "k1")
        assert (found.body, found.msg_id) == (b"seen", sent.msg_id)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.ensure_future(tick())
        offsets = await admin.queue_offsets(topic)  # on a worker thread: the loop keeps turning
        ticker.cancel()
        assert sum(q.max_offset for q in offsets) == 1 and ticks > 0
        with pytest.raises(NotFoundError) as caught:
            await admin.get_topic(unique_name("missing"))
        assert caught.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND
        await admin.delete_topic(topic)
        with pytest.raises(AttributeError):
            admin.no_such_call  # noqa: B018 - the attribute look-up is the test
