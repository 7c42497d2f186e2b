"""gRPC servicers of the store: decode the request, call the core, encode the result.
Errors are typed by the core and mapped to statuses by ``@rpc``."""

from __future__ import annotations

import asyncio
import time
import types
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import grpc

from txmq.errors import TxmqError, error
from txmq.protocol import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
from txmq.v1 import auth_pb2, common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.auth import permits, publish_check, require
from txmq_runtime.grpc_errors import rpc
from txmq_runtime.metrics import RpcMetrics
from txmq_runtime.quotas import charge_produce

from . import metrics as store_metrics
from .arrivals import ArrivalBatch
from .codec import PreparedRecord
from .configs import SubscriptionGroupConfig, TopicConfig
from .decisions_rpc import TIMEOUTS, TO_PB_DECISION, decisions_response, producer_requests, relayed_requests
from .filters import load_message_filter
from .message_store import MessageStore
from .model import GetMessageStatus, OutgoingMessage, SendResult, SendStatus, StoredMessage
from .queue_locks import StoreQueueLocks
from .replication import CONFIG, OFFSETS
from .send_path import Appended
from .transactions import HalfAction

MAX_ARRIVALS_PER_BATCH = 1000
# SendStream: frames appended but not yet acknowledged, per stream (then reading waits).
MAX_UNACKED_FRAMES = 64
_FRAMES = RpcMetrics()  # SendStream frames, timed one by one (the interceptor skips streams)


_NO_PROPERTIES: Mapping[str, str] = types.MappingProxyType({})


def to_outgoing(m: common_pb2.Message) -> OutgoingMessage:
    # Positional and without empty copies: this runs once per message sent.
    keys, props = m.keys, m.properties
    return OutgoingMessage(
        m.topic,
        m.body,
        m.tags,
        tuple(keys) if keys else (),
        dict(props) if props else _NO_PROPERTIES,
        m.unique_id,
        m.flag,
        m.queue_id if m.HasField("queue_id") else None,
        m.born_timestamp_ms,
    )


def peer_address(context: grpc.aio.ServicerContext) -> str:
    """``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` -> host:port; empty for other transports."""
    peer = context.peer() or ""
    kind, _, address = peer.partition(":")
    return address if kind in ("ipv4", "ipv6") else ""


class _FrameLine:
    """A SendStream's frames from its reader (appended) to its writer (acknowledged), in
    order, at most ``limit`` unacknowledged: a deque and at most one waiting future each
    way. Per frame this costs a fraction of an ``asyncio.Queue`` and ``Semaphore``."""

    __slots__ = ("_items", "_limit", "_reader", "_unacked", "_writer")

    def __init__(self, limit: int) -> None:
        self._items: deque[Any] = deque()
        self._limit = limit
        self._unacked = 0
        self._reader: asyncio.Future[None] | None = None  # waiting for room
        self._writer: asyncio.Future[None] | None = None  # waiting for a frame

    async def room(self) -> None:
        """Wait until fewer than ``limit`` frames are unacknowledged; take a place."""
        while self._unacked >= self._limit:
            self._reader = asyncio.get_running_loop().create_future()
            await self._reader
        self._unacked += 1

    def put(self, item: Any) -> None:
        self._items.append(item)
        _wake(self._writer)
        self._writer = None

    async def get(self) -> Any:
        while not self._items:
            self._writer = asyncio.get_running_loop().create_future()
            await self._writer
        return self._items.popleft()

    def acked(self) -> None:
        """A frame's ack is written: its place is free."""
        self._unacked -= 1
        _wake(self._reader)
        self._reader = None


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class StoreServicer(store_pb2_grpc.StoreServicer):
    def __init__(self, store: MessageStore, *, queue_locks: StoreQueueLocks) -> None:
        self._store = store
        # ConsumerControl's queue locks: they fence commits that name a client.
        self._queue_locks = queue_locks

    def _result_fields(self, results: list[SendResult]) -> Iterator[dict[str, Any]]:
        """SendResult fields per result; one shared MessageQueue per queue of a batch."""
        queues: dict[tuple[str, int], common_pb2.MessageQueue] = {}
        store_id = self._store.store_id
        for r in results:
            mq = queues.get((r.topic, r.queue_id))
            if mq is None:
                mq = queues[(r.topic, r.queue_id)] = common_pb2.MessageQueue(
                    topic=r.topic, store_id=store_id, queue_id=r.queue_id
                )
            yield dict(
                status=r.status,
                msg_id=r.msg_id,
                offset_msg_id=r.offset_msg_id,
                queue=mq,
                queue_offset=r.queue_offset,
                commit_log_offset=r.commit_log_offset,
                transaction_id=r.transaction_id,
                duplicate=r.duplicate,
                deliver_at_ms=r.deliver_at_ms,
            )

    def _view(self, m: StoredMessage) -> common_pb2.MessageView:
        return message_view(m, store_id=self._store.store_id)

    @rpc
    async def SendMessage(self, request: store_pb2.SendMessageRequest, context: grpc.aio.ServicerContext):
        charge_produce(request)  # the caller's byte-rate quota
        results = await self._store.sender.send(
            [to_outgoing(request.message)],
            producer_group=request.producer_group,
            transaction_prepared=request.transaction_prepared,
            born_host=peer_address(context),
        )
        (fields,) = self._result_fields(results)
        return store_pb2.SendMessageResponse(result=store_pb2.SendResult(**fields))

    @rpc
    async def SendBatch(self, request: store_pb2.SendBatchRequest, context: grpc.aio.ServicerContext):
        charge_produce(request)  # the caller's byte-rate quota
        if request.transaction_prepared:
            results = await self._store.sender.send(
                [to_outgoing(m) for m in request.messages],
                producer_group=request.producer_group,
                transaction_prepared=True,
                born_host=peer_address(context),
            )
            return store_pb2.SendBatchResponse(
                results=[store_pb2.SendResult(**fields) for fields in self._result_fields(results)]
            )
        appended = self._store.sender.append_records(
            [to_outgoing(m) for m in request.messages],
            producer_group=request.producer_group,
            born_host=peer_address(context),
        )
        status = await self._store.sender.settle(appended)
        if appended.duplicates:  # some were sent before (idempotent sends)
            results = self._store.sender.results(appended, status, transaction_prepared=False)
            return store_pb2.SendBatchResponse(
                results=[store_pb2.SendResult(**fields) for fields in self._result_fields(results)]
            )
        response = self._records_response(status, appended.records, appended.offsets, appended.queue_offsets)
        if appended.deliver_at:  # delayed messages: their real queues, queue offset -1
            for r, (topic, queue_id), at in zip(
                response.results, appended.real_queues, appended.deliver_at, strict=True
            ):
                if at:
                    r.queue.CopyFrom(common_pb2.MessageQueue(topic=topic, store_id=r.queue.store_id, queue_id=queue_id))
                    r.queue_offset = -1
                    r.deliver_at_ms = at
        return response

    @rpc
    async def SendStream(
        self, request_iterator: AsyncIterator[store_pb2.RecordFrame], context: grpc.aio.ServicerContext
    ):
        """Frames are appended as they arrive (a reader task) and acknowledged in order
        once settled, so under sync flush one group commit covers every frame in
        flight. A refused frame is answered in its ack; the stream goes on."""
        sender = self._store.sender
        born_host = peer_address(context)
        line = _FrameLine(MAX_UNACKED_FRAMES)
        may_publish = publish_check()  # the topics are inside the records
        # Each frame is timed like a call (rocketmq_rpc_latency, action SendStream): from
        # its arrival to its ack, under the status a refusal would have. The OK series is
        # looked up once per stream, at its first OK frame.
        timed_ok = None

        async def read() -> None:
            try:
                async for frame in request_iterator:
                    await line.room()
                    started = time.perf_counter()
                    try:
                        charge_produce(frame)  # the caller's byte-rate quota: refused, an error ack
                        out: Appended | TxmqError = sender.append_packed(
                            frame.records,
                            born_host=born_host,
                            transaction_prepared=frame.transaction_prepared,
                            producer_group=frame.producer_group,
                            may_publish=may_publish,
                        )
                    except TxmqError as err:
                        out = err
                    line.put((frame.sequence, out, started))
            finally:
                line.put(None)

        reader = asyncio.create_task(read())
        try:
            while (item := await line.get()) is not None:
                sequence, out, started = item
                if isinstance(out, TxmqError):
                    ack = store_pb2.RecordAck(sequence=sequence, error=out.to_detail())
                elif (status := sender.settled_at_once()) is not None:  # nothing to wait for
                    ack = self._ack(sequence, out, status)
                else:
                    ack = await self._record_ack(sequence, out)
                if ack.HasField("error"):
                    result = TxmqError.from_detail(ack.error).grpc_status.name
                    _FRAMES.observe("Store", "SendStream", result, time.perf_counter() - started)
                else:
                    if timed_ok is None:
                        timed_ok = _FRAMES.child("Store", "SendStream", "OK")
                    timed_ok.observe((time.perf_counter() - started) * 1000)
                yield ack
                line.acked()
            await reader  # a failure of the reader (not a refused frame) ends the call
        finally:
            reader.cancel()

    @rpc
    async def SendRecords(self, request: store_pb2.RecordFrame, context: grpc.aio.ServicerContext):
        try:
            charge_produce(request)  # the caller's byte-rate quota
            appended = self._store.sender.append_packed(
                request.records,
                born_host=peer_address(context),
                transaction_prepared=request.transaction_prepared,
                producer_group=request.producer_group,
                may_publish=publish_check(),
            )
        except TxmqError as err:
            return store_pb2.RecordAck(sequence=request.sequence, error=err.to_detail())
        return await self._record_ack(request.sequence, appended)

    async def _record_ack(self, sequence: int, appended: Appended) -> store_pb2.RecordAck:
        try:
            status = await self._store.sender.settle(appended)
        except TxmqError as err:
            return store_pb2.RecordAck(sequence=sequence, error=err.to_detail())
        return self._ack(sequence, appended, status)

    def _ack(self, sequence: int, appended: Appended, status: SendStatus) -> store_pb2.RecordAck:
        """The ack of a settled frame."""
        store = self._store
        ack = store_pb2.RecordAck(
            sequence=sequence,
            status=store_pb2.SendStatus.ValueType(status),
            offset_msg_id_prefix=store.sender.offset_msg_id_prefix,
            store_id=store.store_id,
        )
        if appended.duplicates:  # some were sent before (idempotent sends): batch order
            results = store.sender.results(appended, status, transaction_prepared=bool(appended.real_queues))
            ack.commit_log_offsets.extend([r.commit_log_offset for r in results])
            ack.queue_offsets.extend([r.queue_offset for r in results])
            ack.queue_ids.extend([r.queue_id for r in results])
            ack.duplicate_indexes.extend([first.index for first in appended.duplicates])
            if any(r.deliver_at_ms for r in results):
                ack.deliver_at_ms.extend([r.deliver_at_ms for r in results])
            return ack
        ack.commit_log_offsets.extend(appended.offsets)
        ack.queue_offsets.extend(appended.reported_queue_offsets())
        if appended.real_queues:  # half and delayed messages: the queue each is meant for
            ack.queue_ids.extend([queue_id for _, queue_id in appended.real_queues])
        else:
            ack.queue_ids.extend([rec.queue_id for rec in appended.records])
        if appended.deliver_at:
            ack.deliver_at_ms.extend(appended.deliver_at)
        return ack

    def _records_response(
        self, status: int, records: Sequence[PreparedRecord], offsets: Sequence[int], queue_offsets: Sequence[int]
    ) -> store_pb2.SendBatchResponse:
        """The response to a send that is not transactional, with the fields of the
        SendResults ``SendPath.send`` would make, without making them. Each
        result starts as a copy of its queue's template (status + queue), which costs a
        fraction of setting every field by keyword."""
        resp = store_pb2.SendBatchResponse()
        add = resp.results.add
        prefix = self._store.sender.offset_msg_id_prefix
        store_id = self._store.store_id
        templates: dict[tuple[str, int], store_pb2.SendResult] = {}
        for rec, offset, queue_offset in zip(records, offsets, queue_offsets, strict=True):
            key = (rec.topic, rec.queue_id)
            template = templates.get(key)
            if template is None:
                template = templates[key] = store_pb2.SendResult(
                    status=status, queue=common_pb2.MessageQueue(topic=key[0], store_id=store_id, queue_id=key[1])
                )
            r = add()
            r.CopyFrom(template)
            r.msg_id = rec.unique_id
            r.offset_msg_id = f"{prefix}{offset:016X}"
            r.queue_offset = queue_offset
            r.commit_log_offset = offset
        return resp

    @rpc
    async def DecideTransactions(self, request: store_pb2.DecideTransactionsRequest, context: grpc.aio.ServicerContext):
        store = self._store
        TIMEOUTS.compare(request.transaction_timeout_ms, store.settings.transaction_timeout_ms)
        outcomes = await store.transactions.decide(
            relayed_requests(request),
            epoch=request.fence.epoch,
            half_queue_id=request.fence.half_queue_id,
            born_host=peer_address(context),
        )
        return decisions_response(
            outcomes, store_id=store.store_id, offset_msg_id_prefix=store.sender.offset_msg_id_prefix
        )

    @rpc
    async def EndTransactions(self, request: store_pb2.EndTransactionsRequest, context: grpc.aio.ServicerContext):
        """A producer's ENDs, decided here as DecideTransactions' are (never fenced)."""
        store = self._store
        outcomes = await store.transactions.decide(producer_requests(request), born_host=peer_address(context))
        return decisions_response(
            outcomes, store_id=store.store_id, offset_msg_id_prefix=store.sender.offset_msg_id_prefix
        )

    @rpc
    async def RecallMessage(self, request: store_pb2.RecallMessageRequest, context: grpc.aio.ServicerContext):
        status, deliver_ms = await self._store.recall(
            topic=request.topic, commit_log_offset=request.commit_log_offset, unique_id=request.unique_id
        )
        return store_pb2.RecallMessageResponse(
            status=store_pb2.SendStatus.ValueType(status), unique_id=request.unique_id, deliver_at_ms=deliver_ms
        )

    @rpc
    async def RequeueHalves(self, request: store_pb2.RequeueHalvesRequest, context: grpc.aio.ServicerContext):
        outcomes = await self._store.transactions.requeue(
            [HalfAction(a.commit_log_offset, a.action, a.reason) for a in request.actions],
            epoch=request.fence.epoch,
            half_queue_id=request.fence.half_queue_id,
            born_host=peer_address(context),
        )
        resp = store_pb2.RequeueHalvesResponse()
        for out in outcomes:
            r = resp.results.add()
            if out.error is not None:
                r.error.CopyFrom(out.error.to_detail())
                continue
            if out.decided:
                r.decided = TO_PB_DECISION[out.decided]
                continue
            r.commit_log_offset = out.commit_log_offset
            r.queue_offset = out.queue_offset
            r.store_timestamp_ms = out.store_timestamp_ms
            r.properties.update(out.properties)
        return resp

    @rpc
    async def PutSystemMessages(self, request: store_pb2.PutSystemMessagesRequest, context: grpc.aio.ServicerContext):
        if request.HasField("fence"):
            await self._store.admit_fence(request.fence.epoch, request.fence.half_queue_id)
        outgoing = []
        for sm in request.messages:
            o = to_outgoing(sm.message)
            o.sys_flag = sm.sys_flag
            o.reconsume_times = sm.reconsume_times
            o.prepared_transaction_offset = sm.prepared_transaction_offset
            outgoing.append(o)
        # Decisions written around DecideTransactions (an older txcheck) are learnt by
        # the decision book as they are appended.
        appended = self._store.transactions.append_system(
            outgoing, producer_group=request.producer_group, born_host=peer_address(context)
        )
        status = await self._store.sender.settle(appended)
        return self._records_response(status, appended.records, appended.offsets, appended.queue_offsets)

    @rpc
    async def GetMessage(self, request: store_pb2.GetMessageRequest, context: grpc.aio.ServicerContext):
        message_filter = None
        if request.HasField("filter"):
            # An unknown type or an expression over the size limit is ILLEGAL_FILTER_EXPRESSION;
            # a long new SQL92 expression is compiled on a worker thread.
            message_filter = await load_message_filter(
                request.filter.type,
                request.filter.expression,
                property_filter_enable=self._store.settings.property_filter_enable,
            )
        r = self._store.reader.get_message(
            topic=request.topic,
            queue_id=request.queue_id,
            offset=request.offset,
            max_messages=request.max_messages,
            message_filter=message_filter,
            raw=request.raw_records,
        )
        if request.raw_records:
            records = b"".join(r.records)
            store_metrics.count_out_records(request.topic, records)
            return store_pb2.GetMessageResponse(
                status=GET_STATUS[r.status],
                next_begin_offset=r.next_begin_offset,
                min_offset=r.min_offset,
                max_offset=r.max_offset,
                suggest_pulling_from_replica=r.suggest_pulling_from_replica,
                records=records,
                store_id=self._store.store_id,
            )
        store_metrics.count_out(request.topic, r.messages)
        if request.topic == TRANS_HALF_TOPIC and request.consumer_group == TRANS_CHECK_GROUP:
            self._store.transactions.walked(r.messages)  # its RequeueHalves takes them from there
        return store_pb2.GetMessageResponse(
            status=GET_STATUS[r.status],
            next_begin_offset=r.next_begin_offset,
            min_offset=r.min_offset,
            max_offset=r.max_offset,
            messages=[self._view(m) for m in r.messages],
            suggest_pulling_from_replica=r.suggest_pulling_from_replica,
        )

    @rpc
    async def WatchArrivals(self, request: store_pb2.WatchArrivalsRequest, context: grpc.aio.ServicerContext):
        # Ends when the store closes (next_batch -> None); a client that goes away
        # cancels this generator, and the context manager drops the watcher.
        with_records = request.with_records
        with self._store.reader.watch_arrivals(request.topics) as watcher:
            # Initial metadata right away tells the client the watch is in place: every
            # dispatch from now on reaches it, so it can re-read what came before.
            await context.send_initial_metadata(())
            while (batch := await watcher.next_batch(max_arrivals=MAX_ARRIVALS_PER_BATCH)) is not None:
                yield self._arrival_batch(batch, with_records=with_records)

    def _arrival_batch(self, batch: ArrivalBatch, *, with_records: bool) -> store_pb2.ArrivalBatch:
        return store_pb2.ArrivalBatch(
            arrivals=[
                store_pb2.Arrival(
                    topic=a.topic,
                    queue_id=a.queue_id,
                    queue_offset=a.queue_offset,
                    max_offset=a.max_offset,
                    tag_code=a.tag_code,
                    properties=a.properties,
                    store_timestamp_ms=a.store_timestamp_ms,
                    min_offset=a.min_offset,
                    record=a.record if with_records else b"",
                )
                for a in batch.arrivals
            ],
            overflowed=batch.overflowed,
            store_id=self._store.store_id,
        )

    @rpc
    async def ViewMessage(self, request: store_pb2.ViewMessageRequest, context: grpc.aio.ServicerContext):
        which = request.WhichOneof("key")
        if which == "offset_msg_id":
            m = self._store.reader.view_message_by_id(request.offset_msg_id)
        elif which == "commit_log_offset":
            m = self._store.reader.view_message(request.commit_log_offset)
        else:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "give offset_msg_id or commit_log_offset")
        require(auth_pb2.RESOURCE_TYPE_TOPIC, m.topic, auth_pb2.ACTION_SUB)
        return store_pb2.ViewMessageResponse(message=self._view(m))

    @rpc
    async def QueryMessages(self, request: store_pb2.QueryMessagesRequest, context: grpc.aio.ServicerContext):
        found = self._store.reader.query_messages(
            topic=request.topic,
            key=request.key,
            unique_id=request.unique_id,
            max_results=request.max_results,
            begin_timestamp_ms=request.begin_timestamp_ms,
            end_timestamp_ms=request.end_timestamp_ms,
        )
        # A query by unique id without a topic finds messages of any topic: the caller
        # gets those of the topics it may read.
        mine = [m for m in found if permits(auth_pb2.RESOURCE_TYPE_TOPIC, m.topic, auth_pb2.ACTION_SUB)]
        return store_pb2.QueryMessagesResponse(messages=[self._view(m) for m in mine])

    @rpc
    async def GetQueueOffsets(self, request: store_pb2.GetQueueOffsetsRequest, context: grpc.aio.ServicerContext):
        queues = self._store.reader.queue_offsets(
            request.topic, request.queue_id if request.HasField("queue_id") else None
        )
        return store_pb2.GetQueueOffsetsResponse(
            topic=request.topic,
            queues=[
                store_pb2.QueueOffsets(
                    queue_id=q.queue_id,
                    min_offset=q.min_offset,
                    max_offset=q.max_offset,
                    last_store_timestamp_ms=q.last_store_timestamp_ms,
                )
                for q in queues
            ],
        )

    @rpc
    async def SearchOffset(self, request: store_pb2.SearchOffsetRequest, context: grpc.aio.ServicerContext):
        offset = self._store.reader.search_offset(request.topic, request.queue_id, request.timestamp_ms)
        return store_pb2.SearchOffsetResponse(offset=offset)

    @rpc
    async def CommitConsumeOffset(
        self, request: store_pb2.CommitConsumeOffsetRequest, context: grpc.aio.ServicerContext
    ):
        if request.HasField("fence"):
            await self._store.admit_fence(request.fence.epoch, request.fence.half_queue_id)
        if request.client_id:
            self._queue_locks.check_commit(request.consumer_group, request.client_id, request.topic, request.queue_id)
        self._store.admin.commit_consume_offset(
            group=request.consumer_group, topic=request.topic, queue_id=request.queue_id, offset=request.offset
        )
        await self._store.state_replicated(OFFSETS)
        return store_pb2.CommitConsumeOffsetResponse()

    @rpc
    async def QueryConsumeOffset(self, request: store_pb2.QueryConsumeOffsetRequest, context: grpc.aio.ServicerContext):
        offset = self._store.admin.query_consume_offset(
            group=request.consumer_group, topic=request.topic, queue_id=request.queue_id
        )
        if offset is None:
            return store_pb2.QueryConsumeOffsetResponse(found=False)
        return store_pb2.QueryConsumeOffsetResponse(found=True, offset=offset)

    @rpc
    async def ListConsumeOffsets(self, request: store_pb2.ListConsumeOffsetsRequest, context: grpc.aio.ServicerContext):
        rows = self._store.admin.list_consume_offsets(group=request.consumer_group, topic=request.topic)
        return store_pb2.ListConsumeOffsetsResponse(
            offsets=[
                store_pb2.ConsumeOffset(
                    consumer_group=r.consumer_group,
                    topic=r.topic,
                    queue_id=r.queue_id,
                    offset=r.offset,
                    min_offset=r.min_offset,
                    max_offset=r.max_offset,
                    updated_at_ms=r.updated_at_ms,
                )
                for r in rows
            ],
            taken_at_ms=self._store.now_ms(),
        )


class StoreAdminServicer(store_pb2_grpc.StoreAdminServicer):
    def __init__(self, store: MessageStore) -> None:
        self._store = store

    @rpc
    async def CreateTopic(self, request: store_pb2.CreateTopicRequest, context: grpc.aio.ServicerContext):
        t = request.topic
        cfg = self._store.admin.create_topic(
            t.name, read_queue_nums=t.read_queue_nums, write_queue_nums=t.write_queue_nums, perm=t.perm,
            attributes=dict(t.attributes),
        )  # fmt: skip
        await self._store.admin.topics_propagated()
        return store_pb2.TopicResponse(topic=topic_pb(cfg))

    @rpc
    async def UpdateTopic(self, request: store_pb2.UpdateTopicRequest, context: grpc.aio.ServicerContext):
        t = request.topic
        cfg = self._store.admin.update_topic(
            t.name, read_queue_nums=t.read_queue_nums, write_queue_nums=t.write_queue_nums, perm=t.perm,
            attributes=dict(t.attributes),
        )  # fmt: skip
        await self._store.admin.topics_propagated()
        return store_pb2.TopicResponse(topic=topic_pb(cfg))

    @rpc
    async def DeleteTopic(self, request: store_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext):
        self._store.admin.delete_topic(request.name)
        await self._store.admin.topics_propagated()
        return store_pb2.DeleteTopicResponse()

    @rpc
    async def GetTopic(self, request: store_pb2.GetTopicRequest, context: grpc.aio.ServicerContext):
        return store_pb2.TopicResponse(topic=topic_pb(self._store.admin.get_topic(request.name)))

    @rpc
    async def ListTopics(self, request: store_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext):
        topics = [c for c in self._store.admin.topic_configs() if request.include_system or not c.is_system]
        return store_pb2.ListTopicsResponse(topics=[topic_pb(c) for c in topics])

    @rpc
    async def CreateSubscriptionGroup(
        self, request: store_pb2.CreateSubscriptionGroupRequest, context: grpc.aio.ServicerContext
    ):
        cfg = self._store.admin.create_subscription_group(group_from_pb(request.group))
        await self._store.state_replicated(CONFIG)
        return store_pb2.SubscriptionGroupResponse(group=group_pb(cfg))

    @rpc
    async def UpdateSubscriptionGroup(
        self, request: store_pb2.UpdateSubscriptionGroupRequest, context: grpc.aio.ServicerContext
    ):
        cfg = self._store.admin.update_subscription_group(group_from_pb(request.group))
        await self._store.state_replicated(CONFIG)
        return store_pb2.SubscriptionGroupResponse(group=group_pb(cfg))

    @rpc
    async def DeleteSubscriptionGroup(
        self, request: store_pb2.DeleteSubscriptionGroupRequest, context: grpc.aio.ServicerContext
    ):
        self._store.admin.delete_subscription_group(request.group_name)
        await self._store.state_replicated(CONFIG)
        return store_pb2.DeleteSubscriptionGroupResponse()

    @rpc
    async def GetSubscriptionGroup(
        self, request: store_pb2.GetSubscriptionGroupRequest, context: grpc.aio.ServicerContext
    ):
        return store_pb2.SubscriptionGroupResponse(
            group=group_pb(self._store.admin.get_subscription_group(request.group_name))
        )

    @rpc
    async def ListSubscriptionGroups(
        self, request: store_pb2.ListSubscriptionGroupsRequest, context: grpc.aio.ServicerContext
    ):
        return store_pb2.ListSubscriptionGroupsResponse(
            groups=[group_pb(g) for g in self._store.admin.subscription_groups()]
        )

    @rpc
    async def GetStoreStatus(self, request: store_pb2.GetStoreStatusRequest, context: grpc.aio.ServicerContext):
        s = self._store.status()
        return store_pb2.GetStoreStatusResponse(
            store_id=s.store_id,
            flush_mode=s.flush_mode,
            commit_log_min_offset=s.commit_log_min_offset,
            commit_log_max_offset=s.commit_log_max_offset,
            commit_log_flushed_offset=s.commit_log_flushed_offset,
            dispatched_offset=s.dispatched_offset,
            segment_count=s.segment_count,
            recovered_from_crash=s.recovered_from_crash,
            started_at_ms=s.started_at_ms,
            settings=s.settings,
        )


GET_STATUS = {s: store_pb2.GetMessageStatus.Value(f"GET_MESSAGE_STATUS_{s.name}") for s in GetMessageStatus}


def message_view(m: StoredMessage, *, store_id: str) -> common_pb2.MessageView:
    return common_pb2.MessageView(
        message=common_pb2.Message(
            topic=m.topic,
            body=m.body,
            tags=m.tags,
            keys=m.keys,
            properties=m.properties,
            unique_id=m.unique_id,
            flag=m.flag,
            queue_id=m.queue_id,
            born_timestamp_ms=m.born_timestamp_ms,
        ),
        offset_msg_id=m.offset_msg_id,
        queue_offset=m.queue_offset,
        commit_log_offset=m.commit_log_offset,
        store_size_bytes=m.store_size,
        body_crc=m.body_crc,
        sys_flag=m.sys_flag,
        born_host=f"{m.born_host}:{m.born_port}",
        store_timestamp_ms=m.store_timestamp_ms,
        store_host=f"{m.store_host}:{m.store_port}",
        reconsume_times=m.reconsume_times,
        prepared_transaction_offset=m.prepared_transaction_offset,
        store_id=store_id,
    )


def topic_pb(cfg: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        name=cfg.name,
        read_queue_nums=cfg.read_queue_nums,
        write_queue_nums=cfg.write_queue_nums,
        perm=cfg.perm,
        attributes=cfg.attributes,
    )


def group_from_pb(g: common_pb2.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(
        group_name=g.group_name,
        consume_enable=g.consume_enable if g.HasField("consume_enable") else True,
        consume_broadcast_enable=g.consume_broadcast_enable,
        retry_max_times=g.retry_max_times or 16,
        retry_queue_nums=g.retry_queue_nums or 1,
    )


def group_pb(g: SubscriptionGroupConfig) -> common_pb2.SubscriptionGroupConfig:
    return common_pb2.SubscriptionGroupConfig(
        group_name=g.group_name,
        consume_enable=g.consume_enable,
        consume_broadcast_enable=g.consume_broadcast_enable,
        retry_max_times=g.retry_max_times,
        retry_queue_nums=g.retry_queue_nums,
    )


def add_store_servicers(server: grpc.aio.Server, store: MessageStore) -> list[str]:
    """Register Store, StoreAdmin and ConsumerControl; returns their full service names
    (reflection)."""
    from .consumer_control import ConsumerControlServicer

    control = ConsumerControlServicer(store)
    store_pb2_grpc.add_StoreServicer_to_server(StoreServicer(store, queue_locks=control.queue_locks), server)
    store_pb2_grpc.add_StoreAdminServicer_to_server(StoreAdminServicer(store), server)
    store_pb2_grpc.add_ConsumerControlServicer_to_server(control, server)
    return [
        store_pb2.DESCRIPTOR.services_by_name[name].full_name for name in ("Store", "StoreAdmin", "ConsumerControl")
    ]
