"""Settings of the pull service (flags, TXMQ_PULL_* env vars, defaults)."""

from __future__ import annotations

from txmq_runtime.settings import ServiceSettings, service_config


class PullSettings(ServiceSettings):
    model_config = service_config("pull")
