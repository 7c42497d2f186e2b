"""The store-side exporter against a real MessageStore (in process, served over a real
grpc.aio server so the real transaction service code writes the system topics), with a
fake clock: snapshot contents, transaction events, incremental export, atomic writes,
retention, and the same export over the gRPC API."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from support.clock import ManualClock  # noqa: E402

from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc, txcheck_pb2  # noqa: E402
from txmq_store import export  # noqa: E402
from txmq_store.export import Exporter, LocalSource, StoreExporter  # noqa: E402
from txmq_store.message_store import MessageStore  # noqa: E402
from txmq_store.model import OutgoingMessage  # noqa: E402
from txmq_store.servicer import add_store_servicers  # noqa: E402
from txmq_store.settings import StoreSettings  # noqa: E402
from txmq_txcheck.checkloop import CheckLoop, CheckSettings  # noqa: E402
from txmq_txcheck.ledger import Ledger  # noqa: E402
from txmq_txcheck.store_client import StoreClient  # noqa: E402

T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
GROUP = "PG_EXPORT"
TX_TOPIC = "TxExport"
SMALL = dict(
    commitlog_segment_bytes=256 * 1024,
    consume_queue_units_per_file=256,
    index_slots_per_file=256,
    index_entries_per_file=1024,
    flush_interval_ms=3_600_000,
    flush_consume_queue_interval_ms=3_600_000,
    consume_offset_persist_interval_ms=3_600_000,
    clean_files_interval_ms=3_600_000,
)
COMMIT = txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT
ROLLBACK = txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK


class Sender:
    def __init__(self) -> None:
        self.checks: list[txcheck_pb2.CheckTransactionState] = []

    def has_live_producer(self, group: str) -> bool:
        return True

    async def send_checks(self, group: str, checks: list[txcheck_pb2.CheckTransactionState]) -> int:
        self.checks.extend(checks)
        return len(checks)


@dataclass
class Env:
    store: MessageStore
    clock: ManualClock
    stub: store_pb2_grpc.StoreStub
    ledger: Ledger
    loop: CheckLoop
    sender: Sender
    address: str
    halves: dict[str, store_pb2.SendResult] = field(default_factory=dict)

    async def half(self, name: str) -> store_pb2.SendResult:
        r = await self.stub.SendMessage(
            store_pb2.SendMessageRequest(
                message=common_pb2.Message(topic=TX_TOPIC, body=name.encode(), born_timestamp_ms=self.clock()),
                producer_group=GROUP,
                transaction_prepared=True,
            )
        )
        self.halves[name] = r.result
        return r.result

    async def end(self, name: str, resolution: int) -> None:
        r = self.halves[name]
        await self.ledger.end(
            txcheck_pb2.EndTransactionRequest(
                producer_group=GROUP,
                transaction_id=r.transaction_id,
                commit_log_offset=r.commit_log_offset,
                tran_state_table_offset=r.queue_offset,
                resolution=resolution,
            )
        )

    async def answer_check(self, name: str, resolution: int) -> None:
        txid = self.halves[name].transaction_id
        c = [c for c in self.sender.checks if c.transaction_id == txid][-1]
        await self.ledger.end(
            txcheck_pb2.EndTransactionRequest(
                producer_group=GROUP,
                transaction_id=txid,
                commit_log_offset=c.commit_log_offset,
                tran_state_table_offset=c.tran_state_table_offset,
                resolution=resolution,
                from_transaction_check=True,
            )
        )


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    clock = ManualClock(wall_ms=T0)
    settings = StoreSettings(data_dir=str(tmp_path / "store"), **SMALL)  # type: ignore[arg-type]
    store = await MessageStore.open(settings, advertised_address="127.0.0.1:1", clock=clock)
    store.create_topic(TX_TOPIC, read_queue_nums=2, write_queue_nums=2)
    store.create_topic("Orders", read_queue_nums=2, write_queue_nums=2)
    server = grpc.aio.server()
    add_store_servicers(server, store)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    client = StoreClient(channel, store_id=store.store_id)
    ledger = Ledger(client, clock=clock, transaction_timeout_ms=6000)
    sender = Sender()
    loop = CheckLoop(client, ledger, sender, clock=clock, settings=CheckSettings(check_max=2), store_id=store.store_id)
    try:
        yield Env(store, clock, store_pb2_grpc.StoreStub(channel), ledger, loop, sender, f"127.0.0.1:{port}")
    finally:
        await channel.close()
        await server.stop(None)
        await store.close()


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def files_of(export_dir: Path, table: str) -> list[Path]:
    return sorted((export_dir / table).rglob("*.parquet"))


async def traffic(env: Env) -> None:
    """10 messages on Orders queue 0, 3 on queue 1; group G1 committed 4 and 3."""
    await env.store.send([OutgoingMessage("Orders", b"m%d" % i, queue_id=0) for i in range(10)])
    await env.store.send([OutgoingMessage("Orders", b"n%d" % i, queue_id=1) for i in range(3)])
    env.store.commit_consume_offset(group="G1", topic="Orders", queue_id=0, offset=4)
    env.store.commit_consume_offset(group="G1", topic="Orders", queue_id=1, offset=3)


async def transactions(env: Env) -> dict[str, int]:
    """commit (producer), rollback (producer), commit after one check, discard after two
    checks (check_max 2). Returns when each half message was stored."""
    stored = {}
    for name in ("commit", "rollback", "checked", "discard"):
        stored[name] = env.clock()
        await env.half(name)
        env.clock.advance(100)
    await env.end("commit", COMMIT)
    env.clock.advance(400)
    await env.end("rollback", ROLLBACK)
    env.clock.advance(7_000)
    rep = await env.loop.check_once()  # checks "checked" and "discard" (check 1)
    assert len(rep.checked) == 2
    env.clock.advance(1_000)
    await env.answer_check("checked", COMMIT)
    env.clock.advance(7_000)
    rep = await env.loop.check_once()  # "discard": check 2
    assert rep.checked == [env.halves["discard"].transaction_id]
    env.clock.advance(7_000)
    rep = await env.loop.check_once()  # "discard": check max reached
    assert rep.discarded == [env.halves["discard"].transaction_id]
    return stored


async def test_snapshot_and_transaction_events(env: Env, tmp_path: Path) -> None:
    await traffic(env)
    stored = await transactions(env)
    out = tmp_path / "export"
    exporter = Exporter(LocalSource(env.store), out)
    result = await exporter.export_once()
    now = env.clock()
    assert result.snapshot_ms == now

    # Offsets: one row per committed (group, topic, queue), with the queue's offsets.
    (offsets_file,) = files_of(out, "offsets")
    assert offsets_file.parent.name == "hour=22" and offsets_file.parent.parent.name == "date=2023-11-14"
    rows = {(r["consumer_group"], r["topic"], r["queue_id"]): r for r in read_rows(offsets_file)}
    g1q0 = rows[("G1", "Orders", 0)]
    orders_q0 = env.store.queue_offsets("Orders", 0)[0]
    assert g1q0 == dict(
        store_id="store-0", snapshot_ms=now, consumer_group="G1", topic="Orders", queue_id=0, committed_offset=4,
        min_offset=0, max_offset=10, lag=6, last_store_ms=orders_q0.last_store_timestamp_ms,
        committed_at_ms=T0, is_system=False,
    )  # fmt: skip
    assert rows[("G1", "Orders", 1)]["lag"] == 0
    # The check loop's progress on the half queue is a system row.
    assert rows[("CID_SYS_RMQ_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0)]["is_system"] is True

    # Queues: every queue of every topic, system topics included.
    queues = {(r["topic"], r["queue_id"]): r for r in read_rows(files_of(out, "queues")[0])}
    assert queues[("Orders", 0)]["max_offset"] == 10 and queues[("Orders", 1)]["max_offset"] == 3
    assert queues[("RMQ_SYS_TRANS_HALF_TOPIC", 0)]["is_system"] is True
    committed_copies = sum(q.max_offset for q in env.store.queue_offsets(TX_TOPIC))
    assert committed_copies == 2

    # Transaction events.
    events = read_rows(files_of(out, "tx_events")[0])
    by_tx: dict[str, list[dict]] = {}
    for e in events:
        by_tx.setdefault(e["transaction_id"], []).append(e)
    txid = {name: r.transaction_id for name, r in env.halves.items()}
    kinds = {name: [e["event_type"] for e in by_tx[txid[name]]] for name in txid}
    assert kinds == {
        "commit": ["half_stored", "committed"],
        "rollback": ["half_stored", "rolled_back"],
        "checked": ["half_stored", "check_sent", "committed"],
        "discard": ["half_stored", "check_sent", "check_sent", "discarded"],
    }
    for e in events:
        assert e["producer_group"] == GROUP and e["topic"] == TX_TOPIC and e["store_id"] == "store-0"
    for name, at in stored.items():
        (half,) = [e for e in by_tx[txid[name]] if e["event_type"] == "half_stored"]
        assert half["event_ms"] == at and half["born_ms"] == at
        assert half["half_offset"] == env.halves[name].queue_offset
    assert [e["check_times"] for e in by_tx[txid["discard"]]] == [0, 1, 2, 2]
    # The commit time is the committed copy's store time.
    copy = env.store.query_messages(topic=TX_TOPIC, unique_id=txid["commit"])
    (copy,) = [m for m in copy if m.topic == TX_TOPIC]
    (committed,) = [e for e in by_tx[txid["commit"]] if e["event_type"] == "committed"]
    assert committed["event_ms"] == copy.store_timestamp_ms == stored["discard"] + 100
    assert committed["detail"].startswith(f"committed copy {TX_TOPIC} queue")
    (rolled,) = [e for e in by_tx[txid["rollback"]] if e["event_type"] == "rolled_back"]
    assert rolled["event_ms"] == stored["discard"] + 500
    (discarded,) = [e for e in by_tx[txid["discard"]] if e["event_type"] == "discarded"]
    assert discarded["detail"] == "check max"
    assert result.events_by_type == {
        "half_stored": 4,
        "check_sent": 3,
        "committed": 2,
        "rolled_back": 1,
        "discarded": 1,
    }

    # Incremental: a second export finds no new events; a new transaction only.
    env.clock.advance(60_000)
    again = await exporter.export_once()
    assert again.events == 0 and again.offsets == result.offsets
    assert len(files_of(out, "tx_events")) == 1 and len(files_of(out, "offsets")) == 2
    await env.half("late")
    await env.end("late", ROLLBACK)
    env.clock.advance(1_000)
    # A new exporter on the same directory continues from the saved state.
    fresh = Exporter(LocalSource(env.store), out)
    third = await fresh.export_once()
    assert third.events_by_type == {"half_stored": 1, "rolled_back": 1}
    # Nothing half-written or temporary is left.
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]


async def test_atomic_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "export"
    rows = [dict(store_id="s", snapshot_ms=T0, topic="T", queue_id=0, min_offset=0, max_offset=5, last_store_ms=T0,
                 is_system=False)]  # fmt: skip
    good = export.write_table(out, "queues", rows, at_ms=T0, store_id="s")
    assert read_rows(good) == rows

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(export.os, "replace", broken_replace)
    with pytest.raises(OSError):
        export.write_table(out, "queues", rows, at_ms=T0 + 1, store_id="s")
    monkeypatch.undo()
    # Only the complete file is there; the failed one left neither a file nor a temp file.
    assert [p.name for p in (out / "queues").rglob("*") if p.is_file()] == [good.name]
    # A crashed writer's old temp file is hidden from readers and pruned later.
    stale = good.parent / f".part-{T0}-s-1-1.parquet.tmp"
    stale.write_bytes(b"PAR1 half a file")
    assert export.prune(out, retention_ms=0, now_ms=T0 + 1000) == 0
    assert export.prune(out, retention_ms=0, now_ms=T0 + export.STALE_TEMP_MS + 1) == 1
    assert not stale.exists() and good.exists()


async def test_retention_prunes_old_files_and_empty_partitions(tmp_path: Path) -> None:
    out = tmp_path / "export"
    hour = 3600 * 1000
    rows = [dict(store_id="s", snapshot_ms=0, topic="T", queue_id=0, min_offset=0, max_offset=5, last_store_ms=0,
                 is_system=False)]  # fmt: skip
    old = export.write_table(out, "queues", rows, at_ms=T0, store_id="s")
    new = export.write_table(out, "queues", rows, at_ms=T0 + 30 * hour, store_id="s")
    assert old.parent != new.parent and old.parent.parent != new.parent.parent  # other day and hour
    assert export.prune(out, retention_ms=24 * hour, now_ms=T0 + 31 * hour) == 1
    assert not old.exists() and not old.parent.exists() and not old.parent.parent.exists()
    assert new.exists()


async def test_store_exporter_runs_periodically_and_once_on_stop(env: Env, tmp_path: Path) -> None:
    await traffic(env)
    out = tmp_path / "periodic"
    ex = StoreExporter(env.store, export_dir=out, interval_ms=20, retention_ms=0).start()
    # Wait on the exporter's own progress (no timing assertion).
    import asyncio

    while ex.runs < 2:
        await asyncio.sleep(0.01)
    await ex.stop()
    assert ex.runs >= 3  # the final export on stop
    assert len(files_of(out, "offsets")) == ex.runs


async def test_export_over_grpc_matches_in_process(env: Env, tmp_path: Path) -> None:
    pytest.importorskip("txmq_analytics.remote")
    from txmq_analytics.remote import StoreTarget, export_stores

    await traffic(env)
    await transactions(env)
    local = await Exporter(LocalSource(env.store), tmp_path / "local").export_once()
    (remote,) = await export_stores([StoreTarget(env.address)], tmp_path / "remote")
    assert remote.snapshot_ms == local.snapshot_ms
    assert (remote.offsets, remote.queues, remote.events_by_type) == (local.offsets, local.queues, local.events_by_type)
    for table in ("offsets", "queues", "tx_events"):
        a = read_rows(files_of(tmp_path / "local", table)[0])
        b = read_rows(files_of(tmp_path / "remote", table)[0])
        key = lambda r: sorted(r.items())  # noqa: E731
        assert sorted(a, key=key) == sorted(b, key=key), table


def test_job_reads_the_exported_columns() -> None:
    pytest.importorskip("pyspark")
    from txmq_analytics.compute import INPUT_COLUMNS

    assert INPUT_COLUMNS == export.COLUMNS
    assert os.path.basename(export.__file__) == "export.py"


async def test_cli_export_over_grpc(env: Env, tmp_path: Path) -> None:
    pytest.importorskip("txmq_analytics.remote")
    import asyncio

    import click
    from click.testing import CliRunner

    from txmq_cli import analytics_cmds

    @click.group()
    def cli() -> None:
        pass

    analytics_cmds.register(cli)
    await traffic(env)
    await transactions(env)
    out = tmp_path / "ondemand"
    args = ["analytics", "export", "--store", env.address, "--output", str(out), "--count", "2", "--interval-s", "0"]
    # The CLI runs its own event loop: in a thread, while this loop serves the store.
    res = await asyncio.to_thread(CliRunner().invoke, cli, args)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    # 8 queues: the topics' and the system ones (half, op, and the timer's: rmq_sys_wheel_timer).
    assert lines[0] == (
        "store-0: 4 consume offsets, 8 queues, 11 transaction events "
        "(check_sent 3, committed 2, discarded 1, half_stored 4, rolled_back 1)"
    )
    assert lines[1] == "store-0: 4 consume offsets, 8 queues, 0 transaction events (none)"
    assert lines[2] == f"exported to {out}"
    assert len(files_of(out, "offsets")) == 2 and len(files_of(out, "tx_events")) == 1


async def test_store_exporter_from_settings(env: Env) -> None:
    from types import SimpleNamespace

    off = SimpleNamespace(export_interval_ms=0, export_dir="", export_retention_ms=0, data_dir="/d")
    assert StoreExporter.from_settings(env.store, off) is None
    on = SimpleNamespace(export_interval_ms=5_000, export_dir="", export_retention_ms=3_600_000, data_dir="/d")
    ex = StoreExporter.from_settings(env.store, on)
    assert ex is not None and ex.export_dir == Path("/d/export") and ex.interval_ms == 5_000
    assert ex.exporter.retention_ms == 3_600_000
    custom = SimpleNamespace(export_interval_ms=1, export_dir="/elsewhere", export_retention_ms=0, data_dir="/d")
    assert StoreExporter.from_settings(env.store, custom).export_dir == Path("/elsewhere")
