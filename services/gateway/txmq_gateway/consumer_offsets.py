"""The SimpleConsumer's progress in the stores (the model: consumer.py): each queue's
lowest un-acked offset committed as the group's consume offset, every
``commit_interval_ms`` and on demand."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from txmq_gateway.backend import Backend
from txmq_gateway.consumer_state import QueueState, Subscription, Subscriptions
from txmq_runtime.clock import Clock

log = logging.getLogger("txmq.gateway.consumer")


class OffsetCommitter:
    """Commits the consume offsets of the core's subscriptions (one commit at a time)."""

    def __init__(self, backend: Backend, clock: Clock, subscriptions: Subscriptions, commit_interval_ms: int) -> None:
        self._backend = backend
        self._clock = clock
        self._subscriptions = subscriptions
        self._interval_ms = commit_interval_ms
        self._lock: asyncio.Lock | None = None

    async def run(self) -> None:
        """Commit every ``commit_interval_ms`` until cancelled."""
        while True:
            await self._clock.sleep_ms(self._interval_ms)
            try:
                await self.flush()
            except Exception:  # retried next round
                log.warning("committing consume offsets failed", exc_info=True)

    async def flush(self, subscriptions: Iterable[Subscription] | None = None) -> None:
        """Commit every queue's lowest un-acked offset that the store does not hold yet
        (one CommitConsumeOffset per changed queue), of every subscription or of the
        ones given."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            jobs: list[tuple[Subscription, QueueState, int]] = []
            for sub in self._subscriptions.values() if subscriptions is None else subscriptions:
                for q in sub.queues.values():
                    target = q.commit_target()
                    if target is not None and target != q.committed:
                        jobs.append((sub, q, target))
            if not jobs:
                return
            results = await asyncio.gather(
                *(
                    self._backend.commit_consume_offset(
                        q.store_id, group=sub.group, topic=sub.topic, queue_id=q.queue_id, offset=t
                    )
                    for sub, q, t in jobs
                ),
                return_exceptions=True,
            )
            for (sub, q, target), result in zip(jobs, results, strict=True):
                if isinstance(result, BaseException):
                    log.warning(
                        "group %s: committing offset %d of %s/%s/%d failed: %s",
                        sub.group, target, q.store_id, sub.topic, q.queue_id, result,
                    )  # fmt: skip
                else:
                    q.committed = target
