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


def test_peer_client_paths_best_and_overrides():
    from bench.peers import BEST_PEER_CLIENT, ClientPath, parse_peer_clients, peer_client

    best = parse_peer_clients("best")
    for sc in ("redis:single", "redis:batch", "nats:single", "nats:batch"):
        assert peer_client(best, sc) == BEST_PEER_CLIENT[sc]
    # redis-aof is driven like redis: the client side is the same.
    assert peer_client(best, "redis-aof:batch") == BEST_PEER_CLIENT["redis:batch"]

    items = parse_peer_clients("redis*=asyncio, redis:batch=sync@8, nats:single=asyncio@4")
    assert peer_client(items, "redis:single") == ClientPath("asyncio")
    assert peer_client(items, "redis:batch") == ClientPath("sync", 8)
    assert peer_client(items, "redis-aof:batch") == ClientPath("asyncio")
    assert peer_client(items, "nats:single") == ClientPath("asyncio", 4)
    assert peer_client(items, "nats:batch") == BEST_PEER_CLIENT["nats:batch"]
    # later items win; "best" puts the measured best back
    assert peer_client(parse_peer_clients("redis=sync,best"), "redis:batch") == BEST_PEER_CLIENT["redis:batch"]
    # a bare path applies to the peers that have it and skips the others
    bare = parse_peer_clients("uvloop@16")
    assert peer_client(bare, "nats:batch") == ClientPath("uvloop", 16)
    assert peer_client(bare, "redis:batch") == BEST_PEER_CLIENT["redis:batch"]
    assert ClientPath("conn").label(4) == "conn@4" and ClientPath("uvloop", 64).label(4) == "uvloop@64"


def test_peer_client_errors():
    from bench.peers import parse_peer_clients, peer_client

    with pytest.raises(ValueError, match="client path"):
        parse_peer_clients("redis=fast")
    with pytest.raises(ValueError, match="client path"):
        parse_peer_clients("nats=uvloop@0")
    with pytest.raises(ValueError, match="no client path 'sync'"):
        peer_client(parse_peer_clients("nats=sync"), "nats:batch")
    with pytest.raises(click.BadParameter):
        produce.check_peer_clients("nats=conn", ["nats:single"])
    produce.check_peer_clients("nats=conn", ["redis:single"])  # no nats scenario picked: not resolved


def _cfg(**kw) -> produce.Config:
    base = dict(
        messages=10,
        single_messages=10,
        batch_size=8,
        concurrency=4,
        body_bytes=16,
        max_seconds=5,
        warmup_messages=0,
        rounds=1,
        scenarios=[],
        txmq_client="auto",
    )
    return produce.Config(**{**base, **kw})


def test_make_target_uses_the_peer_client_path(tmp_path):
    from bench.peers import NatsTarget, RedisBenchTarget, RedisTarget

    cfg = _cfg(peer_client="best,redis:single=asyncio")
    batch = produce.make_target("redis-aof:batch", cfg, tmp_path, etcd=None)
    assert isinstance(batch, RedisTarget) and batch.blocking and batch.aof_always
    assert batch.client_path == "conn@4" and produce.in_flight(batch, cfg) == 4
    single = produce.make_target("redis:single", cfg, tmp_path, etcd=None)
    assert not single.blocking and single.client_path == "asyncio@4"
    nats = produce.make_target("nats:single", cfg, tmp_path, etcd=None)
    assert isinstance(nats, NatsTarget) and nats.client_path == "uvloop@64" and produce.in_flight(nats, cfg) == 64
    native = produce.make_target("redis-bench:batch", cfg, tmp_path, etcd=None)
    assert isinstance(native, RedisBenchTarget) and native.native and native.client_path == "native@4"


def test_table_names_each_rows_client_path():
    def res(sc, path, client):
        system, mode = sc.split(":")
        return produce.Result(
            scenario=sc,
            system=system,
            mode=mode,
            round=0,
            msgs_per_s=10.0,
            messages=10,
            seconds=1.0,
            client_path=path,
            client=client,
        )

    rows = {
        "redis:single": res("redis:single", "conn@4", "redis-py conn"),
        "redis:batch": res("redis:batch", "conn@4", "redis-py conn"),
        "nats:single": res("nats:single", "uvloop@64", "nats-py, 64 in flight"),
        "nats:batch": res("nats:batch", "uvloop@4", "nats-py, 4 in flight"),
        "redis-bench:batch": res("redis-bench:batch", "native@4", "redis-benchmark"),
    }
    table = produce.format_table(rows)
    assert "uvloop@64" in table and "native@4" in table and table.count("conn@4") == 2
    clients = produce.format_clients(rows).splitlines()
    # one line for redis (same client both shapes), one per nats shape (they differ)
    assert clients == [
        "  redis: redis-py conn",
        "  nats:single: nats-py, 64 in flight",
        "  nats:batch: nats-py, 4 in flight",
        "  redis-bench: redis-benchmark",
    ]
    by = {(x["numerator"], x["denominator"]) for x in produce.compute_ratios(rows)}
    assert ("redis:batch", "redis-bench:batch") in by


def _tiny_run(tmp_path, scenarios: str, *extra: str) -> list[dict]:
    import json

    from click.testing import CliRunner

    out = tmp_path / "r.json"
    args = ["--scenarios", scenarios, "--messages", "256", "--single-messages", "40", "--batch-size", "16"]
    args += ["--warmup", "16", "--max-seconds", "10", "--wait-quiet", "0", "--no-progress", "--out", str(out)]
    r = CliRunner().invoke(produce.main, [*args, *extra])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())["results"]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="bench/setup_peers.sh not run")
def test_tiny_redis_run_every_client_path(tmp_path):
    rows = _tiny_run(
        tmp_path, "redis", "--peer-client", "redis:single=sync@2,redis:batch=asyncio@3", "--concurrency", "2"
    )
    assert [(r["scenario"], r["client_path"]) for r in rows] == [
        ("redis:single", "sync@2"),
        ("redis:batch", "asyncio@3"),
    ]
    rows += _tiny_run(tmp_path, "redis-aof", "--peer-client", "redis*=conn")
    for row in rows:
        total = 40 if row["mode"] == "single" else 256
        assert row["messages"] == total and row["stored"] == total + 16 and not row["error"], row


@pytest.mark.skipif(shutil.which("redis-benchmark") is None, reason="bench/setup_peers.sh not run")
def test_tiny_redis_benchmark_run(tmp_path):
    rows = _tiny_run(tmp_path, "redis-bench")
    for row in rows:
        # the count is rounded up to whole pipelines; the stream says what was sent
        assert row["messages"] >= (40 if row["mode"] == "single" else 256), row
        assert row["stored"] == row["expected_stored"], row
        assert not row["error"] and row["client_path"] == "native@4" and row["client_cpu_s"] > 0, row


@pytest.mark.skipif(shutil.which("nats-server") is None, reason="bench/setup_peers.sh not run")
def test_tiny_nats_run_on_its_own_loop(tmp_path):
    rows = _tiny_run(tmp_path, "nats", "--peer-client", "nats=uvloop@8")
    for row in rows:
        total = 40 if row["mode"] == "single" else 256
        assert row["client_path"] == "uvloop@8" and row["messages"] == total, row
        assert row["stored"] == total + 16 and not row["error"], row


def test_report_keeps_one_peer_client_path_apart(tmp_path):
    import json
    from dataclasses import asdict

    from bench import report

    def res(sc, path):
        system, mode = sc.split(":")
        return asdict(produce.Result(scenario=sc, system=system, mode=mode, round=0, client_path=path))

    files = []
    for name, path in (("a", "conn@4"), ("b", "asyncio@4")):
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps({"results": [res("redis:batch", path), res("txmq-async:batch", "sdk@4")]}))
        files.append(f)
    for want, kept in (("asyncio", ["asyncio@4"]), ("conn@4", ["conn@4"]), (None, ["conn@4", "asyncio@4"])):
        results, _ = report.load(files, None, want)
        assert [r.client_path for r in results if r.system == "redis"] == kept
        assert sum(r.system == "txmq-async" for r in results) == 2  # txmq rows are not filtered
