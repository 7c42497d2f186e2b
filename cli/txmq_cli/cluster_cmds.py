"""`txmq up` (a local cluster in the foreground) and `txmq store|txcheck|pull` (one
service in the foreground, every flag passed through to it)."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from txmq_cli import etcd_auth
from txmq_cli.cluster import DEFAULT_PORTS, SERVICES, LocalCluster, PortsInUse, ProcessExited
from txmq_cli.options import option
from txmq_cli.supervise import CannotStart, Died, RestartPolicy, Supervisor, describe_exit
from txmq_runtime.backoff import BackoffPolicy

if TYPE_CHECKING:
    from txmq_cli.certs import TlsFiles

_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True}
_SUPERVISE_INTERVAL_S = 0.2  # how often `txmq up` looks at its children

#: The services' own identity in a local cluster with --auth-enabled (also the operator's super user).
LOCAL_ADMIN = "txmq-admin"
#: Every service's flags with --auth-enabled (the secret goes through the environment).
AUTH_ARGS = ("--auth-enabled", "--auth-access-key", LOCAL_ADMIN)


class _Stop(Exception):
    """SIGTERM, raised in the main thread like KeyboardInterrupt is for SIGINT."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


@click.command(context_settings=_PASS_THROUGH)
@option(
    "--data-dir",
    default="./data",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Data of etcd and the store; logs under <data-dir>/logs.",
)
@option("--host", default="127.0.0.1", show_default=True, help="Address every process binds to.")
@option("--store-port", default=DEFAULT_PORTS["store"], show_default=True, type=int)
@option("--pull-port", default=DEFAULT_PORTS["pull"], show_default=True, type=int)
@option("--txcheck-port", default=DEFAULT_PORTS["txcheck"], show_default=True, type=int)
@option(
    "--gateway-port",
    default=DEFAULT_PORTS["gateway"],
    show_default=True,
    type=int,
    help="RocketMQ 5 clients connect here.",
)
@option("--etcd-client-port", default=2379, show_default=True, type=int)
@option("--etcd-peer-port", default=2380, show_default=True, type=int)
@option("--etcd-prefix", default="/txmq", show_default=True, help="Key prefix in etcd.")
@option(
    "--store-replicas",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Replicas of the store (a replicated store group, min_in_sync 2 when more than one; docs/replication.md).",
)
@option(
    "--start-timeout-s",
    default=60.0,
    show_default=True,
    type=float,
    help="How long each process may take to report SERVING (on its first start and on each restart).",
)
@option(
    "--restart-backoff-max-ms",
    default=30_000,
    show_default=True,
    type=click.IntRange(min=1_000),
    help="A process that dies is started again after 1 s, doubling per death up to this.",
)
@option(
    "--tls",
    is_flag=True,
    help="Mutual TLS on every service and etcd, and etcd auth with a user per kind of service: a throwaway CA "
    "and certificate (new on every start) in <data-dir>/tls; clients need the files printed.",
)
@option(
    "--auth-enabled",
    is_flag=True,
    help="Authentication and permissions on every service (docs/security.md): the super user "
    f"{LOCAL_ADMIN!r} with a secret kept in <data-dir>/auth/secret; other users need `txmq user create`.",
)
@click.pass_context
def up(ctx: click.Context, tls: bool, auth_enabled: bool, restart_backoff_max_ms: int, **options: object) -> None:
    """Run etcd, store, txcheck, pull and the RocketMQ gateway locally until Ctrl-C or SIGTERM.

    A process that dies is started again (same flags, ports and data) after a back-off of
    1 s doubling to --restart-backoff-max-ms; `txmq up` stops with exit code 1 only when one
    cannot start (not ready on its first start, or dead before it is ready 5 times in a row).
    Other options go to the store, e.g. `txmq up --flush-mode sync`.
    """
    try:
        cluster, files, secret_file = _prepare(options, ctx.args, tls=tls, auth_enabled=auth_enabled)
    except PortsInUse as exc:
        click.echo(f"not started: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        click.echo(f"not started: {os_reason(exc)}", err=True)
        sys.exit(1)
    signal.signal(signal.SIGTERM, _raise_stop)
    # Ctrl-C stops the cluster even when started where SIGINT is ignored (a background
    # job of a script): its services stop on it, and must not be restarted instead.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 0
    try:
        cluster.start()
        _echo_up(cluster, files, secret_file)
        # A restart may take as long as the first start.
        policy = RestartPolicy(
            backoff=BackoffPolicy(first_ms=1_000, max_ms=restart_backoff_max_ms),
            ready_timeout_ms=int(cluster.start_timeout_s * 1000),
        )
        supervisor = Supervisor(cluster.members(), policy=policy)
        while True:
            for event in supervisor.tick():
                click.echo(str(event), err=isinstance(event, Died))
            time.sleep(_SUPERVISE_INTERVAL_S)
    except CannotStart as exc:
        click.echo(f"stopping the cluster: {exc}", err=True)
        code = 1
    except PortsInUse as exc:
        click.echo(f"not started: {exc}", err=True)
        code = 1
    except ProcessExited as exc:
        dead = exc.process
        last = dead.log_tail(1).strip()
        click.echo(
            f"start-up failed: {dead.name} (pid {dead.pid}) {describe_exit(dead.returncode)} before it was ready; "
            f"log {dead.log_path}" + (f"; its last line: {last}" if last else ""),
            err=True,
        )
        code = 1
    except TimeoutError as exc:
        click.echo(f"start-up failed: {exc}; logs in {cluster.log_dir}", err=True)
        code = 1
    except OSError as exc:  # a log file or a socket the cluster could not open
        click.echo(f"start-up failed: {os_reason(exc)}", err=True)
        code = 1
    except (KeyboardInterrupt, _Stop):
        click.echo("stopping")
    finally:
        # A second Ctrl-C must not leave children behind halfway through the stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for name, returncode in cluster.stop().items():
            if returncode not in (0, None, -signal.SIGTERM):  # etcd ends by re-raising SIGTERM
                click.echo(f"{name} exited with code {returncode}", err=True)
    sys.exit(code)


def _echo_up(cluster: LocalCluster, files: TlsFiles | None, secret_file: Path | None) -> None:
    """What is up where, and what clients need to reach it."""
    click.echo(f"txmq is up. bootstrap address: {cluster.bootstrap}")
    for name, service in cluster.services.items():
        click.echo(f"  {name:8} {service.address}")
    click.echo(f"  {'etcd':8} {'' if files is None else 'https://'}{cluster.etcd_endpoints}")
    if files is not None:
        _echo_tls(files)
    if cluster.etcd_auth:
        click.echo(
            "etcd: TLS with client certificates of the CA, and etcd auth on: each kind of service has its own "
            f"etcd user, and only {', '.join(etcd_auth.BOOK_WRITERS)} the one that writes the user book "
            f"({etcd_auth.AUTH}); "
            f"root's password is in {cluster.etcd_auth_dir / 'root'}"
        )
    if secret_file is not None:
        click.echo(f"auth: every call needs a user; the super user {LOCAL_ADMIN!r}'s secret is in {secret_file}")
        click.echo(f"  CLI: export TXMQ_ACCESS_KEY={LOCAL_ADMIN} TXMQ_SECRET_KEY=$(cat {secret_file})")
        click.echo(f"  SDK: txmq.Credentials({LOCAL_ADMIN!r}, <secret>)")
    click.echo(f"logs: {cluster.log_dir}   (Ctrl-C to stop)")


def _prepare(
    options: dict[str, object], store_args: list[str], *, tls: bool, auth_enabled: bool
) -> tuple[LocalCluster, TlsFiles | None, Path | None]:
    """The cluster `txmq up` runs, its certificates (--tls) and its auth secret file
    (--auth-enabled). Files are written only once the ports are free and the data dir
    usable: a `txmq up` that cannot start leaves no trace. Raises PortsInUse or OSError
    with nothing started."""
    data_dir = Path(str(options["data_dir"])).resolve()
    files = None
    if tls:
        from txmq_cli.certs import local_hosts, tls_files, write_certificates  # cryptography: only when asked

        files = tls_files(data_dir / "tls")
    secret_file = data_dir / "auth" / "secret" if auth_enabled else None
    service_args = list(AUTH_ARGS) if auth_enabled else []
    cluster = LocalCluster(**options, store_args=store_args, tls=files, service_args=service_args)  # type: ignore[arg-type]
    cluster.check_ports()
    _check_data_dir(data_dir)
    if files is not None:
        write_certificates(files.ca.parent, hosts=local_hosts(str(options["host"])))
    if secret_file is not None:
        _share_auth_secret(secret_file)
    return cluster, files, secret_file


def _check_data_dir(data_dir: Path) -> None:
    """Make ``data_dir`` and its logs directory and write there once, so a path that
    cannot hold the cluster's data is one line before anything starts."""
    try:
        logs = data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=logs):
            pass
    except OSError as exc:
        raise OSError(exc.errno, f"--data-dir {data_dir} cannot hold the cluster's data: {os_reason(exc)}") from exc


def os_reason(exc: OSError) -> str:
    """An OSError in one line: its reason and, when it has one, the path."""
    reason = exc.strerror or str(exc)
    return f"{reason} ({exc.filename})" if exc.filename else reason


def _share_auth_secret(secret_file: Path) -> None:
    """The services' secret (AUTH_ARGS turn auth on) reaches them in their env vars
    (TXMQ_<SERVICE>_AUTH_SECRET_KEY, inherited), not on the command line. The secret is made
    once and kept: users' secrets in etcd are sealed with it."""
    import secrets as random_secrets

    if not secret_file.exists():
        secret_file.parent.mkdir(parents=True, exist_ok=True)
        secret_file.touch(mode=0o600)
        secret_file.write_text(random_secrets.token_urlsafe(24))
    secret = secret_file.read_text().strip()
    for service in ("STORE", "PULL", "TXCHECK", "GATEWAY"):
        os.environ[f"TXMQ_{service}_AUTH_SECRET_KEY"] = secret


def _echo_tls(files: TlsFiles) -> None:
    """Where the certificates are, and how the SDK and the CLI use them."""
    ca, cert, key = str(files.ca), str(files.cert), str(files.key)
    for line in (
        "TLS: every service and etcd serve TLS only and require a client certificate signed by the CA",
        f"  CA           {ca}",
        f"  certificate  {cert}   (server and client certificate; new ones on every start)",
        f"  key          {key}",
        f"  SDK: txmq.TlsConfig(ca_file={ca!r}, cert_file={cert!r}, key_file={key!r})",
        f"  CLI: export TXMQ_TLS_CA_FILE={ca} TXMQ_TLS_CERT_FILE={cert} TXMQ_TLS_KEY_FILE={key}",
    ):
        click.echo(line)


@click.command("etcd-auth-setup")
@option("--etcd-endpoint", required=True, help="host:port of etcd's client port (TLS, --client-cert-auth).")
@option("--etcd-prefix", default="/txmq", show_default=True, help="Key prefix in etcd the roles are granted.")
@option("--ca-file", required=True, type=click.Path(exists=True, dir_okay=False), help="PEM CA of etcd's certificate.")
@option("--cert-file", required=True, type=click.Path(exists=True, dir_okay=False), help="PEM client certificate.")
@option("--key-file", required=True, type=click.Path(exists=True, dir_okay=False), help="PEM key of --cert-file.")
@option(
    "--passwords-dir",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="One file per etcd user: root, store, pull, txcheck, gateway, auth (a mounted Secret).",
)
@option("--wait-s", default=300.0, show_default=True, type=float, help="How long to wait for etcd to answer.")
def etcd_auth_setup(
    etcd_endpoint: str, etcd_prefix: str, ca_file: str, cert_file: str, key_file: str, passwords_dir: str, wait_s: float
) -> None:
    """Make etcd's users and roles for txmq (a user and role per kind of service, each
    allowed only its part of the prefix, and txmq-auth, the only one that writes the user
    book: file "auth", optional) and turn etcd's auth on. Idempotent. The Helm chart's set-up Job
    runs it; `txmq up --tls` does the same by itself."""
    from txmq_cli.certs import TlsFiles

    directory = Path(passwords_dir)
    secrets = {etcd_auth.ROOT: (directory / etcd_auth.ROOT).read_text().strip()}
    for service in SERVICES:
        secrets[etcd_auth.service_user(service)] = (directory / service).read_text().strip()
    book = directory / "auth"  # optional: a Secret made for an older chart has none
    if book.exists():
        secrets[etcd_auth.AUTH] = book.read_text().strip()
    files = TlsFiles(Path(ca_file), Path(cert_file), Path(key_file))
    deadline = time.monotonic() + wait_s
    while True:
        try:
            etcd_auth.set_up(etcd_endpoint, files, prefix=etcd_prefix, services=list(SERVICES), secrets=secrets)
            break
        except etcd_auth.EtcdAuthSetupFailed as exc:
            if time.monotonic() > deadline:
                click.echo(f"not done: {exc}", err=True)
                sys.exit(1)
            time.sleep(2)
    click.echo(
        f"etcd at {etcd_endpoint}: auth on, users root and {', '.join(etcd_auth.service_user(s) for s in SERVICES)}; "
        + (
            f"{etcd_auth.AUTH} writes the user book"
            if etcd_auth.AUTH in secrets
            else f"no file {book}: no one may write the user book (docs/etcd.md)"
        )
    )


def _service_command(service: str) -> click.Command:
    @click.command(
        service,
        context_settings={**_PASS_THROUGH, "help_option_names": []},
        help=f"Run one {service} instance in the foreground; every flag goes to it (--help lists them).",
    )
    @click.pass_context
    def run(ctx: click.Context) -> None:
        importlib.import_module(f"txmq_{service}.__main__").main(ctx.args)

    return run


def register(group: click.Group) -> None:
    group.add_command(up)
    group.add_command(etcd_auth_setup)
    for service in SERVICES:
        group.add_command(_service_command(service))
