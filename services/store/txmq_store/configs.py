"""Topic and subscription-group configuration, persisted as JSON (atomic rewrite), and
the write queues a send goes to.

Files: ``<config dir>/topics.json`` and ``<config dir>/subscription_groups.json``.
System topics and groups are built in: always present, never written to the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from txmq.errors import error

# Permission bits and system topics/groups: txmq.protocol, re-exported for the store.
from txmq.protocol import (  # noqa: F401
    DEFAULT_PERM,
    PERM_ALL,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SYSTEM_TOPIC_PREFIX,
    TIMER_TOPIC,
    TRANS_CHECK_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_system_topic,
)
from txmq.v1 import errors_pb2

from .fileio import read_json, write_json_atomically

if TYPE_CHECKING:
    from .codec import PreparedRecord


@dataclass(slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = DEFAULT_PERM
    attributes: dict[str, str] = field(default_factory=dict)
    # Commit-log offset when the topic was created: older records under this name
    # belong to a deleted namesake and are never dispatched to this topic's queues.
    since_offset: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def is_system(self) -> bool:
        return is_system_topic(self.name)


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = False
    retry_max_times: int = 16
    retry_queue_nums: int = 1


def _system_topics() -> dict[str, TopicConfig]:
    names = (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC)
    return {n: TopicConfig(n, read_queue_nums=1, write_queue_nums=1) for n in names}


class TopicConfigTable:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._topics: dict[str, TopicConfig] = _system_topics()

    @classmethod
    def load(cls, path: Path) -> TopicConfigTable:
        table = cls(path)
        data = read_json(path) or {}
        for item in data.get("topics", []):
            cfg = TopicConfig(**item)
            if not is_system_topic(cfg.name):
                table._topics[cfg.name] = cfg
        return table

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda c: c.name)

    def put(self, cfg: TopicConfig) -> None:
        self._topics[cfg.name] = cfg
        self._save()

    def remove(self, name: str) -> None:
        del self._topics[name]
        self._save()

    def document(self) -> dict[str, object]:
        """The table as its file holds it (replication ships it to followers)."""
        return {"topics": [asdict(c) for c in self.all() if not c.is_system]}

    def adopt(self, document: dict[str, object]) -> None:
        """Become the table ``document`` describes (a follower taking its leader's)."""
        topics = _system_topics()
        items: list[dict] = document.get("topics", [])  # type: ignore[assignment]
        for item in items:
            cfg = TopicConfig(**item)
            if not is_system_topic(cfg.name):
                topics[cfg.name] = cfg
        self._topics = topics
        self._save()

    def _save(self) -> None:
        write_json_atomically(self._path, self.document())


def _system_groups() -> dict[str, SubscriptionGroupConfig]:
    return {TRANS_CHECK_GROUP: SubscriptionGroupConfig(TRANS_CHECK_GROUP)}


class SubscriptionGroupTable:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._groups: dict[str, SubscriptionGroupConfig] = _system_groups()

    @classmethod
    def load(cls, path: Path) -> SubscriptionGroupTable:
        table = cls(path)
        for item in (read_json(path) or {}).get("groups", []):
            cfg = SubscriptionGroupConfig(**item)
            table._groups[cfg.group_name] = cfg
        return table

    def get(self, name: str) -> SubscriptionGroupConfig | None:
        return self._groups.get(name)

    def is_system(self, name: str) -> bool:
        return name in _system_groups()

    def all(self) -> list[SubscriptionGroupConfig]:
        return sorted(self._groups.values(), key=lambda g: g.group_name)

    def put(self, cfg: SubscriptionGroupConfig) -> None:
        self._groups[cfg.group_name] = cfg
        self._save()

    def remove(self, name: str) -> None:
        del self._groups[name]
        self._save()

    def document(self) -> dict[str, object]:
        return {"groups": [asdict(g) for g in self.all() if not self.is_system(g.group_name)]}

    def adopt(self, document: dict[str, object]) -> None:
        groups = _system_groups()
        items: list[dict] = document.get("groups", [])  # type: ignore[assignment]
        for item in items:
            cfg = SubscriptionGroupConfig(**item)
            groups[cfg.group_name] = cfg
        self._groups = groups
        self._save()

    def _save(self) -> None:
        write_json_atomically(self._path, self.document())


class WriteQueues:
    """Where a send goes: its queue (round robin over the topic's write queues, or the
    one it names) and the next queue offset per (topic, queue id). Offsets are assigned
    at append, so in sync mode they run ahead of the consume queues until the fsync."""

    def __init__(self, max_offsets: Mapping[tuple[str, int], int]) -> None:
        self._offsets = dict(max_offsets)
        self._round_robin: dict[str, int] = {}

    def restart(self, max_offsets: Mapping[tuple[str, int], int]) -> None:
        """Continue from the consume queues' ends (a new leader that took over)."""
        self._offsets = dict(max_offsets)

    def queue_for_send(self, cfg: TopicConfig, queue_id: int | None, index: int) -> int:
        n = cfg.write_queue_nums
        if queue_id is None:
            if n <= 0:
                raise error(
                    errors_pb2.CODE_TOPIC_NOT_WRITABLE, f"topic {cfg.name} has no write queues", index=str(index)
                )
            c = self._round_robin.get(cfg.name, 0)
            self._round_robin[cfg.name] = c + 1
            return c % n
        if not 0 <= queue_id < n:
            raise error(
                errors_pb2.CODE_ILLEGAL_QUEUE_ID,
                f"queue {queue_id} of {cfg.name} is not writable (write queues: {n})",
                index=str(index), queue_id=str(queue_id),
            )  # fmt: skip
        return queue_id

    def assign(self, records: Sequence[PreparedRecord]) -> list[int]:
        table = self._offsets
        out: list[int] = []
        for rec in records:
            if rec.takes_queue_slot:
                key = (rec.topic, rec.queue_id)
                q = table.get(key, 0)
                table[key] = q + 1
                out.append(q)
            else:
                out.append(0)
        return out

    def unassign(self, records: Sequence[PreparedRecord], queue_offsets: list[int]) -> None:
        """Undo ``assign`` for a batch that was not stored."""
        table = self._offsets
        for rec, q in zip(records, queue_offsets, strict=True):
            if rec.takes_queue_slot:
                key = (rec.topic, rec.queue_id)
                table[key] = min(table.get(key, 0), q)

    def forget_topic(self, name: str) -> None:
        """A deleted topic: its queues' offsets and its round robin go with it."""
        for key in [k for k in self._offsets if k[0] == name]:
            del self._offsets[key]
        self.forget_round_robin(name)

    def forget_round_robin(self, name: str) -> None:
        self._round_robin.pop(name, None)
