"""docs/operations.md "Every metric" lists every metric the services export, and only
those. The exported ones are read from prometheus_client's registry after importing
every module of the services' packages, in a fresh interpreter: its metrics are the
services' alone, whatever this one imported, and a module a service imports only when
it starts counts too. Scrape-time collectors are in the registry from import on (their
``describe`` names their families)."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys

from .markdown import DOCS, first_column, section

OPERATIONS = DOCS / "operations.md"
PACKAGES = ("txmq_runtime", "txmq_store", "txmq_pull", "txmq_txcheck", "txmq_gateway")
#: Prints the default registry's families after the imports, as JSON [[name, type], ...].
_LIST_METRICS = """
import importlib, json, pkgutil, sys
from prometheus_client import REGISTRY
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        if not module.name.endswith(".__main__"):
            importlib.import_module(module.name)
print(json.dumps([[f.name, f.type] for f in REGISTRY.collect()]))
"""
#: txmq's and RocketMQ's names; prometheus_client's own process_* and python_* are left out.
_OURS = re.compile(r"^(?:rocketmq|txmq)_")


@functools.cache
def exported() -> frozenset[str]:
    """Each metric by the name the table gives it: a counter's sample name (``_total``),
    a histogram's or gauge's family name."""
    result = subprocess.run(
        [sys.executable, "-c", _LIST_METRICS, *PACKAGES], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    names = {name + ("_total" if kind == "counter" else "") for name, kind in json.loads(result.stdout)}
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
