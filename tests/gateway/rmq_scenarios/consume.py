"""Receive with the official client's SimpleConsumer:
``SimpleConsumer(config, group, {topic: FilterExpression(expr)}, await_duration=...)``,
``receive(max, invisible_duration)``, ``ack(message)``.

Loop: print ``receiving`` (wall clock ``t_ms`` just before the call), ``receive``, print
``received`` (started_ms, ended_ms, the messages), then ack every message whose delivery
attempt is at least ``--ack-from-attempt`` (``acked`` or ``error``; the others are left
to become visible again after the invisible duration). Stops once ``--until-acked``
distinct messages are acked (then, with ``--drain-seconds``, keeps receiving that long
with ``--drain-await`` long polls and acks nothing, to show that nothing else comes), or
at ``--deadline-seconds``, or after ``--max-errors`` failed receives in a row. Last lines:
``stopped`` (why) and ``done``.
"""

from __future__ import annotations

import time

from _common import config, emit, message_fields, parser, reported, start
from rocketmq import FilterExpression, SimpleConsumer


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--expression", default="*", help="tag expression")
    p.add_argument("--await-seconds", type=int, default=10, help="long polling timeout of each receive")
    p.add_argument("--invisible-seconds", type=int, default=10)
    p.add_argument("--max-messages", type=int, default=16)
    p.add_argument("--until-acked", type=int, default=1)
    p.add_argument("--ack-from-attempt", type=int, default=1)
    p.add_argument("--drain-seconds", type=float, default=0.0)
    p.add_argument("--drain-await", type=int, default=1)
    p.add_argument("--deadline-seconds", type=float, default=30.0)
    p.add_argument("--max-errors", type=int, default=3, help="stop after this many failed receives in a row")
    args = p.parse_args()

    consumer = SimpleConsumer(
        config(args),
        args.group,
        {args.topic: FilterExpression(args.expression)},
        await_duration=args.await_seconds,
    )
    if not start(consumer):
        return
    deadline = time.monotonic() + args.deadline_seconds
    acked: set[str] = set()
    draining_until: float | None = None
    why = "deadline"
    failures = 0
    try:
        while time.monotonic() < deadline:
            if draining_until is None and len(acked) >= args.until_acked:
                if args.drain_seconds <= 0:
                    why = "acked"
                    break
                draining_until = time.monotonic() + args.drain_seconds
                consumer.await_duration = args.drain_await
                emit("draining", seconds=args.drain_seconds)
            if draining_until is not None and time.monotonic() >= draining_until:
                why = "drained"
                break
            messages = None
            started_ms = int(time.time() * 1000)
            emit("receiving", drain=draining_until is not None)
            with reported("receive", started_ms=started_ms):
                messages = consumer.receive(args.max_messages, args.invisible_seconds)
            if messages is None:
                failures += 1
                if failures >= args.max_errors:
                    why = "errors"
                    break
                time.sleep(0.2)  # the error line is out; do not spin on a failing gateway
                continue
            failures = 0
            emit(
                "received",
                started_ms=started_ms,
                ended_ms=int(time.time() * 1000),
                drain=draining_until is not None,
                messages=[message_fields(m) for m in messages],
            )
            for m in messages:
                attempt = m.delivery_attempt or 0
                if draining_until is not None or attempt < args.ack_from_attempt:
                    emit(
                        "not_acked", message_id=m.message_id, delivery_attempt=attempt, drain=draining_until is not None
                    )
                    continue
                with reported("ack", message_id=m.message_id, delivery_attempt=attempt):
                    consumer.ack(m)
                    acked.add(m.message_id)
                    emit("acked", message_id=m.message_id, delivery_attempt=attempt)
    finally:
        emit("stopped", why=why, acked=sorted(acked))
        consumer.shutdown()
    emit("done")


if __name__ == "__main__":
    main()
