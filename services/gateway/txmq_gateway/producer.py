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
awaited instead of being stored twice.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from txmq.v1 import route_pb2, store_pb2, txcheck_pb2
from txmq_gateway.backend import Backend
from txmq_gateway.convert import HandleSigner, TransactionHandle, decoded_body, to_txmq_message
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError, from_exception, ok, overall
from txmq_gateway.v2 import Code, pb, svc
from txmq_runtime.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("txmq.gateway.producer")

_UNSUPPORTED_TYPES = {pb.DELAY: "delay (timed) messages", pb.LITE: "lite topics", pb.PRIORITY: "priority messages"}
_WRITABLE = 2  # RocketMQ permission bit


@dataclass(frozen=True, slots=True)
class Sent:
    """What a stored message's SendResultEntry says."""

    message_id: str
    transaction_id: str
    offset: int


class SendDeduper:
    """(topic, message id) -> the first successful result, for ``window_ms``; bounded."""

    def __init__(self, *, window_ms: int, max_entries: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self._window_ms = window_ms
        self._max = max_entries
        self._clock = clock
        self._done: OrderedDict[tuple[str, str], tuple[int, Sent]] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Future[Sent]] = {}

    async def once(self, key: tuple[str, str], send: Callable[[], Awaitable[Sent]]) -> Sent:
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
        future: asyncio.Future[Sent] = asyncio.get_running_loop().create_future()
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
        """One entry per message; the response status is the entry's for one message,
        else OK when all succeeded and MULTIPLE_RESULTS otherwise."""
        if not request.messages:
            return svc.SendMessageResponse(status=pb.Status(code=Code.BAD_REQUEST, message="no message to send"))
        entries = []
        for message in request.messages:
            try:
                sent = await self.send_one(message)
                entries.append(
                    svc.SendResultEntry(
                        status=ok(), message_id=sent.message_id, transaction_id=sent.transaction_id, offset=sent.offset
                    )
                )
            except Exception as exc:  # noqa: BLE001 - every failure is answered as a status
                if not isinstance(exc, GatewayError):
                    log.info("send to %s failed: %s", message.topic.name, exc)
                entries.append(
                    svc.SendResultEntry(status=from_exception(exc), message_id=message.system_properties.message_id)
                )
        return svc.SendMessageResponse(status=overall([e.status for e in entries], "sends"), entries=entries)

    async def send_one(self, message: pb.Message) -> Sent:
        topic = message.topic.name
        sp = message.system_properties
        if not topic:
            raise GatewayError(Code.ILLEGAL_TOPIC, "topic is required")
        if not sp.message_id:
            raise GatewayError(Code.ILLEGAL_MESSAGE_ID, "system_properties.message_id is required")
        if sp.message_type in _UNSUPPORTED_TYPES:
            raise GatewayError(Code.UNSUPPORTED, f"txmq does not support {_UNSUPPORTED_TYPES[sp.message_type]} yet")
        if sp.HasField("delivery_timestamp"):
            raise GatewayError(Code.UNSUPPORTED, "txmq does not support delay (timed) messages yet")
        body = decoded_body(message)
        if not body:
            raise GatewayError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
        if len(body) > self.settings.max_body_size_bytes:
            raise GatewayError(
                Code.MESSAGE_BODY_TOO_LARGE,
                f"message body is {len(body)} bytes; at most {self.settings.max_body_size_bytes}",
            )
        transactional = sp.message_type == pb.TRANSACTION
        if transactional and sp.HasField("message_group"):
            raise GatewayError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message has no message group")

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
                message_id=result.msg_id or sp.message_id, transaction_id=transaction_id, offset=result.queue_offset
            )

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
