"""Prometheus metrics of the store (served by the runtime on ``--metrics_port``).

Counted as it happens (a cached child per topic, one ``inc`` each):

- ``rocketmq_messages_in_total`` / ``rocketmq_throughput_in_total`` {topic}: messages and
  body bytes stored (every send path: producers, the gateway, the transaction service's
  system messages; a half message counts on ``RMQ_SYS_TRANS_HALF_TOPIC``, its commit on
  the real topic);
- ``rocketmq_messages_out_total`` / ``rocketmq_throughput_out_total`` {topic}: messages
  and body bytes served by GetMessage (pull service, gateway, check loop);
- ``rocketmq_message_size``: body size of each message stored (RocketMQ's buckets);
- ``txmq_store_flush_seconds``: each commit-log fsync that had something to write;
- ``txmq_store_transaction_decisions_total`` {decision, outcome}: DecideTransactions and
  RequeueHalves items (outcome first | repeat | settled | refused);
- ``txmq_store_fenced_writes_total``: check-loop writes refused under an old epoch;
- ``txmq_store_timer_delivered_total``: delayed messages delivered to their topic.
- ``txmq_store_timer_recalled_total``: delayed messages recalled before their delivery.

Read on scrape (``COLLECTOR``, on the store's event loop):

- ``rocketmq_consumer_lag_messages`` {store_id, consumer_group, topic, queue_id}: queue
  max offset - committed offset, for every committed offset (at most
  ``MAX_LAG_SERIES`` series per store);
- ``rocketmq_half_messages`` {store_id}: half messages the check loop has not passed yet;
- ``rocketmq_storage_size``, ``rocketmq_storage_flush_behind_bytes``,
  ``rocketmq_storage_dispatch_behind_bytes``, ``txmq_store_commitlog_bytes``,
  ``txmq_store_disk_free_bytes``, ``txmq_store_disk_size_bytes`` {store_id};
- ``txmq_store_timer_pending`` {store_id}: delayed messages waiting in the timer wheel
  (the writable store only); ``txmq_store_timer_delivery_lag_ms`` {store_id}: how late
  the last delivered batch was (its earliest delivery time to its append).

Replicated store groups: ``txmq_store_replica_leader``, ``txmq_store_replica_epoch``,
``txmq_store_replica_unreplicated_bytes`` {store_id, replica}; on the leader
``txmq_store_replica_in_sync_size`` {store_id} and ``txmq_store_replica_lag_bytes``
{store_id, replica} (per follower).

``txmq_store_corrupt_records_total`` and ``txmq_store_writes_refused_disk_full_total``
live in integrity.py.
"""

from __future__ import annotations

import shutil
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from txmq.protocol import HALF_QUEUE_ID, TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
from txmq.records import count_records
from txmq_runtime.metrics import MESSAGE_SIZE_BUCKETS, Sample, ScrapeCollector, TopicCounters

from .model import ConsumeOffsetView, StoreStatus
from .replication import Leadership

#: Lag series one store reports at most per scrape (the rest are left out; see docs).
MAX_LAG_SERIES = 10_000

MESSAGES_IN = Counter("rocketmq_messages_in", "Messages stored, per topic.", ["topic"])
THROUGHPUT_IN = Counter("rocketmq_throughput_in", "Message body bytes stored, per topic.", ["topic"])
MESSAGES_OUT = Counter("rocketmq_messages_out", "Messages served by GetMessage, per topic.", ["topic"])
THROUGHPUT_OUT = Counter("rocketmq_throughput_out", "Message body bytes served by GetMessage, per topic.", ["topic"])
DECISIONS = Counter(
    "txmq_store_transaction_decisions",
    "Transaction decisions the store was asked for: outcome first (taken now), repeat (the same as "
    "before), settled (the same as before, and an op entry added for this half record), refused.",
    ["decision", "outcome"],
)
TIMER_DELIVERED = Counter("txmq_store_timer_delivered", "Delayed messages delivered to their topic by the timer.")
TIMER_RECALLED = Counter("txmq_store_timer_recalled", "Delayed messages recalled before their delivery.")
FENCED_WRITES = Counter(
    "txmq_store_fenced_writes", "Check-loop writes refused because a newer leader epoch was seen (CODE_FENCED)."
)
FLUSH_SECONDS = Histogram(
    "txmq_store_flush_seconds",
    "Duration of each commit-log fsync that had bytes to write (sync mode: one per group commit).",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)

_IN = TopicCounters(MESSAGES_IN, THROUGHPUT_IN)
_OUT = TopicCounters(MESSAGES_OUT, THROUGHPUT_OUT)


class SizeHistogram(Collector):
    """``rocketmq_message_size``: a histogram kept as plain bucket counts, because a
    ``prometheus_client`` Histogram's ``observe`` (a lock and a walk over the buckets,
    about 3 us) would cost a fifth of a batched send per message; here a message costs a
    ``bisect`` and an add on the event loop thread. Exposed on scrape (a copy of the list
    under the GIL)."""

    def __init__(self, buckets: Sequence[float], registry: CollectorRegistry | None = REGISTRY) -> None:
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.sum = 0
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily("rocketmq_message_size", "Body size of each message stored, in bytes.")]

    def collect(self) -> Iterable[Metric]:
        counts, total = list(self.counts), self.sum
        cumulative, buckets = 0, []
        for bound, n in zip(self.bounds, counts, strict=False):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        buckets.append(("+Inf", cumulative + counts[-1]))
        family = HistogramMetricFamily("rocketmq_message_size", "Body size of each message stored, in bytes.")
        family.add_metric([], buckets, total)
        return [family]


MESSAGE_SIZE = SizeHistogram(MESSAGE_SIZE_BUCKETS)
_size_counts = MESSAGE_SIZE.counts
_size_bounds = MESSAGE_SIZE.bounds


class _Record(Protocol):
    topic: str
    body: bytes


def count_in(records: Sequence[_Record]) -> None:
    """Messages stored by one send (a batch mostly has one topic: one pair of incs)."""
    topic = ""
    n = size = batch = 0
    counts, bounds = _size_counts, _size_bounds
    for rec in records:
        b = len(rec.body)
        counts[bisect_left(bounds, b)] += 1
        batch += b
        if rec.topic != topic:
            if n:
                _IN.count((topic,), n, size)
            topic, n, size = rec.topic, 0, 0
        n += 1
        size += b
    if n:
        _IN.count((topic,), n, size)
    MESSAGE_SIZE.sum += batch


def count_out(topic: str, messages: Iterable[_Record]) -> None:
    """Messages one GetMessage served."""
    n = size = 0
    for m in messages:
        n += 1
        size += len(m.body)
    if n:
        _OUT.count((topic,), n, size)


def count_out_records(topic: str, records: bytes) -> None:
    """Records one raw GetMessage served, back to back (bytes: their bodies, as
    ``count_out``)."""
    if records:
        _OUT.count((topic,), *count_records(records))


class _Flushable(Protocol):
    flushed_offset: int

    def flush(self, upto: int) -> int: ...


def timed_flush(commitlog: _Flushable, upto: int) -> int:
    """``commitlog.flush(upto)``, timed when it has bytes to write."""
    if commitlog.flushed_offset >= upto:
        return commitlog.flush(upto)
    start = time.perf_counter()
    flushed = commitlog.flush(upto)
    FLUSH_SECONDS.observe(time.perf_counter() - start)
    return flushed


# -- read on scrape --------------------------------------------------------------------


def _families() -> dict[str, Metric]:
    store = ["store_id"]
    return {
        "lag": GaugeMetricFamily(
            "rocketmq_consumer_lag_messages",
            "Messages of a queue after the group's committed offset (max offset - committed offset).",
            labels=["store_id", "consumer_group", "topic", "queue_id"],
        ),
        "half": GaugeMetricFamily(
            "rocketmq_half_messages",
            "Half (prepared) messages the transaction check has not passed yet (half queue max offset - progress).",
            labels=store,
        ),
        "size": GaugeMetricFamily(
            "rocketmq_storage_size",
            "Disk the commit-log segments take, in bytes (segments x segment size).",
            labels=store,
        ),
        "flush_behind": GaugeMetricFamily(
            "rocketmq_storage_flush_behind_bytes", "Commit-log bytes written but not yet fsynced.", labels=store
        ),
        "dispatch_behind": GaugeMetricFamily(
            "rocketmq_storage_dispatch_behind_bytes",
            "Commit-log bytes not yet dispatched to consume queues and index (not yet readable by consumers).",
            labels=store,
        ),
        "commitlog": GaugeMetricFamily(
            "txmq_store_commitlog_bytes",
            "Bytes of records the commit log holds (max offset - min offset).",
            labels=store,
        ),
        "free": GaugeMetricFamily(
            "txmq_store_disk_free_bytes",
            "Free bytes on the data directory's file system (for unprivileged users).",
            labels=store,
        ),
        "disk": GaugeMetricFamily(
            "txmq_store_disk_size_bytes", "Size of the data directory's file system.", labels=store
        ),
        "timer_pending": GaugeMetricFamily(
            "txmq_store_timer_pending",
            "Delayed messages waiting in the timer wheel (writable store only).",
            labels=store,
        ),
        "timer_lag": GaugeMetricFamily(
            "txmq_store_timer_delivery_lag_ms",
            "How late the timer's last delivered batch was: its append time - its earliest delivery time.",
            labels=store,
        ),
        # Replicated store groups (docs/replication.md): every replica reports these.
        "leader": GaugeMetricFamily(
            "txmq_store_replica_leader", "1 while this replica leads its store group.", labels=["store_id", "replica"]
        ),
        "epoch": GaugeMetricFamily(
            "txmq_store_replica_epoch", "The group epoch this replica last knew.", labels=["store_id", "replica"]
        ),
        "hw_behind": GaugeMetricFamily(
            "txmq_store_replica_unreplicated_bytes",
            "Log bytes beyond the high watermark: written on this replica, not yet held by every in-sync replica.",
            labels=["store_id", "replica"],
        ),
        "in_sync": GaugeMetricFamily(
            "txmq_store_replica_in_sync_size",
            "Leader only: replicas in the in-sync set (writes are refused below min_in_sync).",
            labels=["store_id"],
        ),
        "follower_lag": GaugeMetricFamily(
            "txmq_store_replica_lag_bytes",
            "Leader only: how far each follower's log end is behind the leader's.",
            labels=["store_id", "replica"],
        ),
    }


@dataclass(slots=True, frozen=True)
class ReplicaFigures:
    replica_id: str
    leadership: Leadership | None  # this replica leads
    epoch: int  # the epoch it leads, else the newest of its history
    high_watermark: int


@dataclass(slots=True, frozen=True)
class StoreFigures:
    """What a scrape reads of one store, taken in one go on its event loop
    (``MessageStore.figures``)."""

    status: StoreStatus
    segment_bytes: int
    data_dir: str
    consume_offsets: list[ConsumeOffsetView]
    #: The check loop's committed offset in the half queue (None: it has none yet), and
    #: then the half queue's (min, max) offsets (None: no half topic).
    half_progress: int | None
    half_queue: tuple[int, int] | None
    timer_pending: int
    timer_lag_ms: int
    replica: ReplicaFigures | None  # None: a store alone


class Scraped(Protocol):
    """A store as the collector reads it (MessageStore implements it)."""

    def figures(self) -> StoreFigures: ...


def read_store(store: Scraped) -> Iterator[Sample]:
    f = store.figures()
    s = f.status
    sid = s.store_id
    top = s.commit_log_max_offset
    yield "size", [sid], s.segment_count * f.segment_bytes
    yield "flush_behind", [sid], max(0, top - s.commit_log_flushed_offset)
    yield "dispatch_behind", [sid], max(0, top - s.dispatched_offset)
    yield "commitlog", [sid], max(0, top - s.commit_log_min_offset)
    usage = shutil.disk_usage(f.data_dir)
    yield "free", [sid], usage.free
    yield "disk", [sid], usage.total
    half = 0
    for n, row in enumerate(f.consume_offsets):
        lag = max(0, row.max_offset - max(row.offset, row.min_offset))
        if row.consumer_group == TRANS_CHECK_GROUP and row.topic == TRANS_HALF_TOPIC and row.queue_id == HALF_QUEUE_ID:
            half = lag
        if n < MAX_LAG_SERIES:
            yield "lag", [sid, row.consumer_group, row.topic, str(row.queue_id)], lag
    if not half:
        half = _unchecked_halves(f)
    yield "half", [sid], half
    yield "timer_pending", [sid], f.timer_pending
    yield "timer_lag", [sid], f.timer_lag_ms
    if f.replica is not None:
        yield from _replication(sid, f.replica, top)


def _replication(sid: str, replica: ReplicaFigures, top: int) -> Iterator[Sample]:
    me, lead = replica.replica_id, replica.leadership
    yield "leader", [sid, me], 1 if lead is not None else 0
    yield "epoch", [sid, me], replica.epoch
    yield "hw_behind", [sid, me], max(0, top - replica.high_watermark)
    if lead is not None:
        yield "in_sync", [sid], len(lead.in_sync)
        for rid, view in sorted(lead.followers.items()):
            yield "follower_lag", [sid, rid], max(0, top - view.log_end)


def _unchecked_halves(f: StoreFigures) -> int:
    """Half messages when the check loop has no progress yet: the whole half queue."""
    if f.half_progress is not None or f.half_queue is None:
        return 0
    lo, hi = f.half_queue
    return max(0, hi - lo)


COLLECTOR: ScrapeCollector[Scraped] = ScrapeCollector("store", families=_families, read=read_store)
