"""The pull process: what it serves besides Route, health and reflection."""

from __future__ import annotations

from txmq_runtime.server import ServiceContext, ServiceParts

from txmq_pull.settings import PullSettings


async def setup(ctx: ServiceContext[PullSettings]) -> ServiceParts:
    # The Pull service (pull.proto) is not registered yet: until it is, its RPCs answer
    # UNIMPLEMENTED. The instance already registers and answers route look-ups.
    return ServiceParts(service_names=[])
