"""Smoke tests of the pull benchmark's pure code (bench/pull.py), not the benchmark itself."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import pull


def test_pick_defaults_and_globs():
    assert pull.pick("all") == pull.DEFAULT_SCENARIOS
    assert pull.pick("txmq*") == ["txmq:latency", "txmq:throughput", "txmq-32:throughput", "txmq-unary:latency"]
    assert pull.pick("nats:latency,redis") == ["nats:latency", "redis:latency", "redis:throughput"]
    with pytest.raises(click.BadParameter):
        pull.pick("kafka")


def _lat(system, rnd, p99, p50=1.0):
    return pull.Result(
        scenario=f"{system}:latency",
        system=system,
        test="latency",
        round=rnd,
        lat_p99_ms=p99,
        lat_p50_ms=p50,
        samples=10,
    )


def _thr(system, rnd, rate):
    return pull.Result(
        scenario=f"{system}:throughput", system=system, test="throughput", round=rnd, msgs_per_s=rate, messages=10
    )


def test_ratios_are_paired_per_round_and_use_the_better_peer():
    results = [
        _lat("txmq", 0, 4.0),
        _lat("nats", 0, 1.0),
        _lat("redis", 0, 2.0),  # 4.0 / 1.0
        _lat("txmq", 1, 3.0),
        _lat("nats", 1, 3.0),
        _lat("redis", 1, 1.0),  # 3.0 / 1.0
        _lat("txmq", 2, 2.0),
        _lat("nats", 2, 2.0),
        _lat("redis", 2, 2.0),  # 1.0
        _thr("txmq", 0, 10.0),
        _thr("nats", 0, 20.0),
        _thr("txmq", 1, 30.0),
        _thr("nats", 1, 20.0),
        _thr("txmq", 2, 25.0),
        _thr("nats", 2, 20.0),
    ]
    ratios = {x["what"]: x for x in pull.paired_ratios(results, pull.median_rounds(results))}
    p99 = ratios["txmq p99 wake-up latency / the better peer's p99"]
    assert p99["per_round"] == [1.0, 3.0, 4.0] and p99["ratio"] == 3.0 and p99["meets_target"] is False
    thr = ratios["txmq pull throughput / nats fetch"]
    assert thr["ratio"] == 1.25 and thr["meets_target"] is True
    assert "MISSED" in pull.format_ratios(list(ratios.values()))


def test_table_formats_both_tests():
    rows = pull.median_rounds([_lat("txmq", 0, 2.0), _thr("nats", 0, 1000.0)])
    text = pull.format_table(rows)
    assert "wake-up latency" in text and "pull throughput" in text


def test_stream_and_unary_wake_ups_are_compared():
    results = [_lat("txmq", 0, 2.0), _lat("txmq-unary", 0, 4.0), _lat("nats", 0, 1.0), _lat("redis", 0, 2.0)]
    ratios = {x["what"]: x for x in pull.paired_ratios(results, pull.median_rounds(results))}
    assert ratios["txmq p99 wake-up latency, stream / unary"]["ratio"] == 0.5
    assert ratios["txmq-unary p99 wake-up latency / the better peer's p99"]["ratio"] == 4.0
    assert ratios["txmq p99 wake-up latency / the better peer's p99"]["ratio"] == 2.0
