"""Send normal messages with the official client's Producer.

Message i (0-based) has body ``<body-prefix>-<i>``, tag ``--tag``, keys
``<key-prefix>-<i>`` and ``<key-prefix>-all``, the ``--property`` user properties plus
``index=<i>``; with ``--delay-ms`` each is a DELAY message due that long after its send
(rounded up to a second: the client's Producer takes seconds).
Prints ``started``, then per message ``sent`` (message_id, offset,
the queue the client picked, body) or ``error``, then ``done``.
"""

from __future__ import annotations

import time

from _common import (
    config,
    emit,
    new_message,
    parse_properties,
    parser,
    reported,
    start,
)
from rocketmq import Producer


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--tag", default="")
    p.add_argument("--key-prefix", default="key")
    p.add_argument("--body-prefix", default="body")
    p.add_argument("--property", action="append", default=[], help="NAME=VALUE, repeatable")
    p.add_argument("--message-groups", type=int, default=0, help="N > 0: message i is FIFO, group g<i mod N>")
    p.add_argument("--delay-ms", type=int, default=0, help="N > 0: delivery_timestamp = send time + N ms")
    args = p.parse_args()
    properties = parse_properties(args.property)

    producer = Producer(config(args), topics=[args.topic], tls_enable=args.tls)
    if not start(producer):
        return
    try:
        for i in range(args.count):
            body = f"{args.body_prefix}-{i}"
            keys = [f"{args.key_prefix}-{i}", f"{args.key_prefix}-all"]
            msg = new_message(
                args.topic, body, tag=args.tag or None, keys=keys, properties={**properties, "index": str(i)}
            )
            if args.message_groups:
                msg.message_group = f"g{i % args.message_groups}"
            if args.delay_ms:
                # The client's Producer writes delivery_timestamp into Timestamp.seconds
                # (its consumer side reads milliseconds): give it seconds, rounded up.
                msg.delivery_timestamp = -(-(int(time.time() * 1000) + args.delay_ms) // 1000)
            with reported("send", index=i, body=body):
                receipt = producer.send(msg)
                emit(
                    "sent",
                    index=i,
                    body=body,
                    keys=keys,
                    message_id=receipt.message_id,
                    transaction_id=receipt.transaction_id,
                    offset=receipt.offset,
                    queue=str(receipt.message_queue),
                    delivery_timestamp_ms=msg.delivery_timestamp * 1000 if msg.delivery_timestamp else None,
                )
    finally:
        producer.shutdown()
    emit("done")


if __name__ == "__main__":
    main()
