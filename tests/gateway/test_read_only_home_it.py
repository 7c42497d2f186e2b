"""The gateway on a HOME it cannot write (the chart's read-only root filesystem, where
HOME was the image user's home) stops with one line saying what to do. The RocketMQ client
package it imports creates ~/logs/rocketmq_python at import; that used to end the process
with an OSError traceback from inside the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_an_unwritable_home_is_one_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")  # as root every directory is writable; below a file nothing is
    env = {**os.environ, "HOME": str(not_a_dir / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "txmq_cli.main", "gateway", "--port", "0"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("txmq-gateway: cannot start:")
    assert "set HOME to a writable directory" in lines[0]


def test_a_writable_home_gets_the_client_package_log_dir(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", "import txmq_gateway.v2"], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "logs" / "rocketmq_python").is_dir()
