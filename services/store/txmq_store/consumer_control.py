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
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.grpc_errors import rpc

from .message_store import MessageStore


class ConsumerControlServicer(store_pb2_grpc.ConsumerControlServicer):
    def __init__(self, store: MessageStore) -> None:
        self._store = store

    @rpc
    async def SendBack(self, request: store_pb2.SendBackRequest, context: grpc.aio.ServicerContext):
        raise error(errors_pb2.CODE_NOT_IMPLEMENTED, "SendBack is not built yet")

    @rpc
    async def LockQueues(self, request: store_pb2.LockQueuesRequest, context: grpc.aio.ServicerContext):
        raise error(errors_pb2.CODE_NOT_IMPLEMENTED, "LockQueues is not built yet")

    @rpc
    async def UnlockQueues(self, request: store_pb2.UnlockQueuesRequest, context: grpc.aio.ServicerContext):
        raise error(errors_pb2.CODE_NOT_IMPLEMENTED, "UnlockQueues is not built yet")
