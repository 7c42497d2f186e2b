"""Settings of the pull service (flags --field_name, env TXMQ_PULL_FIELD_NAME, defaults)."""

from __future__ import annotations

from pydantic import Field

from txmq_runtime.settings import ServiceSettings, service_config

LONG_POLLING_CHECK_INTERVAL_MS = 5_000


class PullSettings(ServiceSettings):
    model_config = service_config("pull")

    service_readable: bool = Field(
        True, description="Serve pulls (RocketMQ's broker read permission); false: every pull is refused."
    )
    long_polling_enable: bool = Field(
        True,
        description="Hold empty pulls until a matching message arrives (long polling); false: short polling, "
        "each empty pull is held short_polling_time_ms and re-checked, arrivals are not watched.",
    )
    suspend_timeout_default_ms: int = Field(
        15_000, ge=1, description="How long an empty pull is held when it asks for suspend_timeout_ms = 0."
    )
    suspend_timeout_max_ms: int = Field(
        120_000, ge=1, description="Longest hold a pull may ask for; longer requests are held this long."
    )
    short_polling_time_ms: int = Field(
        1_000, ge=1, description="Short polling: how long an empty pull is held (RocketMQ shortPollingTimeMills)."
    )
    hold_check_interval_ms: int = Field(
        0,
        ge=0,
        description="Backstop: held pulls are re-checked against the queues' max offsets this often; "
        "0: 5000 with long polling, short_polling_time_ms without.",
    )
    max_held_requests: int = Field(
        10_000, ge=0, description="Most pulls held at once; past it an empty pull fails with TOO_MANY_REQUESTS."
    )
    max_stream_pulls: int = Field(
        1_024,
        ge=1,
        description="Most pulls outstanding on one PullStream; past it a pull is answered TOO_MANY_REQUESTS.",
    )
    property_filter_enable: bool = Field(True, description="Accept SQL92 filters (RocketMQ enablePropertyFilter).")
    config_cache_ttl_ms: int = Field(
        3_000, ge=0, description="How long topic / subscription-group configs read from a store are reused."
    )
    store_rpc_timeout_ms: int = Field(5_000, ge=1, description="Deadline of each unary call to a store.")
    deadline_margin_ms: int = Field(
        500,
        ge=0,
        description="A held pull is answered this long before the caller's gRPC deadline (if it set one).",
    )
    consumer_expiry_ms: int = Field(
        30_000,
        ge=1,
        description="A consumer that sent no heartbeat for this long leaves its group "
        "(3 heartbeat intervals of the SDK's 10 s).",
    )
    arrival_reconnect_backoff_ms: int = Field(
        500, ge=1, description="First wait before re-opening a store's arrival stream; doubles up to 10x."
    )
    keda_scaler_enabled: bool = Field(
        True,
        description="Serve KEDA's external scaler (externalscaler.ExternalScaler: a consumer group's lag "
        "on a topic) on this port; false: its calls are UNIMPLEMENTED.",
    )
    keda_stream_interval_ms: int = Field(
        5_000,
        ge=100,
        description="KEDA's StreamIsActive (the external-push trigger): how often the group's lag is read "
        "and IsActive pushed.",
    )

    @property
    def effective_hold_check_interval_ms(self) -> int:
        if self.hold_check_interval_ms:
            return self.hold_check_interval_ms
        return LONG_POLLING_CHECK_INTERVAL_MS if self.long_polling_enable else self.short_polling_time_ms
