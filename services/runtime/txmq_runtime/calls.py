"""The calling side of service-to-service gRPC: channel options for long-lived internal
channels, and awaiting a call with its failure re-raised as the callee's TxmqError."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from txmq.errors import TxmqError

from txmq_runtime.server import MAX_MESSAGE_BYTES

T = TypeVar("T")

CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Re-dial a restarted peer quickly.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    # Streams (arrivals, producer channels) are long-lived and may be idle: keep them
    # alive through proxies.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
)


async def call(rpc: Callable[[], Awaitable[T]]) -> T:
    """Await a gRPC call; a failure becomes the callee's typed TxmqError (its ErrorDetail)."""
    try:
        return await rpc()
    except grpc.aio.AioRpcError as exc:
        raise TxmqError.from_rpc_error(exc) from None
