"""``txmq transaction show <id>`` (its timeline, from QueryTransaction) and
``txmq transaction resume <id>`` (check a discarded transaction again)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click
from google.protobuf import json_format

from txmq import ServiceKind, TxmqError
from txmq._client import ClientCore, call
from txmq.errors import NotFoundError
from txmq.transaction import resume_transaction
from txmq.v1 import errors_pb2, txcheck_pb2, txcheck_pb2_grpc
from txmq_cli.credentials import client_options
from txmq_cli.failures import fail
from txmq_cli.options import option

DEFAULT_ENDPOINT = "127.0.0.1:10911"


def register(group: click.Group) -> None:
    group.add_command(transaction)


def _endpoint_option(fn):
    return option(
        "--endpoint", envvar="TXMQ_ENDPOINT", default=DEFAULT_ENDPOINT, show_default=True,
        help="Any txmq service, host:port.",
    )(fn)  # fmt: skip


@click.group()
def transaction() -> None:
    """Transactional messages: look-up and admin."""


@transaction.command()
@click.argument("transaction_id")
@_endpoint_option
@option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def show(transaction_id: str, endpoint: str, output: str) -> None:
    """A transaction's state and timeline."""
    core = ClientCore(endpoint, route_refresh_interval=30, **client_options())
    try:
        addresses = [e.address for e in core.routes.endpoints(ServiceKind.TXCHECK, timeout=5)]
        if not addresses:
            raise NotFoundError("no txcheck service is live", code=errors_pb2.CODE_UNAVAILABLE)
        stub = core.stub(addresses[0], txcheck_pb2_grpc.TransactionStub)
        resp = call(
            stub.QueryTransaction, txcheck_pb2.QueryTransactionRequest(transaction_id=transaction_id), timeout=10
        )
    except TxmqError as err:
        fail(err, endpoint)
    finally:
        core.close()
    if output == "json":
        click.echo(json.dumps(json_format.MessageToDict(resp, preserving_proto_field_name=True), indent=2))
        return
    state = txcheck_pb2.TransactionResolution.Name(resp.resolution).removeprefix("TRANSACTION_RESOLUTION_")
    if resp.discarded:
        state += " (discarded: `txmq transaction resume` checks it again)"
    click.echo(f"transaction {resp.transaction_id}  group {resp.producer_group}  state {state}")
    if resp.HasField("committed"):
        c = resp.committed
        click.echo(f"committed copy: {c.message.topic} queue {c.message.queue_id} offset {c.queue_offset} "
                   f"(offsetMsgId {c.offset_msg_id}, store {c.store_id})")  # fmt: skip
    for e in resp.timeline:
        at = datetime.fromtimestamp(e.at_ms / 1000, UTC).isoformat(timespec="milliseconds")
        click.echo(f"  {at}  {e.kind:<18} {e.detail}")


@transaction.command()
@click.argument("transaction_id")
@_endpoint_option
@option("--store-id", default="", help="The store holding it (default: every store that has it).")
def resume(transaction_id: str, endpoint: str, store_id: str) -> None:
    """Check a transaction discarded to TRANS_CHECK_MAX_TIME_TOPIC again (count reset)."""
    core = ClientCore(endpoint, route_refresh_interval=30, **client_options())
    try:
        half = resume_transaction(core, transaction_id, store_id=store_id, timeout=10)
    except TxmqError as err:
        fail(err, endpoint)
    finally:
        core.close()
    click.echo(
        f"resumed {transaction_id} on {half.store_id}: half queue offset {half.queue_offset}, "
        f"commit-log offset {half.commit_log_offset}"
    )
