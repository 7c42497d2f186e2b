"""Write-queue selection (RocketMQ TopicPublishInfo.selectOneMessageQueue)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from txmq.message import MessageQueue


class QueueSelector:
    """Round robin over a topic's write queues, skipping the store that just failed.

    Starts at a random position so that many producers started together do not all
    hit queue 0 first. ``next()`` on ``itertools.count`` is atomic under the GIL, so
    concurrent senders share the counter without a lock.
    """

    def __init__(self, *, start: int | None = None) -> None:
        self._counter = itertools.count(random.randrange(1 << 16) if start is None else start)

    def select(self, queues: Sequence[MessageQueue], *, avoid_store: str | None = None) -> MessageQueue:
        """Pick a queue from the non-empty ``queues``. With ``avoid_store``, a queue of
        another store if there is one (a retry should not go back where it failed)."""
        if avoid_store is not None:
            for _ in range(len(queues)):
                mq = queues[next(self._counter) % len(queues)]
                if mq.store_id != avoid_store:
                    return mq
        return queues[next(self._counter) % len(queues)]
