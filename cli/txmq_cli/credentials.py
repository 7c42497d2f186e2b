"""Who the ``txmq`` commands call as, on a cluster with auth on: global options of
``txmq`` itself,

    txmq --access-key alice --secret-key ... topic list

or their env vars (TXMQ_ACCESS_KEY, TXMQ_SECRET_KEY — prefer the env var for the secret:
a flag shows in the process list). Both set: every call is signed (``txmq.Credentials``).
``client_options()`` is what every command hands its client: TLS and credentials.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, TypeVar

import click

from txmq import Credentials, TlsConfig
from txmq_cli.options import option
from txmq_cli.tls import client_tls

F = TypeVar("F", bound=Callable[..., Any])
_KEY = "txmq.credentials"


def credential_options(fn: F) -> F:
    """The global --access-key / --secret-key options, on the ``txmq`` group (``fn``)."""
    fn = option(
        "--secret-key",
        envvar="TXMQ_SECRET_KEY",
        expose_value=False,
        callback=_keep,
        help="Secret key of --access-key; better set in the env var (a flag shows in the process list).",
    )(fn)
    return option(
        "--access-key",
        envvar="TXMQ_ACCESS_KEY",
        expose_value=False,
        callback=_keep,
        help="The user to call as on a cluster with auth on (txmq user create).",
    )(fn)


def _keep(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta.setdefault(_KEY, {})[param.name] = value


def client_credentials() -> Credentials | None:
    ctx = click.get_current_context(silent=True)
    given = {} if ctx is None else ctx.meta.get(_KEY, {})
    access_key, secret_key = given.get("access_key"), given.get("secret_key")
    if not access_key and not secret_key:
        return None
    if not (access_key and secret_key):
        raise click.UsageError("--access-key and --secret-key go together (TXMQ_ACCESS_KEY, TXMQ_SECRET_KEY)")
    return Credentials(access_key, secret_key)


class ClientOptions(TypedDict):
    tls: TlsConfig | None
    credentials: Credentials | None


def client_options() -> ClientOptions:
    """``tls=`` and ``credentials=`` for a txmq client, from the global options."""
    return {"tls": client_tls(), "credentials": client_credentials()}
