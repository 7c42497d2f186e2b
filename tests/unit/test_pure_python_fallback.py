"""The record paths with the pure-Python codec (``TXMQ_PURE_PYTHON=1``): what a machine
without the compiled helper runs. The store's packed sends, raw reads and damaged-record
tests, and the SDK's decoding, in a child pytest that loads the fallback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_record_paths_pass_with_the_pure_python_codec() -> None:
    env = {**os.environ, "TXMQ_PURE_PYTHON": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "import txmq.codec_native as c; print(c.NATIVE)"],
        env=env, capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    assert probe.stdout.strip() == "False"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/store/test_packed.py",
         "tests/store/test_integrity.py", "tests/store/test_recovery.py", "tests/pull/test_from_arrivals.py",
         "-m", "not slow", "-k", "not woken_raw_pull"],
        env=env, capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
