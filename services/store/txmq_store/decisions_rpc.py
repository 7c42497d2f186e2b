"""The wire side of the store's transaction decisions: DecideTransactions (txcheck, the
gateway: super users, acting for someone) and EndTransactions (a producer straight,
acting for itself) become ``DecisionRequest``s of one rule (transactions.py), and their
outcomes one ``DecideTransactionsResponse``.

Who is checked: for DecideTransactions, the user the caller names (``acting_user``,
txmq_runtime.auth.on_behalf_of); for EndTransactions, the caller itself
(``publish_check``): Pub on the half message's topic, once the half record is read. The
group check (Pub on the producer group) is the access option's, and the half message's
own group must be the one named (TRANSACTION_MISMATCH): the same checks txcheck's
EndTransaction makes, so either path admits the same ENDs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from txmq.protocol import OP_COMMIT, OP_ROLLBACK
from txmq.v1 import store_pb2
from txmq_runtime.auth import on_behalf_of, publish_check

from .transactions import DecisionOutcome, DecisionRequest

log = logging.getLogger("txmq.store.transactions")

_DECISION = {store_pb2.DECISION_COMMIT: OP_COMMIT, store_pb2.DECISION_ROLLBACK: OP_ROLLBACK}
TO_PB_DECISION = {v: k for k, v in _DECISION.items()}


def relayed_requests(request: store_pb2.DecideTransactionsRequest) -> list[DecisionRequest]:
    """DecideTransactions' items: each checked for the user it names (auth on)."""
    return [_request(d, on_behalf_of(d.acting_user, d.acting_source)) for d in request.decisions]


def producer_requests(request: store_pb2.EndTransactionsRequest) -> list[DecisionRequest]:
    """EndTransactions' items: checked for the caller (auth on, not a super user)."""
    may_publish = publish_check()
    return [_request(d, may_publish) for d in request.decisions]


def _request(d: Any, check: Callable[[str], None] | None) -> DecisionRequest:
    return DecisionRequest(
        d.commit_log_offset,
        d.tran_state_table_offset,
        d.transaction_id,
        d.producer_group,
        _DECISION.get(d.decision, ""),
        d.from_transaction_check,
        check,
    )


class TimeoutAgreement:
    """Logs once per value (per process) a caller's transaction timeout that differs
    from the store's: the store's decides when a decision is late, the caller's (txcheck)
    when a half message is checked; the two settings share a name and should share a
    value."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def compare(self, theirs: int, ours: int) -> None:
        if theirs and theirs != ours and theirs not in self._seen:
            self._seen.add(theirs)
            log.warning(
                "a caller of DecideTransactions has transaction_timeout_ms %d, this store %d: the store's decides "
                "when a decision is late, the caller's when a half message is checked; set both to one value",
                theirs,
                ours,
            )


TIMEOUTS = TimeoutAgreement()


def decisions_response(
    outcomes: Sequence[DecisionOutcome], *, store_id: str, offset_msg_id_prefix: str
) -> store_pb2.DecideTransactionsResponse:
    resp = store_pb2.DecideTransactionsResponse()
    for out in outcomes:
        r = resp.results.add()
        if out.error is not None:
            r.error.CopyFrom(out.error.to_detail())
            continue
        r.decision = TO_PB_DECISION[out.decision]
        r.first = out.first
        r.status = out.status
        c = out.committed
        if c is not None:
            v = r.committed
            v.message.topic = c.topic
            v.message.queue_id = c.queue_id
            v.message.unique_id = c.unique_id
            v.message.tags = c.tags
            v.message.keys.extend(c.keys)
            v.offset_msg_id = f"{offset_msg_id_prefix}{c.commit_log_offset:016X}"
            v.queue_offset = c.queue_offset
            v.commit_log_offset = c.commit_log_offset
            v.store_timestamp_ms = c.store_timestamp_ms
            v.sys_flag = c.sys_flag
            v.prepared_transaction_offset = c.prepared_transaction_offset
            v.store_id = store_id
    return resp
