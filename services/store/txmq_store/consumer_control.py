"""The ConsumerControl service (protos/txmq/v1/store.proto): what consumers of a group ask
of the store that holds their queues.

- ``SendBack``: a failed message copied to ``%RETRY%<group>`` (due after a delay level)
  or ``%DLQ%<group>`` (``sendback.py``; docs/consumers.md "Retries and dead letters").
- ``LockQueues`` / ``UnlockQueues``: the leased queue locks of orderly consumption
  (``queue_locks.py``; docs/consumers.md "Orderly consumption").

A thin servicer: requests are checked and mapped here, the decisions are the cores'.
"""

from __future__ import annotations

import grpc

from txmq.v1 import auth_pb2, common_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.auth import require
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.grpc_errors import rpc

from .message_store import MessageStore
from .queue_locks import StoreQueueLocks
from .sendback import SendBack


class ConsumerControlServicer(store_pb2_grpc.ConsumerControlServicer):
    def __init__(self, store: MessageStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self.queue_locks = StoreQueueLocks(store, clock=clock)  # LockQueues / UnlockQueues
        self._send_back = SendBack(store)

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
        r = outcome.result
        result = store_pb2.SendResult(
            status=store_pb2.SendStatus.ValueType(r.status),
            msg_id=r.msg_id,
            offset_msg_id=r.offset_msg_id,
            queue=common_pb2.MessageQueue(topic=r.topic, store_id=self._store.store_id, queue_id=r.queue_id),
            queue_offset=r.queue_offset,
            commit_log_offset=r.commit_log_offset,
            duplicate=outcome.duplicate,
        )
        return store_pb2.SendBackResponse(
            result=result, dead_lettered=outcome.dead_lettered, reconsume_times=outcome.reconsume_times
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
    """The handler check of SendBack (protos/ACCESS.md): Sub on the record's topic."""
    require(auth_pb2.RESOURCE_TYPE_TOPIC, topic, auth_pb2.ACTION_SUB)
