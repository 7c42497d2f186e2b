"""The gateway's side of txmq: stores (send, offsets, END_TRANSACTION's decision), pull
instances (long polling with filters) and txcheck replicas (END_TRANSACTION where the
store cannot take it, producer channels), found in the cluster view. Failures are
raised as typed ``TxmqError``s (the callee's ErrorDetail)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from txmq.aio.pipe import AsyncSendPipe
from txmq.errors import NotImplementedYetError, TxmqError, error
from txmq.ids import new_unique_id
from txmq.pipe import PipeSettings
from txmq.protocol import STORE_DECISIONS
from txmq.recall import RecallHandle
from txmq.records import encode_for_send
from txmq.v1 import (
    common_pb2,
    errors_pb2,
    pull_pb2,
    pull_pb2_grpc,
    route_pb2,
    store_pb2,
    store_pb2_grpc,
    txcheck_pb2,
    txcheck_pb2_grpc,
)
from txmq_runtime.calls import call, internal_channel
from txmq_runtime.registry import ClusterView

# Coalesced sends: one frame in flight per stream, the sends that come meanwhile share the
# next one (as the gateway's own coalescer did: with 4 in flight, 4 concurrent sends went
# as 4 frames and cost the gateway ~40 % more CPU per message, bench.gateway).
_PIPE_SETTINGS = PipeSettings(max_in_flight_frames=1)


log = logging.getLogger("txmq.gateway.backend")

T = TypeVar("T")

_CLOSE_TIMEOUT_S = 5.0
# How long a held pull may outlive its hold on the pull service's side.
_PULL_MARGIN_S = 5.0


class Backend:
    """Channels (one per address) to the services the cluster view lists."""

    def __init__(self, cluster: ClusterView, *, timeout_ms: int) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_ms / 1000
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._store_stubs: dict[str, store_pb2_grpc.StoreStub] = {}
        self._round_robin = itertools.count()
        # (store address, producer group, half messages?) -> its coalesced sends
        self._pipes: dict[tuple[str, str, bool], AsyncSendPipe] = {}
        self._unary_only: set[str] = set()  # store addresses that get unary sends (no usable stream)

    # -- addressing ------------------------------------------------------------------

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = internal_channel(address)
        return channel

    def addresses(self, kind: int) -> list[str]:
        """Addresses of the live instances of ``kind``, rotated one step per call."""
        found = [e.address for e in self.cluster.endpoints(kind)]
        if not found:
            return []
        start = next(self._round_robin) % len(found)
        return found[start:] + found[:start]

    def store_address(self, store_id: str) -> str:
        for endpoint in self.cluster.endpoints(common_pb2.SERVICE_KIND_STORE):
            if endpoint.instance_id == store_id:
                return endpoint.address
        raise error(errors_pb2.CODE_STORE_NOT_FOUND, f"no live store {store_id!r}", store_id=store_id)

    async def queues(self, topic: str) -> list[route_pb2.QueueData]:
        """The topic's queues on every live store serving it; TOPIC_NOT_FOUND when none."""
        queues, _ = await self.cluster.route(topic)
        if not queues:
            raise error(errors_pb2.CODE_TOPIC_NOT_FOUND, f"no live store serves topic {topic!r}", topic=topic)
        return list(queues)

    def store(self, store_id: str) -> store_pb2_grpc.StoreStub:
        address = self.store_address(store_id)
        stub = self._store_stubs.get(address)
        if stub is None:  # one per address: building a stub per call shows in profiles
            stub = self._store_stubs[address] = store_pb2_grpc.StoreStub(self.channel(address))
        return stub

    def store_admin(self, store_id: str) -> store_pb2_grpc.StoreAdminStub:
        return store_pb2_grpc.StoreAdminStub(self.channel(self.store_address(store_id)))

    # -- store -----------------------------------------------------------------------

    async def send(
        self, store_id: str, message: common_pb2.Message, *, producer_group: str = "", prepared: bool = False
    ) -> store_pb2.SendResult:
        """Store one message; a half message (``prepared``) coalesced with the other
        halves of ``producer_group`` to that store (``send_normal``), a normal one alone."""
        if prepared:
            return await self._coalesced(store_id, message, producer_group=producer_group, prepared=True)
        return await self._send_unary(store_id, message)

    async def _send_unary(
        self, store_id: str, message: common_pb2.Message, *, producer_group: str = "", prepared: bool = False
    ) -> store_pb2.SendResult:
        request = store_pb2.SendMessageRequest(
            message=message, producer_group=producer_group, transaction_prepared=prepared
        )
        stub = self.store(store_id)
        return (await call(lambda: stub.SendMessage(request, timeout=self.timeout_s))).result

    async def send_normal(self, store_id: str, message: common_pb2.Message) -> store_pb2.SendResult:
        """Store a normal (not transactional) message, coalesced with the other sends to
        that store: the SDK's mechanism (``txmq.pipe``), frames of records on one open
        ``SendStream`` (``txmq.aio.pipe.AsyncSendPipe``, as the asyncio SDK). A record the store refuses fails
        only its own send."""
        return await self._coalesced(store_id, message, producer_group="", prepared=False)

    async def _coalesced(
        self, store_id: str, message: common_pb2.Message, *, producer_group: str, prepared: bool
    ) -> store_pb2.SendResult:
        address = self.store_address(store_id)
        if address in self._unary_only:
            return await self._send_unary(store_id, message, producer_group=producer_group, prepared=prepared)
        key = (address, producer_group, prepared)
        pipe = self._pipes.get(key)
        if pipe is None or pipe.failed is not None:
            pipe = self._pipes[key] = AsyncSendPipe(
                self.store(store_id), producer_group=producer_group, settings=_PIPE_SETTINGS,
                transaction_prepared=prepared,
            )  # fmt: skip
        unique_id = message.unique_id or new_unique_id()
        record = encode_for_send(
            message.topic,
            message.queue_id if message.HasField("queue_id") else None,
            message.body,
            unique_id,
            tags=message.tags or None,
            keys=message.keys,
            properties=message.properties,
            flag=message.flag,
            born_timestamp_ms=message.born_timestamp_ms,
        )
        try:
            async with asyncio.timeout(self.timeout_s):
                ack, at = await pipe.send(record, 1)
        except TimeoutError:
            err = error(
                errors_pb2.CODE_UPSTREAM_TIMEOUT, f"store {store_id} did not acknowledge within {self.timeout_s} s"
            )
            # A stream that stalls holds every later frame: the next send opens a new one.
            await pipe.close(err)
            raise err from None
        except TxmqError as err:
            # A store without SendStream (an older txmq): unary sends.
            if not (isinstance(err, NotImplementedYetError) and err.transport):
                raise
            log.info("store %s at %s: no send stream (%s): unary sends", store_id, address, err)
            self._unary_only.add(address)
            return await self._send_unary(store_id, message, producer_group=producer_group, prepared=prepared)
        offset = ack.commit_log_offsets[at]
        return store_pb2.SendResult(
            status=ack.status,
            msg_id=unique_id,
            offset_msg_id=f"{ack.offset_msg_id_prefix}{offset:016X}",
            queue=common_pb2.MessageQueue(topic=message.topic, store_id=ack.store_id, queue_id=ack.queue_ids[at]),
            queue_offset=ack.queue_offsets[at],
            commit_log_offset=offset,
            # A half message's transaction id is its unique id (RecordFrame.transaction_prepared).
            transaction_id=unique_id if prepared else "",
            deliver_at_ms=ack.deliver_at_ms[at] if len(ack.deliver_at_ms) > at else 0,
        )

    async def recall(self, handle: RecallHandle) -> store_pb2.RecallMessageResponse:
        """The store's RecallMessage for ``handle`` (at the store it names)."""
        request = store_pb2.RecallMessageRequest(
            topic=handle.topic, commit_log_offset=handle.commit_log_offset, unique_id=handle.unique_id
        )
        stub = self.store(handle.store_id)
        return await call(lambda: stub.RecallMessage(request, timeout=self.timeout_s))

    async def send_batch(self, store_id: str, messages: list[common_pb2.Message]) -> list[store_pb2.SendResult]:
        """Store ``messages`` in one call (validated as a whole by the store: an error
        stores none of them); one result per message, in order."""
        request = store_pb2.SendBatchRequest(messages=messages)
        stub = self.store(store_id)
        return list((await call(lambda: stub.SendBatch(request, timeout=self.timeout_s))).results)

    async def commit_consume_offset(self, store_id: str, *, group: str, topic: str, queue_id: int, offset: int) -> None:
        request = store_pb2.CommitConsumeOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, offset=offset
        )
        stub = self.store(store_id)
        await call(lambda: stub.CommitConsumeOffset(request, timeout=self.timeout_s))

    async def query_consume_offset(self, store_id: str, *, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of a queue; None when it has none."""
        request = store_pb2.QueryConsumeOffsetRequest(consumer_group=group, topic=topic, queue_id=queue_id)
        stub = self.store(store_id)
        try:
            reply = await call(lambda: stub.QueryConsumeOffset(request, timeout=self.timeout_s))
        except TxmqError as err:
            if err.code == errors_pb2.CODE_CONSUME_OFFSET_NOT_FOUND:
                return None
            raise
        return reply.offset if reply.found else None

    async def queue_offsets(self, store_id: str, topic: str) -> dict[int, tuple[int, int]]:
        """queue id -> (min offset, max offset) of the topic's queues on a store."""
        request = store_pb2.GetQueueOffsetsRequest(topic=topic)
        stub = self.store(store_id)
        reply = await call(lambda: stub.GetQueueOffsets(request, timeout=self.timeout_s))
        return {q.queue_id: (q.min_offset, q.max_offset) for q in reply.queues}

    async def search_offset(self, store_id: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of a queue stored at or after ``timestamp_ms`` (its max offset
        when there is none)."""
        request = store_pb2.SearchOffsetRequest(topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms)
        stub = self.store(store_id)
        return (await call(lambda: stub.SearchOffset(request, timeout=self.timeout_s))).offset

    async def ensure_topic(self, store_id: str, topic: str, *, queue_nums: int = 1) -> None:
        """Create ``topic`` on a store unless it exists (e.g. a %DLQ% topic)."""
        admin = self.store_admin(store_id)
        create = store_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(name=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums)
        )
        try:
            await call(lambda: admin.CreateTopic(create, timeout=self.timeout_s))
        except TxmqError as err:
            if err.code != errors_pb2.CODE_TOPIC_ALREADY_EXISTS:
                raise

    # -- pull ------------------------------------------------------------------------

    async def pull(self, request: pull_pb2.PullMessageRequest) -> pull_pb2.PullMessageResponse:
        """One pull (held up to ``suspend_timeout_ms`` when ``suspend``) on any live pull instance."""
        timeout = self.timeout_s + (request.suspend_timeout_ms / 1000 if request.suspend else 0) + _PULL_MARGIN_S
        return await self._first_live(
            common_pb2.SERVICE_KIND_PULL,
            lambda channel: pull_pb2_grpc.PullStub(channel).PullMessage(request, timeout=timeout),
        )

    # -- txcheck ---------------------------------------------------------------------

    async def end_transaction(self, request: txcheck_pb2.EndTransactionRequest) -> txcheck_pb2.EndTransactionResponse:
        """A COMMIT / ROLLBACK decided by the store holding the half message itself
        (DecideTransactions, first decision wins, atomically; under the gateway's
        identity: the client's Pub on the topic was checked here, and the half message's
        group is that topic). When that store fails retriably or is not live, and for
        anything else, END_TRANSACTION on the live txcheck replicas in turn until one
        decides (a retriable error moves on; a repeated decision is answered as the
        first)."""
        decision = STORE_DECISIONS.get(request.resolution)
        if decision is not None:
            try:
                return await self._decide(request, decision)
            except TxmqError as err:
                if not (err.retriable or err.code == errors_pb2.CODE_STORE_NOT_FOUND):
                    raise
                log.info("END_TRANSACTION of %s at store %s: %s; through txcheck", request.transaction_id,
                         request.store_id, err)  # fmt: skip
        return await self._first_live(
            common_pb2.SERVICE_KIND_TXCHECK,
            lambda channel: txcheck_pb2_grpc.TransactionStub(channel).EndTransaction(request, timeout=self.timeout_s),
        )

    async def _decide(
        self, request: txcheck_pb2.EndTransactionRequest, decision: store_pb2.Decision
    ) -> txcheck_pb2.EndTransactionResponse:
        stub = self.store(request.store_id)
        call_request = store_pb2.DecideTransactionsRequest(
            decisions=[
                store_pb2.TransactionDecision(
                    commit_log_offset=request.commit_log_offset,
                    tran_state_table_offset=request.tran_state_table_offset,
                    transaction_id=request.transaction_id,
                    producer_group=request.producer_group,
                    decision=decision,
                    from_transaction_check=request.from_transaction_check,
                )
            ]
        )
        reply = await call(lambda: stub.DecideTransactions(call_request, timeout=self.timeout_s))
        if len(reply.results) != 1:
            raise error(errors_pb2.CODE_INTERNAL_ERROR, f"the store answered {len(reply.results)} decisions of 1")
        [result] = reply.results
        if result.HasField("error"):
            raise TxmqError.from_detail(result.error)
        return txcheck_pb2.EndTransactionResponse(committed=result.committed if result.HasField("committed") else None)

    async def _first_live(self, kind: int, rpc: Callable[[grpc.aio.Channel], Awaitable[T]]) -> T:
        """``rpc`` on the live instances of ``kind`` in turn until one answers; a
        retriable error moves on to the next, any other is raised."""
        addresses = self.addresses(kind)
        if not addresses:
            raise error(errors_pb2.CODE_UNAVAILABLE, f"no {common_pb2.ServiceKind.Name(kind)} instance is live")
        last: TxmqError | None = None
        for address in addresses:
            channel = self.channel(address)
            try:
                return await call(lambda: rpc(channel))
            except TxmqError as err:
                if not err.retriable:
                    raise
                last = err
        assert last is not None
        raise last

    def producer_channel(self, address: str) -> grpc.aio.StreamStreamCall:
        """Open ``Transaction/ProducerChannel`` on a txcheck replica (no deadline)."""
        return txcheck_pb2_grpc.TransactionStub(self.channel(address)).ProducerChannel()

    async def close(self) -> None:
        pipes, self._pipes = list(self._pipes.values()), {}
        for pipe in pipes:
            await pipe.close()
        channels, self._channels = self._channels, {}
        self._store_stubs.clear()
        for address, channel in channels.items():
            try:
                await asyncio.wait_for(channel.close(), _CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("closing the channel to %s took over %s s; left behind", address, _CLOSE_TIMEOUT_S)
