"""The store decides transactions (docs/transactions.md, "The store decides").

``Transactions.decide``: per decision, the half record it names is read and validated,
the transaction's earlier decision is looked for (the decision book, an in-memory LRU;
on a miss the store's own index: a committed copy by unique id, op messages keyed by the
transaction id), and a new decision is taken only when there is none. The committed
copies and one op message for the whole call are appended together, and the book is
updated, with no await in between: the store is one event loop, so two decisions of one
transaction -- from any txcheck replica, gateway or check answer -- are ordered here and
the second sees the first. ``Transactions.requeue``: the check loop's put-backs and
discards, made from the store's own records; a decided transaction is settled (its op
entry) instead.

``Fences``: the highest check-loop leader epoch seen per half queue, kept durably; a
fenced write under a lower epoch is refused with CODE_FENCED and writes nothing.
"""

from __future__ import annotations

import logging
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from txmq import protocol
from txmq.errors import TxmqError, error
from txmq.protocol import (
    HALF_QUEUE_ID,
    OP_COMMIT,
    OP_ROLLBACK,
    OP_TAG,
    PROPERTY_CHECK_TIMES,
    PROPERTY_CHECK_WAITS,
    PROPERTY_DISCARD_REASON,
    PROPERTY_OP_DECISIONS,
    PROPERTY_PREPARED_QUEUE_OFFSET,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PUT_BACK_PROPERTIES,
    TRANS_CHECK_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    OpEntry,
    check_counts,
    decode_op_entries,
    encode_op_body,
    encode_op_decisions,
    rejects_late_decision,
)
from txmq.records import PHYSICAL_OFFSET_AT
from txmq.v1 import errors_pb2
from txmq.validation import check_group

from . import metrics as store_metrics
from .admin import ConfigAdmin
from .codec import HEADER_SIZE, MESSAGE_MAGIC, read_size_and_magic, read_store_timestamp
from .commitlog import CommitLog
from .fileio import read_json, write_json_atomically
from .model import OutgoingMessage, SendStatus, StoredMessage
from .reads import Reader
from .send_path import Appended, SendPath
from .settings import StoreSettings

log = logging.getLogger("txmq.store.transactions")

_WORD = {OP_COMMIT: "commit", OP_ROLLBACK: "rollback"}
_PUT_BACK = frozenset(PUT_BACK_PROPERTIES)
# Half records the walk read that are kept for its next RequeueHalves (two of its reads).
_WALKED_MAX = 512
_WALKED_MAX_BYTES = 8 << 20  # their records' sizes, at most
# A record's header fields that tell it from another one at the same offset.
BODY_CRC_AT = 12
_BODY_CRC = struct.Struct(">I")
_PHYSICAL = struct.Struct(">q")

# Requeue actions (store.proto RequeueAction).
CHECK, WAIT, IMMUNITY, DISCARD = 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class CopyLocation:
    """Where a committed copy is (no body, no properties)."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_timestamp_ms: int
    unique_id: str
    tags: str
    keys: tuple[str, ...]
    sys_flag: int
    prepared_transaction_offset: int


@dataclass(slots=True)
class Known:
    """A transaction's decision as the store knows it."""

    decision: str  # OP_COMMIT / OP_ROLLBACK
    copy: CopyLocation | None
    op_offsets: set[int]  # half queue offsets an op entry names
    end: int = 0  # commit-log end of the records that prove it (eviction waits for dispatch)


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    commit_log_offset: int
    tran_state_table_offset: int
    transaction_id: str
    producer_group: str
    decision: str  # OP_COMMIT, OP_ROLLBACK, or "" (unspecified)
    from_transaction_check: bool = False
    #: Raises unless whoever ended the transaction may publish to the half message's topic
    #: (auth on: the acting user of the decision); None: no check.
    may_publish: Callable[[str], None] | None = None


@dataclass(slots=True)
class DecisionOutcome:
    error: TxmqError | None = None
    decision: str = ""
    first: bool = False
    committed: CopyLocation | None = None
    status: SendStatus = SendStatus.OK


@dataclass(frozen=True, slots=True)
class HalfAction:
    commit_log_offset: int
    action: int  # CHECK, WAIT, IMMUNITY, DISCARD
    reason: str = ""


@dataclass(slots=True)
class ActionOutcome:
    error: TxmqError | None = None
    decided: str = ""  # the transaction was decided: settled, nothing put back
    commit_log_offset: int = 0
    queue_offset: int = 0
    store_timestamp_ms: int = 0
    properties: dict[str, str] = field(default_factory=dict)


class Fences:
    """The highest check-loop leader epoch seen per half queue, in a small JSON file
    (written atomically and fsynced before the write that raised it is appended)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        raw = read_json(path) or {}
        self._marks: dict[int, int] = {int(k): int(v) for k, v in raw.get("epochs", {}).items()}
        #: Bumped when a mark rises (a replicated group's leader ships the marks then).
        self.version = 0

    def document(self) -> dict[str, dict[str, int]]:
        return {"epochs": {str(k): v for k, v in self._marks.items()}}

    def adopt(self, document: dict[str, dict[str, int]]) -> None:
        """A follower takes its leader's marks (never lowering one of its own)."""
        marks = dict(self._marks)
        for k, v in document.get("epochs", {}).items():
            marks[int(k)] = max(marks.get(int(k), 0), int(v))
        if marks != self._marks:
            write_json_atomically(self._path, {"epochs": {str(k): v for k, v in marks.items()}})
            self._marks = marks

    def mark(self, half_queue_id: int = HALF_QUEUE_ID) -> int:
        return self._marks.get(half_queue_id, 0)

    def admit(self, epoch: int, half_queue_id: int = HALF_QUEUE_ID) -> bool:
        """Refuse (CODE_FENCED) a write under an epoch lower than one already seen;
        raise the mark, durably, for a higher one. Epoch 0: not fenced. Whether the
        mark rose."""
        if epoch <= 0:
            return False
        current = self.mark(half_queue_id)
        if epoch < current:
            store_metrics.FENCED_WRITES.inc()
            raise error(
                errors_pb2.CODE_FENCED,
                f"epoch {epoch} is older than epoch {current} already seen for half queue {half_queue_id}; "
                "a newer check-loop leader took over",
                epoch=str(epoch),
                current_epoch=str(current),
                half_queue_id=str(half_queue_id),
            )
        if epoch > current:
            marks = {**self._marks, half_queue_id: epoch}
            write_json_atomically(self._path, {"epochs": {str(k): v for k, v in marks.items()}})
            self._marks = marks
            self.version += 1
            log.info("half queue %d: check-loop leader epoch %d (was %d)", half_queue_id, epoch, current)
            return True
        return False


class TransactionStore(Protocol):
    """What decisions need of the store (MessageStore implements it): its send path
    (appends and their settling), its reads (records by offset, queue and index), the
    check loop's consume offsets, the commit log's end, its clock, its settings (the
    transaction timeout of the late-decision rule), and fences held by a group's
    followers before they are relied on (``admit_fence``)."""

    @property
    def settings(self) -> StoreSettings: ...

    @property
    def sender(self) -> SendPath: ...

    @property
    def reader(self) -> Reader: ...

    @property
    def admin(self) -> ConfigAdmin: ...

    @property
    def commitlog(self) -> CommitLog: ...

    def now_ms(self) -> int: ...

    async def admit_fence(self, epoch: int, half_queue_id: int) -> None: ...


class Transactions:
    """Decisions and check-loop writes of one store."""

    def __init__(self, store: TransactionStore, *, cache_entries: int, fences: Fences) -> None:
        self._store = store
        self._cap = cache_entries
        self._book: OrderedDict[str, Known] = OrderedDict()
        self.fences = fences
        # Op entries promised to book entries by the call being built (undone if its
        # append fails; calls never interleave before their append: no await).
        self._added: list[tuple[Known, int]] = []
        # Every decision recorded at or after this commit-log offset is in the book: set
        # to the commit log's end when the store opens, raised past every entry the book
        # evicts and past decisions written by another path (PutSystemMessages). A
        # transaction whose first half record is at or after it, and that the book does
        # not know, has no decision: no index read needed.
        self.horizon = 0
        # The half records the check loop's walk read last (GetMessage on the half
        # queue), by commit-log offset: its RequeueHalves names them next and takes them
        # from here instead of reading and decoding them again (``_walked_half``).
        self._walked: dict[int, StoredMessage] = {}
        self._walked_bytes = 0

    # -- the book --------------------------------------------------------------------

    def _remember(self, txid: str, known: Known) -> None:
        book = self._book
        book[txid] = known
        book.move_to_end(txid)
        if len(book) > self._cap:
            dispatched = self._store.reader.dispatched_offset
            while len(book) > self._cap:
                oldest = next(iter(book.values()))
                if oldest.end > dispatched:  # not in the index yet: keep it for now
                    break
                book.popitem(last=False)
                self.horizon = max(self.horizon, oldest.end)

    def note_written_elsewhere(self, end: int) -> None:
        """Decision records (op messages, committed copies) were appended by another
        path, up to commit-log offset ``end``: the book may not know them."""
        self.horizon = max(self.horizon, end)

    def append_system(
        self, messages: Sequence[OutgoingMessage], *, producer_group: str = "", born_host: str = ""
    ) -> Appended:
        """PutSystemMessages' append (older txcheck versions write decisions this way):
        the book learns the op entries and committed copies in it in the same turn of
        the event loop, so a decision asked for before they are indexed (sync flush: at
        the fsync) still sees them. ``settle`` the result next."""
        appended = self._store.sender.append_records(
            messages, producer_group=producer_group, born_host=born_host, system=True
        )
        if self.learn(messages, appended):
            self.note_written_elsewhere(appended.end)
        return appended

    def learn(self, messages: Sequence[OutgoingMessage], appended: Appended) -> bool:
        """Record in the book the decisions ``messages`` (just appended as ``appended``)
        hold: op entries, committed copies. A transaction the book knows with the other
        decision keeps it (the first one). Returns whether any decision record was there."""
        found = False
        end = appended.end
        for msg, rec, offset, queue_offset in zip(
            messages, appended.records, appended.offsets, appended.queue_offsets, strict=False
        ):
            if rec.topic == TRANS_OP_HALF_TOPIC:
                for e in decode_op_entries(msg.properties, msg.body):
                    if not e.transaction_id or e.decision not in (OP_COMMIT, OP_ROLLBACK):
                        continue
                    found = True
                    self._learn(e.transaction_id, e.decision, None, e.half_offset, end)
            elif protocol.is_committed_copy(
                unique_id=rec.unique_id, sys_flag=msg.sys_flag, topic=rec.topic, transaction_id=rec.unique_id
            ):
                found = True
                loc = CopyLocation(
                    rec.topic, rec.queue_id, queue_offset, offset, appended.store_timestamp_ms, rec.unique_id,
                    msg.tags, tuple(msg.keys), msg.sys_flag, msg.prepared_transaction_offset,
                )  # fmt: skip
                self._learn(rec.unique_id, OP_COMMIT, loc, None, end)
        return found

    def _learn(self, txid: str, decision: str, copy: CopyLocation | None, half_offset: int | None, end: int) -> None:
        known = self._book.get(txid)
        if known is None:
            known = Known(decision, copy, set(), end)
        elif known.decision != decision:
            return
        if copy is not None and known.copy is None:
            known.copy = copy
        if half_offset is not None:
            known.op_offsets.add(half_offset)
        known.end = max(known.end, end)
        self._remember(txid, known)

    def warm(self, *, max_entries: int | None = None) -> int:
        """Fill the book from the op queue after the check loop's progress (best
        effort: the index answers what the book does not hold). Returns entries read."""
        store = self._store
        limit = self._cap if max_entries is None else max_entries
        start = store.admin.query_consume_offset(group=TRANS_CHECK_GROUP, topic=TRANS_OP_HALF_TOPIC, queue_id=0) or 0
        seen = 0
        offset = start
        while seen < limit:
            try:
                r = store.reader.get_message(topic=TRANS_OP_HALF_TOPIC, queue_id=0, offset=offset, max_messages=32)
            except TxmqError:  # no op topic yet, or a damaged record: stop warming
                break
            if not r.messages:
                break
            for m in r.messages:
                for e in decode_op_entries(m.properties, m.body):
                    if e.transaction_id and e.decision in (OP_COMMIT, OP_ROLLBACK):
                        known = self._book.get(e.transaction_id)
                        if known is None:
                            end = m.commit_log_offset + m.store_size
                            self._remember(e.transaction_id, Known(e.decision, None, {e.half_offset}, end))
                        else:
                            known.op_offsets.add(e.half_offset)
                        seen += 1
            if r.next_begin_offset <= offset:
                break
            offset = r.next_begin_offset
        return seen

    def _prior(self, txid: str, half: StoredMessage | None = None) -> Known | None:
        """The transaction's decision: the book, else -- unless ``half`` proves the
        transaction younger than the horizon -- the store's index."""
        known = self._book.get(txid)
        if known is not None and not (known.decision == OP_COMMIT and known.copy is None):
            return known
        store = self._store
        if (
            known is None
            and half is not None
            and _origin(half) >= self.horizon
            and not store.reader.indexed_below(txid, self.horizon)
        ):
            # Young, and no record of this id below the horizon (a duplicate half, e.g.
            # a producer's retried send stored after the first was decided, has one).
            return None
        copies = [
            m
            for m in store.reader.query_messages(unique_id=txid, max_results=1000)
            if protocol.is_committed_copy(
                unique_id=m.unique_id, sys_flag=m.sys_flag, topic=m.topic, transaction_id=txid
            )
        ]
        entries = [
            e
            for m in store.reader.query_messages(topic=TRANS_OP_HALF_TOPIC, key=txid, max_results=1000)
            for e in decode_op_entries(m.properties, m.body)
            if e.transaction_id == txid
        ]
        if known is not None:  # warmed from an op entry: add the copy's location
            if copies:
                known.copy = _location(copies[0])
            known.op_offsets.update(e.half_offset for e in entries if e.decision == known.decision)
            return known
        end = store.commitlog.write_offset  # an upper bound of where the proof is
        if copies:
            found = Known(OP_COMMIT, _location(copies[0]), {e.half_offset for e in entries}, end)
        elif entries:
            found = Known(entries[0].decision, None, {e.half_offset for e in entries}, end)
        else:
            return None
        self._remember(txid, found)
        return found

    def _promise(self, known: Known, half_offset: int) -> None:
        known.op_offsets.add(half_offset)
        self._added.append((known, half_offset))

    def _append(self, messages: list[OutgoingMessage], born_host: str) -> Appended:
        """Append the call's records; if that fails, the op entries promised to book
        entries are taken back (the records are not there)."""
        try:
            return self._store.sender.append_records(messages, born_host=born_host, system=True)
        except BaseException:
            for known, offset in self._added:
                known.op_offsets.discard(offset)
            raise
        finally:
            self._added = []

    # -- decisions -------------------------------------------------------------------

    async def decide(
        self,
        requests: Sequence[DecisionRequest],
        *,
        epoch: int = 0,
        half_queue_id: int = HALF_QUEUE_ID,
        born_host: str = "",
    ) -> list[DecisionOutcome]:
        """Decide ``requests`` (each item its own outcome), from any caller: txcheck,
        a gateway, or a producer straight (EndTransactions). The late-decision rule uses
        the store's own ``transaction_timeout_ms``, whoever relays the decision."""
        store = self._store
        await store.admit_fence(epoch, half_queue_id)
        self._added = []
        timeout_ms = store.settings.transaction_timeout_ms
        now = store.now_ms()
        outcomes: list[DecisionOutcome] = []
        copies: list[tuple[int, OutgoingMessage]] = []  # (outcome index, copy)
        entries: list[OpEntry] = []
        local: dict[str, Known] = {}  # decisions taken earlier in this call
        for i, req in enumerate(requests):
            try:
                out = self._decide_one(req, now, timeout_ms, local, copies, entries, i)
            except TxmqError as err:
                out = DecisionOutcome(error=err)
                store_metrics.DECISIONS.labels(decision=_WORD.get(req.decision, "none"), outcome="refused").inc()
            outcomes.append(out)
        if not copies and not entries:
            return outcomes
        copies_by_index = dict(copies)
        messages = [m for _, m in copies]
        messages.append(_op_message(entries))
        appended = self._append(messages, born_host)
        # Still in the same turn of the event loop: the book learns the decisions now.
        for (i, _), offset, queue_offset, rec in zip(
            copies, appended.offsets, appended.queue_offsets, appended.records, strict=False
        ):
            loc = CopyLocation(
                rec.topic, rec.queue_id, queue_offset, offset, appended.store_timestamp_ms, rec.unique_id,
                copies_by_index[i].tags, copies_by_index[i].keys, copies_by_index[i].sys_flag,
                copies_by_index[i].prepared_transaction_offset,
            )  # fmt: skip
            outcomes[i].committed = loc
            local[requests[i].transaction_id].copy = loc
        for txid, known in local.items():
            known.end = appended.end
            self._remember(txid, known)
        for i, out in enumerate(outcomes):  # repeats, in this call, of a commit it took
            if out.error is None and out.decision == OP_COMMIT and out.committed is None:
                taken = local.get(requests[i].transaction_id)
                out.committed = taken.copy if taken is not None else None
        status = await store.sender.settle(appended)
        for out in outcomes:
            out.status = status
        return outcomes

    def _decide_one(
        self,
        req: DecisionRequest,
        now: int,
        timeout_ms: int,
        local: dict[str, Known],
        copies: list[tuple[int, OutgoingMessage]],
        entries: list[OpEntry],
        index: int,
    ) -> DecisionOutcome:
        txid = req.transaction_id
        if not txid:
            raise error(errors_pb2.CODE_ILLEGAL_TRANSACTION_ID, "transaction id is empty")
        check_group(req.producer_group, code=errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP)
        if req.decision not in (OP_COMMIT, OP_ROLLBACK):
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "the decision must be commit or rollback")
        half = self._half(req.commit_log_offset, txid)
        _validate(req, half)
        if req.may_publish is not None:
            req.may_publish(half.properties.get(PROPERTY_REAL_TOPIC, half.topic))
        prior = local.get(txid) or self._prior(txid, half)
        word = _WORD[req.decision]
        if prior is not None:
            if prior.decision != req.decision:
                raise error(
                    errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED,
                    f"transaction {txid} was already resolved: {_WORD.get(prior.decision, prior.decision)}",
                    transaction_id=txid,
                    resolution=_WORD.get(prior.decision, prior.decision),
                )
            if half.queue_offset not in prior.op_offsets:  # a put-back copy, a copy without op
                entries.append(OpEntry(half.queue_offset, txid, prior.decision))
                self._promise(prior, half.queue_offset)
                if txid not in local:
                    local[txid] = prior
                store_metrics.DECISIONS.labels(decision=word, outcome="settled").inc()
            else:
                store_metrics.DECISIONS.labels(decision=word, outcome="repeat").inc()
            return DecisionOutcome(decision=prior.decision, first=False, committed=prior.copy)
        if not req.from_transaction_check and rejects_late_decision(
            half.properties, half.born_timestamp_ms, now, timeout_ms
        ):
            raise error(
                errors_pb2.CODE_TRANSACTION_EXPIRED,
                "the half message is past its check immunity time; its state is decided by the transaction check",
                transaction_id=txid,
            )
        known = Known(req.decision, None, {half.queue_offset})
        local[txid] = known
        entries.append(OpEntry(half.queue_offset, txid, req.decision))
        store_metrics.DECISIONS.labels(decision=word, outcome="first").inc()
        out = DecisionOutcome(decision=req.decision, first=True)
        if req.decision == OP_COMMIT:
            copies.append((index, _committed_copy(half)))
        return out

    def _half(self, commit_log_offset: int, txid: str) -> StoredMessage:
        try:
            half = self._store.reader.view_message(commit_log_offset)
        except TxmqError as err:
            if err.code not in (errors_pb2.CODE_MESSAGE_NOT_FOUND, errors_pb2.CODE_ILLEGAL_OFFSET):
                raise
            half = None
        if half is None or half.topic != TRANS_HALF_TOPIC:
            raise error(
                errors_pb2.CODE_TRANSACTION_NOT_FOUND,
                f"no half message at commit-log offset {commit_log_offset}",
                transaction_id=txid,
                commit_log_offset=str(commit_log_offset),
            )
        return half

    # -- the check loop's writes -----------------------------------------------------

    def walked(self, records: Sequence[StoredMessage]) -> None:
        """The check loop read ``records`` of the half queue; the newest are kept for
        its next RequeueHalves (at most ``_WALKED_MAX`` records, ``_WALKED_MAX_BYTES``)."""
        walked = self._walked
        for m in records:
            old = walked.pop(m.commit_log_offset, None)
            if old is not None:
                self._walked_bytes -= old.store_size
            walked[m.commit_log_offset] = m
            self._walked_bytes += m.store_size
        while walked and (len(walked) > _WALKED_MAX or self._walked_bytes > _WALKED_MAX_BYTES):
            self._walked_bytes -= walked.pop(next(iter(walked))).store_size

    def _walked_half(self, commit_log_offset: int) -> StoredMessage:
        """The half record at ``commit_log_offset``: the one the walk read, while the
        commit log's header there still names it (same size, body CRC, offset and
        store time: a log cut back and written again since holds another record), else
        read (``_half``)."""
        m = self._walked.pop(commit_log_offset, None)
        if m is not None:
            self._walked_bytes -= m.store_size
            head = self._store.commitlog.read(commit_log_offset, HEADER_SIZE)
            if (
                head is not None
                and len(head) == HEADER_SIZE
                and read_size_and_magic(head) == (m.store_size, MESSAGE_MAGIC)
                and _BODY_CRC.unpack_from(head, BODY_CRC_AT)[0] == m.body_crc
                and _PHYSICAL.unpack_from(head, PHYSICAL_OFFSET_AT)[0] == commit_log_offset
                and read_store_timestamp(head) == m.store_timestamp_ms
            ):
                return m
        return self._half(commit_log_offset, "")

    async def requeue(
        self,
        actions: Sequence[HalfAction],
        *,
        epoch: int = 0,
        half_queue_id: int = HALF_QUEUE_ID,
        born_host: str = "",
    ) -> list[ActionOutcome]:
        store = self._store
        await store.admit_fence(epoch, half_queue_id)
        self._added = []
        outcomes: list[ActionOutcome] = []
        copies: list[tuple[int, OutgoingMessage]] = []
        entries: list[OpEntry] = []
        settled: dict[str, Known] = {}
        for i, act in enumerate(actions):
            out = ActionOutcome()
            try:
                half = self._walked_half(act.commit_log_offset)
                if act.action not in (CHECK, WAIT, IMMUNITY, DISCARD):
                    raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"unknown requeue action {act.action}")
                prior = self._prior(half.unique_id, half) if half.unique_id else None
            except TxmqError as err:
                out.error = err
                outcomes.append(out)
                continue
            if prior is not None:
                out.decided = prior.decision
                if half.queue_offset not in prior.op_offsets:
                    entries.append(OpEntry(half.queue_offset, half.unique_id, prior.decision))
                    self._promise(prior, half.queue_offset)
                    settled[half.unique_id] = prior
                    store_metrics.DECISIONS.labels(decision=_WORD[prior.decision], outcome="settled").inc()
            else:
                copies.append((i, _put_back(half, act)))
            outcomes.append(out)
        if not copies and not entries:
            return outcomes
        messages = [m for _, m in copies]
        if entries:
            messages.append(_op_message(entries))
        appended = self._append(messages, born_host)
        for (i, msg), offset, queue_offset in zip(copies, appended.offsets, appended.queue_offsets, strict=False):
            out = outcomes[i]
            out.commit_log_offset = offset
            out.queue_offset = queue_offset
            out.store_timestamp_ms = appended.store_timestamp_ms
            out.properties = dict(msg.properties)
        for txid, known in settled.items():
            known.end = max(known.end, appended.end)
            self._remember(txid, known)
        await store.sender.settle(appended)
        return outcomes


def _validate(req: DecisionRequest, half: StoredMessage) -> None:
    wrong = []
    if half.unique_id != req.transaction_id:
        wrong.append("transaction id")
    if half.properties.get(PROPERTY_PRODUCER_GROUP) != req.producer_group:
        wrong.append("producer group")
    if half.queue_offset != req.tran_state_table_offset:
        wrong.append("transaction state table offset")
    if wrong:
        raise error(
            errors_pb2.CODE_TRANSACTION_MISMATCH,
            f"END_TRANSACTION does not match the half message: wrong {', '.join(wrong)}",
            transaction_id=req.transaction_id,
        )


def _origin(half: StoredMessage) -> int:
    """The commit-log offset of the transaction's first half record: a put-back copy
    made here carries it as its prepared-transaction offset; a copy without it (made by
    older txmq, or resumed by an admin) counts as old (0: the index is asked)."""
    if not _PUT_BACK.isdisjoint(half.properties):
        return half.prepared_transaction_offset
    return half.commit_log_offset


def _location(m: StoredMessage) -> CopyLocation:
    return CopyLocation(
        m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.store_timestamp_ms, m.unique_id, m.tags,
        tuple(m.keys), m.sys_flag, m.prepared_transaction_offset,
    )  # fmt: skip


def _committed_copy(half: StoredMessage) -> OutgoingMessage:
    """What a commit stores on the real topic/queue: same body, tags, keys, properties
    (REAL_TOPIC/REAL_QID removed) and unique id, sysflag COMMIT_TYPE, prepared-transaction
    offset = the half record's commit-log offset."""
    props = dict(half.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, "")
    try:
        queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0"))
    except ValueError:
        queue_id = 0
    out = OutgoingMessage(
        topic, half.body, half.tags, tuple(half.keys), props, half.unique_id, half.flag, queue_id,
        half.born_timestamp_ms,
    )  # fmt: skip
    out.sys_flag = (half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE
    out.reconsume_times = half.reconsume_times
    out.prepared_transaction_offset = half.commit_log_offset
    return out


def _put_back(half: StoredMessage, act: HalfAction) -> OutgoingMessage:
    """A copy of a half record for the tail of the half queue (or the discard topic):
    same body, properties, unique id and born time; transaction bits cleared."""
    props = dict(half.properties)
    topic = TRANS_HALF_TOPIC
    times, waits = check_counts(props)
    if act.action == CHECK:
        props[PROPERTY_CHECK_TIMES] = str(times + 1)
    elif act.action == WAIT:
        props[PROPERTY_CHECK_WAITS] = str(waits + 1)
    elif act.action == IMMUNITY:
        props.setdefault(PROPERTY_PREPARED_QUEUE_OFFSET, str(half.queue_offset))
    else:
        topic = TRANS_CHECK_MAX_TIME_TOPIC
        props[PROPERTY_DISCARD_REASON] = act.reason or "discarded"
    out = OutgoingMessage(
        topic, half.body, half.tags, tuple(half.keys), props, half.unique_id, half.flag, 0, half.born_timestamp_ms
    )
    out.sys_flag = half.sys_flag & ~TRANSACTION_TYPE_MASK
    out.reconsume_times = half.reconsume_times
    # Where the transaction's first half record is (``_origin``), kept by every copy.
    out.prepared_transaction_offset = _origin(half)
    return out


def _op_message(entries: list[OpEntry]) -> OutgoingMessage:
    """One op message for a batch of decisions (RocketMQ 5: offsets joined by ',')."""
    return OutgoingMessage(
        TRANS_OP_HALF_TOPIC,
        encode_op_body(entries),
        OP_TAG,
        tuple(dict.fromkeys(e.transaction_id for e in entries if e.transaction_id)),
        {PROPERTY_OP_DECISIONS: encode_op_decisions(entries)},
        "",
        0,
        0,
        0,
    )
