"""The pull process: the Pull service (validation, filters, long polling) over the stores
it finds in the cluster view, and KEDA's external scaler (``keda_scaler_enabled``),
besides Route, health and reflection."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from txmq_pull.arrivals import ArrivalFeed
from txmq_pull.hold import HoldService
from txmq_pull.keda import Scaler, StoreLag
from txmq_pull.keda_servicer import ExternalScalerServicer, add_external_scaler_servicer
from txmq_pull.membership import ConsumerGroups
from txmq_pull.metrics import HELD_PULLS
from txmq_pull.processor import PullProcessor, store_max_offsets
from txmq_pull.retry_topics import RetryTopics
from txmq_pull.servicer import PullServicer, add_pull_servicer
from txmq_pull.settings import PullSettings
from txmq_pull.store_client import ClusterLocator, StoreClients, StoreLocator
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.server import ServiceContext, ServiceParts

log = logging.getLogger("txmq.pull.service")


@dataclass(slots=True)
class PullCore:
    """Everything one pull instance runs, wired together (also what tests build in-process)."""

    settings: PullSettings
    clock: Clock
    clients: StoreClients
    hold: HoldService
    feed: ArrivalFeed | None
    processor: PullProcessor
    groups: ConsumerGroups
    servicer: PullServicer
    #: KEDA's external scaler (``keda_scaler_enabled``), else None.
    scaler: Scaler | None = None
    _expiry: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> None:
        """Start the hold timer and consumer expiry, and watch the arrivals of every
        known store (long polling)."""
        self.hold.start()
        if self._expiry is None:
            self._expiry = asyncio.create_task(self.groups.run(), name="pull-consumer-expiry")
        if self.feed is not None:
            self.feed.ensure_all()

    async def stopping(self) -> None:
        """Stop watching arrivals, answer held pulls (new ones are refused) and end KEDA's
        StreamIsActive calls."""
        if self.scaler is not None:
            self.scaler.close()
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
            self._expiry = None
        if self.feed is not None:
            await self.feed.close()
        await self.hold.close()
        self.servicer.finish_streams()  # after the held pulls were answered

    async def close(self) -> None:
        """``stopping`` (idempotent), then close the store channels."""
        await self.stopping()
        await self.clients.close()


def build_core(settings: PullSettings, locator: StoreLocator, *, clock: Clock | None = None) -> PullCore:
    clock = clock or SYSTEM_CLOCK
    clients = StoreClients(locator, timeout_ms=settings.store_rpc_timeout_ms)
    hold = HoldService(
        clock=clock,
        check_interval_ms=settings.effective_hold_check_interval_ms,
        max_held=settings.max_held_requests,
        max_offsets=store_max_offsets(clients),
    )
    # Short polling (RocketMQ longPollingEnable = false) registers no arrival listener:
    # held pulls are only re-checked by the backstop and their short timeout.
    feed = (
        ArrivalFeed(
            clients,
            hold,
            reconnect_backoff_ms=settings.arrival_reconnect_backoff_ms,
            connect_timeout_ms=settings.store_rpc_timeout_ms,
        )
        if settings.long_polling_enable
        else None
    )
    processor = PullProcessor(settings, clients=clients, hold=hold, clock=clock, feed=feed)
    groups = ConsumerGroups(clock, expiry_ms=settings.consumer_expiry_ms)
    retry_topics = RetryTopics(clients, processor.group_config)
    servicer = PullServicer(
        processor,
        groups,
        clock=clock,
        deadline_margin_ms=settings.deadline_margin_ms,
        retry_topics=retry_topics,
        max_stream_pulls=settings.max_stream_pulls,
    )
    scaler = (
        Scaler(StoreLag(clients), clock=clock, stream_interval_ms=settings.keda_stream_interval_ms)
        if settings.keda_scaler_enabled
        else None
    )
    return PullCore(settings, clock, clients, hold, feed, processor, groups, servicer, scaler)


async def setup(ctx: ServiceContext[PullSettings]) -> ServiceParts:
    core = build_core(ctx.settings, ClusterLocator(ctx.cluster))
    names = [add_pull_servicer(ctx.server, core.servicer)]
    if core.scaler is not None:
        names.append(add_external_scaler_servicer(ctx.server, ExternalScalerServicer(core.scaler)))
    core.start()
    HELD_PULLS.set_function(lambda: core.hold.held_count)
    log.info(
        "pull service: long polling %s, hold check every %d ms, at most %d held pulls, KEDA external scaler %s",
        "on" if ctx.settings.long_polling_enable else "off (short polling)",
        ctx.settings.effective_hold_check_interval_ms,
        ctx.settings.max_held_requests,
        "on" if core.scaler is not None else "off",
    )
    return ServiceParts(service_names=names, close=core.close, stopping=core.stopping)
