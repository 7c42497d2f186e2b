"""END_TRANSACTION straight to the store that holds the half message (the store's
``EndTransactions``; docs/transactions.md, "END straight to the store").

ENDs of a producer's threads to one store share calls, like a group commit: the thread
that finds no call in flight sends what is queued (its own END first); ENDs that arrive
meanwhile wait, and when the call returns the first of them sends the next one. A caller
gets its own item's result. A waiter that gives up before its END was sent takes it back
(it was never sent); one that gives up while its END is in flight cannot know whether
the store decided it, which is harmless: the caller repeats it elsewhere, and a repeated
decision is answered like the first.
"""

from __future__ import annotations

import threading
import time

from txmq._client import call
from txmq.errors import TxmqError, UpstreamTimeoutError
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc

#: ENDs one EndTransactions call carries at most.
MAX_ENDS_PER_CALL = 64
#: The least time a call is given by a caller asked to send it just as it gave up.
_MIN_CALL_S = 0.5


class _Pending:
    __slots__ = ("decision", "error", "lead", "ready", "result")

    def __init__(self, decision: store_pb2.ProducerDecision) -> None:
        self.decision = decision
        self.lead = False  # this caller is to send the next call
        self.ready = threading.Event()  # answered, or asked to lead
        self.result: store_pb2.DecisionResult | None = None
        self.error: TxmqError | None = None

    def outcome(self) -> store_pb2.DecisionResult:
        if self.error is not None:
            raise self.error
        if self.result is None:  # the sending thread failed outside the call
            raise TxmqError("END_TRANSACTION got no answer", code=errors_pb2.CODE_INTERNAL_ERROR)
        return self.result


class StoreEnds:
    """The ENDs of one producer to one store."""

    def __init__(self, stub: store_pb2_grpc.StoreStub) -> None:
        self._stub = stub
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._busy = False  # a call is in flight, or a waiter was asked to send one
        self.calls = 0  # EndTransactions calls made (tests)

    def end(self, decision: store_pb2.ProducerDecision, timeout: float) -> store_pb2.DecisionResult:
        """The store's result for ``decision`` (its own error included: the caller
        reads it); raises a call's failure (``UpstreamTimeoutError`` when no answer
        came within ``timeout``)."""
        item = _Pending(decision)
        deadline = time.monotonic() + timeout
        with self._lock:
            self._queue.append(item)
            item.lead = not self._busy
            self._busy = True
        if not item.lead and not item.ready.wait(timeout):
            with self._lock:
                if not item.lead and item.result is None and item.error is None:
                    if item in self._queue:
                        self._queue.remove(item)
                        raise UpstreamTimeoutError(f"END_TRANSACTION not sent within {timeout:.3f}s")
                    raise UpstreamTimeoutError(
                        f"no answer to END_TRANSACTION within {timeout:.3f}s (the store may have decided it)"
                    )
        if item.lead:
            self._send(max(deadline - time.monotonic(), _MIN_CALL_S))
        return item.outcome()

    def _send(self, timeout: float) -> None:
        """One call with what is queued (the leader's END first), then the lead to the
        next waiter, if any."""
        with self._lock:
            batch = self._queue[:MAX_ENDS_PER_CALL]
            del self._queue[:MAX_ENDS_PER_CALL]
        try:
            self.calls += 1
            request = store_pb2.EndTransactionsRequest(decisions=[p.decision for p in batch])
            results = call(self._stub.EndTransactions, request, timeout=timeout).results
            if len(results) != len(batch):
                raise TxmqError(
                    f"the store answered {len(results)} of {len(batch)} ENDs", code=errors_pb2.CODE_INTERNAL_ERROR
                )
            for p, r in zip(batch, results, strict=True):
                p.result = r
        except TxmqError as err:
            for p in batch:
                p.error = err
        finally:
            with self._lock:
                if self._queue:
                    self._queue[0].lead = True
                    self._queue[0].ready.set()
                else:
                    self._busy = False
            for p in batch:
                p.ready.set()
