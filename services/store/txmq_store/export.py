"""Analytics export (DESIGN §6): what the consume-offset analytics job reads.

Every ``export_interval_ms`` the store writes, under ``export_dir``:

- ``offsets/``: one row per (consumer group, topic, queue) with a committed offset: the
  committed offset, the queue's min/max offset, the lag, the store time of the queue's
  last message and when the offset was committed; ``snapshot_ms`` says when.
- ``queues/``: one row per queue of every topic (system topics included): min/max
  offset and last store time, so production is visible for topics nobody consumes.
- ``tx_events/``: one row per transaction event found since the last export, derived
  from what the store holds (DESIGN §4): the half queue (``RMQ_SYS_TRANS_HALF_TOPIC``:
  the half message, then its put-backs, whose ``TRANSACTION_CHECK_TIMES`` going up means
  a check was sent), the op queue (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``: commit
  and rollback decisions), the committed copies (sysflag COMMIT_TYPE; their store time
  is the commit time) and ``TRANS_CHECK_MAX_TIME_TOPIC`` (discarded transactions).

Files are Parquet (pyarrow), partitioned by export time in UTC:
``<table>/date=YYYY-MM-DD/hour=HH/part-<ms>-<store id>-<n>.parquet``. Each is written to
a hidden temp file, fsynced and renamed, so a reader (Spark skips names starting with
``.`` and ``_``) never sees half a file. Files older than ``export_retention_ms`` are
deleted.

Transaction events are exported incrementally: the next queue offset to read of each
system queue and the transactions still undecided (group, topic, check count) are kept
in ``_state/<store id>.json``, written after the data files. A crash between the two
exports some events twice; they carry the commit-log offset of the record they come
from (``record_offset``, ``entry``), so readers drop duplicates.

The same ``Exporter`` runs in the store process (``StoreExporter``, over the
``MessageStore``) and on demand from outside (``txmq analytics export``, over the Store
gRPC API): both implement ``ExportSource``. pyarrow is imported only when exporting.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from txmq import protocol
from txmq.errors import TxmqError
from txmq.protocol import (
    CHECK_SENT,
    CHECK_WAITING,
    HALF_STORED,
    IMMUNITY_PUT_BACK,
    PROPERTY_DISCARD_REASON,
    PROPERTY_PREPARED_QUEUE_OFFSET,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PUT_BACK,
    RESUMED,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    check_counts,
    decode_op_entries,
    half_record_kind,
    is_system_topic,
)
from txmq.v1 import errors_pb2

from .fileio import fsync_path, read_json, write_json_atomically

if TYPE_CHECKING:
    from .message_store import MessageStore
    from .settings import StoreSettings

log = logging.getLogger("txmq.store.export")

# Tables (directory names under the export dir).
OFFSETS = "offsets"
QUEUES = "queues"
TX_EVENTS = "tx_events"
TABLES = (OFFSETS, QUEUES, TX_EVENTS)
STATE_DIR = "_state"

# Event types of tx_events.
# (the half-record kinds HALF_STORED ... PUT_BACK are txmq.protocol's)
COMMITTED = "committed"
ROLLED_BACK = "rolled_back"
DISCARDED = "discarded"
EVENT_TYPES = (
    HALF_STORED, CHECK_SENT, CHECK_WAITING, IMMUNITY_PUT_BACK, RESUMED, PUT_BACK, COMMITTED, ROLLED_BACK, DISCARDED,
)  # fmt: skip


# GetMessageStatus / GET_MESSAGE_STATUS_* numbers.
FOUND = 1
OFFSET_TOO_SMALL = 7
OFFSET_OVERFLOW_BADLY = 5
NO_MATCHED_MESSAGE = 2
_SKIP_AHEAD = {2, 3, 4}  # no matched message, message was removing, offset found null

READ_BATCH = 32
MAX_RECORDS_PER_RUN = 50_000  # per system queue; the rest waits for the next run
MAX_PENDING = 100_000  # undecided transactions remembered (oldest forgotten first)
STALE_TEMP_MS = 3600 * 1000
_PART = re.compile(r"^part-(\d+)-.*\.parquet$")
_TEMP = re.compile(r"^\.part-(\d+)-.*\.parquet\.tmp$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


# -- schemas ---------------------------------------------------------------------------------

# (name, pyarrow type name); the analytics job reads these columns.
COLUMNS: dict[str, list[tuple[str, str]]] = {
    OFFSETS: [
        ("store_id", "string"),
        ("snapshot_ms", "int64"),
        ("consumer_group", "string"),
        ("topic", "string"),
        ("queue_id", "int32"),
        ("committed_offset", "int64"),
        ("min_offset", "int64"),
        ("max_offset", "int64"),
        ("lag", "int64"),
        ("last_store_ms", "int64"),
        ("committed_at_ms", "int64"),
        ("is_system", "bool"),
    ],
    QUEUES: [
        ("store_id", "string"),
        ("snapshot_ms", "int64"),
        ("topic", "string"),
        ("queue_id", "int32"),
        ("min_offset", "int64"),
        ("max_offset", "int64"),
        ("last_store_ms", "int64"),
        ("is_system", "bool"),
    ],
    TX_EVENTS: [
        ("store_id", "string"),
        ("event_ms", "int64"),
        ("event_type", "string"),
        ("transaction_id", "string"),
        ("producer_group", "string"),
        ("topic", "string"),  # the real topic
        ("queue_id", "int32"),  # the real queue; -1 unknown
        ("check_times", "int32"),
        ("check_waits", "int32"),
        ("half_offset", "int64"),  # half-queue offset the event is about
        ("record_offset", "int64"),  # commit-log offset of the record it comes from
        ("entry", "int32"),  # entry within an op message; 0 otherwise
        ("born_ms", "int64"),  # when the producer created the half message
        ("detail", "string"),
        ("exported_ms", "int64"),
    ],
}


def arrow_schema(table: str) -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "bool": pa.bool_()}
    return pa.schema([pa.field(name, types[t], nullable=False) for name, t in COLUMNS[table]])


def require_pyarrow() -> None:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError(
            "the analytics export writes Parquet and needs pyarrow: pip install 'txmq-server[analytics]'"
        ) from exc


# -- writing files ---------------------------------------------------------------------------


def partition_dir(export_dir: Path, table: str, at_ms: int) -> Path:
    t = datetime.fromtimestamp(at_ms / 1000, UTC)
    return export_dir / table / f"date={t:%Y-%m-%d}" / f"hour={t:%H}"


_sequence = itertools.count(1)  # file names of one process never collide


def write_table(export_dir: Path, table: str, rows: Sequence[dict[str, Any]], *, at_ms: int, store_id: str) -> Path:
    """Write ``rows`` (dicts with every column of ``table``) as one Parquet file in the
    partition of ``at_ms``, atomically: temp file, fsync, rename, fsync of the
    directory. Returns the file's path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(table)
    data = pa.Table.from_pydict({name: [r[name] for r in rows] for name in schema.names}, schema=schema)
    directory = partition_dir(export_dir, table, at_ms)
    new_dirs = [d for d in (directory.parent.parent, directory.parent, directory) if not d.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    name = f"part-{at_ms}-{_UNSAFE.sub('_', store_id) or 'store'}-{os.getpid()}-{next(_sequence)}.parquet"
    final = directory / name
    tmp = directory / f".{name}.tmp"
    try:
        with open(tmp, "wb") as f:
            pq.write_table(data, f, compression="snappy")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(directory)
    for d in new_dirs:  # a new partition directory must survive a crash too
        fsync_path(d.parent)
    return final


def prune(export_dir: Path, *, retention_ms: int, now_ms: int) -> int:
    """Delete data files older than ``retention_ms`` (by the time in their name), temp
    files left by a crash, and partition directories left empty. Returns the number of
    files deleted. ``retention_ms`` 0 keeps data files forever."""
    deleted = 0
    for table in TABLES:
        root = export_dir / table
        if not root.is_dir():
            continue
        for date_dir in sorted(root.glob("date=*")):
            for hour_dir in sorted(date_dir.glob("hour=*")):
                for f in hour_dir.iterdir():
                    m = _PART.match(f.name)
                    t = _TEMP.match(f.name)
                    if (m and retention_ms and int(m.group(1)) < now_ms - retention_ms) or (
                        t and int(t.group(1)) < now_ms - STALE_TEMP_MS
                    ):
                        f.unlink(missing_ok=True)
                        deleted += 1
                _rmdir_if_empty(hour_dir)
            _rmdir_if_empty(date_dir)
    return deleted


def _rmdir_if_empty(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass


# -- what an export reads ----------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    """One stored message, as the exporter needs it (from a StoredMessage or a
    MessageView)."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_ms: int
    born_ms: int
    unique_id: str
    properties: dict[str, str]
    sys_flag: int
    prepared_transaction_offset: int
    body: bytes


@dataclass(slots=True)
class QueueRow:
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_ms: int


@dataclass(slots=True)
class OffsetRow:
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    min_offset: int
    max_offset: int
    updated_at_ms: int


@dataclass(slots=True)
class Snapshot:
    now_ms: int
    queues: list[QueueRow]
    offsets: list[OffsetRow]


@dataclass(slots=True)
class ReadResult:
    status: int
    next_begin_offset: int
    records: list[Record]


class ExportSource(Protocol):
    store_id: str

    async def snapshot(self) -> Snapshot:
        """Every queue of every topic and every committed offset, at one time."""
        ...

    async def read(self, topic: str, queue_id: int, offset: int, max_messages: int) -> ReadResult: ...

    async def committed_copy(self, transaction_id: str) -> Record | None:
        """The committed copy of a transaction's message, if the store holds one."""
        ...


def is_committed_copy(r: Record, transaction_id: str) -> bool:
    return protocol.is_committed_copy(
        unique_id=r.unique_id, sys_flag=r.sys_flag, topic=r.topic, transaction_id=transaction_id
    )


class LocalSource:
    """The MessageStore of this process. Every call is synchronous underneath, so a
    snapshot is taken at one point of the store's history."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self.store_id = store.store_id

    async def snapshot(self) -> Snapshot:
        s = self._store
        queues = []
        for cfg in s.admin.topic_configs():
            for q in s.queue_offsets(cfg.name):
                queues.append(QueueRow(cfg.name, q.queue_id, q.min_offset, q.max_offset, q.last_store_timestamp_ms))
        offsets = [
            OffsetRow(o.consumer_group, o.topic, o.queue_id, o.offset, o.min_offset, o.max_offset, o.updated_at_ms)
            for o in s.admin.list_consume_offsets()
        ]
        return Snapshot(s.now_ms(), queues, offsets)

    async def read(self, topic: str, queue_id: int, offset: int, max_messages: int) -> ReadResult:
        try:
            r = self._store.reader.get_message(topic=topic, queue_id=queue_id, offset=offset, max_messages=max_messages)
        except TxmqError as exc:
            if exc.code != errors_pb2.CODE_DATA_CORRUPTED:
                raise
            # A damaged record (counted and logged by the store): export what follows it.
            return ReadResult(NO_MATCHED_MESSAGE, int(exc.metadata["next_offset"]), [])
        return ReadResult(int(r.status), r.next_begin_offset, [_from_stored(m) for m in r.messages])

    async def committed_copy(self, transaction_id: str) -> Record | None:
        try:
            found = self._store.reader.query_messages(unique_id=transaction_id, max_results=1000)
        except TxmqError as exc:
            if exc.code != errors_pb2.CODE_DATA_CORRUPTED:
                raise
            return None  # its only copies are damaged (counted and logged by the store)
        for m in found:
            rec = _from_stored(m)
            if is_committed_copy(rec, transaction_id):
                return rec
        return None


def _from_stored(m: Any) -> Record:
    return Record(
        m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.store_timestamp_ms, m.born_timestamp_ms,
        m.unique_id, dict(m.properties), m.sys_flag, m.prepared_transaction_offset, m.body,
    )  # fmt: skip


# -- the exporter --------------------------------------------------------------------------------


@dataclass(slots=True)
class Pending:
    """An undecided transaction: what later records of it need (its op message names only
    the half offset and the transaction id)."""

    group: str
    topic: str
    queue_id: int
    check_times: int
    check_waits: int
    born_ms: int

    def dump(self) -> list[Any]:
        return [self.group, self.topic, self.queue_id, self.check_times, self.check_waits, self.born_ms]

    @classmethod
    def load(cls, raw: list[Any]) -> Pending:
        return cls(str(raw[0]), str(raw[1]), int(raw[2]), int(raw[3]), int(raw[4]), int(raw[5]))


@dataclass(slots=True)
class ExportResult:
    snapshot_ms: int
    offsets: int = 0
    queues: int = 0
    events: int = 0
    files: list[Path] = field(default_factory=list)
    pruned: int = 0
    events_by_type: dict[str, int] = field(default_factory=dict)


class Exporter:
    """Exports one store into ``export_dir`` (``export_once``); see the module doc."""

    def __init__(
        self,
        source: ExportSource,
        export_dir: Path | str,
        *,
        retention_ms: int = 0,
        max_records_per_run: int = MAX_RECORDS_PER_RUN,
    ) -> None:
        require_pyarrow()
        self.source = source
        self.export_dir = Path(export_dir)
        self.retention_ms = retention_ms
        self._max_records = max_records_per_run
        self._lock = asyncio.Lock()
        self._state_path = self.export_dir / STATE_DIR / f"{_UNSAFE.sub('_', source.store_id) or 'store'}.json"
        self._cursors: dict[str, int] = {}
        self._pending: OrderedDict[str, Pending] = OrderedDict()
        self._loaded = False

    @property
    def cursors(self) -> dict[str, int]:
        """Next offset to read per system queue (``topic:queue``)."""
        return dict(self._cursors)

    def _load_state(self) -> None:
        raw = read_json(self._state_path) or {}
        self._cursors = {str(k): int(v) for k, v in (raw.get("cursors") or {}).items()}
        self._pending = OrderedDict((k, Pending.load(v)) for k, v in (raw.get("pending") or {}).items())
        self._loaded = True

    def _state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "store_id": self.source.store_id,
            "cursors": self._cursors,
            "pending": {k: v.dump() for k, v in self._pending.items()},
        }

    async def export_once(self) -> ExportResult:
        """Snapshot offsets and queues, export the transaction events stored since the
        last run, prune expired files."""
        async with self._lock:
            if not self._loaded:
                await asyncio.to_thread(self._load_state)
            snap = await self.source.snapshot()
            now = snap.now_ms
            store_id = self.source.store_id
            queue_rows = [
                dict(store_id=store_id, snapshot_ms=now, topic=q.topic, queue_id=q.queue_id, min_offset=q.min_offset,
                     max_offset=q.max_offset, last_store_ms=q.last_store_ms, is_system=is_system_topic(q.topic))
                for q in snap.queues
            ]  # fmt: skip
            last_store = {(q.topic, q.queue_id): q.last_store_ms for q in snap.queues}
            offset_rows = [
                dict(store_id=store_id, snapshot_ms=now, consumer_group=o.consumer_group, topic=o.topic,
                     queue_id=o.queue_id, committed_offset=o.offset, min_offset=o.min_offset,
                     max_offset=o.max_offset, lag=max(o.max_offset - o.offset, 0),
                     last_store_ms=last_store.get((o.topic, o.queue_id), 0), committed_at_ms=o.updated_at_ms,
                     is_system=is_system_topic(o.topic))
                for o in snap.offsets
            ]  # fmt: skip
            system_queues = {
                t: sorted(q.queue_id for q in snap.queues if q.topic == t)
                for t in (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_OP_HALF_TOPIC)
            }
            events = await self._transaction_events(system_queues, now)
            result = ExportResult(now, len(offset_rows), len(queue_rows), len(events))
            for e in events:
                result.events_by_type[e["event_type"]] = result.events_by_type.get(e["event_type"], 0) + 1
            state = self._state()
            result.files, result.pruned = await asyncio.to_thread(
                self._write, now, store_id, offset_rows, queue_rows, events, state
            )
            return result

    def _write(
        self, now: int, store_id: str, offsets: list[dict], queues: list[dict], events: list[dict], state: dict
    ) -> tuple[list[Path], int]:
        files = []
        for table, rows in ((OFFSETS, offsets), (QUEUES, queues), (TX_EVENTS, events)):
            if rows:
                files.append(write_table(self.export_dir, table, rows, at_ms=now, store_id=store_id))
        self._state_path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomically(self._state_path, state)
        pruned = prune(self.export_dir, retention_ms=self.retention_ms, now_ms=now)
        return files, pruned

    # -- transaction events ----------------------------------------------------------------

    async def _read_new(self, topic: str, queue_id: int) -> list[Record]:
        """Records of a system queue from its cursor on (at most max_records_per_run);
        advances the cursor."""
        key = f"{topic}:{queue_id}"
        offset = self._cursors.get(key, 0)
        out: list[Record] = []
        for _ in range(self._max_records):  # bounds the loop even when nothing comes back
            if len(out) >= self._max_records:
                break
            r = await self.source.read(topic, queue_id, offset, READ_BATCH)
            await asyncio.sleep(0)  # in the store process: let requests in between batches
            if r.status == FOUND and r.records:
                out.extend(m for m in r.records if m.queue_offset >= offset)
                offset = max(r.next_begin_offset, out[-1].queue_offset + 1 if out else offset)
                continue
            if r.status == OFFSET_TOO_SMALL and r.next_begin_offset > offset:
                log.warning(
                    "%s queue %d: offsets %d..%d expired before they were exported",
                    topic, queue_id, offset, r.next_begin_offset - 1,
                )  # fmt: skip
                offset = r.next_begin_offset
                continue
            if r.status in _SKIP_AHEAD and r.next_begin_offset > offset:
                offset = r.next_begin_offset
                continue
            if r.status == OFFSET_OVERFLOW_BADLY and r.next_begin_offset < offset:
                log.warning(
                    "%s queue %d: export cursor %d is past the queue's end; starting over", topic, queue_id, offset
                )
                offset = r.next_begin_offset
                continue
            break
        self._cursors[key] = offset
        return out

    async def _transaction_events(self, system_queues: dict[str, list[int]], now: int) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        store_id = self.source.store_id

        def event(kind: str, at: int, txid: str, p: Pending | None, *, half_offset: int, record: Record,
                  entry: int = 0, detail: str = "") -> None:  # fmt: skip
            events.append(
                dict(store_id=store_id, event_ms=at, event_type=kind, transaction_id=txid,
                     producer_group=p.group if p else "", topic=p.topic if p else "",
                     queue_id=p.queue_id if p else -1, check_times=p.check_times if p else 0,
                     check_waits=p.check_waits if p else 0, half_offset=half_offset,
                     record_offset=record.commit_log_offset, entry=entry, born_ms=p.born_ms if p else 0,
                     detail=detail, exported_ms=now)
            )  # fmt: skip

        # Half queue first, so decisions below find their transaction's group and topic.
        halves: dict[tuple[int, int], Record] = {}
        for qid in system_queues[TRANS_HALF_TOPIC]:
            for rec in await self._read_new(TRANS_HALF_TOPIC, qid):
                halves[(qid, rec.queue_offset)] = rec
                txid = rec.unique_id
                props = rec.properties
                times, waits = check_counts(props)
                prev = self._pending.get(txid)
                kind = half_record_kind(props, (prev.check_times, prev.check_waits) if prev else None)
                detail = {
                    CHECK_SENT: f"check {times}",
                    RESUMED: "checks resumed",
                    CHECK_WAITING: f"no live producer (wait {waits})",
                }.get(kind, "")
                p = _pending_of(rec, times, waits)
                self._remember(txid, p)
                event(kind, rec.store_ms, txid, p, half_offset=rec.queue_offset, record=rec, detail=detail)
        for qid in system_queues[TRANS_CHECK_MAX_TIME_TOPIC]:
            for rec in await self._read_new(TRANS_CHECK_MAX_TIME_TOPIC, qid):
                props = rec.properties
                p = _pending_of(rec, *check_counts(props))
                self._remember(rec.unique_id, p)  # a resume may bring it back
                event(DISCARDED, rec.store_ms, rec.unique_id, p,
                      half_offset=_int(props.get(PROPERTY_PREPARED_QUEUE_OFFSET), -1),
                      record=rec, detail=props.get(PROPERTY_DISCARD_REASON, ""))  # fmt: skip
        for qid in system_queues[TRANS_OP_HALF_TOPIC]:
            for rec in await self._read_new(TRANS_OP_HALF_TOPIC, qid):
                for n, entry in enumerate(decode_op_entries(rec.properties, rec.body)):
                    half_offset, txid, decision = entry.half_offset, entry.transaction_id, entry.decision
                    half = halves.get((qid, half_offset))
                    if not txid or decision not in ("C", "R"):
                        # An op message without txmq's decisions: find the transaction.
                        half = half or await self._half_at(qid, half_offset)
                        if half is None:
                            continue
                        txid = half.unique_id
                        decision = "C" if await self.source.committed_copy(txid) else "R"
                    p = self._pending.pop(txid, None)
                    if p is None:
                        half = half or await self._half_at(qid, half_offset)
                        if half is not None and half.unique_id == txid:
                            props = half.properties
                            p = _pending_of(half, *check_counts(props))
                    at, detail = rec.store_ms, f"op offset {rec.queue_offset}"
                    if decision == "C":
                        copy = await self.source.committed_copy(txid)
                        if copy is not None:
                            at = min(at, copy.store_ms)
                            detail = f"committed copy {copy.topic} queue {copy.queue_id} offset {copy.queue_offset}"
                    event(COMMITTED if decision == "C" else ROLLED_BACK, at, txid, p, half_offset=half_offset,
                          record=rec, entry=n, detail=detail)  # fmt: skip
        return events

    def _remember(self, txid: str, p: Pending) -> None:
        self._pending[txid] = p
        self._pending.move_to_end(txid)
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)

    async def _half_at(self, queue_id: int, half_offset: int) -> Record | None:
        if half_offset < 0:
            return None
        try:
            r = await self.source.read(TRANS_HALF_TOPIC, queue_id, half_offset, 1)
        except Exception:  # noqa: BLE001 - best effort: the event keeps empty fields
            return None
        for m in r.records:
            if m.queue_offset == half_offset:
                return m
        return None


def _pending_of(rec: Record, times: int, waits: int) -> Pending:
    props = rec.properties
    return Pending(
        props.get(PROPERTY_PRODUCER_GROUP, ""),
        props.get(PROPERTY_REAL_TOPIC, ""),
        _int(props.get(PROPERTY_REAL_QUEUE_ID), -1),
        times,
        waits,
        rec.born_ms,
    )


def _int(raw: str | None, default: int = 0) -> int:
    try:
        return int(raw) if raw not in (None, "") else default
    except ValueError:
        return default


# -- in the store process ----------------------------------------------------------------------


class StoreExporter:
    """Runs ``Exporter`` over the store every ``interval_ms``, and once more on stop."""

    def __init__(self, store: MessageStore, *, export_dir: Path | str, interval_ms: int, retention_ms: int) -> None:
        self.exporter = Exporter(LocalSource(store), export_dir, retention_ms=retention_ms)
        self._store = store
        self.interval_ms = interval_ms
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.runs = 0
        self.last: ExportResult | None = None

    @classmethod
    def from_settings(cls, store: MessageStore, settings: StoreSettings) -> StoreExporter | None:
        """None when ``export_interval_ms`` is 0 (export off)."""
        if settings.export_interval_ms <= 0:
            return None
        export_dir = settings.export_dir or str(Path(settings.data_dir) / "export")
        return cls(store, export_dir=export_dir, interval_ms=settings.export_interval_ms,
                   retention_ms=settings.export_retention_ms)  # fmt: skip

    @property
    def export_dir(self) -> Path:
        return self.exporter.export_dir

    def start(self) -> StoreExporter:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="analytics-export")
        log.info("analytics export to %s every %d ms", self.export_dir, self.interval_ms)
        return self

    async def export_now(self) -> ExportResult:
        started = time.monotonic()
        result = await self.exporter.export_once()
        self.runs += 1
        self.last = result
        log.debug(
            "exported %d offsets, %d queues, %d transaction events in %.0f ms",
            result.offsets, result.queues, result.events, (time.monotonic() - started) * 1000,
        )  # fmt: skip
        return result

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_ms / 1000)
                return
            except TimeoutError:
                pass
            if not self.exports():
                continue
            try:
                await self.export_now()
            except Exception:
                log.exception("analytics export failed")

    def exports(self) -> bool:
        """A replicated store group exports from its leader only: every replica holds the
        same offsets and events, and the analytics would count each once per replica."""
        replica = self._store.replica
        return replica is None or replica.leadership is not None

    async def stop(self, *, final_export: bool = True) -> None:
        """Stop the periodic export; ``final_export``: export once more first (call it
        before the store closes)."""
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        if final_export and self.exports():
            try:
                await self.export_now()
            except Exception:
                log.exception("final analytics export failed")
