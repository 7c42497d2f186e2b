"""Settings of the txcheck service (flags, TXMQ_TXCHECK_* env vars, defaults)."""

from __future__ import annotations

from txmq_runtime.settings import ServiceSettings, service_config


class TxcheckSettings(ServiceSettings):
    model_config = service_config("txcheck")
