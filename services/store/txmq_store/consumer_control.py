"""The ConsumerControl service (protos/txmq/v1/store.proto): what consumers of a group ask
of the store that holds their queues.

- ``SendBack``: a failed message copied to ``%RETRY%<group>`` (due after a delay level)
  or ``%DLQ%<group>`` (``sendback.py``; docs/consumers.md "Retries and dead letters").
- ``LockQueues`` / ``UnlockQueues``: the leased queue locks of orderly consumption
  (``queue_locks.py``; docs/consumers.md "Orderly consumption").
- ``ResendDeadLetters``: dead letters sent again to their origin topic, each once
  (``sendback.py``; ``txmq dlq resend``).

A thin servicer: requests are checked and mapped here, the decisions are the cores'.
"""

from __future__ import annotations

import grpc

from txmq.v1 import auth_pb2, common_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.auth import require
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.grpc_errors import rpc

from .message_store import MessageStore
from .model import SendResult
from .queue_locks import StoreQueueLocks
from .sendback import DeadLetterResend, SendBack


class ConsumerControlServicer(store_pb2_grpc.ConsumerControlServicer):
    def __init__(self, store: MessageStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self.queue_locks = StoreQueueLocks(store, clock=clock)  # LockQueues / UnlockQueues
        self._send_back = SendBack(store)
        self._resend = DeadLetterResend(store)

    @rpc
    async def SendBack(self, request: store_pb2.SendBackRequest, context: grpc.aio.ServicerContext):
        outcome = await self._send_back.send_back(
            group=request.group,
            commit_log_offset=request.commit_log_offset,
            unique_id=request.unique_id,
            delay_level=request.delay_level,
            max_reconsume_times=request.max_reconsume_times if request.HasField("max_reconsume_times") else None,
            uncounted=request.uncounted,
            may_consume=_may_consume,
        )
        return store_pb2.SendBackResponse(
            result=self._result_pb(outcome.result, duplicate=outcome.duplicate),
            dead_lettered=outcome.dead_lettered,
            reconsume_times=outcome.reconsume_times,
        )

    @rpc
    async def ResendDeadLetters(self, request: store_pb2.ResendDeadLettersRequest, context: grpc.aio.ServicerContext):
        resent = await self._resend.resend(
            group=request.group, unique_ids=list(request.unique_ids), may_consume=_may_consume
        )
        return store_pb2.ResendDeadLettersResponse(
            resent=[
                store_pb2.ResentDeadLetter(
                    dead_letter_id=r.dead_letter_id,
                    commit_log_offset=r.commit_log_offset,
                    result=self._result_pb(r.result, duplicate=r.result.duplicate),
                )
                for r in resent
            ]
        )

    def _result_pb(self, r: SendResult, *, duplicate: bool) -> store_pb2.SendResult:
        return store_pb2.SendResult(
            status=store_pb2.SendStatus.ValueType(r.status),
            msg_id=r.msg_id,
            offset_msg_id=r.offset_msg_id,
            queue=common_pb2.MessageQueue(topic=r.topic, store_id=self._store.store_id, queue_id=r.queue_id),
            queue_offset=r.queue_offset,
            commit_log_offset=r.commit_log_offset,
            duplicate=duplicate,
        )

    @rpc
    async def LockQueues(self, request: store_pb2.LockQueuesRequest, context: grpc.aio.ServicerContext):
        held = self.queue_locks.lock(request.group, request.client_id, request.queues)
        store_id = self._store.store_id
        return store_pb2.LockQueuesResponse(
            locked=[common_pb2.MessageQueue(topic=t, store_id=store_id, queue_id=q) for t, q in held],
            lease_ms=self.queue_locks.locks.lease_ms,
        )

    @rpc
    async def UnlockQueues(self, request: store_pb2.UnlockQueuesRequest, context: grpc.aio.ServicerContext):
        self.queue_locks.unlock(request.group, request.client_id, request.queues)
        return store_pb2.UnlockQueuesResponse()


def _may_consume(topic: str) -> None:
    """The handler check of SendBack and ResendDeadLetter (protos/ACCESS.md): Sub on the
    record's topic (the dead letter's origin topic)."""
    require(auth_pb2.RESOURCE_TYPE_TOPIC, topic, auth_pb2.ACTION_SUB)
