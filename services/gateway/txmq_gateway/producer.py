"""SendMessage and EndTransaction of the v2 protocol, over txmq's stores and txcheck.

Where a message goes: the client picks a queue from the route, but a v2 send names only
the queue id, not the broker; the gateway picks the store itself (round robin over the
stores with writable queues) and lets that store pick the queue, except for FIFO messages
(a message group), which always go to the same (store, queue) by a stable hash of the
group. Transactional messages are stored as half messages with producer group = topic
(what RocketMQ 5's proxy does for gRPC producers, which have no group), and their v2
transaction id carries what END_TRANSACTION needs (``convert.TransactionHandle``), signed
with the cluster's handle key (``convert.HandleSigner``) so that a client can neither
forge nor alter one.

Client retries: the official clients resend a failed send up to 3 times, without
backoff, with the same message id. A send whose (topic, message id) succeeded within
``send_dedupe_window_ms`` is answered with the first result; one still in flight is
awaited instead of being stored twice (a batch: by its topic and all its message ids).

Several messages in one SendMessageRequest are one batch (rocketmq-apis #68): one topic,
no transactional message, one message group at most; stored with one ``SendBatch`` on
one queue of one store, so all of them are stored or none.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from txmq.recall import RecallHandle
from txmq.v1 import route_pb2, store_pb2, txcheck_pb2
from txmq_gateway.backend import Backend
from txmq_gateway.convert import HandleSigner, TransactionHandle, decoded_body, to_txmq_message
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError, from_exception, ok, shorten
from txmq_gateway.v2 import Code, pb, svc
from txmq_runtime.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("txmq.gateway.producer")

_UNSUPPORTED_TYPES = {pb.LITE: "lite topics"}
_WRITABLE = 2  # RocketMQ permission bit
#: A message field set from it is a copy: one for every answer.
_OK = ok()

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Sent:
    """What a stored message's SendResultEntry says."""

    message_id: str
    transaction_id: str
    offset: int
    recall_handle: str = ""  # a delayed message's (txmq.recall)


class SendDeduper:
    """(topic, message id) -> the first successful result, for ``window_ms``; bounded."""

    def __init__(self, *, window_ms: int, max_entries: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self._window_ms = window_ms
        self._max = max_entries
        self._clock = clock
        self._done: OrderedDict[tuple[str, str], tuple[int, Any]] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Future[Any]] = {}

    async def once(self, key: tuple[str, str], send: Callable[[], Awaitable[T]]) -> T:
        """``send()`` unless ``key`` succeeded recently or is being sent (then that result)."""
        if self._window_ms <= 0 or not key[1]:
            return await send()
        now = self._clock.now_ms()
        self._expire(now)
        hit = self._done.get(key)
        if hit is not None:
            log.info("send of %s/%s repeated within the dedupe window: answered with the first result", *key)
            return hit[1]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await send()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a failure is not remembered, a retry sends again
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(result)
        self._done[key] = (self._clock.now_ms(), result)
        while len(self._done) > self._max:
            self._done.popitem(last=False)
        return result

    def _expire(self, now: int) -> None:
        while self._done:
            key, (at, _) = next(iter(self._done.items()))
            if now - at < self._window_ms:
                break
            del self._done[key]


class ProducerCore:
    def __init__(self, backend: Backend, settings: GatewaySettings, *, handles: HandleSigner | None = None) -> None:
        self.backend = backend
        self.settings = settings
        #: Signs the transaction ids sent to clients and checks those they send back
        #: (the cluster's key; without one, a key of this core alone).
        self.handles = handles or HandleSigner.ephemeral()
        self.dedupe = SendDeduper(
            window_ms=settings.send_dedupe_window_ms, max_entries=settings.send_dedupe_max_entries
        )
        self._round_robin = itertools.count()

    async def send(self, request: svc.SendMessageRequest) -> svc.SendMessageResponse:
        """One entry per message; the response status is the entry's for one message.
        Several messages are one batch, stored all or nothing (``send_batch``): every
        entry then has the batch's status."""
        if not request.messages:
            return svc.SendMessageResponse(status=pb.Status(code=Code.BAD_REQUEST, message="no message to send"))
        if len(request.messages) > 1:
            return await self._send_batch(list(request.messages))
        message = request.messages[0]
        try:
            sent = await self.send_one(message)
        except Exception as exc:  # noqa: BLE001 - every failure is answered as a status
            if not isinstance(exc, GatewayError):
                log.info("send to %s failed: %s", message.topic.name, exc)
            status = from_exception(exc)
            entry = svc.SendResultEntry(status=status, message_id=message.system_properties.message_id)
            return svc.SendMessageResponse(status=status, entries=[entry])
        entry = svc.SendResultEntry(
            status=_OK, message_id=sent.message_id, transaction_id=sent.transaction_id, offset=sent.offset,
            recall_handle=sent.recall_handle,
        )  # fmt: skip
        return svc.SendMessageResponse(status=_OK, entries=[entry])

    async def _send_batch(self, messages: list[pb.Message]) -> svc.SendMessageResponse:
        try:
            sents = await self.send_batch(messages)
        except Exception as exc:  # noqa: BLE001 - every failure is answered as a status
            if not isinstance(exc, GatewayError):
                log.info("batch send to %s failed: %s", messages[0].topic.name, exc)
            status = from_exception(exc)
            status.message = f"batch of {len(messages)} messages not stored (all or nothing): {status.message}"
            return svc.SendMessageResponse(
                status=status,
                entries=[
                    svc.SendResultEntry(status=status, message_id=m.system_properties.message_id) for m in messages
                ],
            )
        return svc.SendMessageResponse(
            status=ok(),
            entries=[
                svc.SendResultEntry(
                    status=ok(),
                    message_id=s.message_id,
                    transaction_id="",
                    offset=s.offset,
                    recall_handle=s.recall_handle,
                )
                for s in sents
            ],
        )

    async def send_batch(self, messages: list[pb.Message]) -> list[Sent]:
        """Several messages as ONE batch of one store (``SendBatch``): all are stored or
        none (rocketmq-apis #68). RocketMQ's batch rules: one topic, no transactional
        (half) messages, and (txmq) at most one message group, so the batch stays in
        one queue as that group's order needs. Any message the gateway refuses refuses
        the batch, named by its position."""
        topic = messages[0].topic.name
        groups = set()
        for index, message in enumerate(messages, 1):
            where = f"message {index} of the batch"
            if message.topic.name != topic:
                raise GatewayError(
                    Code.BAD_REQUEST,
                    f"the messages of a batch must share one topic: {where} is for {shorten(message.topic.name)}, "
                    f"message 1 for {shorten(topic)}",
                )
            try:
                self._check(message)
            except GatewayError as err:
                raise GatewayError(err.code, f"{where}: {err.message}") from None
            sp = message.system_properties
            if sp.message_type == pb.TRANSACTION:
                raise GatewayError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"{where} is transactional: a batch cannot hold transactional messages (as in RocketMQ); "
                    "send them one per request",
                )
            groups.add(sp.message_group if sp.HasField("message_group") else "")
        if len(groups) > 1:
            raise GatewayError(
                Code.BAD_REQUEST, "the messages of a batch must share one message group (or all have none)"
            )
        ids = [m.system_properties.message_id for m in messages]
        if len(set(ids)) != len(ids):
            raise GatewayError(Code.ILLEGAL_MESSAGE_ID, "the messages of a batch must have distinct message ids")

        async def store() -> tuple[Sent, ...]:
            (group,) = groups
            store_id, queue_id = await self._place(topic, group)
            if queue_id is None:  # one queue for the whole batch, as RocketMQ's batches
                counts = {q.store_id: q.write_queue_nums for q in await self.backend.queues(topic)}
                queue_id = next(self._round_robin) % max(1, counts.get(store_id, 1))
            stored = [to_txmq_message(m, queue_id=queue_id) for m in messages]
            results = await self.backend.send_batch(store_id, stored)
            if len(results) != len(messages):
                raise GatewayError(
                    Code.INTERNAL_SERVER_ERROR, f"store {store_id} answered {len(results)} results for {len(messages)}"
                )
            bad = [r for r in results if r.status != store_pb2.SEND_STATUS_OK]
            if bad:
                raise GatewayError(
                    Code.MASTER_PERSISTENCE_TIMEOUT, f"stored with status {store_pb2.SendStatus.Name(bad[0].status)}"
                )
            return tuple(
                Sent(
                    message_id=r.msg_id or i, transaction_id="", offset=r.queue_offset,
                    recall_handle=RecallHandle.of_send(topic, store_id, r.commit_log_offset, r.msg_id, r.deliver_at_ms),
                )
                for r, i in zip(results, ids, strict=True)
            )  # fmt: skip

        return list(await self.dedupe.once((topic, "batch:" + ",".join(ids)), store))

    def _check(self, message: pb.Message) -> None:
        """What a message must be to be stored (GatewayError otherwise)."""
        topic = message.topic.name
        sp = message.system_properties
        if not topic:
            raise GatewayError(Code.ILLEGAL_TOPIC, "topic is required")
        if not sp.message_id:
            raise GatewayError(Code.ILLEGAL_MESSAGE_ID, "system_properties.message_id is required")
        if sp.message_type in _UNSUPPORTED_TYPES:
            raise GatewayError(Code.UNSUPPORTED, f"txmq does not support {_UNSUPPORTED_TYPES[sp.message_type]} yet")
        if sp.HasField("delivery_timestamp"):
            # A delayed message: the store holds it until then (docs/store.md "Delayed messages").
            if sp.message_type == pb.TRANSACTION:
                raise GatewayError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    "a transactional message cannot be delayed (RocketMQ #10260): send it without "
                    "delivery_timestamp, or as a DELAY message outside the transaction",
                )
            if sp.HasField("message_group"):
                raise GatewayError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message (with a message group) cannot be delayed"
                )
            if sp.delivery_timestamp.ToMilliseconds() < 0:
                raise GatewayError(Code.ILLEGAL_DELIVERY_TIME, "delivery_timestamp is before 1970")
        elif sp.message_type == pb.DELAY:
            raise GatewayError(Code.ILLEGAL_DELIVERY_TIME, "a DELAY message needs system_properties.delivery_timestamp")
        body = decoded_body(message)
        if not body:
            raise GatewayError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
        if len(body) > self.settings.max_body_size_bytes:
            raise GatewayError(
                Code.MESSAGE_BODY_TOO_LARGE,
                f"message body is {len(body)} bytes; at most {self.settings.max_body_size_bytes}",
            )
        if sp.message_type == pb.TRANSACTION and sp.HasField("message_group"):
            raise GatewayError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message has no message group")

    async def send_one(self, message: pb.Message) -> Sent:
        topic = message.topic.name
        sp = message.system_properties
        self._check(message)
        transactional = sp.message_type == pb.TRANSACTION

        async def store() -> Sent:
            store_id, queue_id = await self._place(topic, sp.message_group if sp.HasField("message_group") else "")
            stored = to_txmq_message(message, queue_id=queue_id)
            if transactional:
                result = await self.backend.send(store_id, stored, producer_group=topic, prepared=True)
            else:
                result = await self.backend.send_normal(store_id, stored)
            if result.status != store_pb2.SEND_STATUS_OK:
                # Accepted but not flushed / replicated in time (RocketMQ FLUSH_DISK_TIMEOUT...).
                raise GatewayError(
                    Code.MASTER_PERSISTENCE_TIMEOUT, f"stored with status {store_pb2.SendStatus.Name(result.status)}"
                )
            transaction_id = ""
            if transactional:
                transaction_id = self.handles.encode(
                    TransactionHandle(
                        store_id=store_id,
                        commit_log_offset=result.commit_log_offset,
                        queue_offset=result.queue_offset,
                        transaction_id=result.transaction_id or result.msg_id,
                    )
                )
            return Sent(
                message_id=result.msg_id or sp.message_id, transaction_id=transaction_id, offset=result.queue_offset,
                recall_handle=RecallHandle.of_send(
                    topic, store_id, result.commit_log_offset, result.msg_id, result.deliver_at_ms
                ),
            )  # fmt: skip

        return await self.dedupe.once((topic, sp.message_id), store)

    async def _place(self, topic: str, message_group: str) -> tuple[str, int | None]:
        """(store id, queue id or None for the store's own choice)."""
        writable = [q for q in await self.backend.queues(topic) if q.perm & _WRITABLE and q.write_queue_nums > 0]
        if not writable:
            raise GatewayError(Code.FORBIDDEN, f"topic {topic!r} has no writable queue")
        if message_group:
            slots = [(q.store_id, i) for q in writable for i in range(q.write_queue_nums)]
            store_id, queue_id = slots[zlib.crc32(message_group.encode()) % len(slots)]
            return store_id, queue_id
        chosen: route_pb2.QueueData = writable[next(self._round_robin) % len(writable)]
        return chosen.store_id, None

    async def end_transaction(self, request: svc.EndTransactionRequest) -> None:
        """COMMIT / ROLLBACK of a half message sent through a gateway (any replica: the
        transaction id carries the store and offsets)."""
        handle = self.handles.decode(request.transaction_id)
        if request.message_id and request.message_id != handle.transaction_id:
            raise GatewayError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction id belongs to message {handle.transaction_id}, not {request.message_id}",
            )
        resolution = {
            pb.COMMIT: txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT,
            pb.ROLLBACK: txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK,
        }.get(request.resolution)
        if resolution is None:
            raise GatewayError(Code.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
        if not request.topic.name:
            raise GatewayError(Code.ILLEGAL_TOPIC, "topic is required")
        await self.backend.end_transaction(
            txcheck_pb2.EndTransactionRequest(
                producer_group=request.topic.name,
                transaction_id=handle.transaction_id,
                commit_log_offset=handle.commit_log_offset,
                tran_state_table_offset=handle.queue_offset,
                resolution=resolution,
                from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK,
                store_id=handle.store_id,
            )
        )
