"""Admin commands over the SDK: topics, groups, sending, looking messages up, offsets.

Every command takes ``--endpoint`` (any txmq service; env TXMQ_ENDPOINT) and
``-o text|json``, and dials over TLS when txmq's global --tls-* options say so
(``txmq_cli.tls``). A failure prints ``error: [CODE_X] message`` and exits with 1; when no
service answers at all, it says so and suggests ``txmq up`` / ``--endpoint``. Flags are
kebab-case (``txmq_cli.options``).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from txmq import Admin, ConsumeOffset, Message, MessageExt, NotFoundError, Perm, Producer, SendResult, TxmqError
from txmq.models import READ_WRITE, ReplicaState, StoreGroupStatus
from txmq.v1 import errors_pb2
from txmq_cli.credentials import client_options
from txmq_cli.failures import fail
from txmq_cli.options import option

DEFAULT_ENDPOINT = "127.0.0.1:10911"
F = TypeVar("F", bound=Callable[..., Any])
Row = TypeVar("Row")
Columns = Sequence[tuple[str, Callable[[Any], object]]]
# Properties shown with the fields of these types.
_DERIVED: dict[type, tuple[str, ...]] = {
    MessageExt: ("msg_id",),
    ConsumeOffset: ("lag",),
    SendResult: ("recall_handle",),
}


def register(group: click.Group) -> None:
    for command in (topic, subscription_group, send, message, offsets, store_group, dlq):
        group.add_command(command)


# -- shared options and output ---------------------------------------------------------------


def _admin_command(fn: F) -> F:
    """--endpoint and -o on a command; TxmqError becomes one ``error: ...`` line and exit
    code 1 (``txmq_cli.failures.fail``)."""

    @option(
        "--endpoint",
        envvar="TXMQ_ENDPOINT",
        default=DEFAULT_ENDPOINT,
        show_default=True,
        help="Any txmq service, host:port (a comma-separated list is tried in turn).",
    )
    @option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TxmqError as err:
            fail(err, kwargs.get("endpoint"))

    return wrapper  # type: ignore[return-value]


def _pairs(values: Sequence[str], *, what: str) -> dict[str, str]:
    """``("k=v", ...)`` -> dict; a value may contain '='."""
    result = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint=what)
        result[name] = value
    return result


def _jsonable(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)] + list(_DERIVED.get(type(value), ()))
        return {name: _jsonable(getattr(value, name)) for name in names}
    if isinstance(value, Perm):
        return int(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _text(value: object) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, Perm):
        return f"{int(value)} ({_perm_letters(value)})"
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "-"
    if value is None or value == "":
        return "-"
    return str(value)


def _perm_letters(perm: Perm) -> str:
    return "".join(c if perm & p else "-" for c, p in (("r", Perm.READ), ("w", Perm.WRITE), ("i", Perm.INHERIT)))


def _time(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _emit(obj: object, output: str) -> None:
    """One object: ``field: value`` lines (``*_ms`` fields as UTC times), or JSON."""
    if output == "json":
        click.echo(json.dumps(_jsonable(obj), indent=2, sort_keys=True))
        return
    assert dataclasses.is_dataclass(obj)
    names = list(_DERIVED.get(type(obj), ())) + [f.name for f in dataclasses.fields(obj)]
    items = [(name, getattr(obj, name)) for name in names]
    width = max(len(name) for name, _ in items)
    for name, value in items:
        shown = _time(value) if name.endswith(("timestamp_ms", "_at_ms")) else _text(value)
        click.echo(f"{name.ljust(width)}  {shown}")


def _emit_table(rows: Sequence[Row], columns: Columns, output: str) -> None:
    if output == "json":
        click.echo(json.dumps([_jsonable(r) for r in rows], indent=2, sort_keys=True))
        return
    cells = [[h for h, _ in columns]] + [[_text(get(r)) for _, get in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def _short(body: bytes, limit: int = 40) -> str:
    text = _text(body)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- store groups --------------------------------------------------------------------------


@click.group("store-group")
def store_group() -> None:
    """Replicated store groups (docs/replication.md)."""


@store_group.command("status")
@option("--store-id", help="Only this store group (default: every one).")
@_admin_command
def store_group_status(store_id: str | None, endpoint: str, output: str) -> None:
    """Leader, epoch, in-sync set, and each replica's log end, high watermark and lag."""
    with Admin(endpoint, **client_options()) as admin:
        groups = admin.store_group_status(store_id=store_id)
    if output == "json":
        _emit_table(groups, (), output)
        return
    if not groups:
        click.echo("no replicated store group is registered")
    for g in groups:
        click.echo(
            f"store group {g.store_id}: leader {g.leader or '(none)'}, epoch {g.epoch}, "
            f"in sync {','.join(g.in_sync) or '-'} (min {g.min_in_sync})"
        )
        _emit_table(
            list(g.replicas),
            (
                ("REPLICA", lambda r: r.replica_id),
                ("ROLE", lambda r: r.role),
                ("ADDRESS", lambda r: r.address),
                ("LOG_END", lambda r: r.log_end),
                ("HIGH_WATERMARK", lambda r: r.high_watermark),
                ("LAG_BYTES", lambda r: "-" if r.lag_bytes < 0 else r.lag_bytes),
                ("IN_SYNC", lambda r: "-" if r.in_sync is None else ("yes" if r.in_sync else "no")),
                ("CAUGHT_UP_MS_AGO", lambda r: "-" if r.caught_up_ms_ago < 0 else r.caught_up_ms_ago),
                ("NEEDS_RESYNC", lambda r: "yes" if r.needs_resync else "no"),
            ),
            output,
        )


@store_group.command("elect")
@click.argument("store_id")
@option("--replica", "replica_id", required=True, help="The replica to lead (its id, e.g. r1 or a pod name).")
@option("--force", is_flag=True, help="Do it: accept that records beyond the replica's log are lost.")
@_admin_command
def store_group_elect(store_id: str, replica_id: str, force: bool, endpoint: str, output: str) -> None:
    """Pick the leader of STORE_ID when the group cannot elect one (every replica needs a
    resync, or every in-sync replica is gone): REPLICA becomes its only in-sync member and
    leads at its next tick. Says first what may be lost; does it only with --force."""
    with Admin(endpoint, **client_options()) as admin:
        groups = admin.store_group_status(store_id=store_id)
        replicas = {r.replica_id: r for g in groups for r in g.replicas}
        chosen = replicas.get(replica_id)
        if chosen is None or chosen.role == "unreachable":
            raise NotFoundError(
                f"store group {store_id} has no live replica {replica_id!r} "
                f"(registered: {', '.join(sorted(replicas))})",
                code=errors_pb2.CODE_REPLICA_NOT_FOUND,
                metadata={"store_id": store_id, "replica_id": replica_id},
            )
        click.echo(_election_statement(groups[0], chosen), err=output == "json")
        if not force:
            click.echo("nothing done: run it again with --force to elect it", err=True)
            raise click.exceptions.Exit(1)
        elected = admin.elect_store_replica(store_id, replica_id, force=True)
    if output == "json":
        _emit_table([elected], (), output)
        return
    click.echo(
        f"store group {store_id}: {replica_id} is its only in-sync replica from log end {elected.log_end}; "
        f"it leads at its next tick (epoch {elected.epoch + 1}), the others follow it and copy its log"
    )


def _election_statement(group: StoreGroupStatus, chosen: ReplicaState) -> str:
    """What electing ``chosen`` by hand costs, in plain words, from the replicas' status."""
    lines = [
        f"Electing {chosen.replica_id} to lead store group {group.store_id} by hand. Its log (ending at "
        f"{chosen.log_end}) becomes the group's: whatever another replica holds beyond that offset is cut from it "
        "when it follows, and records the group acknowledged there are lost."
    ]
    for r in group.replicas:
        if r.replica_id == chosen.replica_id:
            continue
        if r.role == "unreachable":
            lines.append(f"  {r.replica_id}: did not answer; what it holds is unknown (it is cut when it returns)")
            continue
        beyond = r.log_end - chosen.log_end
        what = f"{beyond} bytes beyond {chosen.replica_id}'s log, lost" if beyond > 0 else "nothing beyond it"
        resync = ", needs a resync" if r.needs_resync else ""
        lines.append(f"  {r.replica_id}: log end {r.log_end} ({what}{resync})")
    if chosen.needs_resync:
        lines.append(f"  {chosen.replica_id} itself needs a resync: its log was cut where damage was found")
    lines.append(f"  in sync before: {','.join(group.in_sync) or '-'}")
    return "\n".join(lines)


# -- dead letters ----------------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """A consumer group's dead letters (%DLQ%<group>; docs/consumers.md "Retries and dead letters")."""


@dlq.command("list")
@click.argument("group")
@option("--store-id", help="Only this store (default: every store).")
@option("--max", "max_results", type=click.IntRange(min=1), default=1000, show_default=True)
@_admin_command
def dlq_list(group: str, store_id: str | None, max_results: int, endpoint: str, output: str) -> None:
    """The dead letters of GROUP: origin topic, unique id, reconsume times, when."""
    with Admin(endpoint, **client_options()) as admin:
        letters = admin.list_dead_letters(group, store_id=store_id, max_results=max_results)
        if not letters:
            require_group(admin, group)
    if output == "text" and not letters:
        click.echo(f"group {group} has no dead letters")
        return
    _emit_table(
        letters,
        [
            ("STORE", lambda d: d.store_id),
            ("ORIGIN_TOPIC", lambda d: d.origin_topic),
            ("MSG_ID", lambda d: d.msg_id),
            ("RECONSUME_TIMES", lambda d: d.reconsume_times),
            ("DEAD_LETTERED", lambda d: _time(d.store_timestamp_ms)),
            ("BODY", lambda d: _short(d.message.body)),
        ],
        output,
    )


@dlq.command("resend")
@click.argument("group")
@option("--id", "ids", multiple=True, help="A dead letter's unique id (repeatable).")
@option("--all", "resend_all", is_flag=True, help="Every dead letter of GROUP.")
@option("--store-id", help="Only this store's dead letters (default: every store).")
@_admin_command
def dlq_resend(
    group: str, ids: tuple[str, ...], resend_all: bool, store_id: str | None, endpoint: str, output: str
) -> None:
    """Send dead letters of GROUP again to their origin topic, as new messages
    (ORIGIN_MESSAGE_ID names the dead letter). They stay in the dead-letter topic. Each
    is resent once (again: the first message, nothing stored). Needs Sub on GROUP and on
    the origin topics when auth is on (--all also reads %DLQ%GROUP)."""
    if bool(ids) == resend_all:
        raise click.UsageError("give --id ID (one or more) or --all")
    with Admin(endpoint, **client_options()) as admin:
        resent = admin.resend_dead_letters(group, list(ids) if ids else None, store_id=store_id)
        if not resent:
            require_group(admin, group)
    if output == "text" and not resent:
        click.echo(f"group {group} has no dead letters")
        return
    _emit_table(
        resent,
        [
            ("DEAD_LETTER", lambda r: r.dead_letter_id),
            ("NEW_MSG_ID", lambda r: r.msg_id),
            ("TOPIC", lambda r: r.topic),
            ("STORE", lambda r: r.store_id),
            ("QUEUE", lambda r: r.queue_id),
            ("OFFSET", lambda r: r.queue_offset),
        ],
        output,
    )


# -- topics --------------------------------------------------------------------------------

_QUEUE_OPTIONS = (
    option("--read-queues", "read_queue_nums", type=click.IntRange(min=1), help="Read queue count."),
    option("--write-queues", "write_queue_nums", type=click.IntRange(min=1), help="Write queue count."),
    option("--perm", type=click.IntRange(0, 7), help="Permission bits: 4 read, 2 write, 1 inherit."),
    option("--attr", "attributes", multiple=True, metavar="NAME=VALUE", help="Topic attribute (repeatable)."),
    option("--store-id", help="Only this store (default: every store)."),
)


def _queue_options(fn: F) -> F:
    for decorate in reversed(_QUEUE_OPTIONS):
        fn = decorate(fn)
    return fn


@click.group()
def topic() -> None:
    """Create, change, inspect and delete topics."""


_EXIST_OK = option("--exist-ok", is_flag=True, help="Succeed if it exists already (left as it is).")


@topic.command("create")
@click.argument("name")
@_queue_options
@_EXIST_OK
@_admin_command
def topic_create(
    name: str,
    read_queue_nums: int | None,
    write_queue_nums: int | None,
    perm: int | None,
    attributes: tuple[str, ...],
    store_id: str | None,
    exist_ok: bool,
    endpoint: str,
    output: str,
) -> None:
    """Create topic NAME on every store (queue counts default to the store's)."""
    with Admin(endpoint, **client_options()) as admin:
        config = admin.create_topic(
            name,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=READ_WRITE if perm is None else Perm(perm),
            attributes=_pairs(attributes, what="--attr"),
            store_id=store_id,
            exist_ok=exist_ok,
        )
    _emit(config, output)


@topic.command("update")
@click.argument("name")
@_queue_options
@_admin_command
def topic_update(
    name: str,
    read_queue_nums: int | None,
    write_queue_nums: int | None,
    perm: int | None,
    attributes: tuple[str, ...],
    store_id: str | None,
    endpoint: str,
    output: str,
) -> None:
    """Change the given settings of topic NAME; --attr replaces all attributes."""
    with Admin(endpoint, **client_options()) as admin:
        config = admin.update_topic(
            name,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=None if perm is None else Perm(perm),
            attributes=_pairs(attributes, what="--attr") if attributes else None,
            store_id=store_id,
        )
    _emit(config, output)


@topic.command("list")
@option("--system", is_flag=True, help="Include system topics (RMQ_SYS_*).")
@_admin_command
def topic_list(system: bool, endpoint: str, output: str) -> None:
    """Topics of every store."""
    with Admin(endpoint, **client_options()) as admin:
        topics = admin.list_topics(include_system=system)
    _emit_table(
        topics,
        [
            ("TOPIC", lambda t: t.name),
            ("READ", lambda t: t.read_queue_nums),
            ("WRITE", lambda t: t.write_queue_nums),
            ("PERM", lambda t: t.perm),
            ("ATTRIBUTES", lambda t: t.attributes),
        ],
        output,
    )


@topic.command("get")
@click.argument("name")
@_admin_command
def topic_get(name: str, endpoint: str, output: str) -> None:
    """Topic NAME's configuration and the stores serving it."""
    with Admin(endpoint, **client_options()) as admin:
        config = admin.get_topic(name)
        route = admin.topic_route(name)
    if output == "json":
        click.echo(
            json.dumps({"config": _jsonable(config), "queues": _jsonable(route.queues)}, indent=2, sort_keys=True)
        )
        return
    _emit(config, output)
    click.echo()
    _emit_table(
        route.queues,
        [
            ("STORE", lambda q: q.store_id),
            ("ADDRESS", lambda q: q.store_address),
            ("READ", lambda q: q.read_queue_nums),
            ("WRITE", lambda q: q.write_queue_nums),
            ("PERM", lambda q: q.perm),
        ],
        output,
    )


@topic.command("delete")
@click.argument("name")
@option("--store-id", help="Only this store (default: every store that has it).")
@_admin_command
def topic_delete(name: str, store_id: str | None, endpoint: str, output: str) -> None:
    """Delete topic NAME."""
    with Admin(endpoint, **client_options()) as admin:
        admin.delete_topic(name, store_id=store_id)
    click.echo(json.dumps({"deleted": name}) if output == "json" else f"deleted topic {name}")


# -- subscription groups -----------------------------------------------------------------------


@click.group("group")
def subscription_group() -> None:
    """Create, inspect and delete subscription (consumer) groups."""


@subscription_group.command("create")
@click.argument("name")
@option("--retry-max-times", type=click.IntRange(min=0), default=16, show_default=True)
@option("--retry-queue-nums", type=click.IntRange(min=1), default=1, show_default=True)
@option("--consume-disable", is_flag=True, help="Create it with consumption disabled.")
@option("--broadcast", is_flag=True, help="Enable broadcast consumption.")
@option("--store-id", help="Only this store (default: every store).")
@_EXIST_OK
@_admin_command
def group_create(
    name: str,
    retry_max_times: int,
    retry_queue_nums: int,
    consume_disable: bool,
    broadcast: bool,
    store_id: str | None,
    exist_ok: bool,
    endpoint: str,
    output: str,
) -> None:
    """Create subscription group NAME on every store."""
    with Admin(endpoint, **client_options()) as admin:
        config = admin.create_subscription_group(
            name,
            consume_enable=not consume_disable,
            consume_broadcast_enable=broadcast,
            retry_max_times=retry_max_times,
            retry_queue_nums=retry_queue_nums,
            store_id=store_id,
            exist_ok=exist_ok,
        )
    _emit(config, output)


@subscription_group.command("list")
@_admin_command
def group_list(endpoint: str, output: str) -> None:
    """Subscription groups of every store."""
    with Admin(endpoint, **client_options()) as admin:
        groups = admin.list_subscription_groups()
    _emit_table(
        groups,
        [
            ("GROUP", lambda g: g.group_name),
            ("CONSUME", lambda g: g.consume_enable),
            ("PAUSED", lambda g: not g.consume_enable),
            ("BROADCAST", lambda g: g.consume_broadcast_enable),
            ("RETRY_MAX", lambda g: g.retry_max_times),
            ("RETRY_QUEUES", lambda g: g.retry_queue_nums),
        ],
        output,
    )


@subscription_group.command("get")
@click.argument("name")
@_admin_command
def group_get(name: str, endpoint: str, output: str) -> None:
    """Subscription group NAME."""
    with Admin(endpoint, **client_options()) as admin:
        config = admin.get_subscription_group(name)
    _emit(config, output)


@subscription_group.command("pause")
@click.argument("name")
@option("--store-id", help="Only this store (default: every store that has it).")
@_admin_command
def group_pause(name: str, store_id: str | None, endpoint: str, output: str) -> None:
    """Pause group NAME: its consumers get nothing (they wait, keeping their queues and
    offsets) until `txmq group resume`, from within the pull services' config cache time
    (config_cache_ttl_ms). A group no store has yet is created paused."""
    with Admin(endpoint, **client_options()) as admin:
        config = admin.pause_consumer_group(name, store_id=store_id)
    _echo_pause_change("paused", config.group_name, output)


@subscription_group.command("resume")
@click.argument("name")
@option("--store-id", help="Only this store (default: every store that has it).")
@_admin_command
def group_resume(name: str, store_id: str | None, endpoint: str, output: str) -> None:
    """Resume group NAME after `txmq group pause`: its consumers go on within the pull
    services' config cache time (config_cache_ttl_ms)."""
    with Admin(endpoint, **client_options()) as admin:
        config = admin.resume_consumer_group(name, store_id=store_id)
    _echo_pause_change("resumed", config.group_name, output)


def _echo_pause_change(change: str, group: str, output: str) -> None:
    """A pause or resume, and when consumers see it: the pull services validate pulls
    against subscription-group configs they cache for ``config_cache_ttl_ms``."""
    from txmq_pull.settings import PullSettings  # its settings, not a copy of the default

    ttl_ms = PullSettings.model_fields["config_cache_ttl_ms"].default
    if output == "json":
        click.echo(json.dumps({change: group, "takes_effect_within_ms": ttl_ms}))
        return
    held = "; long polls held already may still deliver" if change == "paused" else ""
    click.echo(
        f"{change} group {group}; takes effect within {ttl_ms / 1000:g} s "
        f"(the pull services' config cache, config_cache_ttl_ms){held}"
    )


@subscription_group.command("delete")
@click.argument("name")
@option("--store-id", help="Only this store (default: every store that has it).")
@_admin_command
def group_delete(name: str, store_id: str | None, endpoint: str, output: str) -> None:
    """Delete subscription group NAME."""
    with Admin(endpoint, **client_options()) as admin:
        admin.delete_subscription_group(name, store_id=store_id)
    click.echo(json.dumps({"deleted": name}) if output == "json" else f"deleted group {name}")


# -- sending and messages ------------------------------------------------------------------


def _producer_options(what: str) -> Callable[[F], F]:
    """The options of a command that runs a producer: its group, and the time ``what``
    (the send, the recall) may take, retries included."""

    def apply(fn: F) -> F:
        fn = option(
            "--timeout-s",
            type=click.FloatRange(min=0, min_open=True),
            default=3.0,
            show_default=True,
            help=f"Seconds for the {what}, retries included.",
        )(fn)
        return option("--group", default="TXMQ_CLI_PRODUCER", show_default=True, help="Producer group.")(fn)

    return apply


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@click.argument("body")
@option("--tag", help="The message's tag.")
@option("--key", "keys", multiple=True, help="A business key (repeatable).")
@option("--property", "properties", multiple=True, metavar="NAME=VALUE", help="A user property (repeatable).")
@option("--queue-id", type=click.IntRange(min=0), help="Send to this queue.")
@option(
    "--delay-level",
    type=click.IntRange(min=1),
    help="Deliver after the store's delay level N (1-based in its message_delay_levels: 1s 5s 10s 30s 1m ...).",
)
@option(
    "--delivery-timestamp-ms",
    type=click.IntRange(min=0),
    help="Deliver at this time, ms since the epoch (the store's clock); not with --delay-level.",
)
@_producer_options("whole send")
@_admin_command
def send(
    topic_name: str,
    body: str,
    tag: str | None,
    keys: tuple[str, ...],
    properties: tuple[str, ...],
    queue_id: int | None,
    delay_level: int | None,
    delivery_timestamp_ms: int | None,
    group: str,
    timeout_s: float,
    endpoint: str,
    output: str,
) -> None:
    """Send one message with BODY (UTF-8; '-' reads standard input) to TOPIC, at once or
    delayed (--delay-level or --delivery-timestamp-ms: the store's timer delivers it)."""
    if delay_level is not None and delivery_timestamp_ms is not None:
        raise click.UsageError("give at most one of --delay-level and --delivery-timestamp-ms")
    data = sys.stdin.buffer.read() if body == "-" else body.encode("utf-8")
    msg = Message(
        topic_name,
        data,
        tags=tag,
        keys=keys,
        properties=_pairs(properties, what="--property"),
        queue_id=queue_id,
        delay_level=delay_level,
        delivery_timestamp_ms=delivery_timestamp_ms,
    )
    with Producer(group, endpoint, send_timeout=timeout_s, **client_options()) as producer:
        result = producer.send(msg)
    _emit(result, output)


@click.group()
def message() -> None:
    """Look stored messages up."""


@message.command("view")
@click.argument("offset_msg_id")
@_admin_command
def message_view(offset_msg_id: str, endpoint: str, output: str) -> None:
    """The message with OFFSET_MSG_ID (as a send prints it)."""
    with Admin(endpoint, **client_options()) as admin:
        found = admin.view_message(offset_msg_id)
    _emit(found, output)


@message.command("recall")
@click.argument("handle")
@_producer_options("recall")
@_admin_command
def message_recall(handle: str, group: str, timeout_s: float, endpoint: str, output: str) -> None:
    """Cancel a delayed message before it is delivered, by the recall_handle its send
    printed. Too late (delivered): exit 1, MESSAGE_ALREADY_DELIVERED."""
    with Producer(group, endpoint, send_timeout=timeout_s, **client_options()) as producer:
        status = producer.recall(handle)
    if output == "json":
        click.echo(json.dumps({"status": status.name}))
    else:
        click.echo(f"status  {status.name}")


@message.command("query")
@option("--topic", "topic_name", help="The topic (required with --key).")
@option("--key", help="A business key.")
@option("--unique-id", help="A client unique id (msgId).")
@option("--max", "max_results", type=click.IntRange(min=1), default=32, show_default=True)
@_admin_command
def message_query(
    topic_name: str | None, key: str | None, unique_id: str | None, max_results: int, endpoint: str, output: str
) -> None:
    """Messages by key (--topic and --key) or by unique id (--unique-id)."""
    if (key is None) == (unique_id is None):
        raise click.UsageError("give exactly one of --key and --unique-id")
    if key is not None and topic_name is None:
        raise click.UsageError("--key needs --topic")
    with Admin(endpoint, **client_options()) as admin:
        if key is not None and topic_name is not None:
            found = admin.query_messages_by_key(topic_name, key, max_results=max_results)
        else:
            found = [admin.query_message_by_unique_id(unique_id or "", topic=topic_name)]
    _emit_table(
        found,
        [
            ("OFFSET_MSG_ID", lambda m: m.offset_msg_id),
            ("MSG_ID", lambda m: m.msg_id),
            ("TOPIC", lambda m: m.topic),
            ("STORE", lambda m: m.store_id),
            ("QUEUE", lambda m: m.queue_id),
            ("OFFSET", lambda m: m.queue_offset),
            ("TAGS", lambda m: m.tags),
            ("KEYS", lambda m: m.keys),
            ("STORED", lambda m: _time(m.store_timestamp_ms)),
            ("BODY", lambda m: _short(m.body)),
        ],
        output,
    )


# -- offsets ---------------------------------------------------------------------------------


def require_group(admin: Admin, group: str) -> None:
    """Raise ``CODE_SUBSCRIPTION_GROUP_NOT_FOUND`` when no store has ``group``: an empty
    answer about a group (no offsets, no dead letters) is only an answer if it exists."""
    try:
        admin.get_subscription_group(group)
    except NotFoundError as err:
        if err.code != errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND:
            raise
        raise NotFoundError(
            f"subscription group {group!r} does not exist (`txmq group list` shows the groups)",
            code=errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND,
            metadata={"group": group},
        ) from None


def no_offsets_reason(admin: Admin, group: str, topic: str | None) -> str:
    """Why ``group`` has no committed offsets (on ``topic``): it does not exist (raises
    ``CODE_SUBSCRIPTION_GROUP_NOT_FOUND``), or it has committed none yet (the returned line)."""
    require_group(admin, group)
    where = f" on topic {topic}" if topic else ""
    return f"group {group} exists but has committed no offsets{where} yet"


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@option("--group", help="Show this consumer group's committed offsets and lag instead.")
@_admin_command
def offsets(topic_name: str, group: str | None, endpoint: str, output: str) -> None:
    """Min/max offset of every queue of TOPIC (or a group's progress on it)."""
    empty_reason = ""
    with Admin(endpoint, **client_options()) as admin:
        if group is None:
            rows: Sequence[Any] = admin.queue_offsets(topic_name)
            columns: Columns = [
                ("STORE", lambda o: o.queue.store_id),
                ("QUEUE", lambda o: o.queue.queue_id),
                ("MIN", lambda o: o.min_offset),
                ("MAX", lambda o: o.max_offset),
                ("LAST_STORED", lambda o: _time(o.last_store_timestamp_ms)),
            ]
        else:
            rows = admin.consume_offsets(group, topic_name)
            if not rows:
                empty_reason = no_offsets_reason(admin, group, topic_name)
            columns = [
                ("STORE", lambda o: o.queue.store_id),
                ("QUEUE", lambda o: o.queue.queue_id),
                ("COMMITTED", lambda o: o.offset),
                ("MIN", lambda o: o.min_offset),
                ("MAX", lambda o: o.max_offset),
                ("LAG", lambda o: o.lag),
                ("UPDATED", lambda o: _time(o.updated_at_ms)),
            ]
    if empty_reason and output == "text":
        click.echo(empty_reason)
        return
    _emit_table(rows, columns, output)
