"""One member of a consumer group, for tests with several members on several gateways:
``SimpleConsumer(config, group, {topic: FilterExpression(expr)}, await_duration=...)``,
``receive(max, invisible_duration)`` in a loop and ``ack`` of every message (or of none,
with ``--no-ack``), until stdin closes (or a line arrives), or ``--deadline-seconds``.

Failed receives and acks are ``error`` lines and the loop goes on (a gateway may be
gone for a while). Prints ``started``; per round ``receiving`` then ``received``
(started_ms, ended_ms, messages); ``acked`` / ``not_acked`` per message; then
``stopped`` (why, acked ids) and ``done``.
"""

from __future__ import annotations

import time

from _common import config, emit, message_fields, parser, reported, start, stdin_closed
from rocketmq import FilterExpression, SimpleConsumer


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--expression", default="*", help="tag expression")
    p.add_argument("--await-seconds", type=int, default=2, help="long polling timeout of each receive")
    p.add_argument("--invisible-seconds", type=int, default=20)
    p.add_argument("--max-messages", type=int, default=1)
    p.add_argument("--no-ack", action="store_true", help="receive only; every message stays un-acked")
    p.add_argument("--deadline-seconds", type=float, default=50.0)
    args = p.parse_args()

    consumer = SimpleConsumer(
        config(args),
        args.group,
        {args.topic: FilterExpression(args.expression)},
        await_duration=args.await_seconds,
    )
    if not start(consumer):
        return
    stop = stdin_closed()
    deadline = time.monotonic() + args.deadline_seconds
    acked: set[str] = set()
    why = "deadline"
    try:
        while time.monotonic() < deadline:
            if stop.is_set():
                why = "stdin"
                break
            messages = None
            started_ms = int(time.time() * 1000)
            emit("receiving")
            with reported("receive", started_ms=started_ms):
                messages = consumer.receive(args.max_messages, args.invisible_seconds)
            if messages is None:
                time.sleep(0.2)  # the error line is out; do not spin on a failing gateway
                continue
            emit(
                "received",
                started_ms=started_ms,
                ended_ms=int(time.time() * 1000),
                messages=[message_fields(m) for m in messages],
            )
            for m in messages:
                attempt = m.delivery_attempt or 0
                if args.no_ack:
                    emit("not_acked", message_id=m.message_id, delivery_attempt=attempt)
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
