"""The metric families the services' processes can export, read from prometheus_client's
registry in a fresh interpreter after importing every module of the services' packages:
a metric may be defined in a module a service imports only when it starts (the store's
queue locks: add_store_servicers imports consumer_control), and seen here or not
depending on which tests ran before; a fresh interpreter makes the answer the services'
alone, whatever this one imported. Scrape-time collectors are in the registry from import
on (their ``describe`` names their families)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

SERVICE_PACKAGES = ("txmq_runtime", "txmq_store", "txmq_pull", "txmq_txcheck", "txmq_gateway")

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


@functools.cache
def exported_families() -> tuple[tuple[str, str], ...]:
    """(family name, type) of every metric the services register, prometheus_client's own
    process_* and python_* included."""
    result = subprocess.run(
        [sys.executable, "-c", _LIST_METRICS, *SERVICE_PACKAGES],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple((name, kind) for name, kind in json.loads(result.stdout))
