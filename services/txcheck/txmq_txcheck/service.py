"""The txcheck process: the Transaction service (END_TRANSACTION, producer channels,
QueryTransaction), the check loop of every store it leads, and the internal peer RPC
that delivers checks to channels held by this replica.

END_TRANSACTION for a store is decided by the replica that leads that store's check
loop: another replica forwards it there (marked with ``txmq-forwarded`` so it is never
forwarded twice), so one process serializes the decisions of a store.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import grpc
from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2, txcheck_pb2, txcheck_pb2_grpc
from txmq_runtime.grpc_errors import rpc
from txmq_runtime.server import ServiceContext, ServiceParts

from txmq_txcheck.channels import ProducerChannels
from txmq_txcheck.checkloop import CheckLoop, CheckSettings
from txmq_txcheck.leader import LeaderElector
from txmq_txcheck.ledger import Ledger, check_group
from txmq_txcheck.settings import TxcheckSettings
from txmq_txcheck.store_client import StoreClient
from txmq_txcheck.timeline import Timeline
from txmq_txcheck.txquery import query_transaction

log = logging.getLogger("txmq.txcheck")

FORWARDED_METADATA = "txmq-forwarded"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TxcheckNode:
    """Everything one txcheck replica runs, per store it knows."""

    def __init__(self, ctx: ServiceContext[TxcheckSettings], instance_id: str) -> None:
        s = ctx.settings
        self.ctx = ctx
        self.settings = s
        self.instance_id = instance_id
        self.timeline = Timeline()
        self.channels = ProducerChannels(
            etcd=ctx.etcd,
            registration=ctx.registration,
            etcd_prefix=s.etcd_prefix,
            instance_id=instance_id,
            address=ctx.address,
        )
        self._clients: dict[str, StoreClient] = {}
        self._ledgers: dict[str, Ledger] = {}
        self._loops: dict[str, tuple[CheckLoop, asyncio.Event, asyncio.Task[None]]] = {}
        self._peers: dict[str, grpc.aio.Channel] = {}
        self.elector = LeaderElector(
            ctx.etcd,
            etcd_prefix=s.etcd_prefix,
            instance_id=instance_id,
            ttl_ms=s.leader_ttl_ms,
            stores=self.store_ids,
            on_elected=self._start_loop,
            on_lost=self._stop_loop,
        )

    def store_ids(self) -> list[str]:
        return [e.instance_id for e in self.ctx.cluster.endpoints(common_pb2.SERVICE_KIND_STORE)]

    def _store_address(self, store_id: str) -> str:
        for e in self.ctx.cluster.endpoints(common_pb2.SERVICE_KIND_STORE):
            if e.instance_id == store_id:
                return e.address
        raise error(errors_pb2.CODE_STORE_NOT_FOUND, f"store {store_id!r} is not live", store_id=store_id)

    def ledger(self, store_id: str) -> Ledger:
        address = self._store_address(store_id)
        client = self._clients.get(store_id)
        if client is None or client.address != address:
            client = self._clients[store_id] = StoreClient.dial(address, store_id=store_id)
            self._ledgers[store_id] = Ledger(
                client,
                clock=wall_clock_ms,
                transaction_timeout_ms=self.settings.transaction_timeout_ms,
                timeline=self.timeline,
                op_batch_max_entries=self.settings.op_batch_max_entries,
            )
        return self._ledgers[store_id]

    def resolve_store(self, store_id: str) -> str:
        if store_id:
            return store_id
        ids = self.store_ids()
        if len(ids) == 1:
            return ids[0]
        raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"store_id is required ({len(ids)} stores are live)")

    async def _start_loop(self, store_id: str) -> None:
        s = self.settings
        ledger = self.ledger(store_id)
        loop = CheckLoop(
            ledger.store,
            ledger,
            self.channels,
            clock=wall_clock_ms,
            settings=CheckSettings(
                transaction_timeout_ms=s.transaction_timeout_ms,
                check_max=s.transaction_check_max,
                max_process_time_per_queue_ms=s.max_process_time_per_queue_ms,
                file_reserved_time_ms=s.file_reserved_time_ms,
            ),
            store_id=store_id,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(loop.run(s.transaction_check_interval_ms, stop), name=f"check-loop-{store_id}")
        self._loops[store_id] = (loop, stop, task)

    async def _stop_loop(self, store_id: str) -> None:
        found = self._loops.pop(store_id, None)
        if found is not None:
            _, stop, task = found
            stop.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            log.info("%s stopped the check loop of store %s", self.instance_id, store_id)

    async def end_transaction(
        self, request: txcheck_pb2.EndTransactionRequest, *, forwarded: bool
    ) -> txcheck_pb2.EndTransactionResponse:
        check_group(request.producer_group)
        store_id = self.resolve_store(request.store_id)
        if not forwarded and store_id not in self.elector.led:
            address = await self._leader_address(store_id)
            if address is not None and address != self.ctx.address:
                return await self._forward_end(address, request, store_id)
        return await self.ledger(store_id).end(request)

    async def _leader_address(self, store_id: str) -> str | None:
        try:
            leader = await self.elector.leader_of(store_id)
        except Exception:  # noqa: BLE001 - decide here rather than fail
            return None
        for e in self.ctx.cluster.endpoints(common_pb2.SERVICE_KIND_TXCHECK):
            if e.instance_id == leader:
                return e.address
        return None

    async def _forward_end(self, address: str, request, store_id: str) -> txcheck_pb2.EndTransactionResponse:
        channel = self._peers.get(address)
        if channel is None:
            channel = self._peers[address] = grpc.aio.insecure_channel(address)
        fwd = txcheck_pb2.EndTransactionRequest()
        fwd.CopyFrom(request)
        fwd.store_id = store_id
        try:
            return await txcheck_pb2_grpc.TransactionStub(channel).EndTransaction(
                fwd, timeout=10, metadata=((FORWARDED_METADATA, "1"),)
            )
        except grpc.aio.AioRpcError as exc:
            err = TxmqError.from_rpc_error(exc)
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                log.info("leader %s unreachable; deciding here", address)
                return await self.ledger(store_id).end(fwd)
            raise err from None

    async def close(self) -> None:
        await self.elector.close()
        await self.channels.close()
        for c in self._clients.values():
            await c.close()
        for ch in self._peers.values():
            await ch.close()


class TransactionServicer(txcheck_pb2_grpc.TransactionServicer):
    def __init__(self, node: TxcheckNode) -> None:
        self._node = node

    @rpc
    async def EndTransaction(self, request: txcheck_pb2.EndTransactionRequest, context: grpc.aio.ServicerContext):
        forwarded = any(k == FORWARDED_METADATA for k, _ in (context.invocation_metadata() or ()))
        return await self._node.end_transaction(request, forwarded=forwarded)

    @rpc
    async def QueryTransaction(self, request: txcheck_pb2.QueryTransactionRequest, context: grpc.aio.ServicerContext):
        node = self._node
        if not request.transaction_id:
            raise error(errors_pb2.CODE_ILLEGAL_TRANSACTION_ID, "transaction id is empty")
        for store_id in node.store_ids():
            found = await query_transaction(node.ledger(store_id), request.transaction_id)
            if found is not None:
                return found
        raise error(
            errors_pb2.CODE_TRANSACTION_NOT_FOUND,
            f"transaction {request.transaction_id} not found",
            transaction_id=request.transaction_id,
        )

    async def ProducerChannel(self, request_iterator, context: grpc.aio.ServicerContext):
        node = self._node
        try:
            first = await anext(aiter(request_iterator))
        except StopAsyncIteration:
            return
        if first.WhichOneof("command") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first command must be hello")
        hello = first.hello
        try:
            check_group(hello.producer_group)
        except TxmqError as err:
            from txmq_runtime.grpc_errors import abort

            await abort(context, err)
        client_id = hello.client_id or context.peer()
        client_id = client_id.replace("/", "_")
        ch = await node.channels.open(hello.producer_group, client_id)
        await context.send_initial_metadata((("txmq-channel", "open"),))

        async def read() -> None:
            async for cmd in request_iterator:
                if cmd.WhichOneof("command") == "end_transaction":
                    try:
                        await node.end_transaction(cmd.end_transaction, forwarded=False)
                    except TxmqError as err:
                        log.info("END_TRANSACTION from %s refused: %s", client_id, err)
                    except Exception:
                        log.exception("END_TRANSACTION from %s failed", client_id)

        reader = asyncio.create_task(read())
        try:
            while True:
                getter = asyncio.ensure_future(ch.queue.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break
                yield getter.result()
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await node.channels.close_channel(ch)


async def setup(ctx: ServiceContext[TxcheckSettings]) -> ServiceParts:
    instance_id = ctx.settings.instance_id or f"txcheck-{socket.gethostname()}-{os.getpid()}"
    node = TxcheckNode(ctx, instance_id)
    await node.channels.start()
    txcheck_pb2_grpc.add_TransactionServicer_to_server(TransactionServicer(node), ctx.server)
    ctx.server.add_generic_rpc_handlers((node.channels.peer_handler(),))
    if ctx.settings.check_loop_enable:
        node.elector.start()
    name = txcheck_pb2.DESCRIPTOR.services_by_name["Transaction"].full_name
    return ServiceParts(service_names=[name], close=node.close, instance_id=instance_id)
