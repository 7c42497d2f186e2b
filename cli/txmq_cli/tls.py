"""TLS of the ``txmq`` commands that dial a cluster: global options of ``txmq`` itself,

    txmq --tls-ca-file ca.crt --tls-cert-file tls.crt --tls-key-file tls.key topic list

or their env vars (TXMQ_TLS_CA_FILE, TXMQ_TLS_CERT_FILE, TXMQ_TLS_KEY_FILE,
TXMQ_TLS_SERVER_NAME), which ``txmq up --tls`` prints. Any of them set: the commands
dial over TLS (``txmq.TlsConfig``); none: plaintext.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from txmq import TlsConfig
from txmq_cli.options import option

F = TypeVar("F", bound=Callable[..., Any])
_KEY = "txmq.tls"
_FILE = click.Path(exists=True, dir_okay=False)


def tls_options(fn: F) -> F:
    """The global TLS options, on the ``txmq`` group (``fn``), kept for ``client_tls``."""
    options = [
        ("--tls-ca-file", _FILE, "PEM CA bundle the services' certificates are checked with (TLS on)."),
        ("--tls-cert-file", _FILE, "PEM client certificate, for services that require one (mutual TLS)."),
        ("--tls-key-file", _FILE, "PEM private key of --tls-cert-file."),
        (
            "--tls-server-name",
            None,
            "Name the services' certificates are checked against instead of the host dialled (TLS on).",
        ),
    ]
    for decl, kind, help_text in reversed(options):  # the first decorator applied is listed last
        envvar = "TXMQ_" + decl[2:].upper().replace("-", "_")
        fn = option(decl, envvar=envvar, type=kind, expose_value=False, callback=_keep, help=help_text)(fn)
    return fn


def _keep(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta.setdefault(_KEY, {})[param.name] = value


def client_tls() -> TlsConfig | None:
    """The TlsConfig the global options (or env vars) give; None when none is set."""
    ctx = click.get_current_context(silent=True)
    given = {} if ctx is None else ctx.meta.get(_KEY, {})
    if not any(given.values()):
        return None
    if bool(given.get("tls_cert_file")) != bool(given.get("tls_key_file")):
        raise click.UsageError("--tls-cert-file and --tls-key-file go together (TXMQ_TLS_CERT_FILE, TXMQ_TLS_KEY_FILE)")
    return TlsConfig(
        ca_file=given.get("tls_ca_file"),
        cert_file=given.get("tls_cert_file"),
        key_file=given.get("tls_key_file"),
        server_name=given.get("tls_server_name") or None,
    )
