"""PullStreamSession (txmq_pull.stream): the pulls of one PullStream, on fake pulls whose
answers the test decides (no store, no gRPC, no time), and one test on the real pull core
with a ManualClock: a streamed pull is held and times out exactly as a unary one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from support.clock import settle, until

from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2, pull_pb2
from txmq_pull.stream import PullStreamSession

from .conftest import MakeCore, StoreAccess, eventually, pull_request, unique

P = pull_pb2
GUARD_S = 30


class FakePulls:
    """``pull`` parks each pull on a future the test resolves, keyed by its topic."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[P.PullMessageResponse]] = {}
        self.cancelled: list[str] = []

    async def pull(self, request: P.PullMessageRequest) -> P.PullMessageResponse:
        future: asyncio.Future[P.PullMessageResponse] = asyncio.get_running_loop().create_future()
        self.waiting[request.queue.topic] = future
        try:
            return await future
        except asyncio.CancelledError:
            self.cancelled.append(request.queue.topic)
            raise

    def answer(self, topic: str, offset: int) -> None:
        self.waiting.pop(topic).set_result(P.PullMessageResponse(status=P.PULL_STATUS_FOUND, next_begin_offset=offset))

    def fail(self, topic: str, err: BaseException) -> None:
        self.waiting.pop(topic).set_exception(err)


class Requests:
    """The client's side of the stream: ``send`` a request, ``close`` the side."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[P.PullStreamRequest | None] = asyncio.Queue()

    def send(self, request_id: int, topic: str = "", *, cancel: bool = False) -> None:
        request = P.PullStreamRequest(request_id=request_id, cancel=cancel)
        if topic:
            request.pull.CopyFrom(pull_request(common_pb2.MessageQueue(topic=topic, store_id="s", queue_id=0)))
        self._queue.put_nowait(request)

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[P.PullStreamRequest]:
        while (request := await self._queue.get()) is not None:
            yield request


class Answers:
    """Collects what the session writes, until it ends."""

    def __init__(self, session: PullStreamSession) -> None:
        self.got: list[P.PullStreamResponse] = []
        self.ended = False
        self._task = asyncio.ensure_future(self._collect(session))

    async def _collect(self, session: PullStreamSession) -> None:
        async for answer in session.answers():
            self.got.append(answer)
        self.ended = True

    def ids(self) -> list[int]:
        return [a.request_id for a in self.got]

    def by_id(self, request_id: int) -> P.PullStreamResponse:
        return next(a for a in self.got if a.request_id == request_id)

    async def wait(self, n: int) -> None:
        await until(lambda: len(self.got) >= n)


def no_check(request: P.PullMessageRequest) -> None:
    pass


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakePulls, Requests, PullStreamSession, Answers]]:
    pulls, requests = FakePulls(), Requests()
    session = PullStreamSession(pulls.pull, check=no_check, max_outstanding=3)
    session.start(requests)
    answers = Answers(session)
    yield pulls, requests, session, answers
    await session.close()


async def test_outstanding_pulls_are_answered_as_they_are_done_with_their_ids(fake) -> None:  # type: ignore[no-untyped-def]
    pulls, requests, session, answers = fake
    for request_id, topic in ((1, "A"), (2, "B"), (3, "C")):
        requests.send(request_id, topic)
    await until(lambda: len(pulls.waiting) == 3)
    assert session.outstanding == 3
    pulls.answer("B", 7)
    pulls.answer("C", 9)
    await answers.wait(2)
    assert answers.ids() == [2, 3]
    assert answers.by_id(2).pull.next_begin_offset == 7
    pulls.answer("A", 5)
    await answers.wait(3)
    assert answers.by_id(1).pull.status == P.PULL_STATUS_FOUND and session.outstanding == 0


async def test_an_error_is_that_pulls_answer_and_the_stream_goes_on(fake) -> None:  # type: ignore[no-untyped-def]
    pulls, requests, _, answers = fake
    requests.send(1, "A")
    requests.send(2, "B")
    await until(lambda: len(pulls.waiting) == 2)
    pulls.fail("A", error(errors_pb2.CODE_TOPIC_NOT_FOUND, "no topic A", topic="A"))
    pulls.fail("B", RuntimeError("a bug"))
    await answers.wait(2)
    a = answers.by_id(1).error
    assert (a.code, a.message, dict(a.metadata)) == (errors_pb2.CODE_TOPIC_NOT_FOUND, "no topic A", {"topic": "A"})
    assert answers.by_id(2).error.code == errors_pb2.CODE_INTERNAL_ERROR
    requests.send(3, "C")  # still open
    await until(lambda: "C" in pulls.waiting)
    pulls.answer("C", 1)
    await answers.wait(3)
    assert not answers.ended


async def test_refusals_of_one_request(fake) -> None:  # type: ignore[no-untyped-def]
    pulls, requests, _, answers = fake
    requests.send(1, "A")
    await until(lambda: "A" in pulls.waiting)
    requests.send(1, "B")  # the id is outstanding
    requests.send(2)  # no pull
    requests.send(3, "C")
    requests.send(4, "D")
    requests.send(5, "E")  # a fourth outstanding: over max_outstanding (3)
    await answers.wait(3)
    codes = {a.request_id: a.error.code for a in answers.got}
    assert codes == {
        1: errors_pb2.CODE_ILLEGAL_ARGUMENT,
        2: errors_pb2.CODE_ILLEGAL_ARGUMENT,
        5: errors_pb2.CODE_TOO_MANY_REQUESTS,
    }
    assert sorted(pulls.waiting) == ["A", "C", "D"]


async def test_cancel_withdraws_the_pull_without_an_answer(fake) -> None:  # type: ignore[no-untyped-def]
    pulls, requests, session, answers = fake
    requests.send(1, "A")
    requests.send(2, "B")
    await until(lambda: len(pulls.waiting) == 2)
    requests.send(1, cancel=True)
    requests.send(9, cancel=True)  # unknown: nothing happens
    await until(lambda: pulls.cancelled == ["A"])
    assert session.outstanding == 1
    requests.send(1, "A2")  # the id may be used again
    await until(lambda: "A2" in pulls.waiting)
    pulls.answer("A2", 3)
    pulls.answer("B", 4)
    await answers.wait(2)
    await settle()
    assert sorted(answers.ids()) == [1, 2] and answers.by_id(1).pull.next_begin_offset == 3


async def test_a_closed_client_side_still_gets_its_answers_then_the_end(fake) -> None:  # type: ignore[no-untyped-def]
    pulls, requests, _, answers = fake
    requests.send(1, "A")
    requests.close()
    await until(lambda: "A" in pulls.waiting)
    await settle()
    assert not answers.ended
    pulls.answer("A", 2)
    await until(lambda: answers.ended)
    assert answers.ids() == [1]


async def test_finish_reads_no_more_and_ends_once_answered(fake) -> None:  # type: ignore[no-untyped-def]
    pulls, requests, session, answers = fake
    requests.send(1, "A")
    await until(lambda: "A" in pulls.waiting)
    session.finish()
    requests.send(2, "B")
    await settle()
    assert "B" not in pulls.waiting and not answers.ended
    pulls.answer("A", 1)
    await until(lambda: answers.ended)
    assert answers.ids() == [1]


async def test_close_withdraws_every_outstanding_pull(fake) -> None:  # type: ignore[no-untyped-def]
    pulls, requests, session, _ = fake
    requests.send(1, "A")
    requests.send(2, "B")
    await until(lambda: len(pulls.waiting) == 2)
    await session.close()
    assert sorted(pulls.cancelled) == ["A", "B"] and session.outstanding == 0


async def test_the_access_check_answers_a_refused_pull_without_pulling() -> None:
    pulls, requests = FakePulls(), Requests()

    def check(request: P.PullMessageRequest) -> None:
        if request.queue.topic == "Secret":
            raise error(errors_pb2.CODE_ACCESS_DENIED, "user u may not Sub on Topic:Secret")

    session = PullStreamSession(pulls.pull, check=check, max_outstanding=8)
    session.start(requests)
    answers = Answers(session)
    requests.send(1, "Secret")
    requests.send(2, "Open")
    await answers.wait(1)
    assert answers.by_id(1).error.code == errors_pb2.CODE_ACCESS_DENIED
    await until(lambda: "Open" in pulls.waiting)
    assert "Secret" not in pulls.waiting
    await session.close()


async def test_a_streamed_pull_is_held_and_times_out_as_a_unary_one(
    make_core: MakeCore, store_access: StoreAccess
) -> None:
    """The servicer's pull on the real core (ManualClock): held for its suspend time, then
    NO_NEW_MSG; a matching send meanwhile would have woken it (test_processor covers that)."""
    core = await make_core()
    topic = unique("PullStream")
    await store_access.create_topic(topic, queues=1)
    requests = Requests()
    session = PullStreamSession(core.servicer._stream_pull, check=no_check, max_outstanding=8)
    session.start(requests)
    answers = Answers(session)
    request = P.PullStreamRequest(
        request_id=42,
        pull=pull_request(store_access.queue(topic), suspend=True, suspend_timeout_ms=5_000),
    )
    requests._queue.put_nowait(request)
    await eventually(lambda: core.hold.held_count == 1)
    core.clock.advance(4_999)
    await settle()
    assert answers.got == []
    core.clock.advance(1)
    await asyncio.wait_for(answers.wait(1), GUARD_S)
    assert answers.got[0].request_id == 42 and answers.got[0].pull.status == P.PULL_STATUS_NO_NEW_MSG
    assert core.hold.held_count == 0
    await session.close()


def test_error_detail_round_trips_to_the_sdk_error() -> None:
    err = error(errors_pb2.CODE_TOO_MANY_REQUESTS, "busy")
    back = TxmqError.from_detail(P.PullStreamResponse(request_id=1, error=err.to_detail()).error)
    assert (back.code, back.message, back.retriable) == (err.code, "busy", err.retriable)
