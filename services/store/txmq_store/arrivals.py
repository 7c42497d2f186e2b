"""Arrival notifications: watchers hear about every record dispatched to a consume queue.

The store never waits for a watcher: each has a bounded buffer, and a watcher that
falls behind loses what is buffered and gets one batch flagged ``overflowed`` instead
(its consumer must then treat every queue as changed, e.g. re-check held pulls).
Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(slots=True)
class Arrival:
    topic: str
    queue_id: int
    queue_offset: int
    max_offset: int  # the queue's max offset after this message
    tag_code: int
    properties: Mapping[str, str]
    store_timestamp_ms: int
    min_offset: int = 0  # the queue's min offset at dispatch
    record: bytes = b""  # the stored record, when the dispatch was small enough to carry it


@dataclass(slots=True)
class ArrivalBatch:
    arrivals: list[Arrival] = field(default_factory=list)
    overflowed: bool = False


class ArrivalWatcher:
    def __init__(self, hub: ArrivalHub, topics: frozenset[str], *, buffer_limit: int) -> None:
        self._hub = hub
        self.topics = topics  # empty: every topic
        self._limit = buffer_limit
        self._buf: list[Arrival] = []
        self._overflowed = False
        self._closed = False
        self._ready = asyncio.Event()

    def offer(self, arrivals: list[Arrival]) -> None:
        if self.topics:
            arrivals = [a for a in arrivals if a.topic in self.topics]
            if not arrivals:
                return
        if self._overflowed or len(self._buf) + len(arrivals) > self._limit:
            self._buf.clear()
            self._overflowed = True
        else:
            self._buf.extend(arrivals)
        self._ready.set()

    async def next_batch(self, *, max_arrivals: int = 1000) -> ArrivalBatch | None:
        """The next batch (waits for one); None once the watcher or the store closed."""
        while not self._closed:
            if self._buf or self._overflowed:
                taken, self._buf = self._buf[:max_arrivals], self._buf[max_arrivals:]
                batch = ArrivalBatch(taken, self._overflowed)
                self._overflowed = False
                if not self._buf:
                    self._ready.clear()
                return batch
            await self._ready.wait()
        return None

    def close(self) -> None:
        self._closed = True
        self._ready.set()
        self._hub.remove(self)

    def __enter__(self) -> ArrivalWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ArrivalHub:
    def __init__(self, *, buffer_limit: int) -> None:
        self._buffer_limit = buffer_limit
        self._watchers: set[ArrivalWatcher] = set()
        self._closed = False

    @property
    def active(self) -> bool:
        return bool(self._watchers)

    def watch(self, topics: Iterable[str] = ()) -> ArrivalWatcher:
        w = ArrivalWatcher(self, frozenset(topics), buffer_limit=self._buffer_limit)
        if self._closed:
            w.close()  # the store is stopping: the watch ends at once
        else:
            self._watchers.add(w)
        return w

    def remove(self, watcher: ArrivalWatcher) -> None:
        self._watchers.discard(watcher)

    def publish(self, arrivals: list[Arrival]) -> None:
        for w in list(self._watchers):
            w.offer(arrivals)

    def close(self) -> None:
        """End every watch, now and from now on (idempotent)."""
        self._closed = True
        for w in list(self._watchers):
            w.close()
