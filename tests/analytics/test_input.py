"""Bad input to the analytics stops before Spark starts: a missing, non-directory or empty
export is one line and a non-zero exit from ``txmq analytics run``, ``run_report`` and the
spark-submit entry point. No Spark here: starting a session fails these tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

pytest.importorskip("pyspark", reason="analytics extra not installed")

from txmq_analytics import job, run_report
from txmq_analytics.job import InputError, check_input
from txmq_cli import analytics_cmds


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark was started for input that cannot be an export")

    monkeypatch.setattr(job, "build_session", refuse)


def exported(root: Path) -> Path:
    """An export directory with one (empty) Parquet file, as the store writes it."""
    part = root / "offsets" / "date=2026-01-01" / "hour=00"
    part.mkdir(parents=True)
    (part / "part-1-store-0-1-1.parquet").write_bytes(b"PAR1")
    return root


def cli() -> click.Group:
    @click.group()
    def group() -> None:
        pass

    analytics_cmds.register(group)
    return group


def test_check_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such directory"):
        check_input(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        check_input(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no exported data"):
        check_input(empty)
    # What Spark skips does not count: a writer's temp file, the exporter's state.
    hidden = empty / "offsets" / "date=2026-01-01" / "hour=00"
    hidden.mkdir(parents=True)
    (hidden / ".part-1-store-0-1-1.parquet.tmp").write_bytes(b"x")
    (empty / "offsets" / "_state").mkdir()
    (empty / "offsets" / "_state" / "x.parquet").write_bytes(b"x")
    (empty / "queues").mkdir()
    with pytest.raises(InputError, match="no exported data"):
        check_input(empty)
    with pytest.raises(InputError, match="no exported data"):
        check_input(f"file://{empty}")
    check_input(exported(tmp_path / "good"))
    check_input(f"file://{tmp_path / 'good'}")
    check_input("hdfs://namenode/exports/txmq")  # remote: Spark's to read


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_cli_refuses_bad_input_in_one_line(tmp_path: Path, kind: str) -> None:
    source = tmp_path / "export"
    if kind == "empty":
        source.mkdir()
    out = tmp_path / "out"
    res = CliRunner().invoke(cli(), ["analytics", "run", "--input", str(source), "--output", str(out)])
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith(f"Error: --input {source}: ")
    assert ("no such directory" if kind == "missing" else "no exported data") in lines[0]
    assert not out.exists()  # nothing written


def test_run_report_and_spark_submit_entry_refuse_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match="no such directory"):
        run_report(tmp_path / "missing", tmp_path / "out", progress=False)
    assert job.main(["--input", str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"txmq-analytics: error: --input {tmp_path}: no exported data"), err


def test_flags_are_kebab_case_with_hidden_underscore_aliases(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli(), ["analytics", "run", "--help"])
    assert "--stall-window-s" in res.output and "--stall_window_s" not in res.output
    res = CliRunner().invoke(
        cli(),
        ["analytics", "run", "--input", str(tmp_path / "x"), "--output", str(tmp_path / "o"), "--stall_window_s", "3"],
    )
    assert res.exit_code == 1 and "no such directory" in res.output, res.output  # the alias parsed
