"""The consume-offset analytics job (DESIGN §6).

Reads a txmq export directory (offsets/, queues/, tx_events/ Parquet written by the
store's exporter or by ``txmq analytics export``), computes lag over time, rates, time to
drain, stalled consumers, groups behind the queue's min offset and transaction outcomes,
and writes Parquet tables plus a report (HTML with plots, text summary) to the output
directory.

Run it as ``txmq analytics run --input DIR --output DIR [--master local[*]]``, or as a
plain Spark application::

    spark-submit [--master spark://host:7077] analytics/txmq_analytics/job.py --input DIR --output DIR

Outputs (``<output>/``): ``tables/<name>/`` Parquet (lag_timeseries, consumer_status,
group_status, group_timeseries, topic_rates, transactions, tx_summary, tx_latency),
``report.html`` (plots also as ``plots/*.png``), ``summary.txt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

if __package__ in (None, ""):  # spark-submit analytics/txmq_analytics/job.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from txmq_analytics import compute, report  # noqa: E402

TABLES = (
    "lag_timeseries", "consumer_status", "group_status", "group_timeseries", "topic_rates",
    "transactions", "tx_summary", "tx_latency",
)  # fmt: skip
LOG4J = Path(__file__).resolve().parent / "log4j2.properties"


@dataclass
class JobResult:
    output_dir: Path
    report_html: Path
    summary_txt: Path
    tables: dict[str, str]
    summary: str
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def build_session(
    master: str | None = "local[*]",
    *,
    app_name: str = "txmq-analytics",
    conf: dict[str, str] | None = None,
    quiet: bool = True,
) -> Any:
    """A SparkSession (``master`` None: whatever spark-submit or an existing session
    says). ``quiet`` keeps Spark's own logging at ERROR (log4j2.properties beside this
    file; effective when this call starts the JVM)."""
    from pyspark.sql import SparkSession

    if master and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
    b = SparkSession.builder.appName(app_name)
    if master:
        b = b.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    if quiet:
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={LOG4J.as_uri()}"
    settings.update(conf or {})
    for k, v in settings.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


class _Progress:
    """Stage names on stderr (tqdm), or nothing."""

    def __init__(self, stages: Sequence[str], enabled: bool) -> None:
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=len(stages), desc="txmq analytics", unit="stage", file=sys.stderr, leave=True,
                             bar_format="{desc:<42} {bar:20} {n_fmt}/{total_fmt} [{elapsed}]")  # fmt: skip

    def stage(self, name: str) -> "_Stage":
        return _Stage(self._bar, name)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_description("txmq analytics: done")
            self._bar.close()


class _Stage:
    def __init__(self, bar: Any, name: str) -> None:
        self._bar, self._name = bar, name

    def __enter__(self) -> None:
        if self._bar is not None:
            self._bar.set_description(self._name)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None and exc[0] is None:
            self._bar.update(1)


STAGES = (
    "reading the export",
    "lag and rates over time",
    "consumer status",
    "transactions",
    "reading the results back",
    "plots and HTML report",
)


def run_job(
    spark: Any,
    input_dir: str | Path,
    output_dir: str | Path,
    *,
    options: compute.Options = compute.Options(),
    progress: bool = True,
    echo: Callable[[str], None] | None = print,
) -> JobResult:
    """Run the analytics on ``input_dir`` with ``spark``; write tables and the report to
    ``output_dir`` (a local path: the report is written by this process; the tables may
    go anywhere Spark can write when ``output_dir`` is a URI)."""
    started = time.monotonic()
    input_dir, output_str = str(input_dir), str(output_dir)
    local_out = _local_report_dir(output_str)
    local_out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, str] = {}
    prog = _Progress(STAGES, progress)
    cached: list[Any] = []

    def write(name: str, df: Any) -> None:
        path = f"{output_str.rstrip('/')}/tables/{name}"
        df.coalesce(1).write.mode("overwrite").parquet(path)
        tables[name] = path

    try:
        with prog.stage(STAGES[0]):
            offsets = compute.offsets_input(compute.read_table(spark, input_dir, "offsets"), options)
            queues = compute.read_table(spark, input_dir, "queues")
            events = compute.read_table(spark, input_dir, "tx_events")
        with prog.stage(STAGES[1]):
            ts = compute.lag_timeseries(offsets, options).cache()
            cached.append(ts)
            write("lag_timeseries", ts)
            write("group_timeseries", compute.group_timeseries(ts))
            write("topic_rates", compute.topic_rates(queues, options))
        with prog.stage(STAGES[2]):
            status = compute.consumer_status(ts, options).cache()
            cached.append(status)
            write("consumer_status", status)
            write("group_status", compute.group_status(status))
        with prog.stage(STAGES[3]):
            txs = compute.transactions(events).cache()
            cached.append(txs)
            write("transactions", txs)
            write("tx_summary", compute.tx_summary(txs))
            write("tx_latency", compute.tx_latency(txs))
        with prog.stage(STAGES[4]):
            data = report.load_data(
                _table_reader(spark, tables), input_dir=input_dir, output_dir=output_str, options=options
            )
        with prog.stage(STAGES[5]):
            html = report.write_report(data, local_out)
            summary = report.text_summary(data)
            summary_txt = local_out / "summary.txt"
            summary_txt.write_text(summary + "\n", encoding="utf-8")
    finally:
        prog.close()
        for df in cached:
            df.unpersist()
    counts = dict(data.counts)
    result = JobResult(local_out, html, summary_txt, tables, summary, counts, time.monotonic() - started)
    if echo is not None:
        echo(summary)
        echo(f"report: {html}")
    return result


def _local_report_dir(output: str) -> Path:
    """Where the report goes: the output dir when it is local, else a local directory
    (tables may go to any URI Spark writes; the report is written by this process)."""
    if output.startswith("file://"):
        return Path(output.removeprefix("file://"))
    if "://" in output:
        return Path.cwd() / "txmq-analytics-report"
    return Path(output)


def _table_reader(spark: Any, tables: dict[str, str]) -> Callable[[str, Sequence[str] | None], Any]:
    """Reads an output table back as a pyarrow Table: with pyarrow when it is local (no
    Spark job per table), else through Spark."""

    def read(name: str, columns: Sequence[str] | None = None) -> Any:
        path = tables[name]
        if "://" not in path or path.startswith("file://"):
            import pyarrow.parquet as pq

            return pq.read_table(path.removeprefix("file://"), columns=list(columns) if columns else None)
        df = spark.read.parquet(path)
        return (df.select(*columns) if columns else df).toArrow()

    return read


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="txmq-analytics", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="export directory (offsets/, queues/, tx_events/)")
    p.add_argument("--output", required=True, help="where tables and the report go")
    p.add_argument("--master", default=None, help="Spark master (default: local[*], or what spark-submit says)")
    p.add_argument("--rate-window-s", type=float, default=300, help="window of the current rates (s)")
    p.add_argument("--stall-window-s", type=float, default=300, help="no progress with lag for this long = stalled (s)")
    p.add_argument("--include-system", action="store_true", help="include system topics and groups")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration")
    p.add_argument("--no-progress", action="store_true", help="no stage progress bar")
    return p.parse_args(argv)


def options_from(rate_window_s: float, stall_window_s: float, include_system: bool) -> compute.Options:
    return compute.Options(
        rate_window_ms=int(rate_window_s * 1000), stall_window_ms=int(stall_window_s * 1000), include_system=include_system
    )


def parse_conf(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValueError(f"--conf {item!r} is not KEY=VALUE")
        out[k] = v
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    spark = build_session(master, conf=parse_conf(args.conf))
    try:
        run_job(
            spark, args.input, args.output,
            options=options_from(args.rate_window_s, args.stall_window_s, args.include_system),
            progress=not args.no_progress,
        )  # fmt: skip
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
