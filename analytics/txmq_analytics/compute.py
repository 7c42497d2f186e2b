"""The analytics as Spark DataFrame transformations (no Python UDFs: everything runs in
the JVM, so no Python workers are started).

Inputs are the tables the store exports (services/store/txmq_store/export.py):
``offsets``, ``queues`` and ``tx_events``. Definitions (docs/analytics.md):

- lag = max offset - committed offset (at least 0);
- behind_min: the committed offset is below the queue's min offset: the messages in
  between expired before the group read them (``lost_messages`` of them);
- per-interval rates: offset deltas between consecutive snapshots / seconds between them;
- current rates: over the rate window, from the newest snapshot at least
  ``rate_window_ms`` older than the latest one (else the oldest) to the latest;
- time to drain = lag / (consumption rate - production rate), when that is positive;
  0 when there is no lag; null (never) otherwise;
- stalled: lag > 0 and the committed offset unchanged, with lag > 0 throughout, for at
  least ``stall_window_ms`` (``stalled_for_ms`` says how long so far), measured from the
  store's time of the commit that set the offset (``committed_at_ms``) when the snapshots
  show it (so a stall that began before the export window counts in full), else from the
  first snapshot of the run (``_run_start``);
- transactions: per transaction id, the outcome is committed or rolled back when an op
  message (or committed copy) says so, else discarded when it went to
  TRANS_CHECK_MAX_TIME_TOPIC, else pending; checks = check_sent events; latency = outcome
  time - half stored time; percentiles are exact (linear interpolation between closest
  ranks, as numpy's default).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

PERCENTILES = (0.5, 0.95, 0.99)
OUTCOMES = ("committed", "rolled_back", "discarded", "pending")

_TYPES = {"string": StringType(), "int64": LongType(), "int32": IntegerType(), "bool": BooleanType()}

# The exported columns (kept equal to txmq_store.export.COLUMNS; a test checks it).
INPUT_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "offsets": [
        ("store_id", "string"), ("snapshot_ms", "int64"), ("consumer_group", "string"), ("topic", "string"),
        ("queue_id", "int32"), ("committed_offset", "int64"), ("min_offset", "int64"), ("max_offset", "int64"),
        ("lag", "int64"), ("last_store_ms", "int64"), ("committed_at_ms", "int64"), ("is_system", "bool"),
    ],
    "queues": [
        ("store_id", "string"), ("snapshot_ms", "int64"), ("topic", "string"), ("queue_id", "int32"),
        ("min_offset", "int64"), ("max_offset", "int64"), ("last_store_ms", "int64"), ("is_system", "bool"),
    ],
    "tx_events": [
        ("store_id", "string"), ("event_ms", "int64"), ("event_type", "string"), ("transaction_id", "string"),
        ("producer_group", "string"), ("topic", "string"), ("queue_id", "int32"), ("check_times", "int32"),
        ("check_waits", "int32"), ("half_offset", "int64"), ("record_offset", "int64"), ("entry", "int32"),
        ("born_ms", "int64"), ("detail", "string"), ("exported_ms", "int64"),
    ],
}  # fmt: skip

QUEUE_KEY = ["store_id", "consumer_group", "topic", "queue_id"]
GROUP_KEY = ["consumer_group", "topic"]


@dataclass(frozen=True)
class Options:
    rate_window_ms: int = 300_000
    stall_window_ms: int = 300_000
    include_system: bool = False  # system topics/groups (the check loop's progress) in the results


def schema(table: str) -> StructType:
    return StructType([StructField(n, _TYPES[t], True) for n, t in INPUT_COLUMNS[table]])


def read_table(spark: SparkSession, input_dir: str, table: str) -> DataFrame:
    """One exported table (all partitions); an empty DataFrame when there is none."""
    from pyspark.errors import AnalysisException

    path = f"{input_dir.rstrip('/')}/{table}"
    cols = [F.col(n).cast(_TYPES[t]).alias(n) for n, t in INPUT_COLUMNS[table]]
    try:
        # An explicit schema: no job to read footers; the partition columns come along.
        df = spark.read.schema(schema(table)).option("basePath", path).parquet(path)
        return df.select(*cols)
    except AnalysisException:
        return spark.createDataFrame([], schema(table))


def _per_second(delta: Column, ms: Column) -> Column:
    return F.when(ms > 0, delta * F.lit(1000.0) / ms)


def offsets_input(offsets: DataFrame, opts: Options) -> DataFrame:
    df = offsets.dropDuplicates([*QUEUE_KEY, "snapshot_ms"])
    if not opts.include_system:
        df = df.filter(~F.col("is_system"))
    return df


def lag_timeseries(offsets: DataFrame, opts: Options) -> DataFrame:
    """Per (store, group, topic, queue) and snapshot: offsets, lag, per-interval rates,
    the data-loss flag and how long the consumer has been stalled."""
    w = Window.partitionBy(*QUEUE_KEY).orderBy("snapshot_ms")
    df = (
        offsets.withColumn("lag", F.greatest(F.col("max_offset") - F.col("committed_offset"), F.lit(0)))
        .withColumn("behind_min", F.col("committed_offset") < F.col("min_offset"))
        .withColumn("lost_messages", F.greatest(F.col("min_offset") - F.col("committed_offset"), F.lit(0)))
        .withColumn("prev_ms", F.lag("snapshot_ms").over(w))
        .withColumn("prev_committed", F.lag("committed_offset").over(w))
        .withColumn("prev_max", F.lag("max_offset").over(w))
        .withColumn("prev_lag", F.lag("lag").over(w))
    )
    interval = F.col("snapshot_ms") - F.col("prev_ms")
    df = df.withColumn("consume_rate", _per_second(F.col("committed_offset") - F.col("prev_committed"), interval))
    df = df.withColumn("produce_rate", _per_second(F.col("max_offset") - F.col("prev_max"), interval))
    # A stall run: consecutive snapshots with lag > 0 and the same committed offset.
    continues = (F.col("lag") > 0) & (F.col("prev_lag") > 0) & (F.col("prev_committed") == F.col("committed_offset"))
    df = df.withColumn("new_run", F.when(continues, F.lit(0)).otherwise(F.lit(1)))
    df = df.withColumn("run_id", F.sum("new_run").over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    df = df.withColumn("stalled_since_ms", F.min(F.when(F.col("new_run") == 1, _run_start())).over(
        Window.partitionBy(*QUEUE_KEY, "run_id")))  # fmt: skip
    df = df.withColumn(
        "stalled_for_ms", F.when(F.col("lag") > 0, F.col("snapshot_ms") - F.col("stalled_since_ms")).otherwise(F.lit(0))
    )
    df = df.withColumn("stalled", (F.col("lag") > 0) & (F.col("stalled_for_ms") >= F.lit(opts.stall_window_ms)))
    df = df.withColumn("stalled_since_ms", F.when(F.col("lag") > 0, F.col("stalled_since_ms")))
    return df.select(
        *QUEUE_KEY, "snapshot_ms", F.timestamp_millis("snapshot_ms").alias("snapshot_time"),
        "committed_offset", "min_offset", "max_offset", "lag", "behind_min", "lost_messages",
        "consume_rate", "produce_rate", "stalled_for_ms", "stalled_since_ms", "stalled", "last_store_ms",
        "committed_at_ms",
    )  # fmt: skip


def _run_start() -> Column:
    """When a stall run (lag > 0, committed offset unchanged) began, on its first snapshot:
    the store's time of the commit that set the offset (``committed_at_ms``) when that
    commit is known to lie in the run — the offset changed since the previous snapshot, or
    there is no previous snapshot (the run began before the export window: a stall longer
    than the window shows as such); else (the previous snapshot had the same offset and no
    lag, or the commit time is not plausible) the snapshot itself."""
    c, t = F.col("committed_at_ms"), F.col("snapshot_ms")
    known = (
        (c > 0)
        & (c <= t)
        & (
            F.col("prev_ms").isNull()
            | ((F.col("prev_committed") != F.col("committed_offset")) & (c > F.col("prev_ms")))
        )
    )
    return F.when(known, c).otherwise(t)


def consumer_status(ts: DataFrame, opts: Options) -> DataFrame:
    """The latest state per (store, group, topic, queue), rates over the rate window and
    the estimated time to drain."""
    w_all = Window.partitionBy(*QUEUE_KEY)
    df = ts.withColumn("t_last", F.max("snapshot_ms").over(w_all)).withColumn(
        "t_first", F.min("snapshot_ms").over(w_all)
    )
    df = df.withColumn(
        "t_start",
        F.coalesce(
            F.max(
                F.when(F.col("snapshot_ms") <= F.col("t_last") - F.lit(opts.rate_window_ms), F.col("snapshot_ms"))
            ).over(w_all),
            F.col("t_first"),
        ),
    )
    df = df.withColumn("snapshots", F.count(F.lit(1)).over(w_all))
    start = df.filter(F.col("snapshot_ms") == F.col("t_start")).select(
        *QUEUE_KEY, F.col("committed_offset").alias("start_committed"), F.col("max_offset").alias("start_max")
    )
    last = df.filter(F.col("snapshot_ms") == F.col("t_last"))
    j = last.join(start, QUEUE_KEY)
    span = F.col("t_last") - F.col("t_start")
    j = j.withColumn("consume_rate", _per_second(F.col("committed_offset") - F.col("start_committed"), span))
    j = j.withColumn("produce_rate", _per_second(F.col("max_offset") - F.col("start_max"), span))
    j = j.withColumn("time_to_drain_s", _drain(F.col("lag"), F.col("consume_rate"), F.col("produce_rate")))
    return j.select(
        *QUEUE_KEY, "committed_offset", "min_offset", "max_offset", "lag", "consume_rate", "produce_rate",
        "time_to_drain_s", "stalled", "stalled_for_ms", "stalled_since_ms", "behind_min", "lost_messages",
        F.col("t_first").alias("first_snapshot_ms"), F.col("t_last").alias("last_snapshot_ms"),
        F.col("t_start").alias("rate_from_ms"), "snapshots", "last_store_ms", "committed_at_ms",
    )  # fmt: skip


def _drain(lag: Column, consume: Column, produce: Column) -> Column:
    net = consume - produce
    return F.when(lag == 0, F.lit(0.0)).when(net > 0, lag / net)


def group_status(status: DataFrame) -> DataFrame:
    """Per (group, topic): the queues' latest state added up."""
    g = status.groupBy(*GROUP_KEY).agg(
        F.count(F.lit(1)).alias("queues"),
        F.sum("lag").alias("lag"),
        F.sum("consume_rate").alias("consume_rate"),
        F.sum("produce_rate").alias("produce_rate"),
        F.sum(F.col("stalled").cast("int")).alias("stalled_queues"),
        F.sum(F.col("behind_min").cast("int")).alias("behind_min_queues"),
        F.sum("lost_messages").alias("lost_messages"),
        F.max("stalled_for_ms").alias("max_stalled_for_ms"),
        F.max("last_snapshot_ms").alias("last_snapshot_ms"),
    )
    return g.withColumn("time_to_drain_s", _drain(F.col("lag"), F.col("consume_rate"), F.col("produce_rate")))


def group_timeseries(ts: DataFrame) -> DataFrame:
    """Per (store, group, topic) and snapshot: the queues added up, with rates."""
    key = ["store_id", *GROUP_KEY]
    g = ts.groupBy(*key, "snapshot_ms").agg(
        F.sum("lag").alias("lag"),
        F.sum("committed_offset").alias("committed_offset"),
        F.sum("max_offset").alias("max_offset"),
        F.sum(F.col("stalled").cast("int")).alias("stalled_queues"),
    )
    w = Window.partitionBy(*key).orderBy("snapshot_ms")
    interval = F.col("snapshot_ms") - F.lag("snapshot_ms").over(w)
    g = g.withColumn(
        "consume_rate", _per_second(F.col("committed_offset") - F.lag("committed_offset").over(w), interval)
    )
    g = g.withColumn("produce_rate", _per_second(F.col("max_offset") - F.lag("max_offset").over(w), interval))
    return g.withColumn("snapshot_time", F.timestamp_millis("snapshot_ms"))


def topic_rates(queues: DataFrame, opts: Options) -> DataFrame:
    """Per (store, topic) and snapshot: messages stored so far and the production rate
    since the previous snapshot (from the queues table: topics without consumers too)."""
    df = queues.dropDuplicates(["store_id", "topic", "queue_id", "snapshot_ms"])
    if not opts.include_system:
        df = df.filter(~F.col("is_system"))
    g = df.groupBy("store_id", "topic", "snapshot_ms").agg(
        F.count(F.lit(1)).alias("queues"),
        F.sum("max_offset").alias("max_offset"),
        F.sum(F.col("max_offset") - F.col("min_offset")).alias("retained"),
        F.max("last_store_ms").alias("last_store_ms"),
    )
    w = Window.partitionBy("store_id", "topic").orderBy("snapshot_ms")
    interval = F.col("snapshot_ms") - F.lag("snapshot_ms").over(w)
    g = g.withColumn("produce_rate", _per_second(F.col("max_offset") - F.lag("max_offset").over(w), interval))
    return g.withColumn("snapshot_time", F.timestamp_millis("snapshot_ms"))


def transactions(events: DataFrame) -> DataFrame:
    """One row per transaction: group, topic, half time, outcome, its time, checks."""
    ev = events.dropDuplicates(["store_id", "record_offset", "entry", "event_type", "transaction_id"])
    ev = ev.filter(F.col("transaction_id") != "")
    t = F.col("event_type")

    def first(kind: str) -> Column:
        return F.min(F.when(t == kind, F.col("event_ms")))

    g = ev.groupBy("store_id", "transaction_id").agg(
        F.max("producer_group").alias("producer_group"),
        F.max("topic").alias("topic"),
        first("half_stored").alias("half_ms"),
        F.max(F.when(F.col("born_ms") > 0, F.col("born_ms"))).alias("born_ms"),
        F.count(F.when(t == "check_sent", 1)).alias("checks"),
        F.count(F.when(t == "check_waiting", 1)).alias("check_waits"),
        first("committed").alias("committed_ms"),
        first("rolled_back").alias("rolled_back_ms"),
        F.max(F.when(t == "discarded", F.col("event_ms"))).alias("discarded_ms"),
    )
    outcome = (
        F.when(F.col("committed_ms").isNotNull(), F.lit("committed"))
        .when(F.col("rolled_back_ms").isNotNull(), F.lit("rolled_back"))
        .when(F.col("discarded_ms").isNotNull(), F.lit("discarded"))
        .otherwise(F.lit("pending"))
    )
    g = g.withColumn("outcome", outcome)
    g = g.withColumn("outcome_ms", F.coalesce(F.col("committed_ms"), F.col("rolled_back_ms"), F.col("discarded_ms")))
    g = g.withColumn("latency_ms", F.col("outcome_ms") - F.col("half_ms"))
    for c in ("producer_group", "topic"):
        g = g.withColumn(c, F.when(F.col(c) == "", F.lit("(unknown)")).otherwise(F.col(c)))
    return g.select(
        "store_id", "transaction_id", "producer_group", "topic", "half_ms", "born_ms", "outcome", "outcome_ms",
        "latency_ms", "checks", "check_waits", "committed_ms", "rolled_back_ms", "discarded_ms",
    )  # fmt: skip


def _latency_aggs(decided: Column) -> list[Column]:
    lat = F.when(decided, F.col("latency_ms").cast("double"))
    pct = F.percentile(lat, list(PERCENTILES))
    return [
        F.count(lat).alias("timed"),
        pct[0].alias("latency_p50_ms"),
        pct[1].alias("latency_p95_ms"),
        pct[2].alias("latency_p99_ms"),
        F.avg(lat).alias("latency_mean_ms"),
        F.max(lat).alias("latency_max_ms"),
    ]


def tx_summary(txs: DataFrame) -> DataFrame:
    """Per (producer group, topic): outcome counts and ratios (of all its transactions,
    pending included), checks per transaction, exact latency percentiles of decided ones."""
    o = F.col("outcome")
    g = txs.groupBy("producer_group", "topic").agg(
        F.count(F.lit(1)).alias("transactions"),
        *[F.count(F.when(o == k, 1)).alias(k) for k in OUTCOMES],
        F.sum("checks").alias("checks"),
        F.avg("checks").alias("checks_per_tx"),
        F.count(F.when(F.col("checks") > 0, 1)).alias("checked_transactions"),
        F.max("checks").alias("max_checks"),
        *_latency_aggs(o != "pending"),
    )
    for k in ("committed", "rolled_back", "discarded", "pending"):
        g = g.withColumn(f"{k}_ratio", F.col(k) / F.col("transactions"))
    return g


def tx_latency(txs: DataFrame) -> DataFrame:
    """Per (producer group, topic, outcome): exact latency percentiles (decided only)."""
    decided = txs.filter(F.col("outcome") != "pending")
    return decided.groupBy("producer_group", "topic", "outcome").agg(
        F.count(F.lit(1)).alias("transactions"),
        F.avg("checks").alias("checks_per_tx"),
        *_latency_aggs(F.lit(True)),
    )
