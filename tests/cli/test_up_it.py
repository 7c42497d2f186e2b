"""`txmq up` given a place it cannot use: one line saying what and why, exit 1, no
traceback, nothing started. Run as a user runs it, in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Ports 0: no port to check (a cluster elsewhere on the machine may hold the defaults).
NO_FIXED_PORTS = [f"--{name}-port=0" for name in ("store", "pull", "txcheck", "gateway", "etcd-client", "etcd-peer")]


def _up(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "txmq_cli.main", "up", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("where", ["/dev/null/x", "under-a-file", "/proc/no-such-dir"])
def test_an_unusable_data_dir_is_one_line(where: str, tmp_path: Path) -> None:
    if where == "under-a-file":
        (tmp_path / "file").write_text("")
        where = str(tmp_path / "file" / "data")
    up = _up("--data-dir", where, *NO_FIXED_PORTS)
    assert up.returncode == 1, up
    assert up.stderr.startswith(f"not started: --data-dir {where} cannot hold the cluster's data: "), up.stderr
    assert up.stderr.count("\n") == 1 and "Traceback" not in up.stderr + up.stdout


def test_an_address_that_is_not_here_is_one_line(tmp_path: Path) -> None:
    up = _up("--data-dir", str(tmp_path / "data"), "--host", "192.0.2.1")  # TEST-NET-1: nobody's address
    assert up.returncode == 1, up
    assert up.stderr.startswith("not started: cannot listen on 192.0.2.1:"), up.stderr
    assert up.stderr.count("\n") == 1 and "Traceback" not in up.stderr + up.stdout
