"""QueryTransaction: a transaction's timeline, rebuilt from what the store holds (half
record and its put-back copies, op messages, the committed copy, discards) plus the
answers to checks this replica saw (kept in memory only). ``discarded``: the
transaction is undecided and sits in TRANS_CHECK_MAX_TIME_TOPIC now (its latest discard
is newer than its latest half record), waiting for ResumeTransaction."""

from __future__ import annotations

from txmq.protocol import (
    CHECK_SENT,
    CHECK_WAITING,
    HALF_STORED,
    IMMUNITY_PUT_BACK,
    PROPERTY_DISCARD_REASON,
    PROPERTY_PRODUCER_GROUP,
    RESUMED,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    check_counts,
    half_record_kind,
)
from txmq.v1 import common_pb2, txcheck_pb2
from txmq_txcheck.checkloop import discarded_copy
from txmq_txcheck.ledger import COMMIT, ROLLBACK, Ledger, is_committed_copy, parse_op_entries

_MEMORY_ONLY = {"check_answered", "unknown"}


def _props(v: common_pb2.MessageView) -> dict[str, str]:
    return dict(v.message.properties)


async def query_transaction(ledger: Ledger, txid: str) -> txcheck_pb2.QueryTransactionResponse | None:
    views = await ledger.store.by_unique_id(txid)
    halves = [v for v in views if v.message.topic == TRANS_HALF_TOPIC]
    discards = [v for v in views if v.message.topic == TRANS_CHECK_MAX_TIME_TOPIC]
    copies = [v for v in views if is_committed_copy(v, txid)]
    if not halves and not copies:
        return None
    halves.sort(key=lambda v: v.commit_log_offset)
    events: list[txcheck_pb2.TransactionEvent] = []

    def add(at: int, kind: str, detail: str) -> None:
        events.append(txcheck_pb2.TransactionEvent(at_ms=at, kind=kind, detail=detail))

    previous: tuple[int, int] | None = None
    for n, h in enumerate(halves):
        p = _props(h)
        times, waits = check_counts(p)
        where = f"half queue offset {h.queue_offset}, commit-log offset {h.commit_log_offset}"
        # The oldest record the store still holds stands for the half message.
        kind = HALF_STORED if n == 0 else half_record_kind(p, previous)
        if kind == HALF_STORED:
            add(h.store_timestamp_ms, kind, where)
        elif kind == CHECK_SENT:
            add(h.store_timestamp_ms, kind, f"check {times}; put back at {where}")
        elif kind == RESUMED:
            add(h.store_timestamp_ms, kind, f"checks resumed; {where}")
        elif kind == CHECK_WAITING:
            add(h.store_timestamp_ms, kind, f"no live producer (wait {waits}); put back at {where}")
        elif kind == IMMUNITY_PUT_BACK:
            add(h.store_timestamp_ms, kind, f"still immune; put back at {where}")
        previous = (times, waits)
    for d in discards:
        add(
            d.store_timestamp_ms,
            "discarded",
            f"{_props(d).get(PROPERTY_DISCARD_REASON, '')}: kept in {TRANS_CHECK_MAX_TIME_TOPIC}",
        )
    for op in await ledger.store.by_key(TRANS_OP_HALF_TOPIC, txid):
        for e in parse_op_entries(op):
            if e.transaction_id == txid:
                kind = "committed" if e.decision == COMMIT else "rolled_back"
                add(
                    op.store_timestamp_ms,
                    kind,
                    f"op message at op offset {op.queue_offset} for half offset {e.half_offset}",
                )
    for c in copies:
        add(
            c.store_timestamp_ms,
            "committed",
            f"committed copy on {c.message.topic} queue {c.message.queue_id} offset {c.queue_offset},"
            f" commit-log offset {c.commit_log_offset}",
        )
    for ev in ledger.timeline.events(txid):
        if ev.kind in _MEMORY_ONLY:
            add(ev.at_ms, ev.kind, ev.detail)
    events.sort(key=lambda e: e.at_ms)
    decision = await ledger.decision_of(txid)
    resolution = {
        COMMIT: txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT,
        ROLLBACK: txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK,
    }.get(decision.decision if decision else "", txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN)
    resp = txcheck_pb2.QueryTransactionResponse(
        transaction_id=txid,
        producer_group=_props(halves[0]).get(PROPERTY_PRODUCER_GROUP, "") if halves else "",
        resolution=resolution,
        timeline=events,
        discarded=decision is None and discarded_copy(views) is not None,
    )
    if halves:
        resp.half.CopyFrom(halves[0])
    if copies:
        resp.committed.CopyFrom(copies[0])
    return resp
