"""What the docs tests read from the Markdown pages: a section, a table's first column,
a fenced code block."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def section(path: Path, heading: str) -> str:
    """The text under ``heading`` (a whole heading line, e.g. ``## Every metric``) up to
    the next heading of the same or a higher level."""
    text = path.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index("\n" + heading + "\n") + len(heading) + 2
    end = re.compile(rf"^#{{1,{len(level)}}} ", re.M).search(text, start)
    return text[start : end.start() if end else len(text)]


def first_column(text: str) -> list[str]:
    """The first cell of each body row of the Markdown tables in ``text`` (not their
    header rows, nor the separator rows under them)."""
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("|")]
    separator = [bool(cell) and set(cell) <= set("-: ") for cell in rows]
    return [cell for i, cell in enumerate(rows) if not separator[i] and not (i + 1 < len(rows) and separator[i + 1])]


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in ``text``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)
