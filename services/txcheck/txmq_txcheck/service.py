"""The txcheck process: the Transaction service (END_TRANSACTION, producer channels,
QueryTransaction, ResumeTransaction), the check loop of every store it leads, and the
TransactionPeer service that delivers checks to channels held by this replica.

Only the leader of a store decides its transactions (docs/transactions.md, "One
decider"): a replica that does not lead the store forwards END_TRANSACTION to the
leader (``forwarded`` set, so it is never forwarded twice); with no reachable leader it
waits up to ``--leader_wait_ms`` for one, then answers UNAVAILABLE (retriable). It never
decides on its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

import grpc

from txmq.errors import ERROR_DETAIL_KEY, TxmqError, error
from txmq.v1 import common_pb2, errors_pb2, txcheck_pb2, txcheck_pb2_grpc
from txmq_runtime.backoff import Backoff, BackoffPolicy
from txmq_runtime.calls import internal_channel
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.etcd import EtcdMirror
from txmq_runtime.grpc_errors import abort, rpc
from txmq_runtime.server import ServiceContext, ServiceParts
from txmq_txcheck.channels import ProducerChannels
from txmq_txcheck.checkloop import CheckLoop, CheckSettings, resume
from txmq_txcheck.leader import LeaderDirectory, LeaderElector, leaders_prefix
from txmq_txcheck.ledger import Ledger, check_group, not_leader
from txmq_txcheck.settings import TxcheckSettings
from txmq_txcheck.store_client import StoreClient
from txmq_txcheck.timeline import Timeline
from txmq_txcheck.txquery import query_transaction

log = logging.getLogger("txmq.txcheck")

_FORWARD_TIMEOUT_S = 10.0
#: While END_TRANSACTION waits for a reachable leader: look again after 20 ms doubling to 200 ms.
_LEADER_RETRY = BackoffPolicy(first_ms=20, max_ms=200)


class _LeaderUnreachable(Exception):
    """Forwarding found no leader to decide (transport failure, or it no longer leads)."""


def _has_error_detail(exc: grpc.aio.AioRpcError) -> bool:
    return any(k == ERROR_DETAIL_KEY for k, _ in exc.trailing_metadata() or ())


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
        self.leaders = LeaderDirectory(leaders_prefix(s.etcd_prefix))
        self._leader_mirror = (
            EtcdMirror(ctx.etcd, prefix=leaders_prefix(s.etcd_prefix), sink=self.leaders)
            if ctx.etcd is not None
            else None
        )
        self._clients: dict[str, StoreClient] = {}
        self._ledgers: dict[str, Ledger] = {}
        self._loops: dict[str, tuple[CheckLoop, asyncio.Event, asyncio.Task[None]]] = {}
        self._peers: dict[str, grpc.aio.Channel] = {}
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
        if self._leader_mirror is not None:
            await self._leader_mirror.start(timeout_s=30)
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
            clock=self._clock.wall_ms,
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

    # -- END_TRANSACTION -----------------------------------------------------------------

    async def end_transaction(
        self, request: txcheck_pb2.EndTransactionRequest, *, time_remaining_s: float | None = None
    ) -> txcheck_pb2.EndTransactionResponse:
        """Decide here if this replica leads the store, else forward to the leader; with
        no reachable leader wait up to ``leader_wait_ms`` (within the caller's deadline),
        then refuse with a retriable UNAVAILABLE. A forwarded request is never forwarded
        again and does not wait: the forwarding replica does."""
        check_group(request.producer_group)
        if not request.transaction_id:
            raise error(errors_pb2.CODE_ILLEGAL_TRANSACTION_ID, "transaction id is empty")
        store_id = self.resolve_store(request.store_id)
        if request.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_UNKNOWN:
            return await self.ledger(store_id).end(request)  # decides nothing: no leader needed
        wait_s = 0.0 if request.forwarded else self.settings.leader_wait_ms / 1000
        if time_remaining_s is not None:
            wait_s = min(wait_s, max(0.0, time_remaining_s - 0.5))
        deadline_ms = self._clock.now_ms() + wait_s * 1000
        backoff = Backoff(_LEADER_RETRY)
        while True:
            if (epoch := self.elector.epoch(store_id)) is not None:
                # The fence: still leading under the same epoch (a leadership lost and won
                # back meanwhile has a new one: another leader may have decided in between).
                def fence(epoch: int = epoch) -> bool:
                    return self.elector.epoch(store_id) == epoch

                return await self.ledger(store_id).end(request, fence=fence)
            if request.forwarded:
                reason = f"forwarded to {self.instance_id}, which does not lead the store"
            else:
                holder = self.leaders.holder(store_id)
                if holder is None:
                    reason = "no leader is elected"
                elif holder == self.instance_id:
                    reason = "this replica's leadership is not confirmed"
                else:
                    address = self._txcheck_address(holder)
                    if address is None or address == self.ctx.address:  # gone (or our own past life)
                        reason = f"leader {holder} is not live"
                    else:
                        try:
                            return await self._forward_end(address, request, store_id, time_remaining_s)
                        except _LeaderUnreachable as exc:
                            reason = str(exc)
            remaining_ms = deadline_ms - self._clock.now_ms()
            if remaining_ms <= 0:
                raise not_leader(store_id, reason)
            await backoff.sleep(at_most_ms=remaining_ms)

    def _txcheck_address(self, instance_id: str) -> str | None:
        for e in self.ctx.cluster.endpoints(common_pb2.SERVICE_KIND_TXCHECK):
            if e.instance_id == instance_id:
                return e.address
        return None

    def _peer(self, address: str) -> grpc.aio.Channel:
        channel = self._peers.get(address)
        if channel is None:
            channel = self._peers[address] = internal_channel(address)
        return channel

    async def _forward_end(
        self, address: str, request: txcheck_pb2.EndTransactionRequest, store_id: str, time_remaining_s: float | None
    ) -> txcheck_pb2.EndTransactionResponse:
        fwd = txcheck_pb2.EndTransactionRequest()
        fwd.CopyFrom(request)
        fwd.store_id = store_id
        fwd.forwarded = True
        timeout = _FORWARD_TIMEOUT_S if time_remaining_s is None else max(0.5, time_remaining_s - 0.2)
        try:
            return await txcheck_pb2_grpc.TransactionStub(self._peer(address)).EndTransaction(fwd, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            err = TxmqError.from_rpc_error(exc)
            if exc.code() == grpc.StatusCode.UNAVAILABLE and (
                not _has_error_detail(exc) or err.metadata.get("reason") == "no_leader"
            ):
                # Not decided there (unreachable, or it no longer leads): look again.
                raise _LeaderUnreachable(f"leader at {address}: {err.message}") from None
            raise err from None

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
        if self._leader_mirror is not None:
            await self._leader_mirror.close()
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
        return await self._node.end_transaction(request, time_remaining_s=context.time_remaining())

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
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first command must be hello")
        hello = first.hello
        try:
            check_group(hello.producer_group)
        except TxmqError as err:
            await abort(context, err)
        client_id = hello.client_id or context.peer()
        client_id = client_id.replace("/", "_")
        ch = await node.channels.open(hello.producer_group, client_id)
        await context.send_initial_metadata((("txmq-channel", "open"),))

        async def answer(request: txcheck_pb2.EndTransactionRequest) -> None:
            try:
                await node.end_transaction(request)
            except TxmqError as err:
                # Lost answers are asked again by the next check.
                log.info("END_TRANSACTION from %s refused: %s", client_id, err)
            except Exception:
                log.exception("END_TRANSACTION from %s failed", client_id)

        async def read() -> None:
            async for cmd in request_iterator:
                if cmd.WhichOneof("command") == "end_transaction":
                    # Each answer on its own: one waiting for a leader holds up no other.
                    node.spawn(answer(cmd.end_transaction))

        reader = asyncio.create_task(read())
        getter: asyncio.Future[txcheck_pb2.ServerCommand] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(ch.queue.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    break
                yield getter.result()
        finally:
            reader.cancel()
            if getter is not None:
                getter.cancel()
            # No await here: grpc.aio may cancel a handler a second time while its finally
            # awaits, which would leave the channel registered in etcd and checks going to
            # a dead stream. Marked closed now; deregistered by a task of the node.
            ch.closed = True
            node.spawn(node.channels.close_channel(ch))


class TransactionPeerServicer(txcheck_pb2_grpc.TransactionPeerServicer):
    """Between replicas: write a check to a producer channel this replica holds."""

    def __init__(self, node: TxcheckNode) -> None:
        self._node = node

    @rpc
    async def DeliverCheck(self, request: txcheck_pb2.DeliverCheckRequest, context: grpc.aio.ServicerContext):
        command = txcheck_pb2.ServerCommand(check=request.check)
        if not request.channel_key or not self._node.channels.deliver_local(request.channel_key, command):
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
