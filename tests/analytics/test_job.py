"""The Spark job, for real, in local mode, on export files with known answers: exact lag,
rates, time to drain, stalled and behind-min flags, transaction outcomes and exact
percentiles; the Parquet outputs, the HTML report with its plots, the text summary.

The job runs once per module (a shared SparkSession; the whole run takes seconds)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from support.scratch import scoped_dir

pytest.importorskip("pyspark", reason="analytics extra not installed")
pq = pytest.importorskip("pyarrow.parquet")

from txmq_store.export import write_table  # noqa: E402

pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
STEP = 60_000  # one snapshot a minute
K = 11  # snapshots 0..10 (10 minutes)
STORE = "store-0"


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default; Spark percentile)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def offset_row(k: int, group: str, topic: str, queue: int, committed: int, lo: int, hi: int, *, system: bool = False):
    return dict(store_id=STORE, snapshot_ms=T0 + k * STEP, consumer_group=group, topic=topic, queue_id=queue,
                committed_offset=committed, min_offset=lo, max_offset=hi, lag=max(hi - committed, 0),
                last_store_ms=T0 + k * STEP - 1, committed_at_ms=T0, is_system=system)  # fmt: skip


def scenario_offsets() -> dict[int, list[dict]]:
    """Per snapshot k:
    - gA/TopicA q0: produced 10/s, consumed 11/s: lag 900 - 60k;
    - gA/TopicA q1: idle, nothing to consume;
    - gB/TopicA q0: consumed until k=3, then stuck at 500 (stalled from k=3);
    - gC/TopicB q0: slow (10 per minute), min offset moves to 300 at k=6: behind min;
    - gD/TopicC q0: caught up until new messages at k=9 (lag > 0 for one minute only);
    - the check loop's own progress (a system row, left out by default)."""
    out: dict[int, list[dict]] = {}
    for k in range(K):
        top_a = 1000 + 600 * k
        out[k] = [
            offset_row(k, "gA", "TopicA", 0, 100 + 660 * k, 0, top_a),
            offset_row(k, "gA", "TopicA", 1, 50, 0, 50),
            offset_row(k, "gB", "TopicA", 0, 200 + 100 * min(k, 3), 0, top_a),
            offset_row(k, "gC", "TopicB", 0, 100 + 10 * k, 300 if k >= 6 else 0, 1000),
            offset_row(k, "gD", "TopicC", 0, 100, 0, 100 if k <= 8 else 100 + 50 * (k - 8)),
            offset_row(k, "CID_SYS_RMQ_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0, k, 0, 2 * k, system=True),
        ]
    return out


def queue_row(k: int, topic: str, queue: int, lo: int, hi: int, *, system: bool = False) -> dict:
    return dict(store_id=STORE, snapshot_ms=T0 + k * STEP, topic=topic, queue_id=queue, min_offset=lo, max_offset=hi,
                last_store_ms=T0 + k * STEP - 1, is_system=system)  # fmt: skip


def scenario_queues() -> dict[int, list[dict]]:
    """TopicA (2 queues), TopicB, TopicC, and TopicZ nobody consumes: 5 per second."""
    return {
        k: [
            queue_row(k, "TopicA", 0, 0, 1000 + 600 * k),
            queue_row(k, "TopicA", 1, 0, 50),
            queue_row(k, "TopicB", 0, 300 if k >= 6 else 0, 1000),
            queue_row(k, "TopicC", 0, 0, 100 if k <= 8 else 100 + 50 * (k - 8)),
            queue_row(k, "TopicZ", 0, 0, 300 * k),
            queue_row(k, "RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 2 * k, system=True),
        ]
        for k in range(K)
    }


_record = 0


def ev(kind: str, txid: str, at: int, *, group: str = "PG1", topic: str = "TxT", checks: int = 0) -> dict:
    global _record
    _record += 1000
    return dict(store_id=STORE, event_ms=at, event_type=kind, transaction_id=txid, producer_group=group, topic=topic,
                queue_id=0, check_times=checks, check_waits=0, half_offset=0, record_offset=_record, entry=0,
                born_ms=at, detail="", exported_ms=at)  # fmt: skip


# PG1 -> TxT: 20 transactions, half at T0 + i s. 1..14 committed after i s; 15..18 rolled
# back after 2i s with checks; 19 discarded after 60 s and 5 checks; 20 pending.
PG1_CHECKS = {15: 1, 16: 2, 17: 1, 18: 3, 19: 5}
PG1_LATENCIES = [i * 1000 for i in range(1, 15)] + [2 * i * 1000 for i in range(15, 19)] + [60_000]
# PG2 -> TxU: committed after 0.5, 1.5, 2.5 s, and one whose half event expired.
PG2_LATENCIES = [500, 1500, 2500]


def scenario_events() -> tuple[list[dict], list[dict]]:
    first, second = [], []
    for i in range(1, 21):
        tx, half = f"tx{i}", T0 + i * 1000
        first.append(ev("half_stored", tx, half))
        for c in range(1, PG1_CHECKS.get(i, 0) + 1):
            first.append(ev("check_sent", tx, half + c * 100, checks=c))
        if i <= 14:
            # The op message's event may lack group and topic (found from the half).
            first.append(ev("committed", tx, half + i * 1000, group="", topic=""))
        elif i <= 18:
            first.append(ev("rolled_back", tx, half + 2 * i * 1000))
        elif i == 19:
            first.append(ev("discarded", tx, half + 60_000, checks=5))
    for n, lat in enumerate(PG2_LATENCIES):
        half = T0 + 100_000 + n * 10_000
        first.append(ev("half_stored", f"u{n}", half, group="PG2", topic="TxU"))
        first.append(ev("committed", f"u{n}", half + lat, group="PG2", topic="TxU"))
    first.append(ev("committed", "u-expired", T0 + 200_000, group="PG2", topic="TxU"))
    # Exported twice (a crash between data file and state): counted once.
    second.append(dict(first[2]))
    second.append(dict(first[0]))
    return first, second


@pytest.fixture(scope="module")
def export_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = scoped_dir(request, tmp_path_factory, "export")
    offsets, queues = scenario_offsets(), scenario_queues()
    for k in range(K):
        write_table(out, "offsets", offsets[k], at_ms=T0 + k * STEP, store_id=STORE)
        write_table(out, "queues", queues[k], at_ms=T0 + k * STEP, store_id=STORE)
    first, second = scenario_events()
    write_table(out, "tx_events", first, at_ms=T0 + 5 * STEP, store_id=STORE)
    write_table(out, "tx_events", second, at_ms=T0 + 70 * STEP, store_id=STORE)  # another hour partition
    # A writer's temp file must be ignored.
    tmp = next((out / "offsets").rglob("hour=*")) / ".part-1-store-0-1-1.parquet.tmp"
    tmp.write_bytes(b"not parquet")
    return out


@pytest.fixture(scope="module")
def job(spark: Any, export_dir: Path, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from txmq_analytics.compute import Options
    from txmq_analytics.job import run_job

    out = scoped_dir(request, tmp_path_factory, "analytics")
    printed: list[str] = []
    result = run_job(spark, export_dir, out, options=Options(rate_window_ms=300_000, stall_window_ms=300_000),
                     progress=False, echo=printed.append)  # fmt: skip
    result.printed = printed
    return result


def table(job: Any, name: str) -> list[dict]:
    return pq.read_table(job.tables[name]).to_pylist()


def by_queue(rows: list[dict]) -> dict[tuple[str, str, int], dict]:
    return {(r["consumer_group"], r["topic"], r["queue_id"]): r for r in rows}


def test_lag_over_time_is_exact(job: Any) -> None:
    rows = table(job, "lag_timeseries")
    assert len(rows) == 5 * K  # the system row left out
    a = {r["snapshot_ms"]: r for r in rows if (r["consumer_group"], r["queue_id"]) == ("gA", 0)}
    for k in range(K):
        r = a[T0 + k * STEP]
        assert r["lag"] == 900 - 60 * k
        if k:
            assert r["consume_rate"] == pytest.approx(11.0) and r["produce_rate"] == pytest.approx(10.0)
        else:
            assert r["consume_rate"] is None
        assert not r["stalled"] and not r["behind_min"]
    b = {r["snapshot_ms"]: r for r in rows if r["consumer_group"] == "gB"}
    assert [b[T0 + k * STEP]["stalled_for_ms"] for k in range(K)] == [0, 0, 0] + [(k - 3) * STEP for k in range(3, K)]
    assert [b[T0 + k * STEP]["stalled"] for k in range(K)] == [k >= 8 for k in range(K)]
    c = {r["snapshot_ms"]: r for r in rows if r["consumer_group"] == "gC"}
    assert [c[T0 + k * STEP]["behind_min"] for k in range(K)] == [k >= 6 for k in range(K)]
    assert c[T0 + 10 * STEP]["lost_messages"] == 100


def test_consumer_status_rates_drain_and_flags(job: Any) -> None:
    s = by_queue(table(job, "consumer_status"))
    assert set(s) == {
        ("gA", "TopicA", 0),
        ("gA", "TopicA", 1),
        ("gB", "TopicA", 0),
        ("gC", "TopicB", 0),
        ("gD", "TopicC", 0),
    }
    a = s[("gA", "TopicA", 0)]
    assert (a["lag"], a["consume_rate"], a["produce_rate"]) == (300, pytest.approx(11.0), pytest.approx(10.0))
    assert a["rate_from_ms"] == T0 + 5 * STEP and a["last_snapshot_ms"] == T0 + 10 * STEP and a["snapshots"] == K
    assert a["time_to_drain_s"] == pytest.approx(300.0)  # 300 / (11 - 10)
    assert not a["stalled"] and not a["behind_min"]
    idle = s[("gA", "TopicA", 1)]
    assert (idle["lag"], idle["time_to_drain_s"], idle["stalled"]) == (0, 0.0, False)
    b = s[("gB", "TopicA", 0)]
    assert b["stalled"] and b["stalled_for_ms"] == 7 * STEP and b["lag"] == 7000 - 500
    assert b["consume_rate"] == 0.0 and b["time_to_drain_s"] is None  # never
    c = s[("gC", "TopicB", 0)]
    assert c["behind_min"] and c["lost_messages"] == 100 and c["lag"] == 800
    assert c["consume_rate"] == pytest.approx(50 / 300) and c["produce_rate"] == 0.0
    assert c["time_to_drain_s"] == pytest.approx(800 / (50 / 300))
    assert c["stalled"] is False
    d = s[("gD", "TopicC", 0)]
    assert d["lag"] == 100 and d["stalled_for_ms"] == STEP and not d["stalled"]  # lag > 0 for one minute only


def test_group_status_and_topic_rates(job: Any) -> None:
    g = {(r["consumer_group"], r["topic"]): r for r in table(job, "group_status")}
    a = g[("gA", "TopicA")]
    assert (a["queues"], a["lag"], a["stalled_queues"]) == (2, 300, 0)
    assert a["time_to_drain_s"] == pytest.approx(300.0)
    assert g[("gB", "TopicA")]["stalled_queues"] == 1 and g[("gC", "TopicB")]["behind_min_queues"] == 1
    rates = [r for r in table(job, "topic_rates") if r["topic"] == "TopicZ"]
    assert len(rates) == K and {r["produce_rate"] for r in rates if r["produce_rate"] is not None} == {5.0}
    assert not [r for r in table(job, "topic_rates") if r["topic"].startswith("RMQ_SYS_")]
    series = [r for r in table(job, "group_timeseries") if r["consumer_group"] == "gA"]
    assert {r["lag"] for r in series if r["snapshot_ms"] == T0 + 10 * STEP} == {300}


def test_transaction_outcomes_and_exact_percentiles(job: Any) -> None:
    txs = {r["transaction_id"]: r for r in table(job, "transactions")}
    assert len(txs) == 24
    assert txs["tx3"]["outcome"] == "committed" and txs["tx3"]["latency_ms"] == 3000
    assert txs["tx3"]["producer_group"] == "PG1" and txs["tx3"]["topic"] == "TxT"  # filled from the half event
    assert txs["tx18"]["outcome"] == "rolled_back" and txs["tx18"]["checks"] == 3
    assert txs["tx19"]["outcome"] == "discarded" and txs["tx19"]["checks"] == 5
    assert txs["tx20"]["outcome"] == "pending" and txs["tx20"]["latency_ms"] is None
    assert txs["u-expired"]["outcome"] == "committed" and txs["u-expired"]["latency_ms"] is None

    s = {(r["producer_group"], r["topic"]): r for r in table(job, "tx_summary")}
    p1 = s[("PG1", "TxT")]
    assert (p1["transactions"], p1["committed"], p1["rolled_back"], p1["discarded"], p1["pending"]) == (20, 14, 4, 1, 1)
    assert (p1["committed_ratio"], p1["rolled_back_ratio"], p1["discarded_ratio"], p1["pending_ratio"]) == (
        pytest.approx(0.7), pytest.approx(0.2), pytest.approx(0.05), pytest.approx(0.05),
    )  # fmt: skip
    assert (p1["checks"], p1["checked_transactions"], p1["max_checks"]) == (12, 5, 5)
    assert p1["checks_per_tx"] == pytest.approx(12 / 20)
    assert p1["timed"] == 19
    for q, col in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms"), (0.99, "latency_p99_ms")):
        assert p1[col] == pytest.approx(percentile(PG1_LATENCIES, q), abs=1e-9), col
    assert p1["latency_p50_ms"] == 10_000.0 and p1["latency_max_ms"] == 60_000.0
    p2 = s[("PG2", "TxU")]
    assert (p2["transactions"], p2["committed"], p2["timed"]) == (4, 4, 3)
    assert (p2["latency_p50_ms"], p2["latency_p95_ms"]) == (1500.0, pytest.approx(2400.0))

    lat = {(r["producer_group"], r["outcome"]): r for r in table(job, "tx_latency")}
    rolled = [2 * i * 1000 for i in range(15, 19)]
    assert lat[("PG1", "rolled_back")]["transactions"] == 4
    assert lat[("PG1", "rolled_back")]["latency_p50_ms"] == pytest.approx(percentile(rolled, 0.5))
    assert lat[("PG1", "rolled_back")]["checks_per_tx"] == pytest.approx(7 / 4)
    assert ("PG1", "pending") not in lat


def test_report_and_summary(job: Any) -> None:
    html = job.report_html.read_text()
    assert job.report_html.name == "report.html"
    for text in ("Needs attention", "stalled consumer queue", "gB / TopicA q0", "behind the min offset",
                 "PG1", "data:image/png;base64,"):  # fmt: skip
        assert text in html, text
    plots = sorted(p.name for p in (job.output_dir / "plots").glob("*.png"))
    assert plots == sorted(
        f"{n}.png" for n in ("lag_over_time", "rates", "queue_lag", "tx_outcomes", "tx_latency", "tx_checks")
    )
    for p in (job.output_dir / "plots").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = job.summary_txt.read_text()
    assert "STALLED consumers (1 queue): gB / TopicA q0" in summary
    assert "BEHIND MIN OFFSET, data lost (1 queue): gC / TopicB q0 lost 100" in summary
    assert "transactions: 24" in summary
    assert job.printed[0] == job.summary and job.printed[1] == f"report: {job.report_html}"
    assert job.counts == {"offset_rows": 5 * K, "transactions": 24}


def test_cli_run_and_run_report_with_a_running_session(spark: Any, export_dir: Path, tmp_path: Path) -> None:
    import click
    from click.testing import CliRunner

    from txmq_analytics import run_report
    from txmq_cli import analytics_cmds

    @click.group()
    def cli() -> None:
        pass

    analytics_cmds.register(cli)
    out = tmp_path / "cli"
    res = CliRunner().invoke(
        cli, ["analytics", "run", "--input", str(export_dir), "--output", str(out), "--master", "local[2]",
              "--no-progress", "--conf", "spark.sql.shuffle.partitions=2"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (
        "STALLED consumers (1 queue): gB / TopicA q0" in res.output and f"report: {out / 'report.html'}" in res.output
    )
    assert pq.read_table(out / "tables" / "consumer_status").num_rows == 5
    # The session the CLI found running is still usable (it was not stopped).
    assert spark.range(3).count() == 3
    path = run_report(export_dir, tmp_path / "hook", spark=spark, progress=False)
    assert path == tmp_path / "hook" / "report.html" and path.exists()
