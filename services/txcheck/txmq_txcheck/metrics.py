"""Prometheus metrics of the transaction service (served by the runtime on
``--metrics_port``). Every count comes from the transaction timeline (timeline.py), the
one place each event of a transaction is recorded:

- ``txmq_txcheck_checks_sent_total``: checks sent to a live producer of the group;
- ``txmq_txcheck_checks_waiting_total``: checks due that found no live producer;
- ``txmq_txcheck_checks_answered_total``: END_TRANSACTION calls answering a check;
- ``rocketmq_commit_messages_total`` / ``rocketmq_rollback_messages_total``: decisions
  made (by the producer or by a check answer; a repeated decision counts once);
- ``txmq_txcheck_unknown_total``: a producer's UNKNOWN outside a check;
- ``txmq_txcheck_discarded_total``: transactions discarded to TRANS_CHECK_MAX_TIME_TOPIC;
- ``txmq_txcheck_resumed_total``: discarded transactions resumed by an admin.

Half messages pending are the store's ``rocketmq_half_messages``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter

CHECKS_SENT = Counter("txmq_txcheck_checks_sent", "Transaction checks sent to a live producer of the group.")
CHECKS_WAITING = Counter(
    "txmq_txcheck_checks_waiting", "Transaction checks that were due but found no live producer of the group."
)
CHECKS_ANSWERED = Counter("txmq_txcheck_checks_answered", "END_TRANSACTION calls that answered a check.")
COMMITS = Counter("rocketmq_commit_messages", "Transactions committed (by the producer or by a check answer).")
ROLLBACKS = Counter("rocketmq_rollback_messages", "Transactions rolled back (by the producer or by a check answer).")
UNKNOWN = Counter("txmq_txcheck_unknown", "END_TRANSACTION calls with UNKNOWN outside a check.")
DISCARDED = Counter(
    "txmq_txcheck_discarded", "Transactions discarded to TRANS_CHECK_MAX_TIME_TOPIC (check max or file reserved time)."
)
RESUMED = Counter("txmq_txcheck_resumed", "Discarded transactions brought back to the check by an admin.")

_BY_EVENT: dict[str, Any] = {
    "check_sent": CHECKS_SENT,
    "check_waiting": CHECKS_WAITING,
    "check_answered": CHECKS_ANSWERED,
    "committed": COMMITS,
    "rolled_back": ROLLBACKS,
    "unknown": UNKNOWN,
    "discarded": DISCARDED,
    "resumed": RESUMED,
}


def transaction_event(kind: str) -> None:
    """Count one timeline event (kinds without a counter are ignored)."""
    counter = _BY_EVENT.get(kind)
    if counter is not None:
        counter.inc()
