"""The txcheck process: what it serves besides Route, health and reflection."""

from __future__ import annotations

from txmq_runtime.server import ServiceContext, ServiceParts

from txmq_txcheck.settings import TxcheckSettings


async def setup(ctx: ServiceContext[TxcheckSettings]) -> ServiceParts:
    # The Transaction service (txcheck.proto) is not registered yet: until it is, its
    # RPCs answer UNIMPLEMENTED. The instance already registers and answers route look-ups.
    return ServiceParts(service_names=[])
