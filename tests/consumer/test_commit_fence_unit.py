"""An orderly push consumer whose commit the store refuses with QUEUE_LOCKED (another
client holds the queue's lock, whatever this consumer trusted): the lock lapses, the
queue is released and locked again like a new one, and the consumer goes on (the
refusal is not an error that stops it). The consumer's commits name its client id only
in orderly mode. Fakes and a hand-moved clock, as test_orderly_unit."""

from __future__ import annotations

from typing import Any

from txmq import PushConsumer
from txmq._pulling import PullClient
from txmq.errors import ConflictError
from txmq.message import MessageQueue
from txmq.v1 import errors_pb2, pull_pb2

from .test_orderly_unit import MQ, Harness, success


def test_a_commit_the_store_refuses_as_locked_lapses_the_lock() -> None:
    events: list[tuple[str, Any]] = []

    class FakeClient:
        refuse = True

        def commit_offset(self, mq: MessageQueue, offset: int) -> None:
            events.append(("commit", offset))
            if self.refuse:
                raise ConflictError("locked by another client", code=errors_pb2.CODE_QUEUE_LOCKED)

    consumer = PushConsumer("orderly-unit", "127.0.0.1:1", orderly=True)
    consumer._state = "running"
    h = Harness(success)
    h.events = h.calls.events = events
    consumer._client = FakeClient()  # type: ignore[assignment]
    consumer._orderly = h.service
    h.service._commit = consumer._commit
    h.service._on_lapsed = lambda: events.append(("lapsed", None))
    pq = h.hold(offsets=range(0, 3))
    consumer._queues[MQ] = pq
    h.run()
    assert h.service.valid(pq)  # trusted on this side
    consumer._offsets.commit(pq)
    assert ("commit", 3) in events and ("lapsed", None) in events
    assert not h.service.valid(pq)  # no new batch starts
    assert h.service.take_lapsed() == [MQ]  # the next rebalance releases and locks it again
    assert consumer.error is None and consumer._error is None  # not a stop
    assert pq.committed != 3


def test_only_an_orderly_consumers_commits_name_it() -> None:
    sent: list[pull_pb2.UpdateConsumerOffsetRequest] = []

    class Stub:
        def UpdateConsumerOffset(self, request: pull_pb2.UpdateConsumerOffsetRequest, timeout: float) -> object:
            sent.append(request)
            return pull_pb2.UpdateConsumerOffsetResponse()

    class Routes:
        def mark_stale(self, topic: str) -> None:
            pass

    class Core:
        routes = Routes()

    for fence in ("me", ""):
        client = PullClient(Core(), "G", timeout=1.0, commit_client_id=fence)  # type: ignore[arg-type]
        client.pull_addresses = lambda topic: ["a"]  # type: ignore[method-assign]
        client.pull_stub = lambda address: Stub()  # type: ignore[method-assign]
        client.commit_offset(MQ, 5)
    assert [r.client_id for r in sent] == ["me", ""]
