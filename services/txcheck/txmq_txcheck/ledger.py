"""END_TRANSACTION (RocketMQ EndTransactionProcessor) and decision look-ups.

The store decides (docs/transactions.md, "The store decides"): ``Ledger.end`` sends the
decision to the store's DecideTransactions, which validates it against the half record
and, in one append, writes the committed copy (commit) and the op message iff the
transaction has no decision yet; the same decision again is answered like the first, the
opposite one is refused (TRANSACTION_ALREADY_RESOLVED). No look-up precedes a decision,
no lock or leader is needed: any txcheck replica may decide, concurrent ENDs share one
store call (``Decider``).

A decision is proven by the store, never only by memory:

- COMMIT: the committed copy on the real topic (sysflag COMMIT_TYPE, same unique id,
  prepared-transaction offset = the half record committed), and its op message;
- ROLLBACK: an op message. Op messages carry the transaction ids as keys (indexed by
  the store) and a ``TXMQ_OP_DECISIONS`` property naming the decision per half offset.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from txmq import protocol
from txmq.errors import TxmqError, error
from txmq.protocol import (
    OP_COMMIT,
    OP_ROLLBACK,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    OpEntry,
    decode_op_entries,
)
from txmq.v1 import common_pb2, errors_pb2, store_pb2, txcheck_pb2
from txmq.validation import check_group as check_group_name
from txmq_runtime.auth import acting_user
from txmq_runtime.clock import WallClock
from txmq_txcheck.store_client import StoreClient
from txmq_txcheck.timeline import Timeline

log = logging.getLogger("txmq.txcheck.ledger")

Clock = WallClock  # milliseconds since the epoch (txmq_runtime.clock's rule)
COMMIT = OP_COMMIT
ROLLBACK = OP_ROLLBACK
_RESOLUTION = {
    txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT: COMMIT,
    txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK: ROLLBACK,
}
_WORD = {COMMIT: "commit", ROLLBACK: "rollback"}
_TO_STORE = {COMMIT: store_pb2.DECISION_COMMIT, ROLLBACK: store_pb2.DECISION_ROLLBACK}
_CACHE_SIZE = 100_000

__all__ = ["COMMIT", "ROLLBACK", "Decider", "Decision", "Ledger", "OpEntry", "check_group", "committed_copy"]


@dataclass(slots=True)
class Decision:
    decision: str
    committed: common_pb2.MessageView | None = None
    at_ms: int = 0
    op_offsets: tuple[int, ...] = ()  # half queue offsets an op message names


def parse_op_entries(view: common_pb2.MessageView) -> list[OpEntry]:
    """The entries of one op message (txmq.protocol's op-entry codec)."""
    return decode_op_entries(view.message.properties, view.message.body)


class Decider:
    """Sends decisions to the store in batches: the decisions that arrive while a
    DecideTransactions call is in flight go together in the next one (at most
    ``max_entries``), like a group commit. While a full batch waits (a producer's
    answers arrive hundreds at a time), up to ``max_calls`` calls are in flight, so the
    decisions do not wait for one round trip per ``max_entries``: the store orders
    concurrent calls itself (first decision wins, as between replicas). A caller
    returns once the store answered its item, so an answered END_TRANSACTION is
    durable."""

    def __init__(
        self, store: StoreClient, *, transaction_timeout_ms: int, max_entries: int = 64, max_calls: int = 4
    ) -> None:
        self._store = store
        self._timeout_ms = transaction_timeout_ms
        self._max = max_entries
        self._max_calls = max_calls
        self._pending: list[tuple[store_pb2.TransactionDecision, asyncio.Future[store_pb2.DecisionResult]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0  # store calls made (tests, metrics)

    async def decide(self, decision: store_pb2.TransactionDecision) -> store_pb2.DecisionResult:
        return await asyncio.shield(self._enqueue([decision])[0])

    async def decide_many(
        self, decisions: Sequence[store_pb2.TransactionDecision]
    ) -> list[store_pb2.DecisionResult | BaseException]:
        """``decide`` for a batch (a producer's answers to checks): one result or the
        store call's exception per item, without a task per item."""
        futures = self._enqueue(decisions)
        return await asyncio.shield(asyncio.gather(*futures, return_exceptions=True))

    def _enqueue(
        self, decisions: Sequence[store_pb2.TransactionDecision]
    ) -> list[asyncio.Future[store_pb2.DecisionResult]]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[store_pb2.DecisionResult]] = []
        for decision in decisions:
            fut: asyncio.Future[store_pb2.DecisionResult] = loop.create_future()
            self._pending.append((decision, fut))
            futures.append(fut)
        tasks = self._tasks
        while not tasks or (len(tasks) < self._max_calls and len(self._pending) > self._max * len(tasks)):
            task = asyncio.create_task(self._flush())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return futures

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # let decisions ready in this same loop turn join the batch
        while self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            self.calls += 1
            try:
                results = await self._store.decide([d for d, _ in batch], transaction_timeout_ms=self._timeout_ms)
            except BaseException as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc if isinstance(exc, Exception) else TxmqError(str(exc)))
                if not isinstance(exc, Exception):
                    raise
                continue
            for (_, fut), result in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(result)


def committed_copy(half: common_pb2.MessageView) -> store_pb2.SystemMessage:
    """The record the store writes for a commit (it builds its own; this one makes the
    same record for tests and tools that need one, e.g. a copy without its op message as
    older txmq versions could leave). The message a commit stores on the real topic/queue: same body, tags, keys,
    properties and unique id (REAL_TOPIC/REAL_QID removed), sysflag COMMIT_TYPE,
    prepared-transaction offset = the half record's commit-log offset."""
    m = half.message
    props = dict(m.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC)
    queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID))
    msg = common_pb2.Message(
        topic=topic,
        body=m.body,
        tags=m.tags,
        keys=list(m.keys),
        properties=props,
        unique_id=m.unique_id,
        flag=m.flag,
        queue_id=queue_id,
        born_timestamp_ms=m.born_timestamp_ms,
    )
    return store_pb2.SystemMessage(
        message=msg,
        sys_flag=(half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.commit_log_offset,
    )


def is_committed_copy(view: common_pb2.MessageView, transaction_id: str) -> bool:
    return protocol.is_committed_copy(
        unique_id=view.message.unique_id,
        sys_flag=view.sys_flag,
        topic=view.message.topic,
        transaction_id=transaction_id,
    )


def check_group(group: str) -> None:
    """A legal producer group name (the one naming rule of txmq.validation)."""
    check_group_name(group, code=errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP)


class Ledger:
    """END_TRANSACTION and decision look-ups for one store."""

    def __init__(
        self,
        store: StoreClient,
        *,
        clock: Clock,
        transaction_timeout_ms: int,
        timeline: Timeline | None = None,
        decide_batch_max: int = 64,
    ) -> None:
        self.store = store
        self._clock = clock
        self._timeout_ms = transaction_timeout_ms
        self.timeline = timeline or Timeline()
        self.decider = Decider(store, transaction_timeout_ms=transaction_timeout_ms, max_entries=decide_batch_max)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._decided: OrderedDict[str, Decision] = OrderedDict()

    def lock(self, transaction_id: str) -> asyncio.Lock:
        """Serializes admin work on one transaction in this process (resume)."""
        found = self._locks.get(transaction_id)
        if found is None:
            found = self._locks[transaction_id] = asyncio.Lock()
        return found

    def _remember(self, transaction_id: str, decision: Decision) -> None:
        self._decided[transaction_id] = decision
        self._decided.move_to_end(transaction_id)
        while len(self._decided) > _CACHE_SIZE:
            self._decided.popitem(last=False)

    async def decision_of(self, transaction_id: str) -> Decision | None:
        """The durable decision of a transaction, read from the store's index (cached
        once known: decisions are final). For look-ups (QueryTransaction, resume); a
        decision itself never needs it: the store decides atomically."""
        known = self._decided.get(transaction_id)
        if known is not None:
            return known
        by_id, ops = await asyncio.gather(
            self.store.by_unique_id(transaction_id), self.store.by_key(TRANS_OP_HALF_TOPIC, transaction_id)
        )
        found = self._decision_from_views(transaction_id, by_id, ops)
        if found is not None:
            self._remember(transaction_id, found)
        return found

    @staticmethod
    def _decision_from_views(
        transaction_id: str, by_id: list[common_pb2.MessageView], ops: list[common_pb2.MessageView]
    ) -> Decision | None:
        copies = [v for v in by_id if is_committed_copy(v, transaction_id)]
        entries = [(e, v) for v in ops for e in parse_op_entries(v) if e.transaction_id == transaction_id]
        if copies:
            copy = copies[0]
            return Decision(
                COMMIT,
                copy,
                copy.store_timestamp_ms,
                tuple(e.half_offset for e, _ in entries),
            )
        if entries:
            first, view = entries[0]
            return Decision(first.decision, None, view.store_timestamp_ms, tuple(e.half_offset for e, _ in entries))
        return None

    async def end(self, req: txcheck_pb2.EndTransactionRequest) -> txcheck_pb2.EndTransactionResponse:
        """END_TRANSACTION: the store validates it against the half message and decides,
        first decision wins, atomically (DecideTransactions; concurrent ENDs share one
        call). Any replica may call it: no leader is involved."""
        now = self._clock()
        decision = self._decision(req, now)
        if decision is None:
            return txcheck_pb2.EndTransactionResponse()
        return self._ended(req, now, await self.decider.decide(decision))

    async def end_many(
        self, requests: Sequence[txcheck_pb2.EndTransactionRequest]
    ) -> list[txcheck_pb2.EndTransactionResponse | TxmqError]:
        """``end`` for a batch of ENDs (a producer's answers to checks, sent up its
        channel together): each item's response or its error, in order; the decisions
        go to the store together, with no task per item."""
        now = self._clock()
        out: list[txcheck_pb2.EndTransactionResponse | TxmqError] = []
        asked: list[tuple[int, store_pb2.TransactionDecision]] = []
        for req in requests:
            try:
                decision = self._decision(req, now)
            except TxmqError as err:
                out.append(err)
                continue
            out.append(txcheck_pb2.EndTransactionResponse())
            if decision is not None:
                asked.append((len(out) - 1, decision))
        if not asked:
            return out
        results = await self.decider.decide_many([d for _, d in asked])
        for (i, _), result in zip(asked, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                out[i] = result if isinstance(result, TxmqError) else TxmqError(str(result))
                continue
            try:
                out[i] = self._ended(requests[i], now, result)
            except TxmqError as err:
                out[i] = err
        return out

    def _decision(self, req: txcheck_pb2.EndTransactionRequest, now: int) -> store_pb2.TransactionDecision | None:
        """The store's item for ``req``; None for UNKNOWN (only noted)."""
        check_group(req.producer_group)
        txid = req.transaction_id
        if not txid:
            raise error(errors_pb2.CODE_ILLEGAL_TRANSACTION_ID, "transaction id is empty")
        source = "check" if req.from_transaction_check else "producer"
        if req.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN:
            self.timeline.record(
                txid, now, "check_answered" if req.from_transaction_check else "unknown", f"unknown ({source})"
            )
            return None
        decision = _RESOLUTION.get(req.resolution)
        if decision is None:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT, f"resolution {req.resolution} is not commit, rollback or unknown"
            )
        user, source = acting_user()  # auth on: the store checks its Pub on the half's topic
        return store_pb2.TransactionDecision(
            commit_log_offset=req.commit_log_offset,
            tran_state_table_offset=req.tran_state_table_offset,
            transaction_id=txid,
            producer_group=req.producer_group,
            decision=_TO_STORE[decision],
            from_transaction_check=req.from_transaction_check,
            acting_user=user,
            acting_source=source,
        )

    def _ended(
        self, req: txcheck_pb2.EndTransactionRequest, now: int, result: store_pb2.DecisionResult
    ) -> txcheck_pb2.EndTransactionResponse:
        """The response to ``req`` from the store's ``result`` (raises its refusal)."""
        txid = req.transaction_id
        decision = _RESOLUTION[req.resolution]
        if result.HasField("error"):
            if req.from_transaction_check and result.error.code != errors_pb2.CODE_TRANSACTION_NOT_FOUND:
                self.timeline.record(txid, now, "check_answered", f"{_WORD[decision]} (check)")
            raise TxmqError.from_detail(result.error)
        if req.from_transaction_check:
            self.timeline.record(txid, now, "check_answered", f"{_WORD[decision]} (check)")
        committed = result.committed if result.HasField("committed") else None
        if result.first:
            at = self._clock()
            self._remember(txid, Decision(decision, committed, at, (req.tran_state_table_offset,)))
            _, source = acting_user()
            self.timeline.record(txid, at, "committed" if decision == COMMIT else "rolled_back", f"by {source}")
        return txcheck_pb2.EndTransactionResponse(committed=committed)
