"""Queue allocation and the hand-over rule of the push consumer's rebalance.

``allocate_averagely`` is RocketMQ's AllocateMessageQueueAveragely: the group's sorted
consumer ids and the topic's sorted queues give every consumer a contiguous share,
the first ``len(queues) % len(consumers)`` consumers one queue more. Every consumer
computes the same answer from the same membership, with no coordination.

``MembershipView`` decides *when* a consumer may start on a queue that is newly its
own. txmq has no broker-side queue lock (RocketMQ's LockBatchMQ is used only by
orderly consumers), so the hand-over is timed from the membership:

- every live consumer heartbeats every ``heartbeat_interval``, and each heartbeat
  answers the current membership, so a membership change is seen by every live
  consumer within one interval; the consumer that loses a queue then stops pulling it,
  lets its running listeners finish and commits its offset;
- the consumer that gains a queue waits until the membership it sees has stayed the
  same for ``takeover_delay`` (> ``heartbeat_interval``) before pulling it;
- a consumer that sees itself alone takes every queue at once: a consumer that holds a
  queue heartbeats, so while it lives it is in the membership.

A listener still running on the old owner after ``takeover_delay`` may overlap with
the new owner; delivery is at least once, so listeners must be idempotent anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

Q = TypeVar("Q")


def allocate_averagely(queues: Sequence[Q], consumers: Sequence[str], me: str) -> list[Q]:
    """My share of ``queues`` (sorted) among ``consumers`` (sorted); [] if I am not
    one of them."""
    if me not in consumers or not queues:
        return []
    index = consumers.index(me)
    n_queues, n_consumers = len(queues), len(consumers)
    mod = n_queues % n_consumers
    if n_queues <= n_consumers:
        size = 1
    elif mod > 0 and index < mod:
        size = n_queues // n_consumers + 1
    else:
        size = n_queues // n_consumers
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n_queues - start)
    return [queues[(start + i) % n_queues] for i in range(max(0, count))]


@dataclass(slots=True)
class MembershipView:
    """The group's membership as this consumer last saw it, and since when."""

    me: str
    takeover_delay: float
    members: tuple[str, ...] | None = None
    since: float = 0.0

    def update(self, members: Sequence[str], now: float) -> bool:
        """Record a heartbeat's answer; True when the membership changed."""
        seen = tuple(members)
        if seen == self.members:
            return False
        self.members, self.since = seen, now
        return True

    def forget(self) -> None:
        """No heartbeat got through for long: the membership is unknown again."""
        self.members = None

    @property
    def known(self) -> bool:
        return self.members is not None and self.me in self.members

    def alone(self) -> bool:
        return self.members == (self.me,)

    def may_take_over(self, now: float) -> bool:
        """May a queue that is newly mine be started now?"""
        return self.known and (self.alone() or now - self.since >= self.takeover_delay)

    def takeover_at(self) -> float:
        """When ``may_take_over`` becomes true (if the membership stays)."""
        return self.since if self.alone() else self.since + self.takeover_delay
