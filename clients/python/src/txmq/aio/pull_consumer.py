"""``txmq.PullConsumer`` for asyncio: pulls, offsets, queue ranges and send-back over
``grpc.aio``, with the requests, the pull instance a queue prefers, the answers' tag
re-check and the argument checks of the threaded consumer (``txmq._pulling``,
``txmq.consumer``). Long polls are unary PullMessage calls held by the service (the
threaded consumer shares one stream per pull instance between its threads)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from types import TracebackType
from typing import Any

from txmq._client import parse_endpoints
from txmq._consumer_types import ExpressionType, PullResult, SendBackResult
from txmq._convert import message_queue_to_proto
from txmq._pulling import (
    LONG_POLL_DEADLINE_MARGIN_S,
    ordered_pull_addresses,
    pull_request,
    queue_range,
    send_back_request,
    send_back_result,
    to_pull_result,
)
from txmq._push_config import DEFAULT_SUSPEND_TIMEOUT_S, check_positive
from txmq.aio._client import AsyncClientCore, call
from txmq.consumer import check_send_back, pull_arguments
from txmq.errors import BadRequestError, NotFoundError, TxmqError, UnavailableError
from txmq.message import MessageExt, MessageQueue
from txmq.models import ServiceKind
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import errors_pb2, pull_pb2, pull_pb2_grpc, store_pb2, store_pb2_grpc
from txmq.validation import check_group, check_topic


class PullConsumer:
    """Pulls from queues and offsets you choose, from coroutines of one event loop.
    Arguments and semantics are ``txmq.PullConsumer``'s (``interceptors`` aside). A
    cancelled pull commits nothing: offsets move only by ``commit_offset``."""

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        timeout: float = 5.0,
        suspend_timeout: float = DEFAULT_SUSPEND_TIMEOUT_S,
        route_refresh_interval: float = 30.0,
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        check_positive(timeout=timeout, suspend_timeout=suspend_timeout, route_refresh_interval=route_refresh_interval)
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        parse_endpoints(endpoint)
        self.group = group
        self.endpoint = endpoint
        self._timeout = timeout
        self._suspend_timeout = suspend_timeout
        self._route_refresh_interval = route_refresh_interval
        self._tls = tls
        self._credentials = credentials
        self._core: AsyncClientCore | None = None

    def start(self) -> None:
        """Open the client (idempotent); nothing is dialled before the first call."""
        if self._core is None:
            self._core = AsyncClientCore(
                self.endpoint,
                route_refresh_interval=self._route_refresh_interval,
                tls=self._tls,
                credentials=self._credentials,
            )

    async def close(self) -> None:
        core, self._core = self._core, None
        if core is not None:
            await core.close()

    async def __aenter__(self) -> PullConsumer:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _started(self) -> AsyncClientCore:
        if self._core is None:
            raise RuntimeError("the consumer is not started: call start() or use it in an async with block")
        return self._core

    # -- queues and pulls ----------------------------------------------------------------

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues on every store, ordered by store id and queue id."""
        check_topic(topic)
        route = await self._started().routes.get(topic, timeout=self._timeout)
        if not route.queues:
            raise NotFoundError(f"topic {topic!r} does not exist", code=errors_pb2.CODE_TOPIC_NOT_FOUND)
        return route.read_queues()

    async def pull(
        self,
        mq: MessageQueue,
        expression: str = "*",
        offset: int = 0,
        max_nums: int = 32,
        *,
        expression_type: ExpressionType = ExpressionType.TAG,
        suspend: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - how long the service holds the pull
    ) -> PullResult:
        """``txmq.PullConsumer.pull``: up to ``max_nums`` messages of ``mq`` from
        ``offset``; with ``suspend``, held until one arrives or ``timeout`` passes."""
        hold = self._suspend_timeout if timeout is None else timeout
        sub, suspend_timeout = pull_arguments(mq, expression, offset, max_nums, expression_type, hold, suspend)
        request = pull_request(self.group, mq, sub, offset, max_nums=max_nums, suspend_timeout=suspend_timeout)
        deadline = self._timeout if suspend_timeout is None else suspend_timeout + LONG_POLL_DEADLINE_MARGIN_S
        response = await self._on_pull_service(mq, lambda stub: stub.PullMessage, request, deadline, prefer=True)
        return to_pull_result(response, sub)

    # -- offsets -------------------------------------------------------------------------

    async def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` as the group's progress on ``mq``."""
        if offset < 0:
            raise BadRequestError(f"offset {offset} is negative", code=errors_pb2.CODE_ILLEGAL_OFFSET)
        request = pull_pb2.UpdateConsumerOffsetRequest(
            consumer_group=self.group, queue=message_queue_to_proto(mq), offset=offset
        )
        await self._on_pull_service(mq, lambda stub: stub.UpdateConsumerOffset, request, self._timeout)

    async def fetch_offset(self, mq: MessageQueue) -> int | None:
        """The group's committed offset on ``mq``; None if it never committed one."""
        request = pull_pb2.QueryConsumerOffsetRequest(consumer_group=self.group, queue=message_queue_to_proto(mq))
        response = await self._on_pull_service(mq, lambda stub: stub.QueryConsumerOffset, request, self._timeout)
        return response.offset if response.found else None

    async def min_offset(self, mq: MessageQueue) -> int:
        return (await self._queue_range(mq))[0]

    async def max_offset(self, mq: MessageQueue) -> int:
        return (await self._queue_range(mq))[1]

    async def send_back(
        self,
        message: MessageExt,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
        uncounted: bool = False,
    ) -> SendBackResult:
        """``txmq.PullConsumer.send_back``: the store copies the message to
        ``%RETRY%<group>`` (or ``%DLQ%<group>`` past the limit)."""
        check_send_back(delay_level, max_reconsume_times)
        request = send_back_request(
            self.group, message, delay_level=delay_level, max_reconsume_times=max_reconsume_times, uncounted=uncounted
        )
        core = self._started()
        try:
            address = (await core.routes.get(message.topic, timeout=self._timeout)).store_address(message.store_id)
        except NotFoundError:
            stores = await core.routes.endpoints(ServiceKind.STORE, timeout=self._timeout)
            address = next((e.address for e in stores if e.instance_id == message.store_id), "")
            if not address:
                raise NotFoundError(
                    f"store {message.store_id!r} is not live", code=errors_pb2.CODE_STORE_NOT_FOUND
                ) from None
        stub = core.stub(address, store_pb2_grpc.ConsumerControlStub)
        try:
            return send_back_result(await call(stub.SendBack, request, timeout=self._timeout))
        except UnavailableError:
            core.routes.mark_stale(message.topic)
            raise

    # -- internals -----------------------------------------------------------------------

    async def _queue_range(self, mq: MessageQueue) -> tuple[int, int]:
        core = self._started()
        route = await core.routes.get(mq.topic, timeout=self._timeout)
        stub = core.stub(route.store_address(mq.store_id), store_pb2_grpc.StoreStub)
        request = store_pb2.GetQueueOffsetsRequest(topic=mq.topic, queue_id=mq.queue_id)
        return queue_range(await call(stub.GetQueueOffsets, request, timeout=self._timeout), mq)

    async def _on_pull_service(
        self,
        mq: MessageQueue,
        rpc: Callable[[pull_pb2_grpc.PullStub], Any],
        request: object,
        deadline: float,
        *,
        prefer: bool = False,
    ) -> Any:
        """``rpc`` on the pull instances in turn (``prefer``: from the one the queue
        prefers, as every client picks it); an unreachable one is skipped, every other
        error raised."""
        core = self._started()
        check_topic(mq.topic)
        route = await core.routes.get(mq.topic, timeout=self._timeout)
        endpoints = list(route.pull_endpoints) or await core.routes.endpoints(ServiceKind.PULL, timeout=self._timeout)
        addresses = ordered_pull_addresses(endpoints)
        first = zlib.crc32(str(mq).encode()) if prefer else 0
        last_error: TxmqError | None = None
        for attempt in range(len(addresses)):
            stub = core.stub(addresses[(first + attempt) % len(addresses)], pull_pb2_grpc.PullStub)
            try:
                return await call(rpc(stub), request, timeout=deadline)
            except UnavailableError as err:
                core.routes.mark_stale(mq.topic)
                last_error = err
        assert last_error is not None
        raise last_error
