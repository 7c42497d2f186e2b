"""Transactions with the official client: ``Producer(config, topics=[topic],
checker=...)``, ``begin_transaction()``, ``send(msg, transaction)``, then ``commit()``,
``rollback()`` or nothing.

``--actions commit,rollback,none``: one transaction per action, in order; message i has
body ``<body-prefix>-<i>-<action>``, keys ``<key-prefix>-<i>`` and ``<key-prefix>-all``,
tag ``--tag`` and user property ``action=<action>``. Prints ``started``, per transaction
``sent`` (message_id, transaction_id) and ``committed`` / ``rolled_back`` / ``left_open``
(or ``error``), and ``check`` for every transaction check the gateway pushes (answered
with ``--check-answer``). ``--exit crash`` ends the process with os._exit right after
the last action (no shutdown, no client termination notice: a producer that died),
``--exit shutdown`` shuts the producer down first; the last line is ``exiting``.
"""

from __future__ import annotations

import os

from _common import (
    config,
    emit,
    message_fields,
    new_message,
    parser,
    reported,
    start,
)
from rocketmq import Producer, TransactionChecker, TransactionResolution

ANSWERS = {"commit": TransactionResolution.COMMIT, "rollback": TransactionResolution.ROLLBACK}


class PrintingChecker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def check(self, message):
        emit("check", answer=self.answer, **message_fields(message))
        return ANSWERS.get(self.answer, TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    p.add_argument("--actions", default="commit,rollback")
    p.add_argument("--tag", default="")
    p.add_argument("--key-prefix", default="txkey")
    p.add_argument("--body-prefix", default="tx")
    p.add_argument("--check-answer", choices=["commit", "rollback", "unknown"], default="unknown")
    p.add_argument("--exit", choices=["shutdown", "crash"], default="shutdown")
    args = p.parse_args()

    producer = Producer(config(args), topics=[args.topic], checker=PrintingChecker(args.check_answer))
    if not start(producer):
        return
    for i, action in enumerate(a.strip() for a in args.actions.split(",") if a.strip()):
        body = f"{args.body_prefix}-{i}-{action}"
        keys = [f"{args.key_prefix}-{i}", f"{args.key_prefix}-all"]
        msg = new_message(args.topic, body, tag=args.tag or None, keys=keys, properties={"action": action})
        with reported("send", index=i, action=action, body=body):
            transaction = producer.begin_transaction()
            receipt = producer.send(msg, transaction)
            emit(
                "sent",
                index=i,
                action=action,
                body=body,
                keys=keys,
                message_id=receipt.message_id,
                transaction_id=receipt.transaction_id,
                offset=receipt.offset,
            )
            if action == "commit":
                with reported("commit", index=i, message_id=receipt.message_id):
                    transaction.commit()
                    emit("committed", index=i, message_id=receipt.message_id)
            elif action == "rollback":
                with reported("rollback", index=i, message_id=receipt.message_id):
                    transaction.rollback()
                    emit("rolled_back", index=i, message_id=receipt.message_id)
            else:
                emit("left_open", index=i, message_id=receipt.message_id)
    emit("exiting", how=args.exit)
    if args.exit == "crash":
        os._exit(0)
    producer.shutdown()


if __name__ == "__main__":
    main()
