"""Consume offsets per (group, topic, queue id), with the time of the last commit.

Persisted as ``<config dir>/consumer_offsets.json`` (atomic rewrite) by the store's
periodic task and on shutdown; a crash loses at most one persist interval of commits,
as in RocketMQ (consumers then re-receive a few messages: at-least-once).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .fileio import read_json, write_json_atomically

OffsetKey = tuple[str, str, int]  # group, topic, queue id


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    updated_at_ms: int


class ConsumeOffsetTable:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._offsets: dict[OffsetKey, CommittedOffset] = {}
        self._version = 0  # bumped by every change
        self._saved_version = 0

    @classmethod
    def load(cls, path: Path) -> ConsumeOffsetTable:
        table = cls(path)
        for group, topic, queue_id, offset, updated_at in (read_json(path) or {}).get("offsets", []):
            table._offsets[(group, topic, int(queue_id))] = CommittedOffset(int(offset), int(updated_at))
        return table

    def commit(self, group: str, topic: str, queue_id: int, offset: int, *, now_ms: int) -> None:
        self._offsets[(group, topic, queue_id)] = CommittedOffset(offset, now_ms)
        self._version += 1

    def query(self, group: str, topic: str, queue_id: int) -> CommittedOffset | None:
        return self._offsets.get((group, topic, queue_id))

    def entries(self, *, group: str = "", topic: str = "") -> list[tuple[OffsetKey, CommittedOffset]]:
        return sorted(
            (k, v) for k, v in self._offsets.items() if (not group or k[0] == group) and (not topic or k[1] == topic)
        )

    def remove(self, *, group: str = "", topic: str = "") -> None:
        """Forget every offset of a group or of a topic."""
        doomed = [k for k in self._offsets if (group and k[0] == group) or (topic and k[1] == topic)]
        for k in doomed:
            del self._offsets[k]
        if doomed:
            self._version += 1

    def snapshot(self) -> tuple[int, list[list[object]]] | None:
        """(version, rows) when there are unsaved changes; rows are a copy, so saving
        can run in a thread while commits continue."""
        if self._version == self._saved_version:
            return None
        return self._version, self.rows()

    @property
    def version(self) -> int:
        return self._version

    def rows(self) -> list[list[object]]:
        """Every offset as a file row (replication ships them to followers)."""
        return [[g, t, q, c.offset, c.updated_at_ms] for (g, t, q), c in sorted(self._offsets.items())]

    def adopt(self, rows: list[list[object]]) -> None:
        """Become the table ``rows`` describe (a follower taking its leader's); saved by
        the next periodic persist."""
        self._offsets = {
            (str(g), str(t), int(q)): CommittedOffset(int(o), int(u))  # type: ignore[call-overload]
            for g, t, q, o, u in rows
        }
        self._version += 1

    def save(self, version: int, rows: list[list[object]]) -> None:
        write_json_atomically(self._path, {"offsets": rows})
        self._saved_version = max(self._saved_version, version)
