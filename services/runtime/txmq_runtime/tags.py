"""Tag hash codes and TAG subscription expressions (RocketMQ semantics).

The consume queue stores a tag *hash code* per message: Java's ``String.hashCode`` of
the tag (signed 32-bit over UTF-16 code units), as RocketMQ does, so codes agree with
RocketMQ's. A message without a tag has code 0. Hash codes collide; clients re-check
the tag string.
"""

from __future__ import annotations

from dataclasses import dataclass

SUB_ALL = "*"


def tag_hash_code(tag: str) -> int:
    """Java ``String.hashCode`` of ``tag``; 0 for an empty tag."""
    h = 0
    data = tag.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed TAG expression: ``*`` (everything) or ``A || B``."""

    tags: frozenset[str]  # empty: everything matches
    codes: frozenset[int]

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def match_code(self, tag_code: int) -> bool:
        return not self.codes or tag_code in self.codes

    def match_tag(self, tag: str) -> bool:
        return not self.tags or tag in self.tags


MATCH_ALL = TagFilter(frozenset(), frozenset())


def parse_tag_expression(expression: str | None) -> TagFilter:
    """Parse ``*`` / ``TagA || TagB`` as RocketMQ's FilterAPI.build does: empty or ``*``
    means every tag; otherwise tags are split on ``||`` and trimmed, empty parts ignored.
    Raises ValueError when no tag remains (e.g. ``" || "``)."""
    expr = (expression or "").strip()
    if not expr or expr == SUB_ALL:
        return MATCH_ALL
    tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
    if not tags:
        raise ValueError(f"tag expression {expression!r} names no tag")
    return TagFilter(tags, frozenset(tag_hash_code(t) for t in tags))
