"""The one place where domain errors become gRPC statuses.

Servicers wrap every RPC with ``@rpc``: a ``TxmqError`` raised by the core becomes its
gRPC status plus an ``ErrorDetail`` in the trailing metadata; any other exception
becomes INTERNAL and is logged once, with its traceback. What goes on the wire is bounded
(message, metadata: ``txmq.errors.clip``), so echoed input never overflows the trailer. ``RejectUnparseable`` (on every
service's server) answers requests whose bytes do not parse with INVALID_ARGUMENT and
``CODE_BAD_REQUEST`` before any servicer runs (gRPC's default: UNKNOWN and a traceback).
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import Counter

from txmq.errors import ERROR_DETAIL_KEY, InternalError, TxmqError, error
from txmq.v1 import errors_pb2

log = logging.getLogger("txmq.rpc")


def _trailers(err: TxmqError) -> tuple[tuple[str, bytes], ...]:
    return ((ERROR_DETAIL_KEY, err.to_detail().SerializeToString()),)


def _to_txmq_error(method: str, exc: BaseException) -> TxmqError:
    if isinstance(exc, TxmqError):
        return exc
    log.exception("unexpected error in %s", method)
    return InternalError(f"internal error in {method}: {type(exc).__name__}: {exc}")


async def abort(context: grpc.aio.ServicerContext, err: TxmqError) -> None:
    """End the call with ``err``'s status and detail (raises, as context.abort does).
    Both are bounded (``TxmqError.to_detail``, ``status_details``): an error that echoes
    a huge input still fits gRPC's metadata limit and reaches the client typed."""
    context.set_trailing_metadata(_trailers(err))
    await context.abort(err.grpc_status, err.status_details())


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


# -- requests that do not parse ----------------------------------------------------------

#: Requests whose bytes did not parse as their method's message, per method. They are
#: answered INVALID_ARGUMENT (CODE_BAD_REQUEST) and logged at most once a minute per
#: method: a hostile client must not fill the disk with tracebacks (gRPC's default is
#: UNKNOWN and one traceback each).
UNPARSEABLE = Counter(
    "txmq_rpc_unparseable_requests",
    "Requests whose bytes did not parse as the method's message (answered INVALID_ARGUMENT).",
    ["method"],
)
_LOG_EVERY_S = 60.0


class OncePer:
    """Whether something keyed may happen now: at most once per ``interval_s`` per key
    — a log line a hostile client cannot multiply. Past ``max_keys`` keys it forgets them
    all (a client inventing keys costs memory no more than lines)."""

    def __init__(self, interval_s: float = _LOG_EVERY_S, *, max_keys: int = 10_000) -> None:
        self._interval_s = interval_s
        self._max_keys = max_keys
        self._last: dict[object, float] = {}

    def __call__(self, key: object) -> bool:
        now = time.monotonic()
        if now - self._last.get(key, -self._interval_s) < self._interval_s:
            return False
        if len(self._last) >= self._max_keys:
            self._last.clear()
        self._last[key] = now
        return True


class _Unparseable:
    """What the tolerant deserializer hands on instead of a message."""

    __slots__ = ("reason", "size")

    def __init__(self, size: int, reason: str) -> None:
        self.size = size
        self.reason = reason


class RejectUnparseable(grpc.aio.ServerInterceptor):
    """Every method's request deserializer made tolerant: bytes that do not parse reach
    the method as a marker, and the call ends INVALID_ARGUMENT with a typed detail
    before the servicer sees anything (for a request stream, at that message)."""

    def __init__(self) -> None:
        self._handlers: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._log_now = OncePer(_LOG_EVERY_S)

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler, method)
        self._handlers[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        parse = handler.request_deserializer

        def tolerant(data: bytes) -> Any:
            try:
                return parse(data)
            except Exception as exc:  # noqa: BLE001 - any parse failure is the caller's bad bytes
                return _Unparseable(len(data), type(exc).__name__)

        def screen_request(request: Any, context: grpc.aio.ServicerContext, state: object) -> TxmqError | None:
            return self._refusal(method, request) if isinstance(request, _Unparseable) else None

        return screened(handler, screen_request=screen_request, request_deserializer=tolerant)

    def _refusal(self, method: str, bad: _Unparseable) -> TxmqError:
        UNPARSEABLE.labels(method).inc()
        if self._log_now(method):
            log.warning(
                "%s: a request of %d bytes did not parse (%s); answered INVALID_ARGUMENT "
                "(counted in txmq_rpc_unparseable_requests_total, logged at most once a minute)",
                method, bad.size, bad.reason,
            )  # fmt: skip
        return error(errors_pb2.CODE_BAD_REQUEST, f"the request ({bad.size} bytes) is not a valid {method} message")


# -- screening a method's calls and requests (RejectUnparseable, txmq_runtime.auth) -------


def screened(
    handler: grpc.RpcMethodHandler,
    *,
    screen_call: Callable[[grpc.aio.ServicerContext], Awaitable[Any]] | None = None,
    screen_request: Callable[[Any, grpc.aio.ServicerContext, Any], TxmqError | None],
    screens_requests: Callable[[Any], bool] | None = None,
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` with checks before it: ``screen_call(context)`` once per call (it aborts
    the call itself to refuse it; what it returns is handed to ``screen_request``), then
    ``screen_request(request, context, state)`` for the request, or for each request of a
    request stream — a TxmqError it returns refuses it.

    A refused unary request ends the call before the handler runs. A refused request of a
    stream is not aborted from inside the request iterator: a handler may read its
    requests on a task of its own while it writes answers (Store.SendStream,
    Transaction.ProducerChannel), and an abort racing its write fails in gRPC
    (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS: the call left open, a traceback in the log).
    The requests end there instead (the handler sees no more) and the call ends with the
    refusal once the handler is done. ``screens_requests(state)`` False: this call's
    stream of requests goes to the handler as it is (no generator in between)."""
    kwargs = {
        "request_deserializer": request_deserializer or handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    screens = _Screens(screen_call, screen_request, screens_requests)
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(screens.unary_unary(handler.unary_unary), **kwargs)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(screens.unary_stream(handler.unary_stream), **kwargs)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(screens.stream_unary(handler.stream_unary), **kwargs)
    return grpc.stream_stream_rpc_method_handler(screens.stream_stream(handler.stream_stream), **kwargs)


class _Screens:
    """The checks of ``screened`` around a method's behaviour, one wrapper per call
    shape (unary or streamed requests and answers)."""

    __slots__ = ("_screen_call", "_screen_request", "_screens_requests")

    def __init__(
        self,
        screen_call: Callable[[grpc.aio.ServicerContext], Awaitable[Any]] | None,
        screen_request: Callable[[Any, grpc.aio.ServicerContext, Any], TxmqError | None],
        screens_requests: Callable[[Any], bool] | None,
    ) -> None:
        self._screen_call = screen_call
        self._screen_request = screen_request
        self._screens_requests = screens_requests

    async def _enter(self, context: grpc.aio.ServicerContext) -> Any:
        return None if self._screen_call is None else await self._screen_call(context)

    async def _admit(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        state = await self._enter(context)
        refusal = self._screen_request(request, context, state)
        if refusal is not None:
            await abort(context, refusal)

    async def _screen_each(
        self, requests: Any, context: grpc.aio.ServicerContext, state: Any, refused: list[TxmqError]
    ) -> Any:
        async for request in requests:
            refusal = self._screen_request(request, context, state)
            if refusal is not None:
                refused.append(refusal)
                return
            yield request

    def _checked(self, requests: Any, context: grpc.aio.ServicerContext, state: Any, refused: list[TxmqError]) -> Any:
        if self._screens_requests is not None and not self._screens_requests(state):
            return requests
        return self._screen_each(requests, context, state, refused)

    def unary_unary(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await self._admit(request, context)
            response = inner(request, context)
            return await response if inspect.isawaitable(response) else response

        return unary_unary

    def unary_stream(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await self._admit(request, context)
            responses = inner(request, context)
            if inspect.isasyncgen(responses):
                async for response in responses:
                    yield response
            elif inspect.isawaitable(responses):
                await responses

        return unary_stream

    def stream_unary(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        async def stream_unary(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            refused: list[TxmqError] = []
            response = inner(self._checked(requests, context, await self._enter(context), refused), context)
            response = await response if inspect.isawaitable(response) else response
            if refused:
                await abort(context, refused[0])
            return response

        return stream_unary

    def stream_stream(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        async def stream_stream(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            refused: list[TxmqError] = []
            responses = inner(self._checked(requests, context, await self._enter(context), refused), context)
            if inspect.isasyncgen(responses):
                async for response in responses:
                    yield response
            elif inspect.isawaitable(responses):
                await responses
            if refused:
                await abort(context, refused[0])

        return stream_stream
