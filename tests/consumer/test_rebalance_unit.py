"""Allocation, the hand-over rule, subscriptions and the commit point (no processes)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from txmq import BadRequestError, ExpressionType, ForbiddenError, MessageExt
from txmq._process_queue import ProcessQueue
from txmq._push_pulling import QueuePuller
from txmq._rebalance import MembershipView, allocate_averagely
from txmq._subscription import build_subscription
from txmq.message import MessageQueue


@pytest.mark.parametrize(
    ("n_queues", "n_consumers", "expected"),
    [
        # RocketMQ's AllocateMessageQueueAveragely: contiguous shares, the first
        # (queues % consumers) consumers one more.
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (4, 2, [[0, 1], [2, 3]]),
        (5, 2, [[0, 1, 2], [3, 4]]),
        (2, 3, [[0], [1], []]),
        (4, 1, [[0, 1, 2, 3]]),
        (0, 2, [[], []]),
    ],
)
def test_allocate_averagely(n_queues: int, n_consumers: int, expected: list[list[int]]) -> None:
    queues = list(range(n_queues))
    consumers = [f"c{i}" for i in range(n_consumers)]
    shares = [allocate_averagely(queues, consumers, c) for c in consumers]
    assert shares == expected
    assert sorted(q for s in shares for q in s) == queues  # disjoint and covering


def test_allocate_to_a_stranger_is_empty() -> None:
    assert allocate_averagely([1, 2], ["a", "b"], "z") == []


def test_membership_view_hand_over_rule() -> None:
    view = MembershipView("b", takeover_delay=1.0)
    assert not view.may_take_over(0.0)  # nothing heard yet
    assert view.update(["a", "b"], now=10.0)
    assert not view.update(["a", "b"], now=10.5)  # same membership: no change
    assert not view.may_take_over(10.9)
    assert view.takeover_at() == 11.0
    assert view.may_take_over(11.0)
    assert view.update(["b"], now=12.0)  # alone: nobody else can hold a queue
    assert view.may_take_over(12.0)
    assert view.update(["a"], now=13.0)  # not a member (yet)
    assert not view.may_take_over(100.0)


def test_subscription_parsing_and_recheck() -> None:
    sub = build_subscription("T", " A || B ||  ")
    assert sub.tags == frozenset({"A", "B"}) and not sub.matches_all
    assert build_subscription("T", "").matches_all
    assert build_subscription("T", "*").matches_all
    sql = build_subscription("T", "a > 1", ExpressionType.SQL92)
    assert not sql.matches_all and sql.to_proto().expression == "a > 1"

    def msg(tags: str | None) -> MessageExt:
        return _message(0, tags)

    assert sub.accepts(msg("A")) and not sub.accepts(msg("C")) and not sub.accepts(msg(None))
    assert sql.accepts(msg(None))
    for bad in ("||", " || "):
        with pytest.raises(BadRequestError):
            build_subscription("T", bad)
    with pytest.raises(BadRequestError):
        build_subscription("T", "", ExpressionType.SQL92)
    with pytest.raises(BadRequestError):
        build_subscription("bad topic", "*")
    with pytest.raises(ForbiddenError):
        build_subscription("RMQ_SYS_TRANS_HALF_TOPIC", "*")


def test_commit_point_is_the_lowest_message_not_done() -> None:
    pq = ProcessQueue(MessageQueue("T", "s", 0), 5)
    assert pq.commit_point() == 5
    fresh = pq.take([_message(5), _message(6), _message(7)], next_offset=8)
    assert [m.queue_offset for m in fresh] == [5, 6, 7]
    assert pq.commit_point() == 5
    del pq.pending[6]  # done out of order: 5 still holds the commit point
    assert pq.commit_point() == 5
    del pq.pending[5]
    assert pq.commit_point() == 7
    del pq.pending[7]
    assert pq.commit_point() == 8  # nothing pending: the next offset to pull
    assert pq.take([_message(7)], next_offset=8) == []  # a stale answer adds nothing


def _message(offset: int, tags: str | None = None) -> MessageExt:
    return MessageExt(
        "T",
        b"x",
        tags=tags,
        offset_msg_id="",
        queue_offset=offset,
        commit_log_offset=0,
        store_size_bytes=0,
        body_crc=0,
        sys_flag=0,
        born_timestamp_ms=0,
        born_host="",
        store_timestamp_ms=0,
        store_host="",
        reconsume_times=0,
        prepared_transaction_offset=0,
        store_id="s",
    )


def test_a_priority_queue_waits_while_a_higher_queue_of_its_topic_and_store_is_busy() -> None:
    queues = {mq: ProcessQueue(mq, 0) for mq in (MessageQueue("P", "s", q) for q in range(3))}
    other_store = MessageQueue("P", "t", 2)
    queues[other_store] = ProcessQueue(other_store, 0)
    context = SimpleNamespace(_lock=threading.Lock(), _queues=queues)
    puller = QueuePuller(context)  # type: ignore[arg-type]
    low, mid, high = (queues[MessageQueue("P", "s", q)] for q in range(3))
    # before the first pull answers, a higher queue may hold anything
    assert puller._higher_queues_busy(low) and puller._higher_queues_busy(mid)
    assert not puller._higher_queues_busy(high)  # the other store's queue 2 does not count
    high.backlog = False
    assert puller._higher_queues_busy(low) and not puller._higher_queues_busy(mid)
    mid.backlog = False
    assert not puller._higher_queues_busy(low)
    high.take([_message(0)], next_offset=1)  # pulled, not yet consumed
    assert puller._higher_queues_busy(low) and puller._higher_queues_busy(mid)
    high.dropped = True  # released: no longer this consumer's to wait for
    assert not puller._higher_queues_busy(low)
