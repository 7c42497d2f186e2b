"""The docs describe the product, not the tracker: no page of docs/ and not the README
names an issue of txmq's own tracker ("issue 14", "issues 3 and 13", "issue #16"); they
say what the change was. An upstream project's issue is a public reference and stays,
when the text names the project right before it ("RocketMQ issue 7689",
"apache/rocketmq issue 9431"); "RocketMQ #7689" is not an "issue N" at all."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .markdown import DOCS, ROOT

PAGES = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]
ISSUE = re.compile(r"\bissues?\s+(?:no\.?\s*)?#?\d+", re.I)
#: A project named right before the match: the issue is that project's.
UPSTREAM = re.compile(r"(?:rocketmq(?:-apis)?|[\w.-]+/[\w.-]+)(?:'s)?\s+$", re.I)


def tracker_references(text: str) -> list[tuple[int, str]]:
    """(line, the words) of each "issue N" that names no upstream project."""
    found = []
    for m in ISSUE.finditer(text):
        if not UPSTREAM.search(text[max(0, m.start() - 60) : m.start()]):
            found.append((text.count("\n", 0, m.start()) + 1, " ".join(m.group().split())))
    return found


def test_the_rule_tells_tracker_references_from_upstream_ones() -> None:
    text = "Timers (issue 17)\nissues 3 and 13, Issue #16, issue\n16\nRocketMQ issue 7689, apache/rocketmq issue 9431"
    assert tracker_references(text) == [(1, "issue 17"), (2, "issues 3"), (2, "Issue #16"), (2, "issue 16")]
    assert tracker_references("RocketMQ #7689 and rocketmq-apis #68; can issue one per client") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_tracker_issue(page: Path) -> None:
    found = tracker_references(page.read_text())
    assert not found, f"{page.relative_to(ROOT)} names tracker issues (say what the change was): " + ", ".join(
        f"line {line}: {words!r}" for line, words in found
    )
