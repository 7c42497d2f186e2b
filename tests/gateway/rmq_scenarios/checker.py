"""A producer that only answers transaction checks: ``Producer(config, topics=[topic],
checker=...)`` started, then idle until stdin closes (or a line arrives), or until
``--max-seconds``.

Prints ``started``, a ``check`` line (the checked message) for every check the gateway
pushes, answered with ``--answer``, then ``stopping`` and ``done``.
"""

from __future__ import annotations

import sys
import threading

from _common import config, emit, message_fields, parser, reported
from rocketmq import Producer, TransactionChecker, TransactionResolution

ANSWERS = {
    "commit": TransactionResolution.COMMIT,
    "rollback": TransactionResolution.ROLLBACK,
    "unknown": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
}


class PrintingChecker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def check(self, message):
        emit("check", answer=self.answer, **message_fields(message))
        return ANSWERS[self.answer]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    p.add_argument("--answer", choices=sorted(ANSWERS), default="commit")
    p.add_argument("--max-seconds", type=float, default=60.0)
    args = p.parse_args()

    producer = Producer(config(args), topics=[args.topic], checker=PrintingChecker(args.answer))
    started = False
    with reported("startup"):
        producer.startup()
        started = True
    if not started:
        return
    emit("started")
    stop = threading.Event()

    def wait_stdin() -> None:
        sys.stdin.readline()  # a line or EOF
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    stopped_by = "stdin" if stop.wait(args.max_seconds) else "max_seconds"
    emit("stopping", by=stopped_by)
    producer.shutdown()
    emit("done")


if __name__ == "__main__":
    main()
