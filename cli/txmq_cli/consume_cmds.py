"""Consuming from the command line: ``txmq fetch`` (one pull, as PullConsumer.pull),
``txmq tail`` (long-poll every queue of a topic and print messages as they arrive)
and ``txmq lag`` (a group's committed offsets against each queue's max).

Same conventions as the admin commands: ``--endpoint`` (env TXMQ_ENDPOINT), ``-o
text|json``, ``error: [CODE_X] message`` and exit code 1 on failure. ``tail`` retries
what a retry can fix (a service restarting: one line when it starts failing, one when
it works again) and ends, exit code 1, on anything else (txmq._failures).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
from collections.abc import Sequence
from typing import Any

import click

from txmq import Admin, ExpressionType, MessageExt, MessageQueue, PullConsumer, PullStatus, TxmqError
from txmq._backoff import Backoff
from txmq._failures import retriable
from txmq_cli.admin_cmds import _admin_command, _emit_table, _jsonable, _short, _text, _time, no_offsets_reason
from txmq_cli.credentials import client_options
from txmq_cli.options import option

DEFAULT_PULL_GROUP = "TXMQ_CLI_CONSUMER"
DEFAULT_TAIL_GROUP = "TXMQ_CLI_TAIL"
# How long `tail` holds each pull; Ctrl-C closes the channels, which ends them at once.
_TAIL_SUSPEND_S = 15.0
_TAIL_ERROR_BACKOFF_S = 0.5
_TAIL_ERROR_BACKOFF_MAX_S = 10.0


def register(group: click.Group) -> None:
    for command in (pull, tail, lag):
        group.add_command(command)


def _filter(tag_expr: str | None, sql: str | None) -> tuple[str, ExpressionType]:
    if tag_expr is not None and sql is not None:
        raise click.UsageError("give at most one of the tag expression and --sql")
    if sql is not None:
        return sql, ExpressionType.SQL92
    return tag_expr or "*", ExpressionType.TAG


def _find_queue(consumer: PullConsumer, topic: str, queue_id: int, store_id: str | None) -> MessageQueue:
    queues = [q for q in consumer.fetch_message_queues(topic) if q.queue_id == queue_id]
    if store_id is not None:
        queues = [q for q in queues if q.store_id == store_id]
    if not queues:
        where = f" on store {store_id}" if store_id else ""
        raise click.BadParameter(f"topic {topic} has no readable queue {queue_id}{where}", param_hint="--queue-id")
    if len(queues) > 1:
        stores = ", ".join(q.store_id for q in queues)
        raise click.UsageError(f"several stores serve queue {queue_id} of {topic} ({stores}): give --store-id")
    return queues[0]


_MESSAGE_COLUMNS: Sequence[tuple[str, Any]] = [
    ("OFFSET", lambda m: m.queue_offset),
    ("MSG_ID", lambda m: m.msg_id),
    ("TAGS", lambda m: m.tags),
    ("KEYS", lambda m: m.keys),
    ("PROPERTIES", lambda m: {k: v for k, v in m.properties.items() if not k.isupper()}),
    ("STORED", lambda m: _time(m.store_timestamp_ms)),
    ("BODY", lambda m: _short(m.body)),
]


# -- fetch -----------------------------------------------------------------------------------


@click.command("fetch")
@click.argument("topic_name", metavar="TOPIC")
@option("--queue-id", type=click.IntRange(min=0), required=True, aliases=("--queue",), help="The queue id.")
@option("--offset", type=click.IntRange(min=0), default=0, show_default=True, help="Where to start.")
@option("--tag-expr", help="TAG filter: '*' or 'TagA || TagB' (default '*').")
@option("--sql", help="SQL92 filter over message properties, e.g. \"region = 'eu'\".")
@option("--max", "max_nums", type=click.IntRange(min=1), default=32, show_default=True)
@option("--store-id", help="The queue's store (needed when several stores serve the topic).")
@option("--group", default=DEFAULT_PULL_GROUP, show_default=True, help="Consumer group of the pull.")
@option(
    "--wait-s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds the service may hold the pull until a message arrives (long polling); 0: answer at once.",
)
@_admin_command
def pull(
    topic_name: str,
    queue_id: int,
    offset: int,
    tag_expr: str | None,
    sql: str | None,
    max_nums: int,
    store_id: str | None,
    group: str,
    wait_s: float,
    endpoint: str,
    output: str,
) -> None:
    """Pull once from queue --queue-id of TOPIC at --offset; prints the status, the next
    offset and the messages. Commits nothing."""
    expression, expression_type = _filter(tag_expr, sql)
    with PullConsumer(group, endpoint, **client_options()) as consumer:
        mq = _find_queue(consumer, topic_name, queue_id, store_id)
        result = consumer.pull(
            mq,
            expression,
            offset,
            max_nums,
            expression_type=expression_type,
            suspend=wait_s > 0,
            timeout=wait_s if wait_s > 0 else None,
        )
    if output == "json":
        click.echo(json.dumps({"queue": _jsonable(mq), **_jsonable(result)}, indent=2, sort_keys=True))  # type: ignore[dict-item]
        return
    click.echo(
        f"{mq}  status {result.status.name}  next_begin_offset {result.next_begin_offset}  "
        f"min {result.min_offset}  max {result.max_offset}"
    )
    if result.messages:
        _emit_table(result.messages, _MESSAGE_COLUMNS, output)


# -- tail ------------------------------------------------------------------------------------


@click.command()
@click.argument("topic_name", metavar="TOPIC")
@option("--tag-expr", aliases=("--expr",), help="TAG filter: '*' or 'TagA || TagB' (default '*').")
@option("--sql", help="SQL92 filter over message properties.")
@option("--group", default=DEFAULT_TAIL_GROUP, show_default=True, help="Consumer group of the pulls.")
@option("--from-beginning", is_flag=True, help="Start at each queue's first message, not its end.")
@option("--count", type=click.IntRange(min=1), help="Stop after this many messages.")
@_admin_command
def tail(
    topic_name: str,
    tag_expr: str | None,
    sql: str | None,
    group: str,
    from_beginning: bool,
    count: int | None,
    endpoint: str,
    output: str,
) -> None:
    """Print TOPIC's messages as they arrive, from every queue (long polling), until
    Ctrl-C or --count. Commits nothing."""
    expression, expression_type = _filter(tag_expr, sql)
    consumer = PullConsumer(group, endpoint, suspend_timeout=_TAIL_SUSPEND_S, **client_options())
    consumer.start()
    stop = threading.Event()
    arrived: queue.Queue[MessageExt] = queue.Queue()
    failed: list[TxmqError] = []  # the first error a retry cannot fix ends the tail
    workers: list[threading.Thread] = []
    printed = 0
    try:
        queues = consumer.fetch_message_queues(topic_name)
        starts = {mq: consumer.min_offset(mq) if from_beginning else consumer.max_offset(mq) for mq in queues}
        # Validate the filter once, in the foreground, so a bad expression is an error.
        first = queues[0]
        consumer.pull(first, expression, starts[first], 1, expression_type=expression_type, suspend=False)
        for mq in queues:
            worker = threading.Thread(
                target=_tail_queue,
                args=(consumer, mq, starts[mq], expression, expression_type, arrived, stop, failed),
                name=f"txmq-tail-{mq}",
                daemon=True,
            )
            worker.start()
            workers.append(worker)
        if output == "text":
            click.echo(f"tailing {topic_name} ({len(queues)} queues); Ctrl-C stops", err=True)
        while count is None or printed < count:
            if failed:
                raise failed[0]
            try:
                msg = arrived.get(timeout=0.5)
            except queue.Empty:
                continue
            _print_message(msg, output)
            printed += 1
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        consumer.shutdown()  # closing the channels ends the held pulls
        for worker in workers:
            worker.join(timeout=5)


def _tail_queue(
    consumer: PullConsumer,
    mq: MessageQueue,
    offset: int,
    expression: str,
    expression_type: ExpressionType,
    arrived: queue.Queue[MessageExt],
    stop: threading.Event,
    failed: list[TxmqError],
) -> None:
    backoff = Backoff(first=_TAIL_ERROR_BACKOFF_S, maximum=_TAIL_ERROR_BACKOFF_MAX_S)
    while not stop.is_set():
        try:
            result = consumer.pull(mq, expression, offset, 32, expression_type=expression_type, suspend=True)
        except RuntimeError:  # shut down
            return
        except TxmqError as err:
            if stop.is_set():
                return
            if not retriable(err):
                failed.append(err)
                stop.set()
                return
            if not backoff.failures:
                click.echo(f"warning: pull of {mq} failed, retrying: {err}", err=True)
            stop.wait(backoff.next_delay())
            continue
        if backoff.failures:
            click.echo(f"pull of {mq} works again", err=True)
            backoff.reset()
        if result.status is PullStatus.OFFSET_ILLEGAL:
            click.echo(f"warning: offset {offset} of {mq} moved; continuing at {result.next_begin_offset}", err=True)
        for msg in result.messages:
            arrived.put(msg)
        offset = result.next_begin_offset


def _print_message(msg: MessageExt, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(_jsonable(msg), sort_keys=True))
        return
    mq = MessageQueue(msg.topic, msg.store_id, msg.queue_id or 0)
    parts = [f"{mq}@{msg.queue_offset}", f"id={msg.msg_id}"]
    if msg.tags:
        parts.append(f"tags={msg.tags}")
    if msg.keys:
        parts.append(f"keys={_text(msg.keys)}")
    click.echo("  ".join(parts) + "  " + _text(msg.body))
    sys.stdout.flush()


# -- lag -------------------------------------------------------------------------------------


@click.command()
@click.argument("group_name", metavar="GROUP")
@option("--topic", "topic_name", help="Only this topic.")
@_admin_command
def lag(group_name: str, topic_name: str | None, endpoint: str, output: str) -> None:
    """GROUP's committed offset against the max offset of every queue it committed on
    (all its topics, or --topic), and the total lag. Queues the group never committed
    on are not listed."""
    empty_reason = ""
    with Admin(endpoint, **client_options()) as admin:
        rows = admin.consume_offsets(group_name, topic_name)
        if not rows:
            empty_reason = no_offsets_reason(admin, group_name, topic_name)
    if empty_reason and output == "text":
        click.echo(empty_reason)
        return
    _emit_table(
        rows,
        [
            ("TOPIC", lambda o: o.queue.topic),
            ("STORE", lambda o: o.queue.store_id),
            ("QUEUE", lambda o: o.queue.queue_id),
            ("COMMITTED", lambda o: o.offset),
            ("MAX", lambda o: o.max_offset),
            ("LAG", lambda o: o.lag),
            ("UPDATED", lambda o: _time(o.updated_at_ms)),
        ],
        output,
    )
    if output == "text":
        click.echo(f"total lag {sum(o.lag for o in rows)}")
