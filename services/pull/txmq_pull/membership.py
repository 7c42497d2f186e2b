"""Consumer-group membership from heartbeats (RocketMQ's ConsumerManager, reduced to what
rebalancing needs): each group's client ids with the time each was last heard from; a
client silent for ``expiry_ms`` is gone. State is per pull instance and in memory: a
consumer heartbeats the pull instance(s) it pulls from."""

from __future__ import annotations

from collections.abc import Sequence

from txmq.errors import error
from txmq.v1 import errors_pb2
from txmq.validation import check_group
from txmq_runtime.clock import Clock

_PRUNE_EVERY = 1_000  # heartbeats between prunes of every group (silent groups vanish too)


class ConsumerGroups:
    def __init__(self, clock: Clock, *, expiry_ms: int) -> None:
        self._clock = clock
        self._expiry_ms = expiry_ms
        self._groups: dict[str, dict[str, int]] = {}  # group -> client id -> last seen
        self._topics: dict[str, dict[str, tuple[str, ...]]] = {}
        self._beats = 0

    def heartbeat(self, group: str, client_id: str, topics: Sequence[str] = (), *, leaving: bool = False) -> list[str]:
        """Record ``client_id`` as alive in ``group`` (or, ``leaving``, forget it); the
        group's live ids, sorted."""
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if not client_id:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "client_id is empty")
        now = self._clock.now_ms()
        self._beats += 1
        if self._beats % _PRUNE_EVERY == 0:
            for name in list(self._groups):
                self._prune(name, now)
        if leaving:
            self._groups.get(group, {}).pop(client_id, None)
            self._topics.get(group, {}).pop(client_id, None)
        else:
            self._groups.setdefault(group, {})[client_id] = now
            self._topics.setdefault(group, {})[client_id] = tuple(topics)
        return self.members(group)

    def members(self, group: str) -> list[str]:
        """The live client ids of ``group``, sorted."""
        self._prune(group, self._clock.now_ms())
        return sorted(self._groups.get(group, ()))

    def topics(self, group: str, client_id: str) -> tuple[str, ...]:
        """The topics ``client_id`` last said it consumes in ``group``."""
        return self._topics.get(group, {}).get(client_id, ())

    def _prune(self, group: str, now: int) -> None:
        clients = self._groups.get(group)
        if clients is None:
            return
        for client_id in [c for c, seen in clients.items() if now - seen >= self._expiry_ms]:
            del clients[client_id]
            self._topics[group].pop(client_id, None)
        if not clients:
            del self._groups[group]
            self._topics.pop(group, None)
