"""``txmq auth rotate-key``: re-seal what etcd keeps sealed under a new
``auth_secret_key``, with the services running (docs/security.md, "Rotating
auth_secret_key"). It talks to etcd, not to a service: the services accept both keys
while it runs, and any of them may be down."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path

import click
from pydantic import SecretStr

from txmq_cli.options import option

_MIN_KEY_CHARS = 16


@dataclasses.dataclass(frozen=True)
class _EtcdOptions:
    """The fields ``txmq_runtime.etcd_access.EtcdAccess.load`` reads, as the services name them."""

    etcd_tls_ca_file: str
    etcd_tls_cert_file: str
    etcd_tls_key_file: str
    etcd_username: str
    etcd_password: SecretStr


@click.group("auth")
def auth() -> None:
    """The cluster's own secret, auth_secret_key (users: `txmq user`; permissions: `txmq acl`)."""


def _key(file: Path | None, env_value: str | None, what: str) -> str:
    text = file.read_text().strip() if file is not None else (env_value or "").strip()
    if not text:
        raise click.UsageError(
            f"the {what} auth_secret_key is needed: --{what}-key-file or TXMQ_{what.upper()}_AUTH_SECRET_KEY"
        )
    if len(text) < _MIN_KEY_CHARS:
        raise click.UsageError(f"the {what} auth_secret_key has {len(text)} characters; it needs {_MIN_KEY_CHARS}")
    return text


@auth.command("rotate-key")
@option(
    "--wait-s", default=60.0, show_default=True, type=float, help="How long to keep trying while etcd does not answer."
)
@option("--etcd-endpoints", envvar="TXMQ_ETCD_ENDPOINTS", default="127.0.0.1:2379", show_default=True,
        help="Comma-separated host:port of etcd (as the services' etcd_endpoints).")  # fmt: skip
@option(
    "--etcd-prefix", envvar="TXMQ_ETCD_PREFIX", default="/txmq", show_default=True, help="The services' etcd_prefix."
)
@option("--etcd-tls-ca-file", envvar="TXMQ_ETCD_TLS_CA_FILE", default="", help="PEM CA of etcd's certificate (TLS).")
@option("--etcd-tls-cert-file", envvar="TXMQ_ETCD_TLS_CERT_FILE", default="", help="PEM client certificate for etcd.")
@option("--etcd-tls-key-file", envvar="TXMQ_ETCD_TLS_KEY_FILE", default="", help="PEM key of --etcd-tls-cert-file.")
@option("--etcd-username", envvar="TXMQ_ETCD_USERNAME", default="",
        help="etcd user that may write <prefix>/auth/ and /secrets/ (txmq-auth, or root).")  # fmt: skip
@option("--etcd-password-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="File holding --etcd-username's password (or TXMQ_ETCD_PASSWORD).")  # fmt: skip
@option("--service-access-key", envvar="TXMQ_AUTH_ACCESS_KEY", required=True,
        help="The services' auth_access_key: its secret becomes the new key.")  # fmt: skip
@option("--old-key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="File holding the auth_secret_key in use (or TXMQ_OLD_AUTH_SECRET_KEY).")  # fmt: skip
@option("--new-key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="File holding the new auth_secret_key, 16+ characters (or TXMQ_NEW_AUTH_SECRET_KEY).")  # fmt: skip
def rotate_key(
    wait_s: float,
    etcd_endpoints: str,
    etcd_prefix: str,
    etcd_tls_ca_file: str,
    etcd_tls_cert_file: str,
    etcd_tls_key_file: str,
    etcd_username: str,
    etcd_password_file: Path | None,
    service_access_key: str,
    old_key_file: Path | None,
    new_key_file: Path | None,
) -> None:
    """Re-seal users' secrets and cluster secrets in etcd under a new auth_secret_key, and
    make it the services' identity. Run it while every service accepts both keys (their
    auth_accepted_secret_key set to the new one); then switch them to the new key. Running
    it again changes nothing."""
    import os

    from txmq_runtime.etcd import RETRYABLE, etcd_client, retrying
    from txmq_runtime.etcd_access import EtcdAccess, EtcdAuthFailed
    from txmq_runtime.key_rotation import Resealed, RotationFailed, reseal
    from txmq_runtime.tls import TlsError

    old = _key(old_key_file, os.environ.get("TXMQ_OLD_AUTH_SECRET_KEY"), "old")
    new = _key(new_key_file, os.environ.get("TXMQ_NEW_AUTH_SECRET_KEY"), "new")
    password = (
        etcd_password_file.read_text().strip() if etcd_password_file else os.environ.get("TXMQ_ETCD_PASSWORD", "")
    )
    if bool(etcd_username) != bool(password):
        raise click.UsageError(
            "--etcd-username and its password (--etcd-password-file or TXMQ_ETCD_PASSWORD) go together"
        )
    options = _EtcdOptions(etcd_tls_ca_file, etcd_tls_cert_file, etcd_tls_key_file, etcd_username, SecretStr(password))

    async def run() -> Resealed:
        async with etcd_client(etcd_endpoints, EtcdAccess.load(options)) as client:

            async def attempt() -> Resealed:  # the whole pass again: it is idempotent
                return await reseal(
                    client, prefix=etcd_prefix, old_secret=old, new_secret=new, service_access_key=service_access_key
                )

            return await retrying(give_up_after_s=wait_s)(attempt)

    try:
        done = asyncio.run(run())
    except (RotationFailed, EtcdAuthFailed, TlsError, ValueError) as exc:
        click.echo(f"not done: {exc}", err=True)
        sys.exit(1)
    except RETRYABLE as exc:
        click.echo(f"not done: etcd at {etcd_endpoints} did not answer: {exc}", err=True)
        sys.exit(1)
    click.echo(
        f"re-sealed {done.users} users and {done.secrets} cluster secrets under the new key; "
        f"{done.already} already were"
    )
    for key in done.unopenable:
        click.echo(f"left as it is (neither key opens it): {key}", err=True)
    if done.unopenable:
        sys.exit(1)
