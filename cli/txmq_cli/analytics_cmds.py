"""``txmq analytics run`` (the Spark job on an export directory) and ``txmq analytics
export`` (an on-demand export from a running cluster over gRPC). Needs the optional
``analytics`` dependencies (pyspark, pyarrow, matplotlib); docs/analytics.md."""

from __future__ import annotations

import click

from txmq_cli.credentials import client_options
from txmq_cli.options import option

DEFAULT_ENDPOINT = "127.0.0.1:10911"
_MISSING = "the analytics dependencies are not installed: pip install -e '.[analytics]' (pyspark, pyarrow, matplotlib)"


def register(group: click.Group) -> None:
    group.add_command(analytics)


@click.group()
def analytics() -> None:
    """Consume-offset analytics on Spark: lag, rates, stalled consumers, transactions."""


@analytics.command()
@option("--input", "input_dir", required=True, help="Export directory (offsets/, queues/, tx_events/).")
@option("--output", "output_dir", required=True, help="Where the Parquet tables and the report go.")
@option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@option("--rate-window-s", default=300.0, show_default=True, help="Window of the current rates, seconds.")
@option(
    "--stall-window-s", default=300.0, show_default=True, help="Lag and no progress for this long: stalled, seconds."
)
@option("--include-system", is_flag=True, help="Include system topics and groups (the check loop's progress).")
@option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="Extra Spark configuration (repeatable).")
@option("--no-progress", is_flag=True, help="No stage progress bar.")
def run(
    input_dir: str, output_dir: str, master: str, rate_window_s: float, stall_window_s: float,
    include_system: bool, conf: tuple[str, ...], no_progress: bool,
) -> None:  # fmt: skip
    """Run the analytics job and write tables, report.html and summary.txt."""
    try:
        from txmq_analytics.job import (
            InputError,
            build_session,
            check_input,
            options_from,
            parse_conf,
            run_job,
            stop_on_sigint,
        )  # fmt: skip
    except ImportError as exc:
        raise click.ClickException(f"{_MISSING} ({exc})") from exc
    try:
        check_input(input_dir)  # before Spark: a missing or empty export is a one-line error
    except InputError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        extra = parse_conf(conf)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--conf") from exc
    try:
        with stop_on_sigint():
            from pyspark.sql import SparkSession

            existing = SparkSession.getActiveSession()  # e.g. when called from a notebook or a test
            spark = build_session(master, conf=extra)
            try:
                run_job(
                    spark, input_dir, output_dir,
                    options=options_from(rate_window_s, stall_window_s, include_system),
                    progress=not no_progress, echo=click.echo,
                )  # fmt: skip
            finally:
                if existing is None:
                    spark.stop()
    except KeyboardInterrupt:  # Interrupted, or Ctrl-C before Spark was up
        click.echo("txmq analytics: interrupted; the output directory may be incomplete", err=True)
        raise click.exceptions.Exit(130) from None


@analytics.command()
@option("--endpoint", envvar="TXMQ_ENDPOINT", default=DEFAULT_ENDPOINT, show_default=True,
              help="Any txmq service, host:port; the stores are found through it.")  # fmt: skip
@option("--store", "stores", multiple=True, metavar="HOST:PORT",
              help="Export these store addresses instead of every live store (repeatable).")  # fmt: skip
@option("--output", "output_dir", required=True, help="Export directory (not one a store exports into).")
@option("--count", default=1, show_default=True, type=click.IntRange(min=1), help="Number of snapshots.")
@option("--interval-s", default=10.0, show_default=True, help="Seconds between snapshots.")
@option("--retention-hours", default=0.0, show_default=True, help="Delete older exported files; 0: keep.")
def export(
    endpoint: str, stores: tuple[str, ...], output_dir: str, count: int, interval_s: float, retention_hours: float
) -> None:
    """Snapshot consume and queue offsets and export transaction events now (gRPC)."""
    from txmq import TxmqError

    try:
        from txmq_analytics.remote import export_from_endpoint
    except ImportError as exc:
        raise click.ClickException(f"{_MISSING} ({exc})") from exc

    def show(store_id: str, r) -> None:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.events_by_type.items())) or "none"
        click.echo(
            f"{store_id}: {r.offsets} consume offsets, {r.queues} queues, {r.events} transaction events ({kinds})"
        )

    try:
        export_from_endpoint(
            endpoint, output_dir, stores=stores, count=count, interval_s=interval_s,
            retention_ms=int(retention_hours * 3600 * 1000), on_result=show, **client_options(),
        )  # fmt: skip
    except TxmqError as err:
        click.echo(f"error: {err}", err=True)
        raise click.exceptions.Exit(1) from err
    except KeyboardInterrupt:  # each snapshot's files are written whole (temp file, rename)
        click.echo(f"txmq analytics export: interrupted; the snapshots taken so far are in {output_dir}", err=True)
        raise click.exceptions.Exit(130) from None
    click.echo(f"exported to {output_dir}")
