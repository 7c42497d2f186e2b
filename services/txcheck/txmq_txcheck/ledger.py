"""END_TRANSACTION (RocketMQ EndTransactionProcessor + TransactionalMessageBridge) and
the durable record of each transaction's decision.

A decision is proven by the store, never only by memory:

- COMMIT: the committed copy on the real topic (sysflag COMMIT_TYPE, same unique id,
  prepared-transaction offset = the half record committed), and/or an op message;
- ROLLBACK: an op message. Op messages carry the transaction ids as keys (indexed by
  the store) and a ``TXMQ_OP_DECISIONS`` property naming the decision per half offset.

The committed copy is written together with its op message in one all-or-nothing
PutSystemMessages batch (copy first). A copy without an op (written by older code that
stored the two separately and crashed in between, or a torn tail) is still repaired:
the next END_TRANSACTION or check of that transaction finds the copy, writes the
missing op and delivers nothing twice. Decisions of one transaction are
serialized by a per-transaction lock in this process; across txcheck replicas, only the
leader of the store decides (service.py forwards END_TRANSACTION there): ``end`` takes a
``fence`` (the leader's ``leads``) that must still hold right before the first write of a
new decision, else the call is refused with a retriable UNAVAILABLE and nothing is
written.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from txmq import protocol
from txmq.errors import TxmqError, error
from txmq.protocol import (
    OP_COMMIT,
    OP_ROLLBACK,
    OP_TAG,
    PROPERTY_CHECK_IMMUNITY,
    PROPERTY_OP_DECISIONS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    OpEntry,
    decode_op_entries,
    encode_op_body,
    encode_op_decisions,
)
from txmq.v1 import common_pb2, errors_pb2, store_pb2, txcheck_pb2
from txmq.validation import check_group as check_group_name
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
_CACHE_SIZE = 100_000


@dataclass(slots=True)
class Decision:
    decision: str
    committed: common_pb2.MessageView | None = None
    at_ms: int = 0
    op_offsets: tuple[int, ...] = ()  # half queue offsets an op message names


def immunity_ms(half: common_pb2.MessageView, transaction_timeout_ms: int) -> tuple[int, bool]:
    """(check immunity of the half message, whether it set its own): its
    CHECK_IMMUNITY_TIME_IN_SECONDS, never below the transaction timeout (RocketMQ
    TransactionalMessageUtil.getImmunityTime); a bad value counts as unset."""
    raw = half.message.properties.get(PROPERTY_CHECK_IMMUNITY)
    if raw:
        try:
            return max(int(raw) * 1000, transaction_timeout_ms), True
        except ValueError:
            pass
    return transaction_timeout_ms, False


def parse_op_entries(view: common_pb2.MessageView) -> list[OpEntry]:
    """The entries of one op message (txmq.protocol's op-entry codec)."""
    return decode_op_entries(view.message.properties, view.message.body)


def op_message(entries: list[OpEntry], *, queue_id: int = 0) -> store_pb2.SystemMessage:
    """One op message for a batch of decisions (RocketMQ 5: offsets joined by ',')."""
    return store_pb2.SystemMessage(
        message=common_pb2.Message(
            topic=TRANS_OP_HALF_TOPIC,
            queue_id=queue_id,
            body=encode_op_body(entries),
            tags=OP_TAG,
            keys=list(dict.fromkeys(e.transaction_id for e in entries if e.transaction_id)),
            properties={PROPERTY_OP_DECISIONS: encode_op_decisions(entries)},
        )
    )


class OpWriter:
    """Writes op messages, batching decisions that arrive while a write is in flight
    into one message (at most ``max_entries``). A caller returns once its entry is
    stored, so an answered END_TRANSACTION is durable."""

    def __init__(self, store: StoreClient, *, max_entries: int = 64) -> None:
        self._store = store
        self._max = max_entries
        self._pending: list[tuple[OpEntry, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def write(self, entry: OpEntry) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((entry, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush())
        await asyncio.shield(fut)

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # let decisions ready in this same loop turn join the batch
        while self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            try:
                await self._store.put([op_message([e for e, _ in batch])])
            except BaseException as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc if isinstance(exc, Exception) else TxmqError(str(exc)))
                if not isinstance(exc, Exception):
                    raise
                continue
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)


def committed_copy(half: common_pb2.MessageView) -> store_pb2.SystemMessage:
    """The message a commit stores on the real topic/queue: same body, tags, keys,
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


def not_leader(store_id: str, detail: str = "") -> TxmqError:
    """The retriable refusal of a decision this replica may not take (no leader of the
    store reachable, or its leadership lapsed): nothing was written; ask again."""
    text = f"no check-loop leader of store {store_id!r} can decide right now"
    return error(
        errors_pb2.CODE_UNAVAILABLE,
        f"{text}: {detail}" if detail else f"{text}; retry",
        store_id=store_id,
        reason="no_leader",
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
        op_batch_max_entries: int = 64,
    ) -> None:
        self.store = store
        self._clock = clock
        self._timeout_ms = transaction_timeout_ms
        self.timeline = timeline or Timeline()
        self.ops = OpWriter(store, max_entries=op_batch_max_entries)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._decided: OrderedDict[str, Decision] = OrderedDict()

    def lock(self, transaction_id: str) -> asyncio.Lock:
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
        """The durable decision of a transaction (cached once known)."""
        known = self._decided.get(transaction_id)
        if known is not None:
            return known
        found = await self._decision_from_store(transaction_id)
        if found is not None:
            self._remember(transaction_id, found)
        return found

    async def _decision_from_store(self, transaction_id: str) -> Decision | None:
        return self._decision_from_views(transaction_id, *await self._look_up(transaction_id))

    async def _look_up(self, transaction_id: str) -> tuple[list[common_pb2.MessageView], list[common_pb2.MessageView]]:
        """(records with the transaction's unique id, op messages keyed by it): both
        look-ups at once (one round trip of latency instead of two)."""
        by_id, ops = await asyncio.gather(
            self.store.by_unique_id(transaction_id), self.store.by_key(TRANS_OP_HALF_TOPIC, transaction_id)
        )
        return by_id, ops

    async def _half_and_decision(
        self, transaction_id: str, commit_log_offset: int
    ) -> tuple[common_pb2.MessageView | None, Decision | None]:
        """The half record at ``commit_log_offset`` and the transaction's durable
        decision. The look-up by unique id also returns the half records of the
        transaction, so the half is taken from it when it is there (same record, same
        view); else (another id, not indexed yet, a cached decision) ViewMessage."""
        known = self._decided.get(transaction_id)
        if known is not None:
            return await self._half(commit_log_offset), known
        by_id, ops = await self._look_up(transaction_id)
        found = self._decision_from_views(transaction_id, by_id, ops)
        if found is not None:
            self._remember(transaction_id, found)
        half = None
        if commit_log_offset >= 0:
            half = next(
                (v for v in by_id if v.commit_log_offset == commit_log_offset and v.message.topic == TRANS_HALF_TOPIC),
                None,
            )
        if half is None:
            half = await self._half(commit_log_offset)
        return half, found

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

    async def end(
        self, req: txcheck_pb2.EndTransactionRequest, *, fence: Callable[[], bool] | None = None
    ) -> txcheck_pb2.EndTransactionResponse:
        """END_TRANSACTION: validate against the stored half message, then commit or
        roll back exactly once (module docstring). ``fence``: checked right before a new
        decision's first write; False -> retriable UNAVAILABLE, nothing written."""
        check_group(req.producer_group)
        txid = req.transaction_id
        if not txid:
            raise error(errors_pb2.CODE_ILLEGAL_TRANSACTION_ID, "transaction id is empty")
        now = self._clock()
        source = "check" if req.from_transaction_check else "producer"
        if req.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN:
            self.timeline.record(
                txid, now, "check_answered" if req.from_transaction_check else "unknown", f"unknown ({source})"
            )
            return txcheck_pb2.EndTransactionResponse()
        decision = _RESOLUTION.get(req.resolution)
        if decision is None:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT, f"resolution {req.resolution} is not commit, rollback or unknown"
            )
        async with self.lock(txid):
            # The half record and the earlier decision are read together; the half is
            # validated first, as before.
            half, prior = await self._half_and_decision(txid, req.commit_log_offset)
            if half is None or half.message.topic != TRANS_HALF_TOPIC:
                raise error(
                    errors_pb2.CODE_TRANSACTION_NOT_FOUND,
                    f"no half message at commit-log offset {req.commit_log_offset}",
                    transaction_id=txid,
                )
            self._validate(req, half)
            if req.from_transaction_check:
                self.timeline.record(txid, now, "check_answered", f"{_WORD[decision]} (check)")
            if prior is not None:
                return await self._again(req, half, decision, prior)
            if self._reject_late(req, half, now):
                raise error(
                    errors_pb2.CODE_TRANSACTION_EXPIRED,
                    "the half message is past its check immunity time; its state is decided by the transaction check",
                    transaction_id=txid,
                )
            if fence is not None and not fence():
                raise not_leader(self.store.store_id)
            committed = None
            entry = OpEntry(half.queue_offset, txid, decision)
            if decision == COMMIT:
                # The committed copy and its op message in one PutSystemMessages call:
                # the store appends a batch all or nothing (one request, one append, one
                # fsync in sync mode), copy first. A copy without its op (written by
                # older code, or a torn tail) is still settled by the next decision or
                # the check loop.
                results = await self.store.put(
                    [committed_copy(half), op_message([entry])], producer_group=req.producer_group
                )
                committed = await self.store.view(results[0].commit_log_offset)
            else:
                await self.ops.write(entry)
            at = self._clock()
            self._remember(txid, Decision(decision, committed, at, (half.queue_offset,)))
            self.timeline.record(txid, at, "committed" if decision == COMMIT else "rolled_back", f"by {source}")
            return txcheck_pb2.EndTransactionResponse(committed=committed)

    async def _half(self, commit_log_offset: int) -> common_pb2.MessageView | None:
        return await self.store.view(commit_log_offset) if commit_log_offset >= 0 else None

    async def _again(
        self, req: txcheck_pb2.EndTransactionRequest, half: common_pb2.MessageView, decision: str, prior: Decision
    ) -> txcheck_pb2.EndTransactionResponse:
        txid = req.transaction_id
        if prior.decision != decision:
            raise error(
                errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED,
                f"transaction {txid} was already resolved: {_WORD.get(prior.decision, prior.decision)}",
                transaction_id=txid,
                resolution=_WORD.get(prior.decision, prior.decision),
            )
        # The same decision again (retried call, a commit after a put-back, a copy
        # whose op message was lost in a crash): deliver nothing new, but make sure the
        # op queue names this half record so the check loop skips it.
        if half.queue_offset not in prior.op_offsets:
            await self.ops.write(OpEntry(half.queue_offset, txid, decision))
            prior.op_offsets = (*prior.op_offsets, half.queue_offset)
        return txcheck_pb2.EndTransactionResponse(committed=prior.committed)

    async def settle(self, half: common_pb2.MessageView, prior: Decision) -> None:
        """Write the op message a decided transaction's half record lacks (check loop)."""
        async with self.lock(half.message.unique_id):
            if half.queue_offset not in prior.op_offsets:
                await self.ops.write(OpEntry(half.queue_offset, half.message.unique_id, prior.decision))
                prior.op_offsets = (*prior.op_offsets, half.queue_offset)

    @staticmethod
    def _validate(req: txcheck_pb2.EndTransactionRequest, half: common_pb2.MessageView) -> None:
        wrong = []
        if half.message.unique_id != req.transaction_id:
            wrong.append("transaction id")
        if half.message.properties.get(PROPERTY_PRODUCER_GROUP) != req.producer_group:
            wrong.append("producer group")
        if half.queue_offset != req.tran_state_table_offset:
            wrong.append("transaction state table offset")
        if half.commit_log_offset != req.commit_log_offset:
            wrong.append("commit log offset")
        if wrong:
            raise error(
                errors_pb2.CODE_TRANSACTION_MISMATCH,
                f"END_TRANSACTION does not match the half message: wrong {', '.join(wrong)}",
                transaction_id=req.transaction_id,
            )

    def _reject_late(self, req: txcheck_pb2.EndTransactionRequest, half: common_pb2.MessageView, now: int) -> bool:
        """RocketMQ 5 rejectCommitOrRollback: a decision not from a check, for a half
        message that set CHECK_IMMUNITY_TIME_IN_SECONDS, after that immunity passed."""
        if req.from_transaction_check:
            return False
        window, own = immunity_ms(half, self._timeout_ms)
        return own and now - half.message.born_timestamp_ms > window
