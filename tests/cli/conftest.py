"""The ``txmq`` command through click's CliRunner against the session cluster."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from txmq_cli.main import cli

Txmq = Callable[..., Result]


@pytest.fixture
def txmq(bootstrap: str) -> Txmq:
    """Runs ``txmq <args> --endpoint <cluster>``; the Result (exit code, stdout, stderr)."""
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(cli, [*args, "--endpoint", bootstrap])

    return run


@pytest.fixture
def topic(new_topic: Callable[..., str]) -> str:
    """A fresh topic (4 queues), deleted after the test."""
    return new_topic()
