"""`txmq dlq resend` needs exactly one of --id and --all (checked before any call)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from txmq_cli.main import cli


@pytest.mark.parametrize("args", [[], ["--id", "X", "--all"]])
def test_resend_needs_ids_or_all(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["dlq", "resend", "G", *args, "--endpoint", "127.0.0.1:1"])
    assert result.exit_code == 2 and "give --id ID (one or more) or --all" in result.output


def test_dlq_help_lists_both_commands() -> None:
    result = CliRunner().invoke(cli, ["dlq", "--help"])
    assert result.exit_code == 0 and "list" in result.output and "resend" in result.output
