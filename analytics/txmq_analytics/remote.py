"""On-demand export from a running cluster (``txmq analytics export``): the store-side
``Exporter`` (txmq_store.export) over the Store gRPC API instead of an in-process store.

It reads ListTopics (system topics included) + GetQueueOffsets per topic,
ListConsumeOffsets, GetMessage on the transaction system topics and QueryMessages by
unique id (committed copies). The export directory gets the same layout as the store's
own export; its ``_state/<store id>.json`` makes repeated exports into the same
directory incremental. Do not point it at a directory a store exports into itself (two
writers of one state file).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from txmq.errors import TxmqError
from txmq.signing import Credentials, async_interceptors
from txmq.tls import TlsConfig
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc
from txmq_store.export import (
    Exporter,
    ExportResult,
    OffsetRow,
    QueueRow,
    ReadResult,
    Record,
    Snapshot,
    is_committed_copy,
)

TIMEOUT_S = 30.0


def _record(v: common_pb2.MessageView) -> Record:
    m = v.message
    return Record(
        m.topic, m.queue_id, v.queue_offset, v.commit_log_offset, v.store_timestamp_ms, m.born_timestamp_ms,
        m.unique_id, dict(m.properties), v.sys_flag, v.prepared_transaction_offset, m.body,
    )  # fmt: skip


class GrpcSource:
    """One store node over its gRPC API."""

    def __init__(self, channel: grpc.aio.Channel, store_id: str) -> None:
        self.store_id = store_id
        self._stub = store_pb2_grpc.StoreStub(channel)
        self._admin = store_pb2_grpc.StoreAdminStub(channel)

    async def _call(self, method, request):
        try:
            return await method(request, timeout=TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise TxmqError.from_rpc_error(exc) from exc

    @classmethod
    async def connect(cls, channel: grpc.aio.Channel) -> GrpcSource:
        """Asks the store for its id."""
        stub = store_pb2_grpc.StoreAdminStub(channel)
        try:
            status = await stub.GetStoreStatus(store_pb2.GetStoreStatusRequest(), timeout=TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise TxmqError.from_rpc_error(exc) from exc
        return cls(channel, status.store_id)

    async def snapshot(self) -> Snapshot:
        topics = await self._call(self._admin.ListTopics, store_pb2.ListTopicsRequest(include_system=True))
        queues = []
        for t in topics.topics:
            try:
                r = await self._call(self._stub.GetQueueOffsets, store_pb2.GetQueueOffsetsRequest(topic=t.name))
            except TxmqError:
                continue  # deleted meanwhile
            queues += [
                QueueRow(t.name, q.queue_id, q.min_offset, q.max_offset, q.last_store_timestamp_ms) for q in r.queues
            ]
        offs = await self._call(self._stub.ListConsumeOffsets, store_pb2.ListConsumeOffsetsRequest())
        offsets = [
            OffsetRow(o.consumer_group, o.topic, o.queue_id, o.offset, o.min_offset, o.max_offset, o.updated_at_ms)
            for o in offs.offsets
        ]
        return Snapshot(offs.taken_at_ms or time.time_ns() // 1_000_000, queues, offsets)

    async def read(self, topic: str, queue_id: int, offset: int, max_messages: int) -> ReadResult:
        r = await self._call(
            self._stub.GetMessage,
            store_pb2.GetMessageRequest(topic=topic, queue_id=queue_id, offset=offset, max_messages=max_messages),
        )
        return ReadResult(int(r.status), r.next_begin_offset, [_record(v) for v in r.messages])

    async def committed_copy(self, transaction_id: str) -> Record | None:
        r = await self._call(
            self._stub.QueryMessages, store_pb2.QueryMessagesRequest(unique_id=transaction_id, max_results=1000)
        )
        for v in r.messages:
            rec = _record(v)
            if is_committed_copy(rec, transaction_id):
                return rec
        return None


def _channel(address: str, tls: TlsConfig | None, credentials: Credentials | None = None) -> grpc.aio.Channel:
    sign = async_interceptors(credentials)
    if tls is None:
        return grpc.aio.insecure_channel(address, interceptors=sign)
    return grpc.aio.secure_channel(address, tls.channel_credentials(), options=tls.channel_options(), interceptors=sign)


@dataclass
class StoreTarget:
    address: str
    store_id: str = ""


def discover_stores(
    endpoint: str, *, timeout: float = 10, tls: TlsConfig | None = None, credentials: Credentials | None = None
) -> list[StoreTarget]:
    """The live store nodes, asked of any txmq service (route look-up)."""
    from txmq import ServiceKind
    from txmq._client import ClientCore

    core = ClientCore(endpoint, route_refresh_interval=30, tls=tls, credentials=credentials)
    try:
        return [
            StoreTarget(e.address, e.instance_id) for e in core.routes.endpoints(ServiceKind.STORE, timeout=timeout)
        ]
    finally:
        core.close()


async def export_stores(
    stores: Sequence[StoreTarget],
    output_dir: str | Path,
    *,
    count: int = 1,
    interval_s: float = 10.0,
    retention_ms: int = 0,
    on_result: Callable[[str, ExportResult], None] | None = None,
    tls: TlsConfig | None = None,
    credentials: Credentials | None = None,
) -> list[ExportResult]:
    """``count`` exports of every store, ``interval_s`` apart; over TLS with ``tls``, each
    call signed as ``credentials`` (a cluster with auth on)."""
    channels = [_channel(s.address, tls, credentials) for s in stores]
    results: list[ExportResult] = []
    try:
        exporters = []
        for ch in channels:
            source = await GrpcSource.connect(ch)
            exporters.append(Exporter(source, output_dir, retention_ms=retention_ms))
        for n in range(count):
            if n:
                await asyncio.sleep(interval_s)
            for ex in exporters:
                r = await ex.export_once()
                results.append(r)
                if on_result is not None:
                    on_result(ex.source.store_id, r)
    finally:
        for ch in channels:
            await ch.close()
    return results


def export_from_endpoint(
    endpoint: str,
    output_dir: str | Path,
    *,
    stores: Sequence[str] = (),
    count: int = 1,
    interval_s: float = 10.0,
    retention_ms: int = 0,
    on_result: Callable[[str, ExportResult], None] | None = None,
    tls: TlsConfig | None = None,
    credentials: Credentials | None = None,
) -> list[ExportResult]:
    """Export every store of the cluster behind ``endpoint`` (or the store addresses in
    ``stores``) into ``output_dir``, over TLS with ``tls``. Synchronous (runs its own
    event loop)."""
    targets = (
        [StoreTarget(a) for a in stores] if stores else discover_stores(endpoint, tls=tls, credentials=credentials)
    )
    if not targets:
        raise TxmqError("no store is live")
    return asyncio.run(
        export_stores(
            targets,
            output_dir,
            count=count,
            interval_s=interval_s,
            retention_ms=retention_ms,
            on_result=on_result,
            tls=tls,
            credentials=credentials,
        )
    )
