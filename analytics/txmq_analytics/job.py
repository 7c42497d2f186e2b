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
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # spark-submit analytics/txmq_analytics/job.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import txmq_analytics.compute as compute
import txmq_analytics.report as report

TABLES = (
    "lag_timeseries", "consumer_status", "group_status", "group_timeseries", "topic_rates",
    "transactions", "tx_summary", "tx_latency",
)  # fmt: skip
LOG4J = Path(__file__).resolve().parent / "log4j2.properties"
EXPORT_TABLES = ("offsets", "queues", "tx_events")


class InputError(ValueError):
    """The input cannot be an export: said before Spark starts."""


class Interrupted(KeyboardInterrupt):
    """The run was stopped by Ctrl-C (SIGINT); Spark's jobs were cancelled."""


def check_input(input_dir: str | Path) -> None:
    """Raise ``InputError`` for a local ``input_dir`` that is missing, not a directory, or
    holds no exported Parquet file (under offsets/, queues/ or tx_events/; names starting
    with ``.`` or ``_`` do not count, as Spark skips them). Remote URIs are left to Spark."""
    s = str(input_dir)
    if "://" in s and not s.startswith("file://"):
        return
    path = Path(s.removeprefix("file://"))
    if not path.exists():
        raise InputError(f"--input {s}: no such directory")
    if not path.is_dir():
        raise InputError(f"--input {s}: not a directory")
    if not any(_has_parquet(path / t) for t in EXPORT_TABLES):
        raise InputError(
            f"--input {s}: no exported data (no Parquet file under {', '.join(t + '/' for t in EXPORT_TABLES)}); "
            "export with `txmq analytics export --output DIR` or a store's export_interval_ms"
        )


def _has_parquet(table_dir: Path) -> bool:
    for _, dirs, files in os.walk(table_dir):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        if any(f.endswith(".parquet") and not f.startswith((".", "_")) for f in files):
            return True
    return False


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
    _launch_jvm(master, app_name, settings)
    for k, v in settings.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    for guard in _guards[-1:]:
        guard.arm()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


# What the JVM prints on stderr that is not news: Spark's launcher always adds the
# incubating Vector API module, and the JDK announces that on every start.
_JVM_NOISE = (b"WARNING: Using incubator modules:",)
_jvm_muted = threading.Event()  # set once a run is interrupted: cancelled jobs log errors


def _launch_jvm(master: str | None, app_name: str, settings: dict[str, str]) -> None:
    """Start Spark's JVM with its stderr through ``_relay`` (unless one runs already or
    spark-submit started it): the same command pyspark runs, through its documented
    ``popen_kwargs``. The JVM ignores SIGINT (pyspark's choice): Ctrl-C reaches Python only."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf().setAppName(app_name).setAll(list(settings.items()))
    if master:
        conf.setMaster(master)
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(target=_relay, args=(gateway.proc.stderr,), name="spark-stderr", daemon=True).start()
    SparkContext(conf=conf, gateway=gateway)  # the builder's getOrCreate() finds it


def _relay(stream: Any) -> None:
    """Copy the JVM's stderr to ours, line by line, without ``_JVM_NOISE`` and, after an
    interrupt, without the errors of the jobs it cancelled."""
    for line in iter(stream.readline, b""):
        if _jvm_muted.is_set() or line.startswith(_JVM_NOISE):
            continue
        try:
            os.write(2, line)
        except OSError:
            return


class _SigintGuard:
    """Ctrl-C (SIGINT) during a run: cancel Spark's jobs from another thread and mute the
    JVM's stderr; the run then ends with ``Interrupted`` at the failed Spark call or at
    the next stage. pyspark's own handler calls into the JVM on the connection the main
    thread is waiting on, and py4j prints tracebacks. A second Ctrl-C exits at once."""

    def __init__(self) -> None:
        self.fired = threading.Event()

    def arm(self) -> None:
        """(Re)install the handler: starting a SparkContext installs pyspark's."""
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.fired.is_set():
            os._exit(130)
        self.fired.set()
        _jvm_muted.set()
        threading.Thread(target=_cancel_all_jobs, name="spark-cancel", daemon=True).start()


def _cancel_all_jobs() -> None:
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    try:
        if sc is not None:
            sc.cancelAllJobs()
    except (Py4JError, AttributeError):  # the JVM or the context is gone already: nothing to cancel
        pass


_guards: list[_SigintGuard] = []  # the active stop_on_sigint() blocks, innermost last


@contextmanager
def stop_on_sigint() -> Iterator[_SigintGuard]:
    """Within the block, Ctrl-C stops the analytics cleanly (``_SigintGuard``) and the block
    ends with ``Interrupted``. Only in the main thread; elsewhere it does nothing."""
    guard = _SigintGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    _jvm_muted.clear()
    previous = signal.getsignal(signal.SIGINT)
    _guards.append(guard)
    guard.arm()
    try:
        yield guard
    except BaseException as exc:
        if guard.fired.is_set() and not isinstance(exc, Interrupted):
            raise Interrupted() from None
        raise
    finally:
        _guards.remove(guard)
        signal.signal(signal.SIGINT, previous)


def _check_interrupt() -> None:
    if any(g.fired.is_set() for g in _guards):
        raise Interrupted()


class _Progress:
    """Stage names on stderr (tqdm), or nothing."""

    def __init__(self, stages: Sequence[str], enabled: bool) -> None:
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=len(stages), desc="txmq analytics", unit="stage", file=sys.stderr, leave=True,
                             bar_format="{desc:<42} {bar:20} {n_fmt}/{total_fmt} [{elapsed}]")  # fmt: skip

    def stage(self, name: str) -> _Stage:
        return _Stage(self._bar, name)

    def close(self, *, ok: bool = True) -> None:
        if self._bar is not None:
            if ok:
                self._bar.set_description("txmq analytics: done")
            else:
                self._bar.leave = False  # clear the bar: the error says what happened
            self._bar.close()


class _Stage:
    def __init__(self, bar: Any, name: str) -> None:
        self._bar, self._name = bar, name

    def __enter__(self) -> None:
        _check_interrupt()
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
    options: compute.Options | None = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = print,
) -> JobResult:
    """Run the analytics on ``input_dir`` with ``spark``; write tables and the report to
    ``output_dir`` (a local path: the report is written by this process; the tables may
    go anywhere Spark can write when ``output_dir`` is a URI)."""
    started = time.monotonic()
    options = options or compute.Options()
    input_dir, output_str = str(input_dir), str(output_dir)
    local_out = _local_report_dir(output_str)
    local_out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, str] = {}
    prog = _Progress(STAGES, progress)
    cached: list[Any] = []

    def write(name: str, df: Any) -> None:
        _check_interrupt()
        path = f"{output_str.rstrip('/')}/tables/{name}"
        df.coalesce(1).write.mode("overwrite").parquet(path)
        tables[name] = path

    ok = False
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
        ok = True
    finally:
        prog.close(ok=ok)
        if not any(g.fired.is_set() for g in _guards):
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
        # Not the working directory: that is often the source tree.
        return Path(tempfile.gettempdir()) / "txmq-analytics-report"
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
    p = argparse.ArgumentParser(
        prog="txmq-analytics", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
        rate_window_ms=int(rate_window_s * 1000),
        stall_window_ms=int(stall_window_s * 1000),
        include_system=include_system,
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
    try:
        check_input(args.input)
        conf = parse_conf(args.conf)
    except ValueError as exc:  # InputError too
        print(f"txmq-analytics: error: {exc}", file=sys.stderr)
        return 2
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    try:
        with stop_on_sigint():
            spark = build_session(master, conf=conf)
            try:
                run_job(
                    spark, args.input, args.output,
                    options=options_from(args.rate_window_s, args.stall_window_s, args.include_system),
                    progress=not args.no_progress,
                )  # fmt: skip
            finally:
                spark.stop()
    except KeyboardInterrupt:  # Interrupted, or Ctrl-C before the guard was up
        print("txmq-analytics: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
