"""Consumer groups of RocketMQ clients (through the gateway) are in the store's export, as
docs/gateway.md says: the gateway commits their offsets every second and when it stops,
and the local cluster stops the gateway before the store, whose last export sees them.
The demo's run (ack, then stop within the second) is the case that left them out. No Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from support import new_local_cluster  # noqa: E402

from txmq import Admin  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOPIC, GROUP = "GwExport", "gw-export-group"


def test_a_gateway_group_acked_just_before_the_stop_is_exported(tmp_path: Path) -> None:
    # No periodic export: only the store's last one, on stop, can see the group.
    cluster = new_local_cluster(tmp_path / "cluster", store_args=["--export_interval_ms", "3600000"])
    cluster.start()
    try:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        home = tmp_path / "home"  # the official client writes its logs under $HOME
        home.mkdir()
        # The demo's own client run: a send, a committed and a rolled-back transaction, then a
        # SimpleConsumer receives and acks the two visible messages and shuts down.
        done = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "rocketmq_client_demo.py"), cluster.gateway_address, TOPIC, GROUP],
            env={**os.environ, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SimpleConsumer received and acked" in done.stdout, done.stdout
    finally:
        codes = cluster.stop()
    assert [codes[s] for s in ("store", "pull", "txcheck", "gateway")] == [0, 0, 0, 0], codes
    files = sorted((tmp_path / "cluster" / "store" / "export" / "offsets").rglob("*.parquet"))
    assert files, "the store exported nothing on stop"
    rows = [r for f in files for r in pq.read_table(f).to_pylist() if r["consumer_group"] == GROUP]
    assert rows, f"{GROUP} is not in the export"
    last = max(r["snapshot_ms"] for r in rows)
    final = [r for r in rows if r["snapshot_ms"] == last]
    assert {r["topic"] for r in final} == {TOPIC}
    assert sum(r["committed_offset"] for r in final) == 2 and sum(r["lag"] for r in final) == 0, final
