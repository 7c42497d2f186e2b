"""The one place where domain errors become gRPC statuses.

Servicers wrap every RPC with ``@rpc``: a ``TxmqError`` raised by the core becomes its
gRPC status plus an ``ErrorDetail`` in the trailing metadata; any other exception
becomes INTERNAL and is logged once, with its traceback.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import grpc

from txmq.errors import ERROR_DETAIL_KEY, InternalError, TxmqError

log = logging.getLogger("txmq.rpc")


def _trailers(err: TxmqError) -> tuple[tuple[str, bytes], ...]:
    return ((ERROR_DETAIL_KEY, err.to_detail().SerializeToString()),)


def _to_txmq_error(method: str, exc: BaseException) -> TxmqError:
    if isinstance(exc, TxmqError):
        return exc
    log.exception("unexpected error in %s", method)
    return InternalError(f"internal error in {method}: {type(exc).__name__}: {exc}")


async def abort(context: grpc.aio.ServicerContext, err: TxmqError) -> None:
    """End the call with ``err``'s status and detail (raises, as context.abort does)."""
    context.set_trailing_metadata(_trailers(err))
    await context.abort(err.grpc_status, str(err))


def rpc(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate an async unary or async-generator servicer method."""
    name = fn.__qualname__
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def stream_wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext):
            try:
                async for item in fn(self, request, context):
                    yield item
            except (GeneratorExit, grpc.aio.AbortError):
                raise
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, SystemExit)) or _is_cancel(exc):
                    raise
                await abort(context, _to_txmq_error(name, exc))

        return stream_wrapper

    @functools.wraps(fn)
    async def unary_wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext):
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) or _is_cancel(exc):
                raise
            await abort(context, _to_txmq_error(name, exc))

    return unary_wrapper


def _is_cancel(exc: BaseException) -> bool:
    import asyncio

    return isinstance(exc, asyncio.CancelledError)
