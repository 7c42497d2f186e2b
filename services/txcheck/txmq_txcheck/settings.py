"""Settings of the txcheck service (flags, TXMQ_TXCHECK_* env vars, defaults).
Check-loop defaults are RocketMQ 5's (BrokerConfig)."""

from __future__ import annotations

from pydantic import Field

from txmq_runtime.settings import ServiceSettings, service_config


class TxcheckSettings(ServiceSettings):
    model_config = service_config("txcheck")

    transaction_check_interval_ms: int = Field(
        30_000, ge=10, description="How often the check loop runs (RocketMQ transactionCheckInterval)."
    )
    transaction_timeout_ms: int = Field(
        6_000,
        ge=0,
        description=(
            "A half message younger than this is not checked (RocketMQ transactionTimeOut). When a decision is "
            "too late is the store's setting of the same name: give both the same value."
        ),
    )
    transaction_check_max: int = Field(
        15, ge=1, description="Checks before a transaction is discarded to TRANS_CHECK_MAX_TIME_TOPIC."
    )
    max_process_time_per_queue_ms: int = Field(
        60_000, ge=1, description="Time limit of one round on one half queue (RocketMQ MAX_PROCESS_TIME_LIMIT)."
    )
    file_reserved_time_ms: int = Field(
        72 * 3600 * 1000, ge=1, description="Half messages stored longer ago are discarded (file retention)."
    )
    leader_ttl_ms: int = Field(
        10_000, ge=1_000, description="TTL of the check-loop leadership lease; a dead leader is replaced after it."
    )
    op_batch_max_entries: int = Field(
        64, ge=1, description="Most decisions one store call carries (concurrent END_TRANSACTIONs share one)."
    )
    check_batch_max: int = Field(
        256, ge=1, le=1024, description="Half records the check loop acts on per store call; checks per batch sent."
    )
    transaction_wait_max_ms: int = Field(
        3_600_000,
        ge=1,
        description=(
            "A half message that has waited for a live producer of its group longer than this (since it was "
            "born) is discarded to TRANS_CHECK_MAX_TIME_TOPIC (resumable), so waiting does not grow the half "
            "topic for ever."
        ),
    )
    check_send_timeout_ms: int = Field(
        3_000, ge=1, description="How long handing one batch of checks to a producer channel may take."
    )
    check_loop_enable: bool = Field(True, description="Take part in the check-loop leader election.")
