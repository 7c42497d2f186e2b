"""`txmq`: the local cluster (`txmq up`), service entry points and admin commands.

Subcommands live in modules that each expose ``register(group)``.
"""

from __future__ import annotations

import click

from txmq_cli import admin_cmds, analytics_cmds, auth_cmds, cluster_cmds, consume_cmds, tx_cmds
from txmq_cli.credentials import credential_options
from txmq_cli.tls import tls_options


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="txmq-server", prog_name="txmq", message="%(prog)s %(version)s")
@tls_options
@credential_options
def cli() -> None:
    """txmq: a transactional message broker with RocketMQ semantics."""


cluster_cmds.register(cli)
admin_cmds.register(cli)
tx_cmds.register(cli)
analytics_cmds.register(cli)
consume_cmds.register(cli)
auth_cmds.register(cli)

if __name__ == "__main__":
    cli()
