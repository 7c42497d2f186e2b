"""txmq consume-offset analytics on Spark (DESIGN §6; docs/analytics.md).

- ``run_report(input_dir, output_dir)``: run the Spark job (local mode) on an export
  directory and return the path of the HTML report (the demo's hook).
- ``txmq_analytics.job``: the job (also a spark-submit application).
- ``txmq_analytics.remote``: on-demand export from a running cluster over gRPC.

Heavy imports (pyspark, matplotlib) happen inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["run_report"]


def run_report(
    input_dir: str | Path,
    output_dir: str | Path,
    *,
    master: str = "local[*]",
    spark: Any = None,
    progress: bool = True,
    rate_window_s: float = 300,
    stall_window_s: float = 300,
    include_system: bool = False,
) -> Path:
    """Run the analytics job on ``input_dir`` (an export directory) and write tables and
    the report to ``output_dir``; prints the text summary and where the report is, and
    returns the path of ``report.html``. ``spark``: an existing SparkSession (left
    running); otherwise one is started on ``master`` and stopped afterwards.

    Raises ``txmq_analytics.job.InputError`` (before Spark starts) when ``input_dir`` is
    missing or holds no export, and ``txmq_analytics.job.Interrupted`` (a
    KeyboardInterrupt) after Ctrl-C has cancelled the run."""
    from txmq_analytics.job import build_session, check_input, options_from, run_job, stop_on_sigint

    check_input(input_dir)
    own = spark is None
    with stop_on_sigint():
        session = build_session(master) if own else spark
        try:
            result = run_job(
                session, input_dir, output_dir,
                options=options_from(rate_window_s, stall_window_s, include_system),
                progress=progress,
            )  # fmt: skip
        finally:
            if own:
                session.stop()
    return result.report_html
