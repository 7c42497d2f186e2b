"""Fixtures for the analytics tests: one SparkSession for the whole test session (local
mode, 2 shuffle partitions, no UI); the analytics package importable from the checkout
even before it is installed."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import txmq_analytics  # noqa: F401
except ImportError:  # not installed (yet): use the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "analytics"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="analytics extra not installed (pip install -e '.[analytics]')")
    from txmq_analytics.job import build_session

    session = build_session(
        "local[2]",
        app_name="txmq-analytics-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    try:
        yield session
    finally:
        session.stop()
