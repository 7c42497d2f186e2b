"""The calling side of service-to-service gRPC: channels (and their options, and TLS) for
long-lived internal links, and awaiting a call with its failure re-raised as the callee's TxmqError."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from txmq import signing
from txmq.errors import TxmqError
from txmq_runtime import keepalive, tls

T = TypeVar("T")

#: The largest message on txmq's links, both ways: the channels here and every service's
#: server (txmq_runtime.server) set it.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # batches of 4 MiB messages

_BASE_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Re-dial a restarted peer quickly.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
)


def channel_options() -> tuple[tuple[str, int], ...]:
    """Options of a long-lived channel to another txmq service: message limits, quick
    re-dial, and this process's keepalive (txmq_runtime.keepalive: the servers permit it)."""
    return (*_BASE_OPTIONS, *keepalive.current().client_options())


def internal_channel(address: str) -> grpc.aio.Channel:
    """An asyncio channel to another txmq service at ``address``, with ``channel_options``:
    TLS, with this service's certificate as the client certificate (the callee checked
    against ``tls_server_name`` if set), when the process's ``tls_mode`` is not disabled
    (txmq_runtime.tls), else plaintext."""
    material = tls.current()
    if material is None:
        return grpc.aio.insecure_channel(address, options=channel_options(), interceptors=_signing)
    return grpc.aio.secure_channel(
        address,
        material.channel_credentials(),
        options=(*channel_options(), *material.channel_options()),
        interceptors=_signing,
    )


#: Interceptors signing this process's internal calls as the services' own user (auth_enabled).
_signing: list[grpc.aio.ClientInterceptor] = []


def configure_credentials(credentials: signing.Credentials | None) -> None:
    """Sign every internal call made from now on as ``credentials`` (None: unsigned)."""
    _signing[:] = signing.async_interceptors(credentials)


async def call(rpc: Callable[[], Awaitable[T]]) -> T:
    """Await a gRPC call; a failure becomes the callee's typed TxmqError (its ErrorDetail)."""
    try:
        return await rpc()
    except grpc.aio.AioRpcError as exc:
        raise TxmqError.from_rpc_error(exc) from None
