"""docs/operations.md "Every metric" lists every metric the services export, and only
those. The exported ones are read from prometheus_client's registry after importing
every module of the services' packages, in a fresh interpreter (support.metrics)."""

from __future__ import annotations

import re

from support.metrics import exported_families

from .markdown import DOCS, first_column, section

OPERATIONS = DOCS / "operations.md"
#: txmq's and RocketMQ's names; prometheus_client's own process_* and python_* are left out.
_OURS = re.compile(r"^(?:rocketmq|txmq)_")


def exported() -> frozenset[str]:
    """Each metric by the name the table gives it: a counter's sample name (``_total``),
    a histogram's or gauge's family name."""
    names = {name + ("_total" if kind == "counter" else "") for name, kind in exported_families()}
    return frozenset(n for n in names if _OURS.match(n))


def documented() -> frozenset[str]:
    """The metric names in the first column of the table (a row may name several)."""
    cells = first_column(section(OPERATIONS, "## Every metric"))
    return frozenset(name for cell in cells for name in re.findall(r"`([a-z0-9_]+)`", cell))


def test_the_table_is_read() -> None:
    assert len(documented()) >= 40
    assert len(exported()) >= 40


def test_every_exported_metric_has_a_row() -> None:
    missing = sorted(exported() - documented())
    assert not missing, 'exported but not in docs/operations.md "Every metric": ' + ", ".join(missing)


def test_every_row_names_an_exported_metric() -> None:
    unknown = sorted(documented() - exported())
    assert not unknown, 'in docs/operations.md "Every metric" but exported by no service: ' + ", ".join(unknown)
