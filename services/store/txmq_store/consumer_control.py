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

from txmq.errors import error
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.grpc_errors import rpc

from .message_store import MessageStore
from .queue_locks import StoreQueueLocks


class ConsumerControlServicer(store_pb2_grpc.ConsumerControlServicer):
    def __init__(self, store: MessageStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self.queue_locks = StoreQueueLocks(store, clock=clock)  # LockQueues / UnlockQueues

    @rpc
    async def SendBack(self, request: store_pb2.SendBackRequest, context: grpc.aio.ServicerContext):
        raise error(errors_pb2.CODE_NOT_IMPLEMENTED, "SendBack is not built yet")

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
