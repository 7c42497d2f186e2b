"""One SimpleConsumer member for the POP fault tests: ``receive(max, invisible)`` in a loop;
each batch is held ``--hold-seconds`` (a fault can happen meanwhile), then, with
``--change-to-seconds``, each message's invisible duration is changed (a change racing
the redelivery when the hold ends near the deadline), then each message is acked. Runs
until stdin closes or ``--deadline-seconds``.

Prints ``received`` (started_ms, ended_ms, messages) per batch, ``changing`` before a
change, ``changed`` / ``acked`` (t_ms) per message that succeeded, ``error`` lines (op, message_id, code) for
the ones that did not, then ``stopped`` and ``done``.
"""

from __future__ import annotations

import time

from _common import config, emit, message_fields, parser, reported, start, stdin_closed
from rocketmq import FilterExpression, SimpleConsumer


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--await-seconds", type=int, default=2, help="long polling timeout of each receive")
    p.add_argument("--invisible-seconds", type=int, default=20)
    p.add_argument("--max-messages", type=int, default=16)
    p.add_argument("--hold-seconds", type=float, default=0.0, help="between a batch's receive and its acks")
    p.add_argument("--change-to-seconds", type=int, default=0, help="change each message's invisible duration first")
    p.add_argument("--deadline-seconds", type=float, default=60.0)
    args = p.parse_args()

    consumer = SimpleConsumer(
        config(args), args.group, {args.topic: FilterExpression("*")}, await_duration=args.await_seconds
    )
    if not start(consumer):
        return
    stop = stdin_closed()
    deadline = time.monotonic() + args.deadline_seconds
    why = "deadline"
    try:
        while time.monotonic() < deadline:
            if stop.is_set():
                why = "stdin"
                break
            messages = None
            started_ms = int(time.time() * 1000)
            with reported("receive", started_ms=started_ms):
                messages = consumer.receive(args.max_messages, args.invisible_seconds)
            if messages is None:
                time.sleep(0.2)  # the error line is out; do not spin on a failing gateway
                continue
            if not messages:
                continue
            emit("received", started_ms=started_ms, ended_ms=int(time.time() * 1000),
                 messages=[message_fields(m) for m in messages])  # fmt: skip
            if args.hold_seconds:
                time.sleep(args.hold_seconds)
            for m in messages:
                attempt = m.delivery_attempt or 0
                if args.change_to_seconds:
                    failed = True
                    emit("changing", message_id=m.message_id, delivery_attempt=attempt)
                    with reported("change", message_id=m.message_id, delivery_attempt=attempt):
                        consumer.change_invisible_duration(m, args.change_to_seconds)
                        failed = False
                        emit("changed", message_id=m.message_id, delivery_attempt=attempt)
                    if failed:
                        continue  # its handle is no longer valid: it comes again
                with reported("ack", message_id=m.message_id, delivery_attempt=attempt):
                    consumer.ack(m)
                    emit("acked", message_id=m.message_id, delivery_attempt=attempt)
    finally:
        emit("stopped", why=why)
        consumer.shutdown()
    emit("done")


if __name__ == "__main__":
    main()
