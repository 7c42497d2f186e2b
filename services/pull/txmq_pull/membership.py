"""Consumer-group membership from heartbeats (RocketMQ's ConsumerManager, reduced to what
rebalancing needs): each group's client ids with the time each was last heard from; a
client silent for ``expiry_ms`` is gone. State is per pull instance and in memory: a
consumer heartbeats the pull instance(s) it pulls from.

What a consumer leaves behind is bounded: its client id (``MAX_CLIENT_ID_BYTES``) and
topics (``MAX_HEARTBEAT_TOPICS`` valid topic names) are checked, and once it expires
nothing of it is kept -- its group goes with its last member. Expiry runs on every call
(oldest first, so it costs what it removes) and, while no call comes, from ``run``."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

from txmq.errors import error
from txmq.protocol import MAX_HEARTBEAT_TOPICS
from txmq.v1 import errors_pb2
from txmq.validation import check_client_id, check_group, check_topic
from txmq_runtime.clock import Clock


class ConsumerGroups:
    def __init__(self, clock: Clock, *, expiry_ms: int) -> None:
        self._clock = clock
        self._expiry_ms = expiry_ms
        # group -> client id -> the topics it last named
        self._groups: dict[str, dict[str, tuple[str, ...]]] = {}
        # (group, client id) -> last heard from, least recently heard first
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._poke = asyncio.Event()

    def heartbeat(self, group: str, client_id: str, topics: Sequence[str] = (), *, leaving: bool = False) -> list[str]:
        """Record ``client_id`` as alive in ``group`` (or, ``leaving``, forget it); the
        group's live ids, sorted."""
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        check_client_id(client_id)
        if len(topics) > MAX_HEARTBEAT_TOPICS:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"the heartbeat names {len(topics)} topics, more than the limit of {MAX_HEARTBEAT_TOPICS}",
                topics=str(len(topics)),
                limit=str(MAX_HEARTBEAT_TOPICS),
            )
        for topic in topics:
            check_topic(topic)
        now = self._clock.now_ms()
        self.expire(now)
        key = (group, client_id)
        if leaving:
            self._forget(key)
        else:
            if not self._seen:
                self._poke.set()  # the expiry loop sleeps without a deadline while nobody is known
            self._seen[key] = now
            self._seen.move_to_end(key)
            self._groups.setdefault(group, {})[client_id] = tuple(topics)
        return sorted(self._groups.get(group, ()))

    def members(self, group: str) -> list[str]:
        """The live client ids of ``group``, sorted."""
        self.expire(self._clock.now_ms())
        return sorted(self._groups.get(group, ()))

    def topics(self, group: str, client_id: str) -> tuple[str, ...]:
        """The topics ``client_id`` last said it consumes in ``group``."""
        return self._groups.get(group, {}).get(client_id, ())

    @property
    def client_count(self) -> int:
        """Consumers known (live, or expired but not yet removed), over every group."""
        return len(self._seen)

    @property
    def group_count(self) -> int:
        return len(self._groups)

    def expire(self, now: int | None = None) -> int:
        """Forget every consumer silent for ``expiry_ms``; how many there were."""
        now = self._clock.now_ms() if now is None else now
        seen = self._seen
        removed = 0
        while seen:
            key, last = next(iter(seen.items()))
            if now - last < self._expiry_ms:
                break
            self._forget(key)
            removed += 1
        return removed

    def next_expiry_ms(self) -> int | None:
        """When the least recently heard consumer expires; None when nobody is known."""
        if not self._seen:
            return None
        return next(iter(self._seen.values())) + self._expiry_ms

    async def run(self) -> None:
        """Expire consumers on time while no call comes (until cancelled)."""
        while True:
            self._poke.clear()
            self.expire()
            await self._clock.wait(self._poke, self.next_expiry_ms())

    def _forget(self, key: tuple[str, str]) -> None:
        group, client_id = key
        self._seen.pop(key, None)
        clients = self._groups.get(group)
        if clients is not None:
            clients.pop(client_id, None)
            if not clients:
                del self._groups[group]
