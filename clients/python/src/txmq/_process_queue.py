"""Per-queue state of the push consumer (RocketMQ's ProcessQueue) and a timer thread.

``ProcessQueue`` keeps the messages pulled from one queue that are not done yet
(waiting for a consume thread, being consumed, or waiting for a retry), keyed by
queue offset. The offset that may be committed is the lowest of them: a message in
flight holds the commit point back, but not the pulls behind it. With nothing
pending, it is the next offset to pull (messages skipped by the filter are done).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from txmq.message import MessageExt, MessageQueue

log = logging.getLogger("txmq.consumer")


class ProcessQueue:
    def __init__(self, mq: MessageQueue, offset: int) -> None:
        self.mq = mq
        # Guards every field; waited on for ``running`` to reach 0 on release.
        self.lock = threading.Condition()
        self.next_offset = offset
        self.pending: dict[int, MessageExt] = {}
        self.running = 0
        self.dropped = False
        self.committed: int | None = None
        self.pull_call: grpc.Future | None = None
        self.failures = 0  # consecutive failed pulls: which pull instance to try next
        self.paused_polls = 0  # consecutive pulls refused as the group is paused
        self.flow_controlled_logged = False
        # A priority topic's queue (queue N holds priority N): pulled only while the
        # higher queues of its topic and store that this consumer owns have nothing
        # pending nor, as far as their last pull said, waiting in the store (``backlog``;
        # not known before the first pull answers).
        self.priority = False
        self.backlog = True

    def commit_point(self) -> int:
        return min(self.pending) if self.pending else self.next_offset

    def span(self) -> int:
        return max(self.pending) - min(self.pending) if self.pending else 0

    def take(self, messages: list[MessageExt], next_offset: int) -> list[MessageExt]:
        """Record a pull's messages (the caller holds the lock); the new ones, in order."""
        fresh = [m for m in messages if m.queue_offset >= self.next_offset and m.queue_offset not in self.pending]
        for m in fresh:
            self.pending[m.queue_offset] = m
        self.next_offset = max(self.next_offset, next_offset)
        return fresh


class Timer:
    """One thread running short callbacks at their due time (pull retries, flow-control
    pauses, message retries). Callbacks must not block."""

    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), fn, args))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, _, fn, args = heapq.heappop(self._heap)
            try:
                fn(*args)
            except Exception:  # one failed job must not stop the others
                log.exception("consumer timer job %r failed", fn)
