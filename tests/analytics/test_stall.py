"""Stalled consumers as seen in the store's commit times, and Ctrl-C during a run.

A real MessageStore (manual clock) is exported by the store's own Exporter: group
``g-stuck`` committed once, ten minutes before an export window of 40 s, and has lag
since; the job flags it though the window is shorter than the stall window. The edge
rules of ``compute._run_start`` are checked on small DataFrames. Spark: slow."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.scratch import scoped_dir

pytest.importorskip("pyspark", reason="analytics extra not installed")
pytest.importorskip("pyarrow")

from tests.support.clock import ManualClock
from txmq_store.export import Exporter, LocalSource
from txmq_store.message_store import MessageStore
from txmq_store.model import OutgoingMessage
from txmq_store.settings import StoreSettings

pytestmark = pytest.mark.slow

MIN = 60_000
STALL_WINDOW_MS = 5 * MIN
ROOT = Path(__file__).resolve().parents[2]


class RealExport:
    def __init__(self, path: Path, stuck_committed_at: int, snapshots: list[int]) -> None:
        self.path, self.stuck_committed_at, self.snapshots = path, stuck_committed_at, snapshots


@pytest.fixture(scope="module")
async def real_export(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RealExport]:
    """Orders q0: 20 messages, then 5 more per snapshot; g-live consumes them, g-stuck
    committed 3 at t0 and never again. Orders q1: 10 messages, g-idle caught up at t0;
    5 arrive between the first and second snapshot. Snapshots at t0 + 10 min, + 20 s, + 40 s."""
    root = scoped_dir(request, tmp_path_factory, "real-export")
    clock = ManualClock()
    settings = StoreSettings(data_dir=str(root / "store"), flush_interval_ms=3_600_000)  # type: ignore[call-arg]
    store = await MessageStore.open(settings, advertised_address="127.0.0.1:1", clock=clock)
    try:
        store.create_topic("Orders", read_queue_nums=2, write_queue_nums=2)
        await store.send([OutgoingMessage("Orders", b"a%d" % i, queue_id=0) for i in range(20)])
        await store.send([OutgoingMessage("Orders", b"b%d" % i, queue_id=1) for i in range(10)])
        t0 = clock.wall_ms()
        store.commit_consume_offset(group="g-stuck", topic="Orders", queue_id=0, offset=3)
        store.commit_consume_offset(group="g-live", topic="Orders", queue_id=0, offset=5)
        store.commit_consume_offset(group="g-idle", topic="Orders", queue_id=1, offset=10)
        clock.advance(10 * MIN)
        exporter = Exporter(LocalSource(store), root / "export")
        snapshots = []
        for k in range(3):
            if k:
                clock.advance(20_000)
                await store.send([OutgoingMessage("Orders", b"c%d" % i, queue_id=0) for i in range(5)])
                store.commit_consume_offset(group="g-live", topic="Orders", queue_id=0, offset=5 + 10 * k)
            if k == 1:
                await store.send([OutgoingMessage("Orders", b"d%d" % i, queue_id=1) for i in range(5)])
            snapshots.append((await exporter.export_once()).snapshot_ms)
    finally:
        await store.close()
    yield RealExport(root / "export", t0, snapshots)


def test_a_stall_longer_than_the_export_window_is_flagged(spark: Any, real_export: RealExport, tmp_path: Path) -> None:
    from txmq_analytics.compute import Options
    from txmq_analytics.job import run_job

    first, last = real_export.snapshots[0], real_export.snapshots[-1]
    assert last - first < STALL_WINDOW_MS  # the export window is shorter than the stall window
    printed: list[str] = []
    result = run_job(spark, real_export.path, tmp_path / "out", options=Options(stall_window_ms=STALL_WINDOW_MS),
                     progress=False, echo=printed.append)  # fmt: skip
    import pyarrow.parquet as pq

    status = {
        (r["consumer_group"], r["queue_id"]): r for r in pq.read_table(result.tables["consumer_status"]).to_pylist()
    }
    stuck = status[("g-stuck", 0)]
    assert stuck["lag"] == 30 - 3 and stuck["stalled"]
    assert stuck["stalled_since_ms"] == real_export.stuck_committed_at
    assert stuck["stalled_for_ms"] == last - real_export.stuck_committed_at
    live = status[("g-live", 0)]
    assert live["lag"] == 5 and not live["stalled"] and live["stalled_for_ms"] == 0
    # Caught up at t0, lag only since the second snapshot: not a ten-minute stall.
    idle = status[("g-idle", 1)]
    assert idle["lag"] == 5 and not idle["stalled"]
    assert (
        idle["stalled_since_ms"] == real_export.snapshots[1]
        and idle["stalled_for_ms"] == last - real_export.snapshots[1]
    )
    # Flagged from the first snapshot on (already 10 minutes without progress).
    series = [r for r in pq.read_table(result.tables["lag_timeseries"]).to_pylist() if r["consumer_group"] == "g-stuck"]
    assert sorted((r["snapshot_ms"], r["stalled"]) for r in series) == [(s, True) for s in real_export.snapshots]
    html = result.report_html.read_text()
    assert "1 stalled consumer queue" in html and "g-stuck / Orders q0" in html
    assert (
        printed[0]
        .splitlines()[2]
        .startswith("STALLED consumers (1 queue): g-stuck / Orders q0 lag 27 for 10m40s, since ")
    )


def _row(k: int, committed: int, hi: int, committed_at: int) -> dict[str, Any]:
    return dict(store_id="s", snapshot_ms=k * MIN, consumer_group="g", topic="T", queue_id=0,
                committed_offset=committed, min_offset=0, max_offset=hi, lag=max(hi - committed, 0),
                last_store_ms=k * MIN, committed_at_ms=committed_at, is_system=False)  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "since"),
    [
        # No previous snapshot: the commit time, however old (the run began before the window).
        ([_row(100, 5, 9, 40 * MIN)], 40 * MIN),
        # The offset moved since the previous snapshot: the commit in between.
        ([_row(0, 1, 9, 0), _row(10, 5, 9, 7 * MIN)], 7 * MIN),
        # The same offset with no lag before: lag began after that snapshot; the run's own first one.
        ([_row(0, 5, 5, 0), _row(10, 5, 9, 0)], 10 * MIN),
        # A commit time that cannot be (before the previous snapshot, or unknown): the snapshot.
        ([_row(5, 1, 9, 0), _row(10, 5, 9, MIN)], 10 * MIN),
        ([_row(3, 5, 9, 0)], 3 * MIN),
    ],
)
def test_stall_start_rules(spark: Any, rows: list[dict[str, Any]], since: int) -> None:
    from txmq_analytics import compute

    df = spark.createDataFrame(rows, compute.schema("offsets"))
    opts = compute.Options(stall_window_ms=STALL_WINDOW_MS)
    last = compute.lag_timeseries(df, opts).orderBy("snapshot_ms").collect()[-1]
    assert last["stalled_since_ms"] == since
    assert last["stalled_for_ms"] == rows[-1]["snapshot_ms"] - since
    assert last["stalled"] == (rows[-1]["snapshot_ms"] - since >= STALL_WINDOW_MS)


def test_ctrl_c_ends_with_one_line(real_export: RealExport, tmp_path: Path) -> None:
    """``txmq analytics run`` in its own process; SIGINT once Spark runs the first stage:
    exit status 130, one line, no Python or py4j traceback, and the JVM is gone."""
    txmq = Path(sys.executable).with_name("txmq")
    proc = subprocess.Popen(
        [str(txmq), "analytics", "run", "--input", str(real_export.path), "--output", str(tmp_path / "out"),
         "--master", "local[1]"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    err = b""
    try:
        # The stage names are on stderr (the progress bar); Spark is up once the first shows.
        while b"reading the export" not in err:
            ready, _, _ = select.select([proc.stderr], [], [], 60)
            chunk = os.read(proc.stderr.fileno(), 65536) if ready else b""
            assert chunk, f"no stage started; stderr so far: {err.decode(errors='replace')}"
            err += chunk
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = (err + rest).decode(errors="replace")
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "py4j" not in text.lower() and "Exception" not in text, text
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    assert lines[-1] == "txmq analytics: interrupted; the output directory may be incomplete", text
    # Besides that line, only the progress bar's (stage name, bar, n/6, elapsed).
    assert all(line.endswith("]") and "/6 [" in line for line in lines[:-1]), text
    assert out == b""
