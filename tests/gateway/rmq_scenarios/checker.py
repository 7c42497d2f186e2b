"""A producer that only answers transaction checks: ``Producer(config, topics=[topic],
checker=...)`` started, then idle until stdin closes (or a line arrives), or until
``--max-seconds``.

Prints ``started``, a ``check`` line (the checked message) for every check the gateway
pushes, answered with ``--answer``, then ``stopping`` and ``done``.
"""

from __future__ import annotations

from _common import config, emit, message_fields, parser, start, stdin_closed
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
    if not start(producer):
        return
    stop = stdin_closed()
    stopped_by = "stdin" if stop.wait(args.max_seconds) else "max_seconds"
    emit("stopping", by=stopped_by)
    producer.shutdown()
    emit("done")


if __name__ == "__main__":
    main()
