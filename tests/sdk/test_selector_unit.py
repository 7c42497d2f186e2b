"""Write-queue selection (RocketMQ selectOneMessageQueue)."""

from collections import Counter

from txmq import MessageQueue
from txmq._selector import QueueSelector

QUEUES = [
    MessageQueue("T", "s1", 0),
    MessageQueue("T", "s1", 1),
    MessageQueue("T", "s2", 0),
    MessageQueue("T", "s2", 1),
]


def test_round_robin_visits_every_queue_evenly() -> None:
    selector = QueueSelector(start=0)
    picks = [selector.select(QUEUES) for _ in range(8)]
    assert picks == QUEUES + QUEUES


def test_round_robin_start_is_random_but_cycle_is_complete() -> None:
    selector = QueueSelector()
    assert Counter(selector.select(QUEUES) for _ in range(40)) == {q: 10 for q in QUEUES}


def test_avoids_the_store_that_just_failed() -> None:
    selector = QueueSelector(start=0)
    for _ in range(10):
        assert selector.select(QUEUES, avoid_store="s1").store_id == "s2"


def test_falls_back_to_the_failed_store_when_it_is_the_only_one() -> None:
    only = [q for q in QUEUES if q.store_id == "s1"]
    selector = QueueSelector(start=0)
    assert {selector.select(only, avoid_store="s1") for _ in range(4)} == set(only)
