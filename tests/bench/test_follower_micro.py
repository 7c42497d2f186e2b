"""bench.follower_micro drives the store's replica calls directly (no gRPC): a tiny run
keeps it in step with the store's API."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_follower_micro_run_reports_both_figures():
    result = subprocess.run(
        [sys.executable, "-m", "bench.follower_micro", "--batches", "2", "--body-bytes", "64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(
        r"128 records of 64 B in \d+ shipments: copy [\d.]+ us/record CPU \([\d.]+ wall\), "
        r"dispatch [\d.]+ us/record CPU \([\d.]+ wall\)",
        result.stdout,
    )
