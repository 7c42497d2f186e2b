"""Orderly consumption of the push consumer (``PushConsumer(..., orderly=True)``; RocketMQ's
MessageListenerOrderly and ConsumeMessageOrderlyService; docs/consumers.md "Orderly
consumption").

``OrderlyService`` adds to the push consumer what orderly consumption needs:

- **Queue locks.** A queue the rebalance assigns is consumed only once the store that
  holds it has locked it for this client (``ConsumerControl.LockQueues``; ``lock_new``).
  Every third of the lease (``LockQueuesResponse.lease_ms``) all locks are renewed, one
  request per store (``renew``). A lock is **trusted for half the lease from the moment
  the request that got it was sent**: the store keeps it a whole lease from its receipt,
  and the second half is the margin (a slow answer, a pause, clock rates). A lock not
  renewed in time, or refused on renewal, *lapses*: no new batch of the queue starts,
  its offset is no longer committed, and the consumer releases the queue (``take_lapsed``)
  and locks it again like a new one (reading the committed offset then). The store
  fences commits too: one it refuses because another client holds the lock
  (``CODE_QUEUE_LOCKED``) lapses the lock the same way (``commit_refused``).
- **One consume thread per queue**, messages in queue-offset order,
  ``batch_size`` at a time (``submit`` schedules a queue's task when none is scheduled).
- **Failures**: RECONSUME_LATER, an exception or any other answer suspends the queue for
  ``suspend_time`` seconds and delivers the same messages again, ``reconsume_times``
  counting up. A message that failed with ``reconsume_times >= max_reconsume_times`` is
  sent to the group's dead-letter topic (``ConsumerControl.SendBack``, delay level -1)
  and counts as done; if that call fails (e.g. NOT_IMPLEMENTED on a store without it)
  the failure is logged and the queue stays suspended on the message: it is never
  skipped silently.
- **Release**: a queue taken away (or at shutdown) is stopped after its running batch,
  its offset committed (the consumer's ``_commit``, allowed only while the lock is
  valid: ``may_commit``), then unlocked (``remove``). A batch still running when the
  consumer gives up waiting commits and unlocks by itself when it ends.

The RPCs go through ``LockCalls`` (``StoreLockCalls`` by default), so the rules are unit
tested with fakes; time is ``now()`` (monotonic seconds), also injectable.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from txmq._client import call
from txmq._consumer_types import ConsumeStatus, listener_status
from txmq._convert import message_queue_to_proto
from txmq._failures import FailureLog
from txmq._process_queue import ProcessQueue
from txmq.errors import TxmqError
from txmq.message import MessageExt, MessageQueue
from txmq.v1 import store_pb2, store_pb2_grpc

log = logging.getLogger("txmq.consumer")

#: How long one consume task keeps a thread before it lets other queues' tasks run
#: (RocketMQ's MAX_TIME_CONSUME_CONTINUOUSLY is 60 s; shorter here, for fairness).
MAX_CONTINUOUS_S = 1.0
#: Until the first answer tells the lease, renewal rounds run this often.
DEFAULT_RENEW_S = 1.0


class LockCalls(Protocol):
    """The store calls orderly consumption makes (faked in unit tests)."""

    def lock(self, queues: list[MessageQueue]) -> tuple[set[MessageQueue], int]:
        """LockQueues on the store of ``queues`` (all of one store): (held, lease_ms)."""
        ...

    def unlock(self, queues: list[MessageQueue]) -> None: ...

    def send_back(self, msg: MessageExt, max_reconsume_times: int) -> None:
        """Send ``msg`` to the group's dead-letter topic; raise ``TxmqError`` if not done."""
        ...


class StoreLockCalls:
    """``LockCalls`` over gRPC: ConsumerControl on the store the route names for a queue."""

    def __init__(self, client: Any, group: str, client_id: str, *, timeout: float) -> None:
        self._client = client  # a txmq._pulling.PullClient
        self._group = group
        self._client_id = client_id
        self._timeout = timeout

    def _stub(self, topic: str, store_id: str) -> store_pb2_grpc.ConsumerControlStub:
        address = self._client.route(topic).store_address(store_id)
        return self._client.core.stub(address, store_pb2_grpc.ConsumerControlStub)

    def lock(self, queues: list[MessageQueue]) -> tuple[set[MessageQueue], int]:
        request = store_pb2.LockQueuesRequest(
            group=self._group, client_id=self._client_id, queues=[message_queue_to_proto(q) for q in queues]
        )
        try:
            response = call(self._stub(queues[0].topic, queues[0].store_id).LockQueues, request, timeout=self._timeout)
        except TxmqError:
            self._client.core.routes.mark_stale(queues[0].topic)  # e.g. NOT_LEADER: a new leader
            raise
        held = {MessageQueue(q.topic, q.store_id, q.queue_id) for q in response.locked}
        return held, response.lease_ms

    def unlock(self, queues: list[MessageQueue]) -> None:
        request = store_pb2.UnlockQueuesRequest(
            group=self._group, client_id=self._client_id, queues=[message_queue_to_proto(q) for q in queues]
        )
        call(self._stub(queues[0].topic, queues[0].store_id).UnlockQueues, request, timeout=self._timeout)

    def send_back(self, msg: MessageExt, max_reconsume_times: int) -> None:
        request = store_pb2.SendBackRequest(
            group=self._group,
            commit_log_offset=msg.commit_log_offset,
            unique_id=msg.msg_id,
            delay_level=-1,
            max_reconsume_times=max_reconsume_times,
            client_id=self._client_id,
        )
        call(self._stub(msg.topic, msg.store_id).SendBack, request, timeout=self._timeout)


@dataclass(eq=False, slots=True)
class _Queue:
    """Orderly state of one ProcessQueue (a queue held once; a new hold is a new one)."""

    pq: ProcessQueue
    valid_until: float  # the lock is trusted until then (monotonic seconds)
    scheduled: bool = False  # a consume task is queued, running or waiting out a suspension
    suspended_until: float = 0.0
    release_deferred: bool = False  # released while a batch ran: that batch commits and unlocks
    lapsed_reported: bool = False
    dlq_failures: dict[int, int] = field(default_factory=dict)  # queue offset -> failed send-backs


class OrderlyService:
    def __init__(
        self,
        *,
        client_id: str,
        listener: Callable[[list[MessageExt]], Any],
        calls: LockCalls,
        submit: Callable[..., Any],
        call_later: Callable[..., Any],
        commit: Callable[[ProcessQueue], None],
        on_lapsed: Callable[[], None],
        batch_size: int = 1,
        max_reconsume_times: int = 16,
        suspend_time: float = 1.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client_id = client_id
        self._listener = listener
        self._calls = calls
        self._submit = submit  # submit(fn, *args): run on a consume thread
        self._call_later = call_later  # call_later(delay_s, fn, *args)
        self._commit = commit
        self._on_lapsed = on_lapsed
        self._batch_size = batch_size
        self._max_reconsume_times = max_reconsume_times
        self._suspend_time = suspend_time
        self._now = now
        self._lock = threading.Lock()
        self._queues: dict[MessageQueue, _Queue] = {}
        self._lapsed: list[MessageQueue] = []
        self.lease_ms: int | None = None  # the last lease a store answered
        self._failures = FailureLog(log)
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()  # the next round moved earlier, or close()
        #: When the renewal thread runs its next round (monotonic seconds).
        self._next_round = now() + DEFAULT_RENEW_S
        self._renewer: threading.Thread | None = None

    # -- locks -------------------------------------------------------------------------

    def _trust(self, sent: float, lease_ms: int) -> float:
        self.lease_ms = lease_ms
        return sent + lease_ms / 2000

    def lock_new(self, mq: MessageQueue) -> float | None:
        """Lock a queue newly assigned; when it was granted, until when it is trusted
        (pass it to ``add``), else None (the store refused it: try again later).
        Raises the call's ``TxmqError``."""
        sent = self._now()
        held, lease_ms = self._calls.lock([mq])
        if mq not in held:
            log.debug("consumer %s: %s is locked by another consumer (or the store just started)", self.client_id, mq)
            return None
        return self._trust(sent, lease_ms)

    def add(self, pq: ProcessQueue, valid_until: float) -> None:
        """Start tracking a queue locked by ``lock_new`` (before it is pulled).

        A renewal round that began between ``lock_new`` and now did not see the queue,
        and the round after it may come too late for the lock (taking a queue on reads
        its committed offset first, slow on a cold start): the next round is moved up
        to a sixth of a lease before the lock's trust ends, as a renewed lock has."""
        with self._lock:
            self._queues[pq.mq] = _Queue(pq, valid_until)
            due = valid_until - self._renew_margin_s()
            if due < self._next_round:
                self._next_round = due
                self._wake.set()

    def _renew_margin_s(self) -> float:
        """How long before a lock's trust ends it is renewed: a sixth of the lease
        (rounds a third of a lease apart, trust half a lease from the request)."""
        return self.lease_ms / 6000 if self.lease_ms else DEFAULT_RENEW_S / 2

    def next_round(self) -> float:
        """When the next renewal round is due (monotonic seconds)."""
        with self._lock:
            return self._next_round

    def valid(self, pq: ProcessQueue) -> bool:
        q = self._queues.get(pq.mq)
        return q is not None and q.pq is pq and self._now() < q.valid_until

    def may_commit(self, pq: ProcessQueue) -> bool:
        """An offset of ``pq`` may be committed only while its lock is trusted: after
        that another consumer may hold the queue and have committed further."""
        return self.valid(pq)

    def commit_refused(self, pq: ProcessQueue) -> None:
        """The store refused a commit of ``pq`` (``CODE_QUEUE_LOCKED``): another client
        holds its lock, whatever this side trusted (a pause past the margin, a clock that
        ran slow). The lock lapses now: no new batch, and the queue is released and
        locked again like a new one, from the committed offset (the holder's)."""
        with self._lock:
            q = self._queues.get(pq.mq)
            if q is None or q.pq is not pq:
                return
            q.valid_until = min(q.valid_until, self._now())
        log.warning(
            "consumer %s: the store refused a commit of %s: another consumer holds its lock", self.client_id, pq.mq
        )
        self.check_lapsed()

    def renew(self) -> float:
        """One renewal round: lock again every queue held, one request per store; the
        queues refused or not renewed in time lapse. Returns when to renew next
        (monotonic seconds): a third of the lease after this round began."""
        began = self._now()
        with self._lock:
            by_store = group_by_store(self._queues)
            self._next_round = float("inf")  # a queue added from now on moves it up (add)
        for store_id, queues in sorted(by_store.items()):
            sent = self._now()
            what = f"renewing the locks of {len(queues)} queue(s) on store {store_id}"
            try:
                held, lease_ms = self._calls.lock(sorted(queues))
            except TxmqError as err:
                self._failures.failed(("lock", store_id), f"consumer {self.client_id}: {what}", err)
                continue
            self._failures.recovered(("lock", store_id), f"consumer {self.client_id}: {what}")
            until = self._trust(sent, lease_ms)
            with self._lock:
                for mq in queues:
                    q = self._queues.get(mq)
                    if q is None:
                        continue
                    if mq in held:
                        q.valid_until = max(q.valid_until, until)
                    elif q.valid_until > sent:
                        log.warning("consumer %s: the store refused to renew the lock of %s", self.client_id, mq)
                        q.valid_until = sent  # stop now: someone else may get it
        self.check_lapsed()
        interval = self.lease_ms / 3000 if self.lease_ms else DEFAULT_RENEW_S
        with self._lock:
            self._next_round = min(self._next_round, began + interval)
            return self._next_round

    def check_lapsed(self) -> list[MessageQueue]:
        """Queues whose lock lapsed (reported once each to ``on_lapsed``)."""
        now = self._now()
        lapsed: list[MessageQueue] = []
        with self._lock:
            for mq, q in self._queues.items():
                if now >= q.valid_until and not q.lapsed_reported:
                    q.lapsed_reported = True
                    lapsed.append(mq)
            self._lapsed.extend(lapsed)
        for mq in lapsed:
            log.warning(
                "consumer %s: the lock of %s lapsed (refused, or not renewed in time); "
                "stopping it until it is locked again",
                self.client_id,
                mq,
            )
        if lapsed:
            self._on_lapsed()
        return lapsed

    def take_lapsed(self) -> list[MessageQueue]:
        """The lapsed queues to release (the consumer's service thread asks)."""
        with self._lock:
            lapsed, self._lapsed = self._lapsed, []
        return lapsed

    def remove(self, pq: ProcessQueue) -> None:
        """``pq`` was released (dropped; committed if it could be): unlock it, or, while
        a batch still runs on it, let that batch commit and unlock when it ends."""
        with self._lock:
            q = self._queues.get(pq.mq)
            if q is None or q.pq is not pq:
                return
            with pq.lock:
                if pq.running:
                    q.release_deferred = True
                    return
        # A batch that ended after the caller's commit moved the commit point: commit it
        # (nothing is sent when it did not move), then unlock.
        self._commit(pq)
        with self._lock:
            if self._queues.get(pq.mq) is q:
                del self._queues[pq.mq]
        self._unlock(pq.mq)

    def _unlock(self, mq: MessageQueue) -> None:
        try:
            self._calls.unlock([mq])
        except TxmqError as err:  # the lease ends it anyway
            log.info("consumer %s: unlocking %s failed (its lease will end it): %s", self.client_id, mq, err)

    # -- the renewal thread ------------------------------------------------------------

    def start(self) -> None:
        self._renewer = threading.Thread(target=self._renew_loop, name="txmq-consumer-locks", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        while True:
            woken = self._wake.wait(max(0.0, self.next_round() - self._now()))
            if self._stop.is_set():
                return
            if woken:  # the next round moved up: wait for the new time
                self._wake.clear()
                continue
            try:
                self.renew()
            except Exception:  # renewals must go on
                log.exception("consumer %s: renewing queue locks failed", self.client_id)
                with self._lock:
                    self._next_round = self._now() + DEFAULT_RENEW_S

    def close(self) -> None:
        """Stop renewing; unlock what is still held (after the consumer's last commits)."""
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        with self._lock:
            held = list(self._queues)
            self._queues.clear()
        for queues in group_by_store(held).values():
            try:
                self._calls.unlock(sorted(queues))
            except TxmqError as err:
                log.info("consumer %s: unlocking at shutdown failed (the leases end them): %s", self.client_id, err)

    # -- consuming -----------------------------------------------------------------------

    def submit(self, pq: ProcessQueue) -> None:
        """Messages arrived for ``pq``: run its consume task unless one is scheduled."""
        q = self._queues.get(pq.mq)
        if q is None or q.pq is not pq:
            return
        with pq.lock:
            if q.scheduled or pq.dropped or self._closed:
                return
            q.scheduled = True
        try:
            self._submit(self._run, q)
        except RuntimeError:  # shut down meanwhile
            with pq.lock:
                q.scheduled = False

    def _resume(self, q: _Queue) -> None:
        """A suspension ended (timer thread): hand the task back to a consume thread."""
        try:
            self._submit(self._run, q)
        except RuntimeError:
            with q.pq.lock:
                q.scheduled = False

    def _run(self, q: _Queue) -> None:
        """The queue's one consume task: batches in offset order while the lock is
        trusted, up to MAX_CONTINUOUS_S, then it lets others run."""
        pq = q.pq
        started = self._now()
        while True:
            with pq.lock:
                now = self._now()
                if pq.dropped or self._closed:
                    q.scheduled = False
                    return
                if now >= q.valid_until:
                    q.scheduled = False  # the lapse is reported; the queue gets released
                    lapsed = True
                elif now < q.suspended_until:
                    self._call_later(q.suspended_until - now, self._resume, q)
                    return
                elif not pq.pending:
                    q.scheduled = False
                    return
                elif now - started >= MAX_CONTINUOUS_S:
                    break
                else:
                    lapsed = False
                    batch = [pq.pending[o] for o in heapq.nsmallest(self._batch_size, pq.pending)]
                    pq.running += 1
            if lapsed:
                self.check_lapsed()
                return
            self._consume(q, batch)
        try:
            self._submit(self._run, q)
        except RuntimeError:
            with pq.lock:
                q.scheduled = False

    def _consume(self, q: _Queue, batch: list[MessageExt]) -> None:
        pq = q.pq
        status = listener_status(
            self._listener, batch, log, client_id=self.client_id, where=pq.mq, then="suspending the queue"
        )
        done: list[MessageExt] = list(batch) if status is ConsumeStatus.CONSUME_SUCCESS else []
        if not done:
            done = self._dead_letter(q, batch)
        with pq.lock:
            pq.running -= 1
            for m in done:
                pq.pending.pop(m.queue_offset, None)
                q.dlq_failures.pop(m.queue_offset, None)
            if len(done) < len(batch):
                done_ids = {id(m) for m in done}
                for m in batch:
                    if id(m) not in done_ids:
                        m.reconsume_times += 1
                q.suspended_until = self._now() + self._suspend_time
            pq.lock.notify_all()
            finish_release = pq.dropped and q.release_deferred and not pq.running
        if finish_release:
            self._finish_release(q)

    def _dead_letter(self, q: _Queue, batch: list[MessageExt]) -> list[MessageExt]:
        """The failed batch's messages past ``max_reconsume_times`` sent to the
        dead-letter topic; those the store took (done)."""
        done: list[MessageExt] = []
        for m in batch:
            if m.reconsume_times < self._max_reconsume_times:
                continue
            try:
                self._calls.send_back(m, self._max_reconsume_times)
            except TxmqError as err:
                failures = q.dlq_failures[m.queue_offset] = q.dlq_failures.get(m.queue_offset, 0) + 1
                if failures == 1 or failures % 60 == 0:
                    log.error(
                        "consumer %s: message %s (%s offset %d) failed %d times and cannot be sent to the "
                        "dead-letter topic (%s); the queue stays suspended on it",
                        self.client_id, m.msg_id, q.pq.mq, m.queue_offset, m.reconsume_times + 1, err,
                    )  # fmt: skip
                continue
            log.error(
                "consumer %s: message %s (%s offset %d) failed %d times; sent to the dead-letter topic",
                self.client_id, m.msg_id, q.pq.mq, m.queue_offset, m.reconsume_times + 1,
            )  # fmt: skip
            done.append(m)
        return done

    def _finish_release(self, q: _Queue) -> None:
        """The batch that outlived its queue's release ended: commit, then unlock."""
        self._commit(q.pq)
        with self._lock:
            if self._queues.get(q.pq.mq) is q:
                del self._queues[q.pq.mq]
        self._unlock(q.pq.mq)


def group_by_store(queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    by_store: dict[str, list[MessageQueue]] = {}
    for mq in queues:
        by_store.setdefault(mq.store_id, []).append(mq)
    return by_store
