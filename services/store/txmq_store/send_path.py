"""The send path: how a batch becomes records in the commit log and then visible.

One send, top to bottom (every producer path: SendMessage, SendBatch, SendStream /
SendRecords, the transaction service's system messages, timer deliveries):

1. ``append_records`` (messages) or ``append_packed`` (records a producer encoded,
   ``Store.SendStream``) validates the whole batch first: the store takes writes
   (``check_writable``), batch limits, topic (created when allowed) and queue per
   message, a retry the idempotence window answers, a delay (the record goes to the
   timer queue) or a half message (to the half topic). Nothing is stored on a bad
   request.
2. ``_append_prepared`` appends it, with no await between validation and append (queue
   offsets follow commit-log order): the free-space floor, new topics, queue offsets
   (``WriteQueues``), consume-queue files, one ``CommitLog.append``; a failed write
   stores nothing.
3. Dispatch (consume queues, index, arrivals; dispatch.py) follows at once under async
   flush; under sync flush after the group commit's fsync (``dispatch_durable``); in a
   replicated group once the high watermark covers it (the ``ReplicaGate``).
4. ``settle`` waits per the flush mode (and for the in-sync replicas), and ``results``
   builds the answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from txmq.errors import error
from txmq.ids import encode_offset_msg_id
from txmq.protocol import (
    DELAY_PROPERTIES,
    PROPERTY_PRIORITY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OFFSET,
    TIMER_QUEUE_ID,
    TIMER_TOPIC,
    is_priority_topic,
)
from txmq.records import ANY_QUEUE
from txmq.v1 import errors_pb2

from . import metrics as store_metrics
from .admin import ConfigAdmin, not_found
from .codec import UNKNOWN_HOST, CorruptRecord, PreparedRecord, encode_host, set_queue_id, split_host_port
from .commitlog import CommitLog
from .configs import TRANS_HALF_TOPIC, TopicConfig, WriteQueues, is_system_topic
from .dispatch import Dispatcher
from .flush import GroupCommit, PeriodicFlusher
from .idempotence import FirstSend, SendWindow
from .integrity import FreeSpaceGuard, disk_full, is_disk_full
from .model import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    TRANSACTION_TYPE_MASK,
    OutgoingMessage,
    SendResult,
    SendStatus,
    StoredMessage,
)
from .priority import priority_queue, refuse_priority
from .settings import StoreSettings
from .timer import delivery_time
from .validation import MessageEncoder, MessageLimits, check_group_name, check_topic_name

log = logging.getLogger("txmq.store")


@dataclass(slots=True)
class Appended:
    """A batch ``SendPath.append_records`` wrote: the records, their commit-log and
    queue offsets, for half messages (and for every record of a batch with delayed ones)
    the queue each is meant for, the commit log's end after the batch and the store time
    given to them. ``deliver_at``: per record, when a delayed one becomes visible (0: not
    delayed); empty when none is delayed."""

    records: list[PreparedRecord]
    offsets: list[int]
    queue_offsets: list[int]
    real_queues: list[tuple[str, int]]
    end: int
    store_timestamp_ms: int
    deliver_at: list[int] = field(default_factory=list)
    # Idempotent sends: messages of the batch answered with an earlier send's record
    # instead of being stored (``records`` and the lists above hold the others).
    duplicates: list[FirstSend] = field(default_factory=list)

    def reported_queue_offsets(self) -> list[int]:
        """Queue offsets as answered: -1 for a delayed record (it has none until it is
        delivered; its offset here is the timer queue's)."""
        if not self.deliver_at:
            return self.queue_offsets
        return [-1 if at else q for q, at in zip(self.queue_offsets, self.deliver_at, strict=True)]


class ReplicaGate(Protocol):
    """What the send path needs of a replicated group's replica (replica.Replica)."""

    def check_leads(self) -> None:
        """Raise unless this replica takes writes now."""
        ...

    def appended(self, end: int) -> None:
        """The leader appended up to ``end`` (held in ``_undispatched`` until the high
        watermark covers it)."""
        ...

    def durable(self, offset: int) -> None:
        """Sync flush: the log is fsynced up to ``offset``."""
        ...

    async def wait_replicated(self, end: int) -> SendStatus:
        """Wait until the in-sync replicas hold everything up to ``end``."""
        ...


class SendPath:
    """Sends, from validation to the answers. ``check_open`` raises once the store is
    closing; ``gate`` is the replica of a replicated group (None: a store alone)."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        clock: Callable[[], int],
        commitlog: CommitLog,
        dispatcher: Dispatcher,
        admin: ConfigAdmin,
        queues: WriteQueues,
        check_open: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._commitlog = commitlog
        self._dispatcher = dispatcher
        self._admin = admin
        self._topics = admin.topics
        self._queues = queues
        self._check_open = check_open
        self.gate: ReplicaGate | None = None
        self._sync = settings.flush_mode == "sync"
        self._limits = MessageLimits(
            max_body_bytes=settings.max_message_body_bytes,
            max_properties_bytes=settings.max_properties_bytes,
            max_record_bytes=commitlog.max_record_size(),
        )
        self._delay_levels_ms = settings.delay_levels_ms
        self._free_space = FreeSpaceGuard(commitlog.directory, min_free_bytes=settings.disk_min_free_bytes)
        # Idempotent sends (idempotence.py): earlier sends found through the index.
        self._window = SendWindow(settings.idempotence_window_ms, lambda: dispatcher.index, self._read_first)
        # Appended batches waiting for their fsync (sync mode) or the high watermark (a
        # replicated group's leader) before dispatch: (end, records, offsets, queue
        # offsets, store time).
        self._undispatched: deque[tuple[int, list[PreparedRecord], list[int], list[int], int]] = deque()
        self._flusher: PeriodicFlusher | None = None
        self._group_commit: GroupCommit | None = None
        self._store_host = UNKNOWN_HOST
        self._offset_msg_id_prefix = ""
        self.advertised_address = ""
        #: False once a storage error stopped writes (a restart recovers).
        self.writable = True

    def start_flushing(self) -> None:
        if self._sync:
            self._group_commit = GroupCommit(self._commitlog, on_durable=self.dispatch_durable)
            self._group_commit.start()
        else:
            self._flusher = PeriodicFlusher(self._commitlog, interval_s=self._settings.flush_interval_ms / 1000)
            self._flusher.start()

    async def stop_flushing(self) -> None:
        if self._group_commit is not None:
            await self._group_commit.stop()
        if self._flusher is not None:
            await self._flusher.stop()

    def set_store_host(self, host: str, port: int) -> None:
        self._store_host = encode_host(host, port)
        # offsetMsgId = address | port | offset (16 hex digits, last): computed once.
        self._offset_msg_id_prefix = encode_offset_msg_id(host, port, 0)[:-16]
        self.advertised_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def offset_msg_id_prefix(self) -> str:
        """offsetMsgId of commit-log offset N: this prefix + f"{N:016X}"."""
        return self._offset_msg_id_prefix

    # -- 1. validate -----------------------------------------------------------------

    async def send(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        producer_group: str = "",
        transaction_prepared: bool = False,
        born_host: str = "",
        system: bool = False,
    ) -> list[SendResult]:
        """Store a batch (all or nothing). ``system`` sends (the transaction service)
        may write system topics and set sysflag, reconsume times and the
        prepared-transaction offset. A half message's result names its real queue and
        carries the half record's queue offset (RocketMQ tranStateTableOffset)."""
        appended = self.append_records(
            messages,
            producer_group=producer_group,
            transaction_prepared=transaction_prepared,
            born_host=born_host,
            system=system,
        )
        return self.results(appended, await self.settle(appended), transaction_prepared=transaction_prepared)

    async def send_records(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        producer_group: str = "",
        transaction_prepared: bool = False,
        born_host: str = "",
        system: bool = False,
    ) -> tuple[SendStatus, list[PreparedRecord], list[int], list[int], list[tuple[str, int]]]:
        """``send`` without building SendResults (the servicer builds its response from
        these): status, the records, their commit-log offsets, their queue offsets and,
        for half messages, the (topic, queue id) each is meant for."""
        appended = self.append_records(
            messages,
            producer_group=producer_group,
            transaction_prepared=transaction_prepared,
            born_host=born_host,
            system=system,
        )
        status = await self.settle(appended)
        return status, appended.records, appended.offsets, appended.queue_offsets, appended.real_queues

    def append_records(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        producer_group: str = "",
        transaction_prepared: bool = False,
        born_host: str = "",
        system: bool = False,
    ) -> Appended:
        """Validate and append a batch, all or nothing, without awaiting anything: what
        a caller checked right before calling this still holds when the records are in
        the commit log (the store is one event loop). ``settle`` the result next."""
        self.check_writable()
        self._check_send(messages, producer_group, transaction_prepared=transaction_prepared)
        now = self._clock()
        encoder = MessageEncoder(limits=self._limits, born_host=_born_host(born_host), now_ms=now, system=system)
        prepare = encoder.prepare
        new_topics: dict[str, TopicConfig] = {}
        records: list[PreparedRecord] = []
        real_queues: list[tuple[str, int]] = []  # half and delayed messages: the queue it is meant for
        deliver_at: list[int] = []  # filled once a delayed message is met
        cfg: TopicConfig | None = None
        prioritised = False  # cfg is a priority topic
        window = self._window
        duplicates: list[FirstSend] = []
        for i, msg in enumerate(messages):
            if window.enabled and not system:
                first = window.first_send(i, msg.topic, msg.unique_id, now)
                if first is not None:
                    duplicates.append(first)
                    continue
            if cfg is None or cfg.name != msg.topic:  # batches mostly share one topic
                cfg = self._topic_for_send(msg.topic, i, system=system, new_topics=new_topics)
                prioritised = is_priority_topic(cfg.attributes)
            queue_id = msg.queue_id
            if prioritised:
                queue_id = priority_queue(cfg, msg.properties, i, system=system, prepared=transaction_prepared)
            elif msg.properties and PROPERTY_PRIORITY in msg.properties and not system:
                refuse_priority(cfg, i)
            if queue_id is None or not 0 <= queue_id < cfg.write_queue_nums:  # else: as queue_for_send
                queue_id = self._queues.queue_for_send(cfg, queue_id, i)
            at = self._delivery_time(msg, i, now, system=system, transaction_prepared=transaction_prepared)
            if at and not deliver_at:
                deliver_at = [0] * len(records)
                real_queues = [(r.topic, r.queue_id) for r in records]
            if at or deliver_at:
                deliver_at.append(at)
            if deliver_at or transaction_prepared:
                real_queues.append((cfg.name, queue_id))
            if at:
                records.append(_timer_record(prepare, msg, i, cfg.name, queue_id, at))
            elif transaction_prepared:
                records.append(_half_record(prepare, msg, i, cfg.name, queue_id, producer_group, system=system))
            else:
                records.append(prepare(msg, i, cfg.name, queue_id, None, msg.sys_flag if system else 0))
        return self._append_prepared(records, new_topics, real_queues, now, deliver_at, duplicates)

    def append_packed(
        self,
        blob: bytes,
        *,
        born_host: str = "",
        transaction_prepared: bool = False,
        producer_group: str = "",
        may_publish: Callable[[str], None] | None = None,
    ) -> Appended:
        """``append_records`` for records a producer sent in the commit-log layout
        (``Store.SendStream``): each is checked (``MessageEncoder.unpack``) and stored
        as it came, with the fields only the store knows written in. All or nothing.
        ``transaction_prepared``: stored as half messages, which ``append_records`` makes
        (their topic and properties are rewritten, so they are not taken as they came).
        ``may_publish(topic)`` raises when the caller may not publish there (ACLs): called
        once per run of records to one topic, before anything is written."""
        self.check_writable()
        now = self._clock()
        if transaction_prepared:
            halves = self._unpacked_messages(blob, may_publish, now)
            return self.append_records(
                halves, producer_group=producer_group, transaction_prepared=True, born_host=born_host
            )
        frame = bytearray(blob)  # the records are patched in place (one copy of the frame)
        new_topics: dict[str, TopicConfig] = {}
        records: list[PreparedRecord] = []
        cfg: TopicConfig | None = None
        prioritised = False
        total_body = 0
        window = self._window if self._window.enabled else None
        duplicates: list[FirstSend] = []
        for i, pos, rec in self._sent_records(frame, _born_host(born_host), now):
            if window is not None:
                first = window.first_send(i, rec.topic, rec.unique_id, now)
                if first is not None:
                    if may_publish is not None:
                        may_publish(rec.topic)  # answering reveals the first send
                    duplicates.append(first)
                    continue
            if rec.user_properties and not DELAY_PROPERTIES.isdisjoint(rec.user_properties):
                # A delayed record is rewritten to the timer topic, as a half message is.
                return self.append_records(self._unpacked_messages(blob, may_publish, now), born_host=born_host)
            total_body += len(rec.body)
            if cfg is None or cfg.name != rec.topic:
                if may_publish is not None:
                    may_publish(rec.topic)
                cfg = self._topic_for_send(rec.topic, i, system=False, new_topics=new_topics)
                prioritised = is_priority_topic(cfg.attributes)
            queue_id = rec.queue_id
            if prioritised:
                queue_id = rec.queue_id = priority_queue(cfg, rec.user_properties, i)
                set_queue_id(frame, pos, queue_id)
            elif rec.user_properties and PROPERTY_PRIORITY in rec.user_properties:
                refuse_priority(cfg, i)
            if not queue_id < cfg.write_queue_nums:  # ANY_QUEUE (0xFFFFFFFF) or out of range
                rec.queue_id = self._queues.queue_for_send(cfg, None if queue_id == ANY_QUEUE else queue_id, i)
                set_queue_id(frame, pos, rec.queue_id)
            records.append(rec)
        self._check_batch_size(len(records), total_body)
        return self._append_prepared(records, new_topics, [], now, duplicates=duplicates)

    def _unpacked_messages(
        self, blob: bytes, may_publish: Callable[[str], None] | None, now: int
    ) -> list[OutgoingMessage]:
        """A sent frame's records as messages, for the paths that rewrite them (half and
        delayed messages: ``append_records``), once the caller may publish to each topic."""
        messages = [
            OutgoingMessage(
                rec.topic,
                bytes(rec.body),
                rec.tags,
                rec.keys,
                dict(rec.user_properties),
                rec.unique_id,
                rec.flag,
                None if rec.queue_id == ANY_QUEUE else rec.queue_id,
                rec.born_timestamp_ms,
            )
            for _, _, rec in self._sent_records(bytearray(blob), UNKNOWN_HOST, now)
        ]
        if may_publish is not None:
            for topic in {m.topic for m in messages}:
                may_publish(topic)
        return messages

    def _sent_records(self, frame: bytearray, born_host: bytes, now: int) -> Iterator[tuple[int, int, PreparedRecord]]:
        """(index, position, record) of each record of a sent frame, checked; at most
        ``max_batch_messages``."""
        if not frame:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "no records to send")
        unpack = MessageEncoder(limits=self._limits, born_host=born_host, now_ms=now, system=False).unpack
        max_messages = self._settings.max_batch_messages
        pos = i = 0
        while pos < len(frame):
            if i == max_messages:
                raise error(errors_pb2.CODE_BATCH_TOO_LARGE, f"more than {max_messages} records in one frame")
            rec = unpack(frame, pos, i)
            yield i, pos, rec
            pos += rec.size
            i += 1

    def check_writable(self) -> None:
        self._check_open()
        if not self.writable or self._commitlog.broken:
            raise error(errors_pb2.CODE_SERVICE_NOT_WRITABLE, "store stopped writing after a storage error")
        if self.gate is not None:
            self.gate.check_leads()

    def _check_send(
        self, messages: Sequence[OutgoingMessage], producer_group: str, *, transaction_prepared: bool
    ) -> None:
        if not messages:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "no messages to send")
        self._check_batch_size(len(messages), sum(len(m.body) for m in messages))
        if transaction_prepared:
            if not self._settings.transaction_message_enable:
                raise error(
                    errors_pb2.CODE_TRANSACTION_NOT_ALLOWED, "transactional messages are disabled on this store"
                )
            check_group_name(producer_group, code=errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP)

    def _check_batch_size(self, count: int, body_bytes: int) -> None:
        s = self._settings
        if count > s.max_batch_messages:
            raise error(
                errors_pb2.CODE_BATCH_TOO_LARGE, f"{count} messages in one batch, at most {s.max_batch_messages}"
            )
        if body_bytes > s.max_batch_bytes:
            raise error(
                errors_pb2.CODE_BATCH_TOO_LARGE, f"batch bodies total {body_bytes} bytes, at most {s.max_batch_bytes}"
            )

    def _topic_for_send(
        self, name: str, index: int, *, system: bool, new_topics: dict[str, TopicConfig]
    ) -> TopicConfig:
        cfg = self._topics.get(name) or new_topics.get(name)
        if cfg is None:
            check_topic_name(name, index=str(index))
            if is_system_topic(name) and not system:
                raise error(errors_pb2.CODE_SYSTEM_TOPIC, f"{name} is a system topic", topic=name, index=str(index))
            if not self._settings.auto_create_topic_enable:
                raise not_found(errors_pb2.CODE_TOPIC_NOT_FOUND, f"topic {name}", topic=name, index=str(index))
            n = self._settings.default_topic_queue_nums
            cfg = new_topics[name] = TopicConfig(name, n, n, since_offset=self._commitlog.write_offset)
        elif not system and cfg.is_system:
            raise error(errors_pb2.CODE_SYSTEM_TOPIC, f"{name} is a system topic", topic=name, index=str(index))
        if not cfg.writable:
            raise error(
                errors_pb2.CODE_TOPIC_NOT_WRITABLE, f"topic {name} is not writable", topic=name, index=str(index)
            )
        return cfg

    def _delivery_time(
        self, msg: OutgoingMessage, index: int, now: int, *, system: bool, transaction_prepared: bool
    ) -> int:
        """When a message becomes visible: 0 at once (not delayed, or due within the
        timer's precision). A system send that carries TXMQ_TIMER_OFFSET is a timer's
        delivery, never delayed again."""
        props = msg.properties
        if not props or DELAY_PROPERTIES.isdisjoint(props) or (system and PROPERTY_TIMER_OFFSET in props):
            return 0
        if transaction_prepared:
            raise error(
                errors_pb2.CODE_MESSAGE_TYPE_CONFLICT,
                "a transactional message cannot be delayed (RocketMQ #10260): send it without "
                f"{'/'.join(sorted(DELAY_PROPERTIES & props.keys()))}, or not as a transaction",
                index=str(index),
            )  # fmt: skip
        s = self._settings
        return delivery_time(
            props, now_ms=now, levels_ms=self._delay_levels_ms, max_delay_ms=s.timer_max_delay_ms, index=index
        )

    # -- 2. append -------------------------------------------------------------------

    def append_copies(self, copies: list[PreparedRecord]) -> Appended:
        """Timer deliveries: built by the timer (timer.py), appended as any send."""
        self.check_writable()
        return self._append_prepared(copies, {}, [], self._clock())

    def _append_prepared(
        self,
        records: list[PreparedRecord],
        new_topics: dict[str, TopicConfig],
        real_queues: list[tuple[str, int]],
        now: int,
        deliver_at: list[int] | None = None,
        duplicates: list[FirstSend] | None = None,
    ) -> Appended:
        """Append validated records (topics to create in ``new_topics``); ``duplicates``:
        messages of the batch the idempotence window answered (nothing to write)."""
        if not records:  # every message was sent before: nothing to write
            return Appended([], [], [], [], self._commitlog.write_offset, now, [], duplicates or [])
        # Valid. Room on disk for the records and their queue and index entries?
        self._free_space.check(sum(rec.size for rec in records) + 64 * len(records))
        # From here on the request changes the store.
        self._admin.put_new_topics(new_topics.values())
        queue_offsets = self._queues.assign(records)
        try:
            # Consume-queue files the dispatch will write, created (and their blocks
            # reserved) first: a full disk refuses the send instead of failing dispatch.
            self._dispatcher.prepare_queues(records, queue_offsets)
            offsets = self._commitlog.append(
                records, queue_offsets, store_timestamp_ms=now, store_host=self._store_host
            )
        except OSError as exc:
            # Nothing of the batch is stored (append rolls back what it wrote).
            self._queues.unassign(records, queue_offsets)
            if is_disk_full(exc) and not self._commitlog.broken:
                log.error("send refused, the disk is full: %s", exc)
                raise disk_full(f"the store's disk is full: {exc}") from None
            self.writable = False
            log.error("commit log append failed; the store stops accepting writes: %s", exc)
            raise error(errors_pb2.CODE_STORAGE_ERROR, f"commit log write failed: {exc}") from None
        end = self._commitlog.write_offset
        if self.gate is not None:
            self._window.appended(records, offsets)
            self._undispatched.append((end, records, offsets, queue_offsets, now))
            self.gate.appended(end)
        elif self._group_commit is not None:
            self._window.appended(records, offsets)
            self._undispatched.append((end, records, offsets, queue_offsets, now))
        else:
            self._dispatcher.dispatch(records, offsets, queue_offsets, store_timestamp_ms=now, end_offset=end)
        store_metrics.count_in(records)
        return Appended(records, offsets, queue_offsets, real_queues, end, now, deliver_at or [], duplicates or [])

    # -- 3. dispatch ------------------------------------------------------------------

    def dispatch_durable(self, durable_offset: int) -> None:
        """The group commit fsynced the log up to ``durable_offset``."""
        if self.gate is not None:
            self.gate.durable(durable_offset)
            return
        self.dispatch_appended(durable_offset)

    def dispatch_appended(self, bound: int) -> bool:
        """Dispatch the appended batches that end at or below ``bound``, in order;
        whether every appended batch is dispatched now."""
        pending = self._undispatched
        while pending and pending[0][0] <= bound:
            end, records, offsets, queue_offsets, now = pending.popleft()
            self._dispatcher.dispatch(records, offsets, queue_offsets, store_timestamp_ms=now, end_offset=end)
            if pending:
                self._window.dispatched(records)
        if not pending:
            self._window.forget_pending()  # everything appended is in the index now
        return not pending

    def drop_undispatched(self) -> int | None:
        """Forget the appended batches not dispatched yet (a leader whose term ended:
        they stay in the log, held until a leader says whether they survive); the
        commit-log offset of the first one's first record, None when there is none."""
        if not self._undispatched:
            return None
        start = self._undispatched[0][2][0]
        self._undispatched.clear()
        self._window.forget_pending()  # held now: a new leader's index will say
        return start

    # -- 4. settle and answer ----------------------------------------------------------

    async def settle(self, appended: Appended) -> SendStatus:
        """Acknowledge an append per the flush mode: async, at once; sync, once the
        group commit has fsynced it (FLUSH_DISK_TIMEOUT when that takes too long). A
        replicated group's leader then waits for the in-sync replicas to hold it
        (FLUSH_REPLICA_TIMEOUT when they do not within sync_flush_timeout_ms)."""
        status = SendStatus.OK if self._group_commit is None else await self._wait_durable(appended.end)
        if self.gate is None or status != SendStatus.OK:
            return status
        return await self.gate.wait_replicated(appended.end)

    def settled_at_once(self) -> SendStatus | None:
        """The status ``settle`` would give any append without waiting (async flush, a
        store alone: OK), so a caller may skip awaiting it; None when it must wait."""
        return SendStatus.OK if self._group_commit is None and self.gate is None else None

    async def _wait_durable(self, end: int) -> SendStatus:
        assert self._group_commit is not None
        fut = self._group_commit.request(end)
        try:
            # On timeout ``fut`` is cancelled; the group commit skips cancelled waiters
            # and still flushes and dispatches the records.
            async with asyncio.timeout(self._settings.sync_flush_timeout_ms / 1000):
                await fut
        except TimeoutError:
            return SendStatus.FLUSH_DISK_TIMEOUT
        except OSError as exc:
            # After a failed fsync the page cache no longer says what is on disk (the
            # kernel may have dropped the pages): stop writing; a restart recovers from
            # what the disk holds.
            if self.writable:
                self.writable = False
                log.error("the store stops accepting writes after a failed fsync")
            raise error(errors_pb2.CODE_STORAGE_ERROR, f"commit log fsync failed: {exc}") from None
        return SendStatus.OK

    def results(self, appended: Appended, status: SendStatus, *, transaction_prepared: bool) -> list[SendResult]:
        """The SendResult of every message of a settled batch, in batch order (earlier
        sends' results where the window answered: ``SendResult.duplicate``; delayed
        messages with their real queue, queue offset -1 and ``deliver_at_ms``)."""
        prefix = self._offset_msg_id_prefix
        records, offsets, queue_offsets = appended.records, appended.offsets, appended.queue_offsets
        if appended.deliver_at:  # delayed messages among them: answered with their real queues
            reported = appended.reported_queue_offsets()
            out = [
                SendResult(status, rec.unique_id, f"{prefix}{offset:016X}", topic, qid, qoff, offset, deliver_at_ms=at)
                for rec, offset, qoff, (topic, qid), at in zip(
                    records, offsets, reported, appended.real_queues, appended.deliver_at, strict=True
                )
            ]
        elif transaction_prepared:
            out = [
                SendResult(status, rec.unique_id, f"{prefix}{offset:016X}", topic, qid, qoff, offset, rec.unique_id)
                for rec, offset, qoff, (topic, qid) in zip(
                    records, offsets, queue_offsets, appended.real_queues, strict=True
                )
            ]
        else:
            out = [
                SendResult(status, rec.unique_id, f"{prefix}{offset:016X}", rec.topic, rec.queue_id, qoff, offset)
                for rec, offset, qoff in zip(records, offsets, queue_offsets, strict=True)
            ]
        for first in appended.duplicates:  # in batch order: each goes where it was sent
            out.insert(first.index, self._first_result(first, status))
        return out

    def _first_result(self, first: FirstSend, status: SendStatus) -> SendResult:
        offset = first.commit_log_offset
        queue_offset, deliver_at_ms = first.queue_offset, 0
        if first.record_topic == TIMER_TOPIC:  # still waiting: no queue offset until its delivery
            queue_offset = -1
            deliver_at_ms = int(first.properties.get(PROPERTY_TIMER_DELIVER_MS, "0") or 0)
        return SendResult(
            status,
            first.unique_id,
            f"{self._offset_msg_id_prefix}{offset:016X}",
            first.topic,
            first.queue_id,
            queue_offset,
            offset,
            first.unique_id if first.prepared else "",
            duplicate=True,
            deliver_at_ms=deliver_at_ms,
        )

    def _read_first(self, offset: int) -> StoredMessage | None:
        """The record an earlier send left at ``offset`` (the window's candidates); None
        when it is gone or damaged (the send is then stored again: nothing is lost)."""
        try:
            return self._commitlog.read_record(offset, boundary=True)
        except CorruptRecord:
            return None


def _timer_record(
    prepare: Callable[..., PreparedRecord], msg: OutgoingMessage, index: int, topic: str, queue_id: int, at: int
) -> PreparedRecord:
    """A delayed message as a record of the timer queue: its real topic and queue in
    REAL_TOPIC / REAL_QID, its absolute delivery time in TIMER_DELIVER_MS (the relative
    delay property dropped) and in its unit's tag-hash field."""
    extra = {
        PROPERTY_REAL_TOPIC: topic,
        PROPERTY_REAL_QUEUE_ID: str(queue_id),
        PROPERTY_TIMER_DELIVER_MS: str(at),
    }
    user = {k: v for k, v in msg.properties.items() if k not in DELAY_PROPERTIES}
    rec = prepare(replace(msg, properties=user), index, TIMER_TOPIC, TIMER_QUEUE_ID, extra, 0)
    rec.tag_code = at  # the timer queue's unit holds the delivery time
    return rec


def _half_record(
    prepare: Callable[..., PreparedRecord], msg: OutgoingMessage, index: int, topic: str, queue_id: int,
    producer_group: str, *, system: bool,
) -> PreparedRecord:  # fmt: skip
    """A prepared (transactional) message as a half record: on the half topic, its real
    topic and queue in its properties."""
    extra = {
        PROPERTY_REAL_TOPIC: topic,
        PROPERTY_REAL_QUEUE_ID: str(queue_id),
        PROPERTY_PRODUCER_GROUP: producer_group,
        PROPERTY_TRANSACTION_PREPARED: "true",
    }
    sys_flag = msg.sys_flag if system else 0
    return prepare(msg, index, TRANS_HALF_TOPIC, 0, extra, sys_flag & ~TRANSACTION_TYPE_MASK)


#: Peer address -> born host: a stream's frames (and a connection's calls) come from one
#: peer, parsed once.
_BORN_HOSTS: dict[str, bytes] = {}


def _born_host(address: str) -> bytes:
    """The peer's ``host:port`` as a record's born host (unknown when unparseable)."""
    cached = _BORN_HOSTS.get(address)
    if cached is not None:
        return cached
    try:
        born = encode_host(*split_host_port(address)) if address else UNKNOWN_HOST
    except ValueError:
        born = UNKNOWN_HOST
    if len(_BORN_HOSTS) >= 4096:  # bounded: peers come and go
        _BORN_HOSTS.clear()
    _BORN_HOSTS[address] = born
    return born
