"""The push consumer's settings, checked once (``PushConsumer(...)``'s keywords).

``PushConsumerConfig`` is what ``PushConsumer.__init__`` turns its keywords into: frozen,
because a consumer's settings do not change while it runs, and validated on
construction, so a bad value fails where it was given with the name of the setting.
Durations are float seconds, as the SDK's public API counts them, and carry their unit
in the name (``heartbeat_interval_s`` is the ``heartbeat_interval`` keyword).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc

from txmq._client import parse_endpoints
from txmq._consumer_types import ConsumeFromWhere
from txmq.errors import TxmqError
from txmq.protocol import retry_topic
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import errors_pb2
from txmq.validation import check_group

ErrorCallback = Callable[[TxmqError], None]

DEFAULT_SUSPEND_TIMEOUT_S = 15.0  # RocketMQ's brokerSuspendMaxTimeMillis


def check_positive(**values: float) -> None:
    """Raise ``ValueError`` naming the first of ``values`` that is not > 0."""
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be > 0, not {value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PushConsumerConfig:
    """A push consumer's settings; see ``PushConsumer`` and docs/consumers.md for each."""

    group: str
    endpoint: str
    client_id: str | None = None  # None: the consumer makes one up (host@pid@random)
    consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    consume_thread_max: int = 20
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    consume_concurrently_max_span: int = 2000
    max_reconsume_times: int = 16
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 60.0
    heartbeat_interval_s: float = 10.0
    rebalance_interval_s: float = 20.0
    takeover_delay_s: float | None = None  # None: heartbeat_interval_s + 2
    commit_interval_s: float = 5.0
    suspend_timeout_s: float = DEFAULT_SUSPEND_TIMEOUT_S
    pull_error_backoff_s: float = 1.0
    timeout_s: float = 5.0
    route_refresh_interval_s: float = 30.0
    interceptors: tuple[grpc.UnaryUnaryClientInterceptor, ...] = ()
    on_error: ErrorCallback | None = None
    tls: TlsConfig | None = None
    credentials: Credentials | None = None
    pause_on_consume_disabled: bool = True
    orderly: bool = False
    suspend_current_queue_time_s: float = 1.0

    def __post_init__(self) -> None:
        check_group(self.group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        parse_endpoints(self.endpoint)
        if self.on_error is not None and not callable(self.on_error):
            raise TypeError("on_error must be callable")
        check_positive(
            consume_thread_max=self.consume_thread_max,
            consume_message_batch_max_size=self.consume_message_batch_max_size,
            pull_batch_size=self.pull_batch_size,
            pull_threshold_for_queue=self.pull_threshold_for_queue,
            consume_concurrently_max_span=self.consume_concurrently_max_span,
            retry_backoff_s=self.retry_backoff_s,
            retry_backoff_max_s=self.retry_backoff_max_s,
            heartbeat_interval_s=self.heartbeat_interval_s,
            rebalance_interval_s=self.rebalance_interval_s,
            commit_interval_s=self.commit_interval_s,
            suspend_timeout_s=self.suspend_timeout_s,
            pull_error_backoff_s=self.pull_error_backoff_s,
            timeout_s=self.timeout_s,
            route_refresh_interval_s=self.route_refresh_interval_s,
            suspend_current_queue_time_s=self.suspend_current_queue_time_s,
        )
        if not isinstance(self.consume_from, ConsumeFromWhere):
            raise TypeError(f"consume_from must be a ConsumeFromWhere, not {self.consume_from!r}")
        if self.max_reconsume_times < 0:
            raise ValueError(f"max_reconsume_times must be >= 0, not {self.max_reconsume_times}")
        if self.effective_takeover_delay_s <= self.heartbeat_interval_s:
            raise ValueError(
                f"takeover_delay_s ({self.effective_takeover_delay_s}) must be longer than "
                f"heartbeat_interval_s ({self.heartbeat_interval_s})"
            )

    @property
    def effective_takeover_delay_s(self) -> float:
        """How long the membership must be stable before a queue newly ours is started;
        a released queue also waits this long for its running listeners (the new owner
        starts this long after the change)."""
        if self.takeover_delay_s is not None:
            return self.takeover_delay_s
        return self.heartbeat_interval_s + 2.0

    @property
    def retry_topic(self) -> str:
        """The group's retry topic (``%RETRY%<group>``): failed messages go back to their
        store, to this topic, which the consumer subscribes too."""
        return retry_topic(self.group)
