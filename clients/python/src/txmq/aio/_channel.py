"""``txmq._channel.ProducerChannel`` for asyncio: the transactional producer's
ProducerChannel stream to a txcheck replica (found through the route service), opened by
the producer, reconnected with backoff when it breaks, given up on a refusal a reconnect
cannot fix. Checks go to ``on_check`` one at a time: while it waits (the producer's
checks are all busy), nothing more is read, so the service's stream backs up (nothing is
dropped). Answers queued while the stream is busy go up as one batch, as in the threaded
channel (``coalesce``)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from txmq._backoff import Backoff
from txmq._channel import _RECONNECT_FIRST_S, _RECONNECT_MAX_S, MAX_ANSWER_BATCH, coalesce
from txmq._failures import retriable
from txmq.aio._client import AsyncClientCore
from txmq.errors import TxmqError
from txmq.models import ServiceKind
from txmq.v1 import txcheck_pb2, txcheck_pb2_grpc

log = logging.getLogger("txmq.aio.transaction.channel")

_STOP = object()
OnCheck = Callable[[txcheck_pb2.CheckTransactionState], Awaitable[None]]


class AsyncProducerChannel:
    def __init__(self, core: AsyncClientCore, *, group: str, client_id: str, on_check: OnCheck) -> None:
        self._core = core
        self._group = group
        self._client_id = client_id
        self._on_check = on_check
        self._stopped = False
        self._out: asyncio.Queue[object] | None = None
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.address: str | None = None
        #: Why the channel gave up: a refusal a reconnect cannot fix (txmq._failures).
        self.error: TxmqError | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def send(self, command: txcheck_pb2.ProducerCommand) -> bool:
        """Queue a command on the open stream; False when none is open."""
        out = self._out if self.connected.is_set() else None
        if out is None:
            return False
        out.put_nowait(command)
        return True

    async def _run(self) -> None:
        backoff = Backoff(first=_RECONNECT_FIRST_S, maximum=_RECONNECT_MAX_S)
        while not self._stopped:
            try:
                endpoints = await self._core.routes.endpoints(ServiceKind.TXCHECK, timeout=3.0)
                addresses = [e.address for e in endpoints]
                random.shuffle(addresses)  # spread the producers of a group over the replicas
            except TxmqError as exc:
                log.debug("no txcheck endpoint yet: %s", exc)
                addresses = []
            for address in addresses:
                if self._stopped:
                    return
                if await self._serve(address):
                    backoff.reset()
                    break
            if not self._stopped:
                await asyncio.sleep(backoff.next_delay())

    async def _serve(self, address: str) -> bool:
        """Run one stream to ``address`` until it breaks; True if it was open."""
        out: asyncio.Queue[object] = asyncio.Queue()
        stub = self._core.stub(address, txcheck_pb2_grpc.TransactionStub)
        call = stub.ProducerChannel(self._requests(out))
        opened = False
        try:
            await call.initial_metadata()  # the service answers once the channel is registered
            opened = True
            self.address, self._out = address, out
            self.connected.set()
            log.info("producer channel of %s open to %s", self._group, address)
            async for command in call:
                kind = command.WhichOneof("command")
                if kind == "check":
                    await self._on_check(command.check)
                elif kind == "check_batch":
                    for check in command.check_batch.checks:
                        await self._on_check(check)
        except grpc.RpcError as exc:
            if not self._stopped:
                err = TxmqError.from_rpc_error(exc)
                if not retriable(err):  # refused for good: stop reconnecting
                    self.error = err
                    self._stopped = True
                    log.error("producer channel of %s refused by %s; not reconnecting: %s", self._group, address, err)
                else:
                    log.info("producer channel to %s broke: %s", address, err)
        finally:
            self.connected.clear()
            self._out = None
            out.put_nowait(_STOP)
            call.cancel()
        return opened

    async def _requests(self, out: asyncio.Queue[object]) -> AsyncIterator[txcheck_pb2.ProducerCommand]:
        yield txcheck_pb2.ProducerCommand(
            hello=txcheck_pb2.ProducerHello(
                producer_group=self._group, client_id=self._client_id, accepts_check_batches=True
            )
        )
        while True:
            item = await out.get()
            if item is _STOP:
                return
            batch = [item]
            stop = False
            while len(batch) < MAX_ANSWER_BATCH and not out.empty():  # what else is queued goes with it
                more = out.get_nowait()
                if more is _STOP:
                    stop = True
                    break
                batch.append(more)
            yield coalesce(batch)  # type: ignore[arg-type]
            if stop:
                return
