"""Smoke tests of the benchmark harness code (bench/), not the benchmark itself."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import produce


def test_pick_scenarios_globs_and_order():
    assert produce.pick_scenarios("all") == produce.ALL_SCENARIOS
    assert produce.pick_scenarios("redis:batch,txmq-*:batch") == [
        "txmq-async:batch",
        "txmq-sync:batch",
        "redis:batch",
    ]
    assert produce.pick_scenarios("nats") == ["nats:single", "nats:batch"]
    with pytest.raises(click.BadParameter):
        produce.pick_scenarios("kafka")


def test_ratios_and_targets():
    def res(sc, rate):
        system, mode = sc.split(":")
        return produce.Result(scenario=sc, system=system, mode=mode, round=0, msgs_per_s=rate)

    rows = {
        s: res(s, r)
        for s, r in [
            ("txmq-async:batch", 150.0),
            ("redis:batch", 100.0),
            ("txmq-sync:batch", 90.0),
            ("redis-aof:batch", 100.0),
        ]
    }
    by = {(x["numerator"], x["denominator"]): x for x in produce.compute_ratios(rows)}
    assert by[("txmq-async:batch", "redis:batch")]["ratio"] == pytest.approx(1.5)
    assert by[("txmq-async:batch", "redis:batch")]["meets_target"] is True
    assert by[("txmq-sync:batch", "redis-aof:batch")]["meets_target"] is False
    assert ("txmq-async:single", "redis:single") not in by
    assert "MISSED" in produce.format_ratios(list(by.values()))


def test_percentile_and_profile_summary(tmp_path):
    assert produce.percentile([], 0.5) == 0.0
    assert produce.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    p = tmp_path / "prof.txt"
    p.write_text(
        "thread (1): MainThread;main (txmq_store/a.py:1);append (txmq_store/b.py:7) 30\n"
        "thread (2): flusher;run (txmq_store/f.py:3);fsync (txmq_store/f.py:9) 10\n"
    )
    s = produce.summarize_profile(p)
    assert "40 samples" in s and " 75.0%  MainThread" in s
    assert " 75.0%  append (txmq_store/b.py)" in s and " 25.0%  run (txmq_store/f.py)" in s


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="bench/setup_peers.sh not run")
def test_tiny_redis_run(tmp_path):
    from click.testing import CliRunner

    out = tmp_path / "r.json"
    r = CliRunner().invoke(
        produce.main,
        [
            "--scenarios",
            "redis:batch",
            "--messages",
            "256",
            "--batch-size",
            "16",
            "--warmup",
            "16",
            "--max-seconds",
            "10",
            "--wait-quiet",
            "0",
            "--no-progress",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    import json

    doc = json.loads(out.read_text())
    (row,) = doc["results"]
    assert row["messages"] == 256 and row["stored"] == 256 + 16 and not row["error"]


def test_null_store_is_opt_in():
    assert not any(s.startswith("grpc-null") for s in produce.pick_scenarios("all"))
    picked = produce.pick_scenarios("all,grpc-null")
    assert picked[-2:] == ["grpc-null:single", "grpc-null:batch"]
    assert set(produce.ALL_SCENARIOS) <= set(picked)
