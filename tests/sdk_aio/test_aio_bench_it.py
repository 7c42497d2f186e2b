"""bench/aio_produce.py in a tiny run: every row measured (nats-py's where a nats-server
is installed), the figures parse."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.aio_produce import _main


@pytest.mark.slow  # an etcd and a store process of its own
async def test_a_tiny_run_reports_every_row(tmp_path: Path) -> None:
    with_nats = shutil.which("nats-server") is not None  # bench/setup_peers.sh
    rows = await _main(200, 4, 8, 1, tmp_path, with_nats)
    names = [row.split("|")[1].strip() for row in rows[2:]]
    clients = ["threads", "asyncio"] + (["nats-py asyncio"] if with_nats else [])
    assert names == [f"{c}, {shape}" for shape in ("single", "batch of 8") for c in clients]
    for row in rows[2:]:
        rate, client_us, server_us = (float(cell.replace(",", "")) for cell in row.split("|")[2:5])
        assert rate > 0 and client_us > 0 and server_us >= 0
