"""PullStream on a real pull process over a real store: several pulls outstanding on one
stream, each answered with its id when its queue gets a message; an error answers only
its own pull; unary PullMessage works beside it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from txmq.records import decode_messages
from txmq.v1 import errors_pb2, pull_pb2, pull_pb2_grpc

from .conftest import pull_request, unique
from .test_pull_it import Pulling
from .test_pull_it import private as private

P = pull_pb2
GUARD_S = 30


class OpenStream:
    def __init__(self, stub: pull_pb2_grpc.PullStub) -> None:
        self._out: asyncio.Queue[P.PullStreamRequest | None] = asyncio.Queue()
        self.call = stub.PullStream(self._requests())

    async def _requests(self) -> AsyncIterator[P.PullStreamRequest]:
        while (r := await self._out.get()) is not None:
            yield r

    def send(self, request_id: int, pull: P.PullMessageRequest) -> None:
        self._out.put_nowait(P.PullStreamRequest(request_id=request_id, pull=pull))

    def close(self) -> None:
        self._out.put_nowait(None)

    async def answer(self) -> P.PullStreamResponse:
        answer = await asyncio.wait_for(self.call.read(), GUARD_S)
        assert answer is not grpc.aio.EOF
        return answer


async def test_several_pulls_outstanding_on_one_stream(private: Pulling) -> None:
    topic, group = unique("PullStreamIt"), unique("PullStreamGroup")
    await private.store.create_topic(topic, queues=3)
    stream = OpenStream(private.pull)
    try:
        metadata = await asyncio.wait_for(stream.call.initial_metadata(), GUARD_S)
        assert ("txmq-pull-stream", "1") in list(metadata)
        for queue_id in range(3):  # three long polls, one per queue
            stream.send(
                10 + queue_id,
                pull_request(
                    private.store.queue(topic, queue_id), group=group, suspend=True, suspend_timeout_ms=60_000
                ),
            )
        stream.send(20, pull_request(private.store.queue(unique("NoSuchTopic")), group=group))
        refused = await stream.answer()  # the others are held: this comes first
        assert refused.request_id == 20 and refused.error.code == errors_pb2.CODE_TOPIC_NOT_FOUND

        # Unary pulls are served beside the stream, as before.
        unary = await private.pull.PullMessage(pull_request(private.store.queue(topic, 0), group=group), timeout=10)
        assert unary.status == P.PULL_STATUS_NO_NEW_MSG

        for queue_id in (2, 0, 1):
            await private.store.send(topic, f"to-{queue_id}".encode(), queue_id=queue_id)
            answer = await stream.answer()
            assert answer.request_id == 10 + queue_id and answer.pull.status == P.PULL_STATUS_FOUND
            bodies = [m.body for m in decode_messages(answer.pull.records, answer.pull.store_id)]
            if not bodies:
                bodies = [v.message.body for v in answer.pull.messages]
            assert bodies == [f"to-{queue_id}".encode()]
        stream.close()  # the client is done: the stream ends with OK
        assert await asyncio.wait_for(stream.call.read(), GUARD_S) is grpc.aio.EOF
        assert await stream.call.code() == grpc.StatusCode.OK
    finally:
        stream.call.cancel()
