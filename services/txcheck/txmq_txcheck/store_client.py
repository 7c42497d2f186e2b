"""The store as the transaction service uses it: a thin asyncio wrapper over the Store
gRPC stub. Failed calls raise the typed ``TxmqError``. Tests wrap it for fault
injection; everything else in txmq_txcheck depends only on these methods."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from txmq.errors import TxmqError
from txmq.protocol import TRANS_CHECK_GROUP
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.calls import internal_channel

_TIMEOUT_S = 10.0
MAX_QUERY_RESULTS = 1000


class StoreClient:
    def __init__(self, channel: grpc.aio.Channel, *, store_id: str = "", address: str = "") -> None:
        self.store_id = store_id
        self.address = address
        self._channel = channel
        self._stub = store_pb2_grpc.StoreStub(channel)

    @classmethod
    def dial(cls, address: str, *, store_id: str = "") -> StoreClient:
        return cls(internal_channel(address), store_id=store_id, address=address)

    async def close(self) -> None:
        await self._channel.close()

    async def _call(self, method, request):
        try:
            return await method(request, timeout=_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise TxmqError.from_rpc_error(exc) from exc

    async def view(self, commit_log_offset: int) -> common_pb2.MessageView | None:
        """The record at ``commit_log_offset``; None when there is none."""
        try:
            r = await self._call(
                self._stub.ViewMessage, store_pb2.ViewMessageRequest(commit_log_offset=commit_log_offset)
            )
        except TxmqError as err:
            if err.code in (errors_pb2.CODE_MESSAGE_NOT_FOUND, errors_pb2.CODE_ILLEGAL_MESSAGE_ID):
                return None
            raise
        return r.message

    async def get(self, topic: str, queue_id: int, offset: int, max_messages: int = 32) -> store_pb2.GetMessageResponse:
        return await self._call(
            self._stub.GetMessage,
            store_pb2.GetMessageRequest(
                consumer_group=TRANS_CHECK_GROUP,
                topic=topic,
                queue_id=queue_id,
                offset=offset,
                max_messages=max_messages,
            ),
        )

    async def put(
        self, messages: Sequence[store_pb2.SystemMessage], *, producer_group: str = ""
    ) -> list[store_pb2.SendResult]:
        r = await self._call(
            self._stub.PutSystemMessages,
            store_pb2.PutSystemMessagesRequest(messages=messages, producer_group=producer_group),
        )
        return list(r.results)

    async def decide(
        self,
        decisions: Sequence[store_pb2.TransactionDecision],
        *,
        transaction_timeout_ms: int,
        fence: store_pb2.Fence | None = None,
    ) -> list[store_pb2.DecisionResult]:
        """The store decides (first decision wins, atomically): one result per item."""
        r = await self._call(
            self._stub.DecideTransactions,
            store_pb2.DecideTransactionsRequest(
                decisions=decisions, transaction_timeout_ms=transaction_timeout_ms, fence=fence
            ),
        )
        return list(r.results)

    async def requeue(
        self, actions: Sequence[store_pb2.HalfAction], *, fence: store_pb2.Fence | None = None
    ) -> list[store_pb2.HalfActionResult]:
        """Put half records back / discard them, in one append (decided ones are settled)."""
        r = await self._call(self._stub.RequeueHalves, store_pb2.RequeueHalvesRequest(actions=actions, fence=fence))
        return list(r.results)

    async def by_unique_id(self, unique_id: str, *, topic: str = "") -> list[common_pb2.MessageView]:
        r = await self._call(
            self._stub.QueryMessages,
            store_pb2.QueryMessagesRequest(topic=topic, unique_id=unique_id, max_results=MAX_QUERY_RESULTS),
        )
        return list(r.messages)

    async def by_key(self, topic: str, key: str) -> list[common_pb2.MessageView]:
        r = await self._call(
            self._stub.QueryMessages,
            store_pb2.QueryMessagesRequest(topic=topic, key=key, max_results=MAX_QUERY_RESULTS),
        )
        return list(r.messages)

    async def query_consume_offset(self, topic: str, queue_id: int) -> int | None:
        r = await self._call(
            self._stub.QueryConsumeOffset,
            store_pb2.QueryConsumeOffsetRequest(consumer_group=TRANS_CHECK_GROUP, topic=topic, queue_id=queue_id),
        )
        return r.offset if r.found else None

    async def commit_consume_offset(
        self, topic: str, queue_id: int, offset: int, *, fence: store_pb2.Fence | None = None
    ) -> None:
        await self._call(
            self._stub.CommitConsumeOffset,
            store_pb2.CommitConsumeOffsetRequest(
                consumer_group=TRANS_CHECK_GROUP, topic=topic, queue_id=queue_id, offset=offset, fence=fence
            ),
        )
