"""How every ``txmq`` command that talks to a cluster ends on an error: one line on
stderr and exit code 1, never a traceback."""

from __future__ import annotations

from typing import NoReturn

import click

from txmq import TxmqError


def unreachable_hint(endpoint: str | None) -> str:
    where = f" at {endpoint}" if endpoint else ""
    return (
        f"no txmq service answers{where}: start a local cluster with `txmq up`, "
        "or point --endpoint (or TXMQ_ENDPOINT) at a running service; a cluster serving TLS "
        "needs txmq --tls-ca-file (and --tls-cert-file/--tls-key-file for mutual TLS, or TXMQ_TLS_* env vars)"
    )


def fail(err: TxmqError, endpoint: str | None = None) -> NoReturn:
    """Print ``err`` (or, when nothing answered, where to find a cluster) and exit 1."""
    if err.unreachable:
        click.echo(f"error: {unreachable_hint(endpoint)} ({err})", err=True)
    else:
        click.echo(f"error: {err}", err=True)
    raise click.exceptions.Exit(1)
