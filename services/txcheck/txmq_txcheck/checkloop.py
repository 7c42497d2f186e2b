"""The transaction check loop (RocketMQ TransactionalMessageServiceImpl.check and
TransactionalMessageCheckService), for one store, with an injectable clock.

One round walks the half queue from the check group's progress (CID_SYS_RMQ_TRANS):

- a half offset named by an op message (the removeMap) is resolved: skip;
- checked ``check_max`` times already, or older than the file retention: discard to
  TRANS_CHECK_MAX_TIME_TOPIC (nothing vanishes; ``resume`` brings it back);
- stored after the round began: stop;
- younger than its immunity: stop, unless it set its own immunity (then skip if its
  original offset is resolved, else put it back unchanged, check count kept);
- otherwise, if the op queue cannot prove it resolved: put it back at the tail with
  TRANSACTION_CHECK_TIMES + 1 and send a check to a live producer of its group.

Differences from RocketMQ (docs/transactions.md): an immunity put-back does not use up a
check (#8311); rounds never overlap (#9322); a failure mid-queue saves the progress made
so far instead of freezing it (#9500); no live producer of the group -> the put-back
keeps the count (a wait is counted in TXMQ_CHECK_WAITS), until
``transaction_wait_max_ms`` (then discarded, resumable: #1543); a transaction the store
proves decided (committed copy or op by id) is settled, not checked again.

The walk only decides; the store acts. What the walk decided for up to
``check_batch_max`` half records goes to the store in one RequeueHalves call (put back
for a check, for a wait, for immunity; discard; the store settles a decided transaction
instead), then the checks go to the producers in one batch per group. Every write
carries the leader's epoch (``epoch``): a loop whose leadership moved on is refused by
the store (CODE_FENCED), stops, and saves no progress.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from txmq.errors import TxmqError, error
from txmq.protocol import (
    HALF_QUEUE_ID,
    PROPERTY_CHECK_TIMES,
    PROPERTY_DISCARD_REASON,
    PROPERTY_PREPARED_QUEUE_OFFSET,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_TYPE_MASK,
    check_counts,
    immunity_ms,
)
from txmq.v1 import common_pb2, errors_pb2, store_pb2, txcheck_pb2
from txmq_runtime.clock import WallClock
from txmq_txcheck.ledger import Ledger, parse_op_entries
from txmq_txcheck.store_client import StoreClient

log = logging.getLogger("txmq.txcheck.loop")

Clock = WallClock  # milliseconds since the epoch (txmq_runtime.clock's rule)
PULL_BATCH = 32
# Half records read per GetMessage by the walk, at most: a run of records the removeMap
# does not show resolved is read in one call up to this many (check_batch_max's default:
# what one RequeueHalves acts on); at least PULL_BATCH, as before (the store caps a batch
# by bytes too).
HALF_PULL_BATCH = 256
# RocketMQ MAX_RETRY_COUNT_WHEN_HALF_NULL / OP pulls: small bounds per round.
_MAX_EMPTY_OP_PULLS = 1

FOUND = 1
OFFSET_TOO_SMALL = 7
_END = {4, 5, 6, 9}  # found null, overflow badly / one, no message in queue


@dataclass(frozen=True, slots=True)
class CheckSettings:
    transaction_timeout_ms: int = 6_000
    check_max: int = 15
    max_process_time_per_queue_ms: int = 60_000
    file_reserved_time_ms: int = 72 * 3600 * 1000
    # Half records acted on per store call (and checks per batch sent to a producer).
    check_batch_max: int = 256
    # A half that has waited for a live producer of its group longer than this (since
    # its birth) is discarded (resumable): waiting put-backs do not grow the half topic
    # for ever while a group has no producer (RocketMQ #1543).
    transaction_wait_max_ms: int = 3_600_000
    # How long delivering one batch of checks may take before the loop moves on.
    check_send_timeout_ms: int = 3_000


class CheckSender(Protocol):
    def has_live_producer(self, group: str) -> bool: ...

    async def send_checks(self, group: str, checks: list[txcheck_pb2.CheckTransactionState]) -> int:
        """Deliver ``checks`` to live producers of ``group``; how many were delivered."""
        ...


@dataclass(slots=True)
class RoundReport:
    """What one round did, per kind (for logs and tests)."""

    half_offset_before: int = 0
    half_offset_after: int = 0
    op_offset_before: int = 0
    op_offset_after: int = 0
    checked: list[str] = field(default_factory=list)  # transaction ids
    waited: list[str] = field(default_factory=list)  # no live producer
    immunity_put_back: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)
    skipped_resolved: list[int] = field(default_factory=list)  # half offsets
    settled: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # "<topic>:<queue offset>" skipped
    saturated: set[str] = field(default_factory=set)  # groups that took no more checks
    error: str | None = None


def renewed_half(
    view: common_pb2.MessageView, *, set_props: dict[str, str] | None = None, topic: str = TRANS_HALF_TOPIC
) -> store_pb2.SystemMessage:
    """A copy of a half record for the tail of the half queue (or another topic): same
    body, properties, unique id and born time; transaction bits cleared."""
    m = view.message
    props = dict(m.properties)
    props.update(set_props or {})
    return store_pb2.SystemMessage(
        message=common_pb2.Message(
            topic=topic,
            queue_id=0,
            body=m.body,
            tags=m.tags,
            keys=list(m.keys),
            properties=props,
            unique_id=m.unique_id,
            flag=m.flag,
            born_timestamp_ms=m.born_timestamp_ms,
        ),
        sys_flag=view.sys_flag & ~TRANSACTION_TYPE_MASK,
        reconsume_times=view.reconsume_times,
    )


def check_state(view: common_pb2.MessageView, store_id: str) -> txcheck_pb2.CheckTransactionState:
    """A check for ``view``: the message as its producer sent it (real topic and queue,
    as RocketMQ's sendCheckMessage restores them), with the offsets of this half record."""
    state = txcheck_pb2.CheckTransactionState(
        transaction_id=view.message.unique_id,
        commit_log_offset=view.commit_log_offset,
        tran_state_table_offset=view.queue_offset,
        store_id=store_id,
    )
    msg = state.message
    msg.CopyFrom(view)  # the only copy: the fields below are set on it
    props = msg.message.properties
    if PROPERTY_REAL_TOPIC in props:
        msg.message.topic = props[PROPERTY_REAL_TOPIC]
    try:
        msg.message.queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, "0"))
    except ValueError:
        pass
    return state


class _OpState:
    """removeMap and the op offsets fully consumed (RocketMQ fillOpRemoveMap)."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.next = start
        self.remove: dict[int, int] = {}  # half offset -> op queue offset
        self.remaining: dict[int, set[int]] = {}  # op queue offset -> half offsets left
        self.done: set[int] = set()
        self.last_born_ms: int | None = None
        self.exhausted = False

    def mark(self, half_offset: int) -> None:
        op = self.remove.pop(half_offset)
        left = self.remaining.get(op)
        if left is not None:
            left.discard(half_offset)
            if not left:
                del self.remaining[op]
                self.done.add(op)

    def new_offset(self) -> int:
        """The first op offset not fully done (RocketMQ calculateOpOffset)."""
        off = self.start
        while off in self.done:
            off += 1
        return off


@dataclass(slots=True)
class _Pending:
    """A half record the walk decided to act on; stored by the next flush."""

    view: common_pb2.MessageView
    action: store_pb2.RequeueAction
    reason: str = ""


class Fenced(Exception):
    """The store refused this loop's write: a newer leader's epoch was seen (CODE_FENCED)."""


class CheckLoop:
    def __init__(
        self,
        store: StoreClient,
        ledger: Ledger,
        sender: CheckSender,
        *,
        clock: Clock,
        settings: CheckSettings = CheckSettings(),
        store_id: str = "",
        epoch: int = 0,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.sender = sender
        self._clock = clock
        self.settings = settings
        self.store_id = store_id or store.store_id
        # The leadership's fencing token: every write of this loop carries it; 0: unfenced.
        self.fence = store_pb2.Fence(epoch=epoch, half_queue_id=HALF_QUEUE_ID) if epoch else None
        self.fenced = False
        self._damaged: set[str] = set()  # "<topic>:<queue offset>" already reported
        self._running = False
        self.rounds = 0
        self.store_calls = 0  # RequeueHalves calls (tests, benchmarks)

    @property
    def running(self) -> bool:
        return self._running

    async def check_once(self) -> RoundReport | None:
        """One round over the half queue; None when a round is already running (rounds
        never overlap, RocketMQ #9322) or the loop was fenced."""
        if self._running or self.fenced:
            return None
        self._running = True
        try:
            self.rounds += 1
            return await self._round(HALF_QUEUE_ID)
        finally:
            self._running = False

    async def run(self, interval_ms: int, stop: asyncio.Event) -> None:
        """Every ``interval_ms``: a round (RocketMQ waits first, then checks). Ends when
        the store fences this loop (a newer leader took over)."""
        while not stop.is_set() and not self.fenced:
            try:
                await asyncio.wait_for(stop.wait(), interval_ms / 1000)
                return
            except TimeoutError:
                pass
            try:
                report = await self.check_once()
                if report is not None and (report.checked or report.discarded or report.error):
                    log.info(
                        "check round on %s: checked %d, waited %d, discarded %d%s",
                        self.store_id, len(report.checked), len(report.waited), len(report.discarded),
                        f", stopped early: {report.error}" if report.error else "",
                    )  # fmt: skip
            except TxmqError as err:
                if not err.retriable:
                    log.exception("check round on %s failed", self.store_id)
                else:  # the store is restarting or unreachable: the next round tries again
                    log.warning("check round on %s failed: %s", self.store_id, err)
            except Exception:
                log.exception("check round on %s failed", self.store_id)

    def _on_fenced(self, err: TxmqError) -> Fenced:
        if not self.fenced:
            self.fenced = True
            log.warning(
                "check loop of store %s fenced: %s; this replica no longer leads it and stops its check loop",
                self.store_id, err.message,
            )  # fmt: skip
        return Fenced(err.message)

    async def _progress(self, topic: str, queue_id: int) -> int:
        found = await self.store.query_consume_offset(topic, queue_id)
        return 0 if found is None else found

    async def _round(self, queue_id: int) -> RoundReport:
        s = self.settings
        start = self._clock()
        half_offset = await self._progress(TRANS_HALF_TOPIC, queue_id)
        op_offset = await self._progress(TRANS_OP_HALF_TOPIC, queue_id)
        report = RoundReport(half_offset, half_offset, op_offset, op_offset)
        ops = _OpState(op_offset)
        new_offset = half_offset
        pending: list[_Pending] = []
        # Half offset of the first action not yet stored: the progress never passes it.
        first_unstored: int | None = None
        try:
            ops.exhausted = not await self._fill(ops, queue_id, half_offset, report)
            cache: dict[int, common_pb2.MessageView] = {}
            i = half_offset
            while True:
                if len(pending) >= s.check_batch_max:
                    await self._flush(pending, report)
                    pending, first_unstored = [], None
                if self._clock() - start > s.max_process_time_per_queue_ms:
                    break
                if i in ops.remove:
                    ops.mark(i)
                    report.skipped_resolved.append(i)
                    new_offset = i = i + 1
                    continue
                msg = cache.get(i)
                if msg is None:
                    r = await self._get(TRANS_HALF_TOPIC, queue_id, i, report, _unresolved_run(i, ops.remove))
                    if r is None:  # a damaged record at i: stepped over
                        new_offset = i = i + 1
                        continue
                    if r.status == FOUND and r.messages:
                        cache = {m.queue_offset: m for m in r.messages}
                        msg = cache.get(i)
                        if msg is None and min(cache) > i:
                            new_offset = i = min(cache)  # removed records: jump
                            continue
                    if msg is None:
                        if r.status == FOUND or r.status in _END or r.next_begin_offset <= i:
                            break
                        new_offset = i = r.next_begin_offset  # removed / too small: jump
                        continue
                now = self._clock()
                if msg.store_timestamp_ms >= start:
                    # Before the discard test (RocketMQ tests it after): the copy put back
                    # by this round's last check is not discarded before its answer can come.
                    break
                action = self._due(msg, now, start, ops, report)
                if action is _LOOK_FURTHER:
                    if not await self._fill(ops, queue_id, half_offset, report):
                        ops.exhausted = True
                    continue  # look at offset i again with more of the op queue
                if action is _STOP:
                    break
                if isinstance(action, _Pending):
                    pending.append(action)
                    if first_unstored is None:
                        first_unstored = i
                new_offset = i = i + 1
            await self._flush(pending, report)
            pending, first_unstored = [], None
        except Fenced as exc:
            report.error = f"fenced: {exc}"
            return report  # a newer leader owns the progress now: save nothing
        except Exception as exc:  # noqa: BLE001 - isolate: save what was done (#9500)
            if first_unstored is not None:
                new_offset = min(new_offset, first_unstored)
            log.warning("check round on %s stopped at half offset %d: %s", self.store_id, new_offset, exc)
            report.error = f"{type(exc).__name__}: {exc}"
        await self._save(report, queue_id, half_offset, new_offset, ops)
        return report

    def _due(self, msg: common_pb2.MessageView, now: int, start: int, ops: _OpState, report: RoundReport) -> object:
        """What the walk does with the half record ``msg``: a ``_Pending`` action, None
        (resolved: skip it), ``_STOP`` (too young: the round ends here) or
        ``_LOOK_FURTHER`` (read more of the op queue first)."""
        s = self.settings
        times, waits = check_counts(msg.message.properties)
        age_stored = now - msg.store_timestamp_ms
        if times >= s.check_max or age_stored > s.file_reserved_time_ms:
            reason = "check max" if times >= s.check_max else "file reserved time"
            return _Pending(msg, store_pb2.REQUEUE_ACTION_DISCARD, reason)
        age = now - msg.message.born_timestamp_ms
        immunity, own = immunity_ms(msg.message.properties, s.transaction_timeout_ms)
        if 0 <= age < immunity:
            if not own:
                return _STOP
            original = _prepared_offset(msg)
            if original in ops.remove:
                ops.mark(original)
                report.skipped_resolved.append(msg.queue_offset)
                return None
            # Kept checkable past the progress, count unchanged (#8311); a decided one
            # is settled by the store instead (its op names an offset below the
            # progress, which the removeMap never holds).
            return _Pending(msg, store_pb2.REQUEUE_ACTION_IMMUNITY)
        last = ops.last_born_ms
        need_check = (
            (ops.exhausted and age > immunity)
            or (last is not None and last - start > s.transaction_timeout_ms)
            or age <= -1
        )
        if not need_check:
            return _LOOK_FURTHER
        group = _group(msg)
        if self.sender.has_live_producer(group):
            return _Pending(msg, store_pb2.REQUEUE_ACTION_CHECK)
        if waits and age > s.transaction_wait_max_ms:
            return _Pending(msg, store_pb2.REQUEUE_ACTION_DISCARD, f"no live producer of {group}")
        return _Pending(msg, store_pb2.REQUEUE_ACTION_WAIT)

    async def _flush(self, pending: list[_Pending], report: RoundReport) -> None:
        """Store the walk's actions in one RequeueHalves call, then send the checks."""
        if not pending:
            return
        actions = [
            store_pb2.HalfAction(commit_log_offset=p.view.commit_log_offset, action=p.action, reason=p.reason)
            for p in pending
        ]
        self.store_calls += 1
        try:
            results = await self.store.requeue(actions, fence=self.fence)
        except TxmqError as err:
            if err.code == errors_pb2.CODE_FENCED:
                raise self._on_fenced(err) from None
            raise
        checks: dict[str, list[txcheck_pb2.CheckTransactionState]] = {}
        at = self._clock()
        timeline = self.ledger.timeline
        for p, r in zip(pending, results, strict=True):
            txid = p.view.message.unique_id
            group = _group(p.view)
            if r.HasField("error"):
                where = f"{TRANS_HALF_TOPIC}:{p.view.queue_offset}"
                if where not in self._damaged:
                    self._damaged.add(where)
                    log.error("store %s refused to act on half %s: %s", self.store_id, where, r.error.message)
                report.damaged.append(where)
                continue
            if r.decided:
                report.settled.append(txid)
                continue
            if p.action == store_pb2.REQUEUE_ACTION_CHECK:
                # The walk is past this record: its view becomes the put-back copy's
                # in place (check_state copies it once).
                fresh = p.view
                fresh.message.properties.clear()
                fresh.message.properties.update(r.properties)
                fresh.queue_offset = r.queue_offset
                fresh.commit_log_offset = r.commit_log_offset
                fresh.store_timestamp_ms = r.store_timestamp_ms
                checks.setdefault(group, []).append(check_state(fresh, self.store_id))
                report.checked.append(txid)
                timeline.record(txid, at, "check_sent", f"check {r.properties.get(PROPERTY_CHECK_TIMES)} to {group}")
            elif p.action == store_pb2.REQUEUE_ACTION_WAIT:
                report.waited.append(txid)
                timeline.record(txid, at, "check_waiting", f"no live producer of {group}")
            elif p.action == store_pb2.REQUEUE_ACTION_IMMUNITY:
                report.immunity_put_back.append(txid)
            else:
                report.discarded.append(txid)
                timeline.record(txid, at, "discarded", p.reason)
                log.warning(
                    "transaction %s (group %s) discarded to %s: %s", txid, group, TRANS_CHECK_MAX_TIME_TOPIC, p.reason
                )
        for group, states in checks.items():
            await self._send(group, states, report)

    async def _send(self, group: str, states: list[txcheck_pb2.CheckTransactionState], report: RoundReport) -> None:
        """Deliver a batch of checks. Bounded: producers of the group that take none of
        it within ``check_send_timeout_ms`` (they answer slower than they are asked)
        mark the group saturated for the rest of the round; its further checks are not
        sent (their put-backs still count, as RocketMQ's dropped checks do), so one slow
        group neither stalls the round nor grows txcheck's memory."""
        if group in report.saturated:
            return
        try:
            async with asyncio.timeout(self.settings.check_send_timeout_ms / 1000):
                sent = await self.sender.send_checks(group, states)
        except TimeoutError:
            report.saturated.add(group)
            log.info(
                "producers of %s take no more checks (%d not sent); no more are sent to them this round",
                group, len(states),
            )  # fmt: skip
            return
        except Exception:
            log.exception("sending %d checks to group %s failed", len(states), group)
            return
        if sent < len(states):
            log.info("%d of %d checks found no live producer of %s", len(states) - sent, len(states), group)

    async def _save(self, report: RoundReport, queue_id: int, half_before: int, half_after: int, ops: _OpState) -> None:
        try:
            if half_after != half_before:
                await self.store.commit_consume_offset(TRANS_HALF_TOPIC, queue_id, half_after, fence=self.fence)
            report.half_offset_after = half_after
            op_after = ops.new_offset()
            if op_after != ops.start:
                await self.store.commit_consume_offset(TRANS_OP_HALF_TOPIC, queue_id, op_after, fence=self.fence)
            report.op_offset_after = op_after
        except TxmqError as err:
            if err.code == errors_pb2.CODE_FENCED:
                self._on_fenced(err)
            log.warning("saving check progress on %s failed: %s", self.store_id, err)
            report.error = report.error or f"{type(err).__name__}: {err}"
        except Exception as exc:  # noqa: BLE001 - next round starts from the saved offsets
            log.warning("saving check progress on %s failed: %s", self.store_id, exc)
            report.error = report.error or f"{type(exc).__name__}: {exc}"

    async def _fill(self, ops: _OpState, queue_id: int, half_offset: int, report: RoundReport) -> bool:
        """Load up to 32 more op messages into the removeMap; False when none came."""
        r = await self._get(TRANS_OP_HALF_TOPIC, queue_id, ops.next, report)
        while r is None:  # a damaged op message: its decisions are unknown, so the halves
            ops.done.add(ops.next)  # it named are checked again (a decision is idempotent)
            ops.next += 1
            r = await self._get(TRANS_OP_HALF_TOPIC, queue_id, ops.next, report)
        if r.status == OFFSET_TOO_SMALL and r.next_begin_offset > ops.next:
            ops.next = ops.start = r.next_begin_offset
            r = await self.store.get(TRANS_OP_HALF_TOPIC, queue_id, ops.next, PULL_BATCH)
        if r.status != FOUND or not r.messages:
            return False
        for m in r.messages:
            entries = [e.half_offset for e in parse_op_entries(m)]
            left = {h for h in entries if h >= half_offset}
            if not left:
                ops.done.add(m.queue_offset)
            else:
                ops.remaining[m.queue_offset] = left
                for h in left:
                    ops.remove[h] = m.queue_offset
            ops.last_born_ms = m.message.born_timestamp_ms or m.store_timestamp_ms
        ops.next = r.next_begin_offset
        return True

    async def _get(
        self, topic: str, queue_id: int, offset: int, report: RoundReport, max_messages: int = PULL_BATCH
    ) -> store_pb2.GetMessageResponse | None:
        """A batch of the half or op queue from ``offset``; None when the record at
        ``offset`` is damaged on disk (CODE_DATA_CORRUPTED: the store serves the intact
        records before a damaged one and refuses a read that starts at it). The loop
        steps over it instead of stopping at it every round: one ERROR line per record."""
        try:
            return await self.store.get(topic, queue_id, offset, max_messages)
        except TxmqError as err:
            if err.code != errors_pb2.CODE_DATA_CORRUPTED or err.metadata.get("queue_offset") != str(offset):
                raise
        where = f"{topic}:{offset}"
        if where not in self._damaged:
            self._damaged.add(where)
            log.error(
                "store %s: the %s record at queue offset %d is damaged on disk; the check loop steps over it%s",
                self.store_id, topic, offset,
                " (its transaction can no longer be checked)" if topic == TRANS_HALF_TOPIC else
                " (the halves it decided are checked again)",
            )  # fmt: skip
        report.damaged.append(where)
        return None


_LOOK_FURTHER = object()
_STOP = object()


def _unresolved_run(offset: int, remove: dict[int, int]) -> int:
    """Half records to read from ``offset``: PULL_BATCH, or more while the removeMap
    shows none of them resolved (those are skipped without a read), up to
    HALF_PULL_BATCH."""
    n = PULL_BATCH
    while n < HALF_PULL_BATCH and offset + n not in remove:
        n += 1
    return n


def _group(msg: common_pb2.MessageView) -> str:
    return msg.message.properties.get(PROPERTY_PRODUCER_GROUP, "")


def _int(raw: str | None) -> int:
    try:
        return int(raw or "0")
    except ValueError:
        return 0


def _prepared_offset(msg: common_pb2.MessageView) -> int:
    raw = msg.message.properties.get(PROPERTY_PREPARED_QUEUE_OFFSET)
    return msg.queue_offset if raw is None else _int(raw)


def discarded_copy(views: list[common_pb2.MessageView]) -> common_pb2.MessageView | None:
    """The copy in TRANS_CHECK_MAX_TIME_TOPIC when that is where the transaction is now:
    its latest discard was stored after its latest half record (a resumed transaction
    has a newer half record and is not discarded until discarded again). ``views``: all
    records of the transaction id on one store."""
    discards = [v for v in views if v.message.topic == TRANS_CHECK_MAX_TIME_TOPIC]
    if not discards:
        return None
    last = max(discards, key=lambda v: v.commit_log_offset)
    halves = [v.commit_log_offset for v in views if v.message.topic == TRANS_HALF_TOPIC]
    if halves and max(halves) > last.commit_log_offset:
        return None
    return last


async def resume(store: StoreClient, transaction_id: str, ledger: Ledger) -> common_pb2.MessageView:
    """Bring a discarded transaction back to the half queue with its check count reset,
    so the check loop asks its producers again. Refused when it is decided
    (TRANSACTION_ALREADY_RESOLVED) or not discarded now (TRANSACTION_NOT_FOUND)."""
    async with ledger.lock(transaction_id):
        decided = await ledger.decision_of(transaction_id)
        if decided is not None:
            raise error(
                errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED,
                f"transaction {transaction_id} is already resolved",
                transaction_id=transaction_id,
            )
        last = discarded_copy(await store.by_unique_id(transaction_id))
        if last is None:
            raise error(
                errors_pb2.CODE_TRANSACTION_NOT_FOUND,
                f"transaction {transaction_id} is not among the discarded transactions"
                + (f" of store {store.store_id}" if store.store_id else ""),
                transaction_id=transaction_id,
            )
        props = dict(last.message.properties)
        props.pop(PROPERTY_DISCARD_REASON, None)
        props[PROPERTY_CHECK_TIMES] = "0"
        view = common_pb2.MessageView()
        view.CopyFrom(last)
        view.message.properties.clear()
        view.message.properties.update(props)
        results = await store.put([renewed_half(view)], producer_group=props.get(PROPERTY_PRODUCER_GROUP, ""))
        stored = await store.view(results[0].commit_log_offset)
    at = stored.store_timestamp_ms if stored is not None else 0
    ledger.timeline.record(transaction_id, at, "resumed", "checks resumed by an admin")
    return stored or view
