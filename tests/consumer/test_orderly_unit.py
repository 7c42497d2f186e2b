"""The rules of orderly consumption (txmq._orderly.OrderlyService, and its hooks in
PushConsumer) with fake RPCs, a fake executor and timer, and a hand-moved clock: no
threads, no sleeps.

- messages reach the listener in queue-offset order, ``batch_size`` at a time, from one
  task per queue;
- a failed batch suspends the queue (``suspend_time``) and is delivered again, the next
  message not before it succeeded; past ``max_reconsume_times`` it goes to the
  dead-letter topic, and while that call fails the queue stays on it;
- a lock is trusted for half the lease from when its request was sent; renewals extend
  it, a refused or missing renewal lapses it (no new batch, no commit);
- a release commits, then unlocks; a batch still running defers both to its end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from txmq import ConsumeStatus, PushConsumer
from txmq._orderly import OrderlyService
from txmq._process_queue import ProcessQueue
from txmq.errors import NotImplementedYetError, TxmqError, UnavailableError
from txmq.message import MessageExt, MessageQueue
from txmq.v1 import errors_pb2

LEASE_MS = 6000
MQ = MessageQueue("T", "store-0", 0)
MQ1 = MessageQueue("T", "store-0", 1)


def message(offset: int, mq: MessageQueue = MQ) -> MessageExt:
    return MessageExt(
        mq.topic,
        f"m{offset}".encode(),
        unique_id=f"id-{mq.queue_id}-{offset}",
        offset_msg_id="",
        queue_offset=offset,
        commit_log_offset=1000 + offset,
        store_size_bytes=0,
        body_crc=0,
        sys_flag=0,
        born_timestamp_ms=0,
        born_host="",
        store_timestamp_ms=0,
        store_host="",
        reconsume_times=0,
        prepared_transaction_offset=0,
        store_id=mq.store_id,
        queue_id=mq.queue_id,
    )


class FakeCalls:
    def __init__(self, events: list[tuple[str, Any]]) -> None:
        self.events = events
        self.grant = True
        self.fail: TxmqError | None = None
        self.send_back_error: TxmqError | None = NotImplementedYetError(
            "SendBack is not built yet", code=errors_pb2.CODE_NOT_IMPLEMENTED
        )

    def lock(self, queues: list[MessageQueue]) -> tuple[set[MessageQueue], int]:
        self.events.append(("lock", list(queues)))
        if self.fail is not None:
            raise self.fail
        return (set(queues) if self.grant else set()), LEASE_MS

    def unlock(self, queues: list[MessageQueue]) -> None:
        self.events.append(("unlock", list(queues)))

    def send_back(self, msg: MessageExt, max_reconsume_times: int) -> None:
        self.events.append(("send_back", msg.queue_offset))
        if self.send_back_error is not None:
            raise self.send_back_error


class Harness:
    """An OrderlyService on fakes: ``run()`` runs the submitted tasks inline,
    ``fire_timers()`` the due timer callbacks; ``t`` is the clock (seconds)."""

    def __init__(self, listener: Callable[[list[MessageExt]], Any], *, batch_size: int = 1, max_reconsume: int = 16):
        self.t = 100.0
        self.events: list[tuple[str, Any]] = []
        self.calls = FakeCalls(self.events)
        self.tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.timers: list[tuple[float, Callable[..., Any], tuple[Any, ...]]] = []
        self.lapses = 0
        self.seen: list[list[int]] = []

        def recording(msgs: list[MessageExt]) -> Any:
            self.seen.append([m.queue_offset for m in msgs])
            return listener(msgs)

        self.service = OrderlyService(
            client_id="me",
            listener=recording,
            calls=self.calls,
            submit=lambda fn, *args: self.tasks.append((fn, args)),
            call_later=lambda delay, fn, *args: self.timers.append((self.t + delay, fn, args)),
            commit=lambda pq: self.events.append(("commit", pq.commit_point())),
            on_lapsed=self._lapsed,
            batch_size=batch_size,
            max_reconsume_times=max_reconsume,
            suspend_time=1.0,
            now=lambda: self.t,
        )

    def _lapsed(self) -> None:
        self.lapses += 1

    def hold(self, mq: MessageQueue = MQ, offsets: range = range(0)) -> ProcessQueue:
        until = self.service.lock_new(mq)
        assert until is not None
        pq = ProcessQueue(mq, 0)
        self.service.add(pq, until)
        self.arrive(pq, offsets)
        return pq

    def arrive(self, pq: ProcessQueue, offsets: range) -> None:
        with pq.lock:
            pq.take([message(o, pq.mq) for o in offsets], offsets.stop if offsets else pq.next_offset)
        self.service.submit(pq)

    def run(self) -> None:
        while self.tasks:
            fn, args = self.tasks.pop(0)
            fn(*args)

    def fire_timers(self) -> None:
        due = [t for t in self.timers if t[0] <= self.t]
        self.timers = [t for t in self.timers if t[0] > self.t]
        for _, fn, args in due:
            fn(*args)


def success(msgs: list[MessageExt]) -> ConsumeStatus:
    return ConsumeStatus.CONSUME_SUCCESS


def test_messages_go_in_offset_order_in_batches_from_one_task_per_queue() -> None:
    h = Harness(success, batch_size=2)
    pq = h.hold(offsets=range(0, 5))
    h.arrive(pq, range(5, 7))  # a task is scheduled already: no second one
    assert len(h.tasks) == 1
    h.run()
    assert h.seen == [[0, 1], [2, 3], [4, 5], [6]]
    assert not pq.pending and pq.commit_point() == 7 and pq.running == 0
    h.arrive(pq, range(7, 8))  # the task ended: a new one for new messages
    h.run()
    assert h.seen[-1] == [7]


def test_a_failed_batch_suspends_the_queue_and_is_delivered_again_first() -> None:
    failures = {1: 2}  # offset 1 fails twice

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        m = msgs[0]
        if failures.get(m.queue_offset, 0) > 0:
            failures[m.queue_offset] -= 1
            if m.reconsume_times == 0:
                raise RuntimeError("boom")  # an exception counts as RECONSUME_LATER
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    h = Harness(listener)
    pq = h.hold(offsets=range(0, 4))
    h.run()
    assert h.seen == [[0], [1]]  # 2 and 3 wait behind the failed 1
    assert pq.commit_point() == 1 and [t for t, _, _ in h.timers] == [h.t + 1.0]
    h.arrive(pq, range(4, 5))  # a suspended queue gets no second task
    assert not h.tasks
    h.t += 0.5
    h.fire_timers()
    assert not h.tasks
    h.t += 0.5
    h.fire_timers()
    h.run()
    assert h.seen == [[0], [1], [1]] and pq.pending[1].reconsume_times == 2
    h.t += 1.0
    h.fire_timers()
    h.run()
    assert h.seen == [[0], [1], [1], [1], [2], [3], [4]]
    assert not pq.pending


def test_past_max_reconsume_times_the_message_goes_to_the_dead_letter_topic_never_skipped() -> None:
    h = Harness(
        lambda msgs: ConsumeStatus.RECONSUME_LATER if msgs[0].queue_offset == 0 else success(msgs), max_reconsume=2
    )
    pq = h.hold(offsets=range(0, 2))

    def once() -> None:
        h.run()
        h.t += 1.0
        h.service.renew()  # keeps the lock valid
        h.fire_timers()

    for _ in range(3):
        once()
    # Three failures (reconsume_times 0, 1, 2): the third tries the dead-letter topic,
    # which is not built yet (NOT_IMPLEMENTED): the message stays, the queue suspended.
    assert [e for e in h.events if e[0] == "send_back"] == [("send_back", 0)]
    assert 0 in pq.pending and h.seen == [[0], [0], [0]]
    once()
    assert [e for e in h.events if e[0] == "send_back"] == [("send_back", 0)] * 2
    assert 0 in pq.pending and 1 in pq.pending
    h.calls.send_back_error = None  # SendBack works now
    once()
    h.run()
    assert h.seen[-2:] == [[0], [1]] and not pq.pending


def test_a_lock_is_trusted_for_half_the_lease_from_the_request_and_renewals_extend_it() -> None:
    h = Harness(success)
    pq = h.hold()
    assert h.service.valid(pq) and h.service.may_commit(pq)
    h.t += LEASE_MS / 3000  # a renewal round, sent now
    next_at = h.service.renew()
    assert next_at == pytest.approx(h.t + LEASE_MS / 3000)
    h.t += LEASE_MS / 2000 - 0.001
    assert h.service.valid(pq)
    h.t += 0.001
    assert not h.service.valid(pq) and not h.service.may_commit(pq)
    # The task does not start a batch on a lapsed lock; the lapse is reported once.
    h.arrive(pq, range(0, 1))
    h.run()
    assert h.seen == [] and h.lapses == 1
    assert h.service.take_lapsed() == [MQ] and h.service.take_lapsed() == []


def test_a_queue_taken_on_during_a_renewal_round_is_renewed_before_its_lock_lapses() -> None:
    """A round that began between lock_new and add did not see the queue; when taking it
    on was slow, the round after comes too late. add() moves the next round up to a
    sixth of a lease before the lock's trust ends."""
    h = Harness(success)
    sixth = LEASE_MS / 6000
    h.service.renew()  # the lease is known, as after any earlier round
    until = h.service.lock_new(MQ)
    assert until is not None
    h.t += 2 * sixth - 0.1  # a round begins, not seeing the queue (not added yet)
    h.service.renew()
    h.t += 0.05  # the queue's committed offset has been read
    pq = ProcessQueue(MQ, 0)
    h.service.add(pq, until)
    assert h.service.next_round() == pytest.approx(until - sixth)
    h.t = h.service.next_round()
    h.service.renew()
    h.t = until + 0.001  # without that round the lock would lapse here
    assert h.service.valid(pq) and h.service.check_lapsed() == [] and h.lapses == 0
    assert h.service.next_round() == pytest.approx(until - sixth + 2 * sixth)


def test_a_renewal_that_fails_or_is_refused_lapses_the_lock() -> None:
    h = Harness(success)
    pq0 = h.hold(MQ)
    pq1 = h.hold(MQ1)
    h.calls.fail = UnavailableError("store down", code=errors_pb2.CODE_UNAVAILABLE)
    h.t += LEASE_MS / 3000
    h.service.renew()  # failed: validity stays as it was
    assert h.service.valid(pq0) and h.lapses == 0
    h.t += LEASE_MS / 3000  # past half the lease since the grant
    h.service.renew()
    assert not h.service.valid(pq0) and not h.service.valid(pq1)
    assert sorted(h.service.take_lapsed()) == [MQ, MQ1] and h.lapses == 1
    # Refused (another holder, or the store restarted): stop at once, not at the old expiry.
    h2 = Harness(success)
    pq = h2.hold()
    h2.calls.grant = False
    h2.t += 0.1
    h2.service.renew()
    assert not h2.service.valid(pq) and h2.service.take_lapsed() == [MQ]


def test_remove_unlocks_and_a_running_batch_commits_then_unlocks_when_it_ends() -> None:
    h = Harness(success)
    pq = h.hold(offsets=range(0, 3))
    h.service.remove(pq)
    assert h.events[-1] == ("unlock", [MQ])
    assert not h.service.valid(pq)

    # A batch still running when its queue is released: the release is deferred.
    release: list[Callable[[], None]] = []

    def slow(msgs: list[MessageExt]) -> ConsumeStatus:
        release[0]()  # the queue is taken away while this batch runs
        return ConsumeStatus.CONSUME_SUCCESS

    h2 = Harness(slow)
    pq2 = h2.hold(offsets=range(0, 3))

    def take_away() -> None:
        with pq2.lock:
            pq2.dropped = True
        h2.service.remove(pq2)
        assert not [e for e in h2.events if e[0] == "unlock"]

    release.append(take_away)
    h2.run()
    assert h2.seen == [[0]]  # nothing new after the drop
    assert [e for e in h2.events if e[0] in ("commit", "unlock")] == [("commit", 1), ("unlock", [MQ])]


def test_push_consumer_release_commits_then_unlocks_and_skips_the_commit_of_a_lapsed_lock() -> None:
    events: list[tuple[str, Any]] = []

    class FakeClient:
        def commit_offset(self, mq: MessageQueue, offset: int) -> None:
            events.append(("commit", offset))

    consumer = PushConsumer("orderly-unit", "127.0.0.1:1", orderly=True)
    h = Harness(success)
    h.events = events
    h.calls.events = events
    consumer._client = FakeClient()  # type: ignore[assignment]
    consumer._orderly = h.service
    h.service._commit = consumer._commit  # the consumer's: only a moved point, only while locked
    pq = h.hold(offsets=range(0, 3))
    consumer._queues[MQ] = pq
    h.run()
    consumer._release(MQ)
    assert [e for e in events if e[0] in ("commit", "unlock")] == [("commit", 3), ("unlock", [MQ])]
    # A lapsed lock: released without a commit (someone else may hold the queue), unlocked.
    events.clear()
    pq = h.hold(MQ1, offsets=range(0, 2))
    consumer._queues[MQ1] = pq
    h.run()
    h.t += LEASE_MS / 2000
    consumer._release(MQ1)
    assert [e for e in events if e[0] in ("commit", "unlock")] == [("unlock", [MQ1])]


def test_orderly_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        PushConsumer("g", "127.0.0.1:1", orderly=True, suspend_current_queue_time=0)


def test_store_lock_calls_ask_the_store_of_the_queue() -> None:
    from txmq._orderly import StoreLockCalls
    from txmq.v1 import common_pb2, store_pb2

    asked: list[tuple[str, str, object]] = []

    class Stub:
        def __init__(self, address: str) -> None:
            self.address = address

        def LockQueues(self, request: object, timeout: float) -> store_pb2.LockQueuesResponse:
            asked.append((self.address, "lock", request))
            q = request.queues[0]  # type: ignore[attr-defined]
            return store_pb2.LockQueuesResponse(locked=[q], lease_ms=LEASE_MS)

        def UnlockQueues(self, request: object, timeout: float) -> store_pb2.UnlockQueuesResponse:
            asked.append((self.address, "unlock", request))
            return store_pb2.UnlockQueuesResponse()

        def SendBack(self, request: object, timeout: float) -> store_pb2.SendBackResponse:
            asked.append((self.address, "send_back", request))
            return store_pb2.SendBackResponse(dead_lettered=True)

    class Route:
        def store_address(self, store_id: str) -> str:
            return f"addr-of-{store_id}"

    class Core:
        routes = None

        def stub(self, address: str, stub_type: object) -> Stub:
            return Stub(address)

    class Client:
        core = Core()

        def route(self, topic: str) -> Route:
            return Route()

    calls = StoreLockCalls(Client(), "G", "me", timeout=1.0)
    held, lease = calls.lock([MQ, MQ1])
    assert held == {MQ} and lease == LEASE_MS
    calls.unlock([MQ1])
    calls.send_back(message(7), 5)
    (a1, k1, r1), (_, k2, r2), (_, k3, r3) = asked
    assert (a1, k1) == ("addr-of-store-0", "lock") and r1 == store_pb2.LockQueuesRequest(
        group="G",
        client_id="me",
        queues=[common_pb2.MessageQueue(topic="T", store_id="store-0", queue_id=i) for i in (0, 1)],
    )
    assert k2 == "unlock" and [q.queue_id for q in r2.queues] == [1]  # type: ignore[attr-defined]
    assert k3 == "send_back" and r3 == store_pb2.SendBackRequest(
        group="G", commit_log_offset=1007, unique_id="id-0-7", delay_level=-1, max_reconsume_times=5, client_id="me"
    )


def test_rebalance_takes_a_queue_once_locked_without_the_timed_hand_over() -> None:
    from txmq._subscription import build_subscription

    events: list[tuple[str, Any]] = []
    queues = [MessageQueue("T", "store-0", i) for i in range(2)]

    class Route:
        def read_queues(self) -> list[MessageQueue]:
            return list(queues)

    class FakeClient:
        def route(self, topic: str) -> Route:
            return Route()

        def fetch_offset(self, mq: MessageQueue) -> int | None:
            events.append(("fetch_offset", mq.queue_id))
            return 10

        def commit_offset(self, mq: MessageQueue, offset: int) -> None:
            events.append(("commit", offset))

    consumer = PushConsumer("orderly-unit", "127.0.0.1:1", client_id="a", orderly=True, takeover_delay=60)
    h = Harness(success)
    h.events = h.calls.events = events
    consumer._client = FakeClient()  # type: ignore[assignment]
    consumer._orderly = h.service
    h.service._commit = consumer._commit  # the consumer's: only a moved point, only while locked
    consumer._state = "running"
    consumer._subs["T"] = build_subscription("T", "*")
    consumer._pull = lambda pq: events.append(("pull", pq.mq.queue_id))  # type: ignore[method-assign]
    consumer._view.update(["a"], now=0.0)
    consumer._view.update(["a", "b"], now=100.0)  # "a" gets queue 0; the group just changed
    h.calls.grant = False  # b still holds it
    assert consumer._rebalance(100.0) == pytest.approx(100.5)  # asked again in 0.5 s
    assert consumer.assignment() == set() and ("fetch_offset", 0) not in events
    h.calls.grant = True
    assert consumer._rebalance(100.5) is None  # no takeover_delay wait: the lock decides
    assert consumer.assignment() == {queues[0]}
    # Locked first, then the committed offset read, then pulled.
    assert [e for e in events if e[0] in ("lock", "fetch_offset", "pull")][-3:] == [
        ("lock", [queues[0]]),
        ("fetch_offset", 0),
        ("pull", 0),
    ]
    # A lapsed lock: the next rebalance releases the queue (no commit, unlock) and locks it again.
    events.clear()
    h.t += LEASE_MS / 2000
    assert h.service.check_lapsed() == [queues[0]]
    consumer._rebalance(101.0)
    assert [e[0] for e in events] == ["unlock", "lock", "fetch_offset", "pull"]
    assert consumer.assignment() == {queues[0]} and h.service.valid(consumer._queues[queues[0]])
