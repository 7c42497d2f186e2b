"""Arrival streams: one task per store consumes its WatchArrivals stream and tells the
hold service (RocketMQ's NotifyMessageArrivingListener, across a process boundary).

Whenever the stream may have missed arrivals, held pulls on that store re-check:
- when a stream is opened (the first time, or again after a failure) and the store has
  registered its watch (it sends the response headers right after registering, so from
  then on no arrival is missed: the re-check covers everything before);
- when a batch is flagged ``overflowed`` (the store dropped arrivals for this watcher).
A stream that fails is re-opened with backoff, at the store's current address.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from txmq.errors import TxmqError, error
from txmq.v1 import errors_pb2, store_pb2
from txmq_pull.hold import ArrivalEvent, HoldService, QueueKey
from txmq_pull.store_client import StoreClients, connected, iterate
from txmq_runtime.backoff import Backoff, BackoffPolicy
from txmq_runtime.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("txmq.pull.arrivals")

#: The reconnect backoff grows up to this many times ``reconnect_backoff_ms``.
_MAX_BACKOFF_FACTOR = 10


class ArrivalFeed:
    def __init__(
        self,
        clients: StoreClients,
        hold: HoldService,
        *,
        reconnect_backoff_ms: int,
        connect_timeout_ms: int,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clients = clients
        self._hold = hold
        self._backoff = BackoffPolicy(first_ms=reconnect_backoff_ms, max_ms=reconnect_backoff_ms * _MAX_BACKOFF_FACTOR)
        self._clock = clock
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Open stream calls: close() cancels them first, because a task cancelled while
        # it awaits a call's headers may not return until the call itself ends.
        self._calls: set[grpc.aio.UnaryStreamCall] = set()
        self._closed = False
        #: Batches received per store (tests, metrics).
        self.batches: dict[str, int] = {}

    def ensure(self, store_id: str) -> None:
        """Watch ``store_id`` unless already watching it."""
        if self._closed or store_id in self._tasks:
            return
        task = self._tasks[store_id] = asyncio.create_task(self._watch(store_id), name=f"arrivals-{store_id}")
        task.add_done_callback(self._watcher_done)

    def _watcher_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("arrival watcher %s died", task.get_name(), exc_info=task.exception())

    def ensure_all(self) -> None:
        for store_id in self._clients.locator.store_ids():
            self.ensure(store_id)

    async def close(self) -> None:
        self._closed = True
        for call in list(self._calls):
            call.cancel()
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, store_id: str) -> None:
        backoff = Backoff(self._backoff, clock=self._clock)
        while True:
            address = self._clients.locator.address(store_id)
            if address is None:
                log.debug("store %s is not registered; its arrival stream waits", store_id)
                # Not (or no longer) registered: its held pulls time out; look again later.
                await backoff.sleep()
                continue
            log.debug(
                "opening the arrival stream of store %s at %s (attempt %d)", store_id, address, backoff.failures + 1
            )
            call = self._clients.for_address(address).watch_arrivals()
            self._calls.add(call)
            try:
                # Once the store registered the watch, arrivals missed while there was no
                # stream are visible to a read: re-check (not before, or every attempt
                # against a store that is down would re-read every held pull).
                try:
                    await asyncio.wait_for(connected(call), self._connect_timeout_s)
                except TimeoutError:
                    raise error(
                        errors_pb2.CODE_UPSTREAM_TIMEOUT, f"no connection within {self._connect_timeout_s} s"
                    ) from None
                log.debug("arrival stream of store %s at %s opened; re-checking its held pulls", store_id, address)
                backoff.reset()
                self._hold.recheck_store(store_id)
                async for batch in iterate(call):
                    self.batches[store_id] = self.batches.get(store_id, 0) + 1
                    self._on_batch(store_id, batch)
                log.info("arrival stream of store %s ended (store stopping); re-opening", store_id)
            except TxmqError as exc:
                log.warning("arrival stream of store %s at %s failed: %s", store_id, address, exc)
            finally:
                call.cancel()
                self._calls.discard(call)
            await backoff.sleep()

    def _on_batch(self, store_id: str, batch: store_pb2.ArrivalBatch) -> None:
        if batch.store_id and batch.store_id != store_id:
            log.warning("arrival batch from store %s on the stream of %s: ignored", batch.store_id, store_id)
            return
        hold = self._hold
        events = []
        for a in batch.arrivals:
            key = QueueKey(store_id, a.topic, a.queue_id)
            if hold.interested(key):  # convert (copy the properties) only what matters now
                events.append(
                    ArrivalEvent(
                        key, a.queue_offset, a.max_offset, a.tag_code, dict(a.properties), a.min_offset, a.record
                    )
                )
        if events:
            hold.on_arrivals(events)
        if batch.overflowed:
            hold.recheck_store(store_id)
