"""The HTML report without Spark: the per-queue table fits a terminal-sized window, and
a stalled queue is what the report leads with."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="analytics extra not installed (pip install -e '.[analytics]')")
pytest.importorskip("matplotlib", reason="analytics extra not installed (pip install -e '.[analytics]')")

from txmq_analytics.compute import Options
from txmq_analytics.report import ReportData, write_report

T = 1_795_000_000_000  # a snapshot time (ms)


def _queue(group: str, topic: str, queue_id: int, lag: int, **extra: Any) -> dict[str, Any]:
    row = {
        "store_id": "store-0", "consumer_group": group, "topic": topic, "queue_id": queue_id,
        "committed_offset": 1_000_000 - lag, "min_offset": 0, "max_offset": 1_000_000, "lag": lag,
        "consume_rate": 12_345.67, "produce_rate": 12_000.5, "time_to_drain_s": None if lag else 0.0,
        "stalled": False, "stalled_for_ms": 0, "stalled_since_ms": None, "behind_min": False, "lost_messages": 0,
        "last_snapshot_ms": T,
    }  # fmt: skip
    return {**row, **extra}


def _report(tmp_path: Path, queues: list[dict[str, Any]]) -> str:
    data = ReportData(
        input_dir="in", output_dir="out", options=Options(stall_window_ms=5_000), counts={},
        group_status=[], consumer_status=queues, tx_summary=[], tx_latency=[], time_range=(T - 60_000, T),
    )  # fmt: skip
    return write_report(data, tmp_path).read_text()


def _table_after(page: str, heading: str) -> list[list[str]]:
    table = re.search(r"<table>(.*?)</table>", page[page.index(heading) :], re.S)
    assert table is not None
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)
    return [[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)] for r in rows]


def test_the_per_queue_table_fits_a_terminal_window(tmp_path: Path) -> None:
    queues = [
        _queue("demo-audit", "DemoOrders", 3, 701, stalled=True, stalled_for_ms=25_300, stalled_since_ms=T - 25_300),
        _queue("demo-reminders", "%RETRY%demo-reminders", 0, 0, stalled_for_ms=4_900),
        _queue("demo-rocketmq-group", "DemoRocketMQ", 3, 123_456, behind_min=True, lost_messages=1_234),
        _queue("demo-billing", "DemoOrders", 0, 0, last_snapshot_ms=T - 30_000),
    ]
    rows = _table_after(_report(tmp_path, queues), "<h2>Queues</h2>")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    assert sum(widths) + 2 * (len(widths) - 1) <= 100, rows
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["demo-audit / DemoOrders q3"][-1] == "stalled 25.3 s"
    assert by_name["demo-reminders / %RETRY% q0"][-1] == "idle 4.9 s"
    assert by_name["demo-rocketmq-group / DemoRocketMQ q3"][-1] == "lost 1,234"
    assert (
        by_name["demo-billing / DemoOrders q0"][-1]
        == f"as of {datetime.fromtimestamp((T - 30_000) / 1000, UTC):%H:%M:%S}"
    )


def test_a_stalled_queue_needs_attention(tmp_path: Path) -> None:
    stalled = _queue("demo-audit", "DemoOrders", 1, 700, stalled=True, stalled_for_ms=9_000, stalled_since_ms=T - 9_000)
    page = _report(tmp_path, [stalled])
    attention = page[page.index("<h2>Needs attention</h2>") : page.index("<h2>Consumer groups</h2>")]
    assert "1 stalled consumer queue" in attention and "demo-audit / DemoOrders q1 (lag 700, 9.0 s" in attention
    assert "Nothing needs attention" not in page
