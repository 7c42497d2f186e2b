"""In-memory events of recent transactions (checks sent and answered), merged by
QueryTransaction with what the store proves durably (half copies, committed copy, op
messages, discards). Bounded: the oldest transactions are forgotten first."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from txmq_txcheck.metrics import transaction_event

MAX_TRANSACTIONS = 10_000
MAX_EVENTS = 64


@dataclass(frozen=True, slots=True)
class Event:
    at_ms: int
    kind: str
    detail: str = ""


class Timeline:
    def __init__(self, *, max_transactions: int = MAX_TRANSACTIONS) -> None:
        self._max = max_transactions
        self._events: OrderedDict[str, list[Event]] = OrderedDict()

    def record(self, transaction_id: str, at_ms: int, kind: str, detail: str = "") -> None:
        transaction_event(kind)
        events = self._events.get(transaction_id)
        if events is None:
            events = self._events[transaction_id] = []
            while len(self._events) > self._max:
                self._events.popitem(last=False)
        else:
            self._events.move_to_end(transaction_id)
        if len(events) < MAX_EVENTS:
            events.append(Event(at_ms, kind, detail))

    def events(self, transaction_id: str) -> list[Event]:
        return list(self._events.get(transaction_id, ()))
