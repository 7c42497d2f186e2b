"""Queue locks of orderly consumption (txmq_store/queue_locks.py): the core on a manual
clock (grant, renewal, expiry, another client refused, unlock only one's own, the grace
after a start and after a new leadership term), and LockQueues / UnlockQueues through a
real gRPC server (typed errors for bad input, NOT_LEADER on a replica that does not lead).
No sleeps: time moves only with ``clock.advance``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_store.consumer_control import ConsumerControlServicer
from txmq_store.message_store import MessageStore
from txmq_store.queue_locks import QueueLocks

from .conftest import StoreFactory

LEASE = 60_000
G, A, B = "CG_ORDER", "client-a", "client-b"
Q0, Q1 = ("TopicA", 0), ("TopicA", 1)


def past_grace(clock: ManualClock) -> QueueLocks:
    locks = QueueLocks(lease_ms=LEASE, clock=clock)
    clock.advance(LEASE // 2)
    return locks


def test_nothing_is_granted_for_half_a_lease_after_a_start() -> None:
    clock = ManualClock()
    locks = QueueLocks(lease_ms=LEASE, clock=clock)
    assert locks.grace_ms == LEASE // 2
    assert locks.lock(G, A, [Q0]) == []
    clock.advance(LEASE // 2 - 1)
    assert locks.in_grace()
    assert locks.lock(G, A, [Q0]) == []
    clock.advance(1)
    assert not locks.in_grace()
    assert locks.lock(G, A, [Q0]) == [Q0]


def test_grant_renew_and_refuse_another_client() -> None:
    clock = ManualClock()
    locks = past_grace(clock)
    assert locks.lock(G, A, [Q0, Q1]) == [Q0, Q1]
    assert locks.lock(G, B, [Q0, Q1]) == []  # both held by a under a live lease
    clock.advance(LEASE - 1)
    assert locks.lock(G, A, [Q0]) == [Q0]  # renewal: the lease starts again now
    clock.advance(1)  # Q1's lease (not renewed) ends now; Q0's runs another LEASE - 1
    assert locks.holder(G, *Q1) is None
    assert locks.lock(G, B, [Q0, Q1]) == [Q1]
    assert locks.holder(G, *Q0) == A and locks.holder(G, *Q1) == B
    # Another group's locks are independent.
    assert locks.lock("CG_OTHER", B, [Q0]) == [Q0]


def test_an_expired_lock_goes_to_whoever_asks() -> None:
    clock = ManualClock()
    locks = past_grace(clock)
    assert locks.lock(G, A, [Q0]) == [Q0]
    clock.advance(LEASE)
    assert locks.holder(G, *Q0) is None
    assert locks.lock(G, B, [Q0]) == [Q0]
    assert locks.lock(G, A, [Q0]) == []  # a's renewal came too late


def test_unlock_releases_only_the_callers_locks() -> None:
    clock = ManualClock()
    locks = past_grace(clock)
    locks.lock(G, A, [Q0])
    locks.lock(G, B, [Q1])
    assert locks.unlock(G, A, [Q0, Q1]) == 1  # Q1 is b's: left alone
    assert locks.holder(G, *Q0) is None and locks.holder(G, *Q1) == B
    assert locks.lock(G, B, [Q0]) == [Q0]  # free at once, no wait for the lease
    assert locks.unlock(G, A, [Q0]) == 0


def test_expired_locks_are_swept() -> None:
    clock = ManualClock()
    locks = past_grace(clock)
    locks.lock(G, A, [Q0, Q1])
    clock.advance(LEASE)
    locks.lock(G, B, [("TopicA", 2)])
    assert len(locks) == 1


def test_reset_forgets_every_lock_and_starts_the_grace_again() -> None:
    clock = ManualClock()
    locks = past_grace(clock)
    locks.lock(G, A, [Q0])
    locks.reset()
    assert locks.holder(G, *Q0) is None
    assert locks.lock(G, B, [Q0]) == []
    clock.advance(LEASE // 2)
    assert locks.lock(G, B, [Q0]) == [Q0]


# -- through gRPC ------------------------------------------------------------------------


@dataclass
class Served:
    store: MessageStore
    servicer: ConsumerControlServicer
    stub: store_pb2_grpc.ConsumerControlStub
    clock: ManualClock


@pytest.fixture
async def served(stores: StoreFactory) -> AsyncIterator[Served]:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    async with _serve(store) as s:
        yield s


class _serve:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    async def __aenter__(self) -> Served:
        clock = ManualClock()
        self.server = grpc.aio.server()
        servicer = ConsumerControlServicer(self.store, clock=clock)
        store_pb2_grpc.add_ConsumerControlServicer_to_server(servicer, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        return Served(self.store, servicer, store_pb2_grpc.ConsumerControlStub(self.channel), clock)

    async def __aexit__(self, *exc: object) -> None:
        await self.channel.close()
        await self.server.stop(None)


def mq(store: MessageStore, topic: str = "TopicA", queue_id: int = 0, store_id: str | None = None):
    return common_pb2.MessageQueue(
        topic=topic, store_id=store.store_id if store_id is None else store_id, queue_id=queue_id
    )


async def code_of(call) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return TxmqError.from_rpc_error(info.value).code


@pytest.mark.asyncio
async def test_lock_and_unlock_over_grpc(served: Served) -> None:
    s = served
    request = store_pb2.LockQueuesRequest(
        group=G, client_id=A, queues=[mq(s.store, queue_id=0), mq(s.store, queue_id=1)]
    )
    answer = await s.stub.LockQueues(request)
    assert list(answer.locked) == [] and answer.lease_ms == s.servicer.queue_locks.locks.lease_ms  # the grace
    s.clock.advance(answer.lease_ms // 2)
    answer = await s.stub.LockQueues(request)
    assert [q.queue_id for q in answer.locked] == [0, 1]
    assert all(q.store_id == s.store.store_id and q.topic == "TopicA" for q in answer.locked)
    other = await s.stub.LockQueues(store_pb2.LockQueuesRequest(group=G, client_id=B, queues=request.queues))
    assert list(other.locked) == []
    await s.stub.UnlockQueues(store_pb2.UnlockQueuesRequest(group=G, client_id=B, queues=request.queues))
    await s.stub.UnlockQueues(store_pb2.UnlockQueuesRequest(group=G, client_id=A, queues=request.queues[:1]))
    other = await s.stub.LockQueues(store_pb2.LockQueuesRequest(group=G, client_id=B, queues=request.queues))
    assert [q.queue_id for q in other.locked] == [0]


@pytest.mark.asyncio
async def test_bad_requests_get_typed_errors(served: Served) -> None:
    s, E = served, errors_pb2
    lock, unlock = s.stub.LockQueues, s.stub.UnlockQueues

    def req(kind, group=G, client_id=A, queues=None):  # type: ignore[no-untyped-def]
        return kind(group=group, client_id=client_id, queues=[mq(s.store)] if queues is None else queues)

    L, U = store_pb2.LockQueuesRequest, store_pb2.UnlockQueuesRequest
    assert await code_of(lock(req(L, group=""))) == E.CODE_ILLEGAL_CONSUMER_GROUP
    assert await code_of(lock(req(L, group="bad group!"))) == E.CODE_ILLEGAL_CONSUMER_GROUP
    assert await code_of(lock(req(L, client_id=""))) == E.CODE_ILLEGAL_ARGUMENT
    assert await code_of(lock(req(L, client_id="x" * 256))) == E.CODE_ILLEGAL_ARGUMENT
    assert await code_of(lock(req(L, queues=[mq(s.store, store_id="elsewhere")]))) == E.CODE_STORE_NOT_FOUND
    assert await code_of(lock(req(L, queues=[mq(s.store, topic="")]))) == E.CODE_ILLEGAL_TOPIC
    assert await code_of(lock(req(L, queues=[mq(s.store, topic="NoSuchTopic")]))) == E.CODE_TOPIC_NOT_FOUND
    assert await code_of(lock(req(L, queues=[mq(s.store, queue_id=4)]))) == E.CODE_ILLEGAL_QUEUE_ID
    assert await code_of(lock(req(L, queues=[mq(s.store, queue_id=-1)]))) == E.CODE_ILLEGAL_QUEUE_ID
    assert await code_of(lock(req(L, queues=[mq(s.store)] * 4097))) == E.CODE_ILLEGAL_ARGUMENT
    assert await code_of(unlock(req(U, group=""))) == E.CODE_ILLEGAL_CONSUMER_GROUP
    assert await code_of(unlock(req(U, queues=[mq(s.store, store_id="elsewhere")]))) == E.CODE_STORE_NOT_FOUND
    assert await code_of(unlock(req(U, queues=[mq(s.store, queue_id=-1)]))) == E.CODE_ILLEGAL_QUEUE_ID
    # A deleted (unknown) topic's locks may still be released.
    await unlock(req(U, queues=[mq(s.store, topic="NoSuchTopic")]))
    # The index of the offending queue is named.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await lock(req(L, queues=[mq(s.store), mq(s.store, queue_id=9)]))
    assert TxmqError.from_rpc_error(info.value).metadata["index"] == "1"


@pytest.mark.asyncio
async def test_a_replica_that_does_not_lead_answers_not_leader(stores: StoreFactory) -> None:
    store = await stores.open("replica", replica_id="r1")
    assert store.replicated and store.replica.leadership is None
    async with _serve(store) as s:
        request = store_pb2.LockQueuesRequest(group=G, client_id=A, queues=[mq(store, topic="TopicA")])
        # The topic is unknown on this fresh replica: bad input is named first.
        assert await code_of(s.stub.LockQueues(request)) == errors_pb2.CODE_TOPIC_NOT_FOUND
        request = store_pb2.UnlockQueuesRequest(group=G, client_id=A, queues=[mq(store, topic="TopicA")])
        assert await code_of(s.stub.UnlockQueues(request)) == errors_pb2.CODE_NOT_LEADER


class _Term:
    """A stand-in Leadership: writable while not ended."""

    def __init__(self) -> None:
        self.ended = False

    def check_writable(self) -> None:
        if self.ended:
            raise TxmqError("ended", code=errors_pb2.CODE_NOT_LEADER)


@pytest.mark.asyncio
async def test_a_new_leadership_term_forgets_the_locks_and_waits_the_grace(stores: StoreFactory) -> None:
    store = await stores.open("replica", replica_id="r1")
    async with _serve(store) as s:
        locks = s.servicer.queue_locks
        keys = [common_pb2.MessageQueue(topic="T", store_id=store.store_id, queue_id=0)]
        s.clock.advance(LEASE)
        store.replica.leadership = _Term()  # type: ignore[assignment]
        assert locks.unlock(G, A, keys) == 0  # a new term: reset, grace from now
        s.clock.advance(LEASE // 2)
        locks.locks.lock(G, A, [("T", 0)])
        assert locks.locks.holder(G, "T", 0) == A
        store.replica.leadership = _Term()  # type: ignore[assignment]  # lost and won again
        locks.unlock(G, B, keys)
        assert locks.locks.holder(G, "T", 0) is None and locks.locks.in_grace()
