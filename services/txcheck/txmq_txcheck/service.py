"""The txcheck process: the Transaction service (END_TRANSACTION, producer channels,
QueryTransaction, ResumeTransaction), the check loop of every store it leads, and the
TransactionPeer service that delivers checks to channels held by this replica.

The store decides transactions (docs/transactions.md, "The store decides"): any replica
passes END_TRANSACTION to the store at once, leader or not. Leadership (one per store)
only says who runs the store's check loop; its epoch fences the loop's writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Sequence

import grpc

from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2, txcheck_pb2, txcheck_pb2_grpc
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.grpc_errors import abort, rpc
from txmq_runtime.server import ServiceContext, ServiceParts
from txmq_txcheck.channels import LocalChannel, ProducerChannels
from txmq_txcheck.checkloop import CheckLoop, CheckSettings, resume
from txmq_txcheck.leader import LeaderElector
from txmq_txcheck.ledger import Ledger, check_group
from txmq_txcheck.settings import TxcheckSettings
from txmq_txcheck.store_client import StoreClient
from txmq_txcheck.timeline import Timeline
from txmq_txcheck.txquery import query_transaction

log = logging.getLogger("txmq.txcheck")

_FAILED = TxmqError(
    "END_TRANSACTION failed on the transaction service; retry", code=errors_pb2.CODE_UNAVAILABLE, retriable=True
)


class TxcheckNode:
    """Everything one txcheck replica runs, per store it knows."""

    def __init__(
        self,
        ctx: ServiceContext[TxcheckSettings],
        instance_id: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        s = ctx.settings
        self.ctx = ctx
        self.settings = s
        self.instance_id = instance_id
        self._clock = clock
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
        self._tasks: set[asyncio.Task[None]] = set()
        self.elector = LeaderElector(
            ctx.etcd,
            etcd_prefix=s.etcd_prefix,
            instance_id=instance_id,
            ttl_ms=s.leader_ttl_ms,
            stores=self.store_ids,
            on_elected=self._start_loop,
            on_lost=self._stop_loop,
        )

    async def start(self) -> None:
        await self.channels.start()
        if self.settings.check_loop_enable:
            self.elector.start()

    def spawn(self, coro) -> None:
        """Run ``coro`` in the background until it ends or the node closes."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def store_ids(self) -> list[str]:
        return [e.instance_id for e in self.ctx.cluster.endpoints(common_pb2.SERVICE_KIND_STORE)]

    def _store_address(self, store_id: str) -> str:
        for e in self.ctx.cluster.endpoints(common_pb2.SERVICE_KIND_STORE):
            if e.instance_id == store_id:
                return e.address
        err = error(errors_pb2.CODE_STORE_NOT_FOUND, f"store {store_id!r} is not live", store_id=store_id)
        err.retriable = True  # it may be restarting
        raise err

    def ledger(self, store_id: str) -> Ledger:
        address = self._store_address(store_id)
        client = self._clients.get(store_id)
        if client is None or client.address != address:
            client = self._clients[store_id] = StoreClient.dial(address, store_id=store_id)
            self._ledgers[store_id] = Ledger(
                client,
                clock=self._clock.wall_ms,
                transaction_timeout_ms=self.settings.transaction_timeout_ms,
                timeline=self.timeline,
                decide_batch_max=self.settings.op_batch_max_entries,
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
        epoch = self.elector.epoch(store_id)
        if epoch is None:  # lapsed already: on_lost follows, and the next campaign
            return
        ledger = self.ledger(store_id)
        loop = CheckLoop(
            ledger.store,
            ledger,
            self.channels,
            clock=self._clock.wall_ms,
            settings=CheckSettings(
                transaction_timeout_ms=s.transaction_timeout_ms,
                check_max=s.transaction_check_max,
                max_process_time_per_queue_ms=s.max_process_time_per_queue_ms,
                file_reserved_time_ms=s.file_reserved_time_ms,
                check_batch_max=s.check_batch_max,
                transaction_wait_max_ms=s.transaction_wait_max_ms,
                check_send_timeout_ms=s.check_send_timeout_ms,
            ),
            store_id=store_id,
            epoch=epoch,
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

    # -- END_TRANSACTION -----------------------------------------------------------------

    async def end_transaction(self, request: txcheck_pb2.EndTransactionRequest) -> txcheck_pb2.EndTransactionResponse:
        """Any replica: the store decides, first decision wins (no leader involved)."""
        check_group(request.producer_group)
        if not request.transaction_id:
            raise error(errors_pb2.CODE_ILLEGAL_TRANSACTION_ID, "transaction id is empty")
        return await self.ledger(self.resolve_store(request.store_id)).end(request)

    async def end_transactions(
        self, requests: Sequence[txcheck_pb2.EndTransactionRequest]
    ) -> list[txcheck_pb2.EndTransactionResponse | TxmqError]:
        """``end_transaction`` for a batch (a producer's answers sent up its channel
        together): each item's response or error, in order; the ledger of each store
        takes its items in one go."""
        out: dict[int, txcheck_pb2.EndTransactionResponse | TxmqError] = {}
        per_store: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            try:
                per_store.setdefault(self.resolve_store(request.store_id), []).append(i)
            except TxmqError as err:
                out[i] = err
        for store_id, items in per_store.items():
            try:
                results = await self.ledger(store_id).end_many([requests[i] for i in items])
            except TxmqError as err:
                results = [err] * len(items)
            for i, result in zip(items, results, strict=True):
                out[i] = result
        return [out[i] for i in range(len(requests))]

    # -- ResumeTransaction ---------------------------------------------------------------

    async def resume_transaction(
        self, request: txcheck_pb2.ResumeTransactionRequest
    ) -> txcheck_pb2.ResumeTransactionResponse:
        txid = request.transaction_id
        if not txid:
            raise error(errors_pb2.CODE_ILLEGAL_TRANSACTION_ID, "transaction id is empty")
        if request.store_id:
            self._store_address(request.store_id)  # STORE_NOT_FOUND
            stores = [request.store_id]
        else:
            stores = self.store_ids()
        resumed: common_pb2.MessageView | None = None
        missing: TxmqError | None = None
        for store_id in stores:
            ledger = self.ledger(store_id)
            try:
                view = await resume(ledger.store, txid, ledger)
            except TxmqError as err:
                if err.code != errors_pb2.CODE_TRANSACTION_NOT_FOUND:
                    raise
                missing = err
                continue
            log.info("transaction %s resumed on store %s (half queue offset %d)", txid, store_id, view.queue_offset)
            resumed = resumed or view
        if resumed is None:
            raise missing or error(
                errors_pb2.CODE_TRANSACTION_NOT_FOUND, f"transaction {txid} not found", transaction_id=txid
            )
        return txcheck_pb2.ResumeTransactionResponse(half=resumed)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.elector.close()
        await self.channels.close()
        for c in self._clients.values():
            await c.close()


class _Answers:
    """The ENDs a producer sends up its channel: each command on its own task of the
    node (a batch on one: the ledger sends its items to the store together), so a slow
    one holds up no other; those with a request id are answered down the channel."""

    def __init__(self, node: TxcheckNode, ch: LocalChannel, client_id: str) -> None:
        self._node = node
        self._ch = ch
        self._client_id = client_id

    def take(self, cmd: txcheck_pb2.ProducerCommand) -> None:
        kind = cmd.WhichOneof("command")
        if kind == "end_transaction":
            self._node.spawn(self._one(cmd.end_transaction))
        elif kind == "end_transactions":
            self._node.spawn(self._batch(list(cmd.end_transactions.requests)))

    async def _one(self, request: txcheck_pb2.EndTransactionRequest) -> None:
        try:
            outcome: object = await self._node.end_transaction(request)
        except Exception as exc:  # noqa: BLE001 - answered as an error, logged by _reply
            outcome = exc
        self._reply(request, outcome)

    async def _batch(self, requests: list[txcheck_pb2.EndTransactionRequest]) -> None:
        try:
            outcomes: list[object] = list(await self._node.end_transactions(requests))
        except Exception as exc:  # noqa: BLE001 - answered as an error, logged by _reply
            outcomes = [exc] * len(requests)
        for request, outcome in zip(requests, outcomes, strict=True):
            self._reply(request, outcome)

    def _reply(self, request: txcheck_pb2.EndTransactionRequest, outcome: object) -> None:
        result = txcheck_pb2.EndTransactionResult(request_id=request.request_id)
        if isinstance(outcome, txcheck_pb2.EndTransactionResponse):
            result.response.CopyFrom(outcome)
        elif isinstance(outcome, TxmqError):
            result.error.CopyFrom(outcome.to_detail())
            if not request.request_id:  # an answer to a check: the next check asks again
                log.info("END_TRANSACTION from %s refused: %s", self._client_id, outcome)
        else:
            log.error("END_TRANSACTION from %s failed", self._client_id, exc_info=outcome)  # type: ignore[arg-type]
            result.error.CopyFrom(_FAILED.to_detail())
        if request.request_id:
            self._ch.reply(txcheck_pb2.ServerCommand(end_result=result))


class TransactionServicer(txcheck_pb2_grpc.TransactionServicer):
    def __init__(self, node: TxcheckNode) -> None:
        self._node = node

    @rpc
    async def EndTransaction(self, request: txcheck_pb2.EndTransactionRequest, context: grpc.aio.ServicerContext):
        return await self._node.end_transaction(request)

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

    @rpc
    async def ResumeTransaction(self, request: txcheck_pb2.ResumeTransactionRequest, context: grpc.aio.ServicerContext):
        return await self._node.resume_transaction(request)

    async def ProducerChannel(self, request_iterator, context: grpc.aio.ServicerContext):
        node = self._node
        try:
            first = await anext(aiter(request_iterator))
        except StopAsyncIteration:
            return
        if first.WhichOneof("command") != "hello":
            await abort(
                context,
                error(
                    errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP,
                    "the first command must be a hello naming the producer group",
                ),
            )
        hello = first.hello
        client_id = hello.client_id or context.peer()
        client_id = client_id.replace("/", "_")
        try:
            check_group(hello.producer_group)
            # Bounded (MAX_CLIENT_ID_BYTES) before it becomes an etcd key; a key etcd
            # refuses is refused here too, and never costs this replica its own key.
            ch = await node.channels.open(hello.producer_group, client_id, batches=hello.accepts_check_batches)
        except TxmqError as err:
            await abort(context, err)
        # txmq-end-results: this replica answers ENDs sent up the stream with a request id.
        await context.send_initial_metadata((("txmq-channel", "open"), ("txmq-end-results", "1")))

        answers = _Answers(node, ch, client_id)

        async def read() -> None:
            async for cmd in request_iterator:
                answers.take(cmd)

        reader = asyncio.create_task(read())
        getter: asyncio.Future[txcheck_pb2.ServerCommand] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(ch.queue.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    break
                command = getter.result()
                ch.taken(command)
                yield command
        finally:
            reader.cancel()
            if getter is not None:
                getter.cancel()
            # No await here: grpc.aio may cancel a handler a second time while its finally
            # awaits, which would leave the channel registered in etcd and checks going to
            # a dead stream. Marked closed now; deregistered by a task of the node.
            ch.close()
            node.spawn(node.channels.close_channel(ch))


class TransactionPeerServicer(txcheck_pb2_grpc.TransactionPeerServicer):
    """Between replicas: write a check to a producer channel this replica holds."""

    def __init__(self, node: TxcheckNode) -> None:
        self._node = node

    @rpc
    async def DeliverCheck(self, request: txcheck_pb2.DeliverCheckRequest, context: grpc.aio.ServicerContext):
        checks = [request.check, *request.more_checks]
        if not request.channel_key or not await self._node.channels.deliver_local(request.channel_key, checks):
            raise error(
                errors_pb2.CODE_NOT_FOUND,
                f"no live producer channel {request.channel_key!r} on {self._node.instance_id}",
                channel_key=request.channel_key,
            )
        return txcheck_pb2.DeliverCheckResponse()


async def setup(ctx: ServiceContext[TxcheckSettings]) -> ServiceParts:
    instance_id = ctx.settings.instance_id or f"txcheck-{socket.gethostname()}-{os.getpid()}"
    node = TxcheckNode(ctx, instance_id)
    txcheck_pb2_grpc.add_TransactionServicer_to_server(TransactionServicer(node), ctx.server)
    txcheck_pb2_grpc.add_TransactionPeerServicer_to_server(TransactionPeerServicer(node), ctx.server)
    await node.start()
    services = txcheck_pb2.DESCRIPTOR.services_by_name
    names = [services["Transaction"].full_name, services["TransactionPeer"].full_name]
    return ServiceParts(service_names=names, close=node.close, instance_id=instance_id)
