"""Leased queue locks of orderly consumption (RocketMQ's RebalanceLockManager; the
ConsumerControl RPCs LockQueues / UnlockQueues; docs/consumers.md "Orderly consumption").

Per (group, topic, queue id) of this store: the client id holding the queue and when its
lease ends, on the injected clock's monotonic ``now_ms``, in memory only.

- ``lock``: each queue asked for is granted when it is free, its lease ended, or the
  caller holds it already (a renewal: the lease starts again from now); a queue another
  client of the group holds under a live lease is not. The answer is the queues the
  caller holds now.
- ``unlock``: releases the caller's locks on the queues named; others' are left alone.
- **grace**: the table is memory only, so right after the store starts (or a replica
  starts leading its group, ``reset``) nothing is known about locks granted before. A
  consumer trusts a lock for at most half a lease after it sent the request that got it
  (the SDK's rule, ``txmq._orderly``), so for half a lease from the start **no lock is
  granted**: by then every lock granted before the start has run out on its holder.

This is not the etcd lease of ``txmq_runtime.lease`` (docs/leases.md): there the arbiter
is etcd and the holder is a process of ours that campaigns for a key; here the store
*is* the arbiter, for queues it serves, and the holders are consumers that renew by
asking again. The safety argument is the same shape (the holder stops well before the
arbiter lets go): the store keeps a lock a whole lease from its receipt of the request,
the client stops trusting it half a lease after sending it, so the second half is the
margin for a slow answer, a paused consumer and clock rate differences. Like the etcd
lease, it is not mutual exclusion against a consumer paused between its check and its
listener call for more than that margin (docs/consumers.md says what can still happen).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import Gauge

from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2
from txmq_runtime.clock import Clock

from .replication import not_leader
from .validation import check_group_name, check_topic_name

if TYPE_CHECKING:
    from .message_store import MessageStore

log = logging.getLogger("txmq.store")

#: (topic, queue id) of a queue of this store.
QueueKey = tuple[str, int]

LOCKS = Gauge(
    "txmq_store_queue_locks",
    "Queue locks of orderly consumers in the store's table (expired ones leave at the next sweep).",
)


@dataclass(slots=True)
class _Lock:
    client_id: str
    expires_ms: int


class QueueLocks:
    def __init__(self, *, lease_ms: int, clock: Clock) -> None:
        if lease_ms <= 0:
            raise ValueError(f"lease_ms must be > 0, not {lease_ms}")
        self.lease_ms = lease_ms
        self._clock = clock
        self._locks: dict[tuple[str, str, int], _Lock] = {}
        self._grace_until_ms = 0
        self._next_sweep_ms = 0
        self.reset()

    @property
    def grace_ms(self) -> int:
        """How long after a start no lock is granted: half a lease."""
        return (self.lease_ms + 1) // 2

    def reset(self) -> None:
        """Forget every lock and grant none for ``grace_ms`` from now: at the start, and
        when a replica starts leading its group (the old leader's locks are unknown)."""
        self._locks.clear()
        self._grace_until_ms = self._clock.now_ms() + self.grace_ms
        LOCKS.set(0)

    def in_grace(self) -> bool:
        return self._clock.now_ms() < self._grace_until_ms

    def lock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> list[QueueKey]:
        """Grant or renew what can be; the queues (of ``queues``, in their order) that
        ``client_id`` holds now."""
        now = self._clock.now_ms()
        self._sweep(now)
        if now < self._grace_until_ms:
            return []
        held: list[QueueKey] = []
        expires = now + self.lease_ms
        for topic, queue_id in dict.fromkeys(queues):
            key = (group, topic, queue_id)
            current = self._locks.get(key)
            if current is None or current.client_id == client_id or current.expires_ms <= now:
                self._locks[key] = _Lock(client_id, expires)
                held.append((topic, queue_id))
        LOCKS.set(len(self._locks))
        return held

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> int:
        """Release ``client_id``'s locks on ``queues``; how many it held."""
        released = 0
        for topic, queue_id in queues:
            key = (group, topic, queue_id)
            current = self._locks.get(key)
            if current is not None and current.client_id == client_id:
                del self._locks[key]
                released += 1
        LOCKS.set(len(self._locks))
        return released

    def holder(self, group: str, topic: str, queue_id: int) -> str | None:
        """Who holds the queue under a live lease (None: nobody)."""
        current = self._locks.get((group, topic, queue_id))
        if current is None or current.expires_ms <= self._clock.now_ms():
            return None
        return current.client_id

    def __len__(self) -> int:
        return len(self._locks)

    def _sweep(self, now: int) -> None:
        """Drop expired locks, at most once a lease (bounds the table to the queues
        locked within about two leases)."""
        if now < self._next_sweep_ms:
            return
        self._next_sweep_ms = now + self.lease_ms
        for key in [k for k, v in self._locks.items() if v.expires_ms <= now]:
            del self._locks[key]


#: Queues one LockQueues / UnlockQueues request may name.
MAX_QUEUES_PER_REQUEST = 4096
#: Longest client id accepted (RocketMQ's are ip@pid-like; ours host@pid@random).
MAX_CLIENT_ID_LENGTH = 255


class StoreQueueLocks:
    """The queue locks of one ``MessageStore``: the checks of a request against the store
    (its queues, its leadership) and the grace at a new leadership term.

    In a replicated store group only the leader answers, and only while it may take
    writes (``NOT_LEADER`` / ``NOT_ENOUGH_REPLICAS`` as for writes); a replica that
    starts leading (a new ``Leadership``, noticed at the first request of the term)
    forgets the table and starts the grace then: the locks the old leader granted are
    unknown to it. (Counting from that request rather than from the election only
    makes the grace end later.)"""

    def __init__(self, store: MessageStore, *, clock: Clock) -> None:
        self._store = store
        self.locks = QueueLocks(lease_ms=store.settings.queue_lock_lease_ms, clock=clock)
        self._term: object | None = store.replica.leadership if store.replica is not None else None

    def lock(self, group: str, client_id: str, queues: Sequence[common_pb2.MessageQueue]) -> list[QueueKey]:
        keys = self._check(group, client_id, queues, topics_exist=True)
        return self.locks.lock(group, client_id, keys)

    def unlock(self, group: str, client_id: str, queues: Sequence[common_pb2.MessageQueue]) -> int:
        # A deleted topic's locks can still be released: its name is only checked.
        keys = self._check(group, client_id, queues, topics_exist=False)
        return self.locks.unlock(group, client_id, keys)

    def check_commit(self, group: str, client_id: str, topic: str, queue_id: int) -> None:
        """Refuse (``CODE_QUEUE_LOCKED``) an offset commit of ``client_id`` on a queue
        another client of the group holds under a live lease: the committer's lock lapsed
        (or it never had one), and moving the offset would overwrite the holder's
        progress. A queue nobody holds is left to the caller, as without locks."""
        self._check_serving()  # a new term forgets the old one's table first
        holder = self.locks.holder(group, topic, queue_id)
        if holder is not None and holder != client_id:
            raise error(
                errors_pb2.CODE_QUEUE_LOCKED,
                f"queue {topic}:{queue_id} of group {group} is locked by another client; "
                f"{client_id} may not commit its offset",
                topic=topic,
                queue_id=str(queue_id),
            )

    def _check_serving(self) -> None:
        store, replica = self._store, self._store.replica
        if replica is None:
            return
        leadership = replica.leadership
        if leadership is None:
            raise not_leader(*replica.leader_hint)
        leadership.check_writable()
        if leadership is not self._term:
            self._term = leadership
            self.locks.reset()
            log.info(
                "store %s: leading, so queue locks start empty; none granted for %d ms",
                store.store_id,
                self.locks.grace_ms,
            )

    def _check(
        self, group: str, client_id: str, queues: Sequence[common_pb2.MessageQueue], *, topics_exist: bool
    ) -> list[QueueKey]:
        check_group_name(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if not client_id:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "client_id is empty")
        if len(client_id) > MAX_CLIENT_ID_LENGTH:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"client_id is {len(client_id)} characters long, at most {MAX_CLIENT_ID_LENGTH}",
            )
        if len(queues) > MAX_QUEUES_PER_REQUEST:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"{len(queues)} queues in one request, at most {MAX_QUEUES_PER_REQUEST}",
            )
        store_id = self._store.store_id
        keys: list[QueueKey] = []
        for index, q in enumerate(queues):
            where = dict(index=str(index))
            if q.store_id != store_id:
                raise error(
                    errors_pb2.CODE_STORE_NOT_FOUND,
                    f"queue {q.topic}:{q.queue_id} names store {q.store_id!r}, this is store {store_id!r}",
                    store_id=q.store_id,
                    this_store_id=store_id,
                    **where,
                )
            if topics_exist:
                try:
                    cfg = self._store.admin.get_topic(q.topic)
                except TxmqError as err:
                    err.metadata.update(where)
                    raise
                if not 0 <= q.queue_id < cfg.read_queue_nums:
                    raise error(
                        errors_pb2.CODE_ILLEGAL_QUEUE_ID,
                        f"topic {q.topic} has no readable queue {q.queue_id} (it has {cfg.read_queue_nums})",
                        topic=q.topic,
                        queue_id=str(q.queue_id),
                        **where,
                    )
            else:
                check_topic_name(q.topic, **where)
                if q.queue_id < 0:
                    raise error(
                        errors_pb2.CODE_ILLEGAL_QUEUE_ID,
                        f"queue id {q.queue_id} is negative",
                        queue_id=str(q.queue_id),
                        **where,
                    )
            keys.append((q.topic, q.queue_id))
        # Checked before the leadership: bad input is the caller's to fix wherever it goes.
        self._check_serving()
        return keys
