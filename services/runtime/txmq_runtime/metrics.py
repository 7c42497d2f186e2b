"""Prometheus metrics, one place for every service.

- ``serve``: the HTTP exposition server (``prometheus_client``'s own) on the settings'
  ``metrics_port`` (0: a free port; -1: off), bound to the service's ``host``. It logs
  one line naming the bound port (``metrics on http://host:port/metrics``), which tests
  and ``txmq up`` read; the port also goes into the instance's etcd labels.
- ``RpcMetrics``: a server interceptor that times every unary call and every
  server-streaming call into ``rocketmq_rpc_latency`` (RocketMQ 5's name and unit:
  milliseconds), labelled by gRPC service, method (``action``) and ``result``: the gRPC
  status name, or, for RocketMQ v2 responses, the in-band ``status.code`` name.
- ``TopicCounters``: messages and bytes per topic, a labelled child cached per topic,
  so counting costs two ``inc`` calls and no allocation once a topic was seen.
- ``ScrapeCollector``: figures read from live objects when Prometheus scrapes (lag,
  sizes, free disk), run on the object's event loop so they never race the service,
  bounded by a timeout; a failure to read one source drops its samples, not the scrape.

Every metric lives in ``prometheus_client``'s default registry; names follow RocketMQ 5
where RocketMQ has the figure (``rocketmq_*``, RocketMQ's units) and are ``txmq_*`` in
Prometheus base units (seconds, bytes) otherwise. docs/operations.md lists them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import grpc
import prometheus_client
from prometheus_client import Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from txmq_runtime.net import join_host_port

log = logging.getLogger("txmq.metrics")

# RocketMQ's rpc latency buckets (1, 5, 10, 100 ms, 10 s, 60 s) with more resolution
# where a broker's calls land.
RPC_LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000)
# RocketMQ's message size buckets: 1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB.
MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)
# How long a scrape waits for a service's event loop before skipping a source.
SCRAPE_TIMEOUT_S = 2.0

RPC_LATENCY = Histogram(
    "rocketmq_rpc_latency",
    "Server-side latency of gRPC calls in milliseconds (a held long poll counts its hold); "
    "result: gRPC status name, or a RocketMQ v2 response's status code name.",
    ["service", "action", "result"],
    buckets=RPC_LATENCY_BUCKETS_MS,
)
SCRAPE_ERRORS = Counter(
    "txmq_metrics_scrape_errors",
    "Sources a scrape could not read (timeout on a busy event loop, or an error); their samples were left out.",
    ["collector"],
)


# -- exposition ------------------------------------------------------------------------


def serve(*, host: str, port: int, stack: contextlib.ExitStack | contextlib.AsyncExitStack) -> int | None:
    """Start the /metrics HTTP server unless ``port`` < 0; its shutdown goes on
    ``stack``. Returns the bound port (None when off) and logs it."""
    if port < 0:
        return None
    server, thread = prometheus_client.start_http_server(port, addr=host)
    stack.callback(_stop_http, server, thread)
    bound = int(server.server_port)
    log.info("metrics on http://%s/metrics (bound port %d)", join_host_port(host or "0.0.0.0", bound), bound)
    return bound


def _stop_http(server: Any, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


# -- RPCs ------------------------------------------------------------------------------


def _split_method(method: str) -> tuple[str, str]:
    """``/pkg.Service/Method`` -> (``Service``, ``Method``)."""
    service, _, action = method.lstrip("/").rpartition("/")
    return service.rpartition(".")[2], action


#: Response type -> the names of its ``status.code`` enum values, or None when it has no
#: Status message with a code (txmq's own responses): decided once per type.
_CODE_NAMES: dict[type, dict[int, str] | None] = {}


def _code_names(response_type: type) -> dict[int, str] | None:
    names = None
    descriptor = getattr(response_type, "DESCRIPTOR", None)
    status = descriptor.fields_by_name.get("status") if descriptor is not None else None
    if status is not None and status.message_type is not None:
        code = status.message_type.fields_by_name.get("code")
        if code is not None and code.enum_type is not None:
            names = {v.number: v.name for v in code.enum_type.values}
    _CODE_NAMES[response_type] = names
    return names


def _in_band_result(response: object) -> str | None:
    """A RocketMQ v2 response's ``status.code`` name (apache.rocketmq.v2.Status); None
    for responses without a status message (txmq's own: their errors are gRPC statuses)."""
    t = type(response)
    names = _CODE_NAMES[t] if t in _CODE_NAMES else _code_names(t)
    if names is None or not response.HasField("status"):  # type: ignore[attr-defined]
        return None  # (a message frame of a stream: its status is the last frame's)
    code = response.status.code  # type: ignore[attr-defined]
    return names.get(code) or str(code)


_STATUS_BY_NUMBER = {c.value[0]: c.name for c in grpc.StatusCode}


def _status_name(context: grpc.aio.ServicerContext, default: grpc.StatusCode) -> str:
    code = context.code()
    if code is None:
        return default.name
    if isinstance(code, grpc.StatusCode):
        return code.name
    return _STATUS_BY_NUMBER.get(code, str(code))


class RpcMetrics(grpc.aio.ServerInterceptor):
    """Times unary-unary and unary-stream calls (client-streaming calls, such as the
    gateway's Telemetry session, are left alone: their duration is a session's)."""

    def __init__(self, histogram: Histogram = RPC_LATENCY) -> None:
        self._histogram = histogram
        self._children: dict[tuple[str, str, str], Any] = {}
        # method -> (the handler continuation gave, the timed one): wrapped once.
        self._handlers: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def observe(self, service: str, action: str, result: str, elapsed_s: float) -> None:
        self.child(service, action, result).observe(elapsed_s * 1000)

    def child(self, service: str, action: str, result: str) -> Any:
        """The histogram of one label set (observe milliseconds), for a caller that times
        many events under the same labels (a stream's messages)."""
        key = (service, action, result)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._histogram.labels(service, action, result)
        return child

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        method = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        service, action = _split_method(method)
        if handler.unary_unary is not None:
            timed = grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, service, action),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        elif handler.unary_stream is not None:
            timed = grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, service, action),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        else:
            return handler
        self._handlers[method] = (handler, timed)
        return timed

    def _unary(self, behavior: Callable[..., Any], service: str, action: str) -> Callable[..., Any]:
        async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start = time.perf_counter()
            result = grpc.StatusCode.UNKNOWN.name
            try:
                response = behavior(request, context)
                if inspect.isawaitable(response):
                    response = await response
                result = _in_band_result(response) or _status_name(context, grpc.StatusCode.OK)
                return response
            except asyncio.CancelledError:
                result = grpc.StatusCode.CANCELLED.name
                raise
            except BaseException:
                result = _status_name(context, grpc.StatusCode.UNKNOWN)
                raise
            finally:
                self.observe(service, action, result, time.perf_counter() - start)

        return timed

    def _stream(self, behavior: Callable[..., Any], service: str, action: str) -> Callable[..., Any]:
        async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start = time.perf_counter()
            result = grpc.StatusCode.UNKNOWN.name
            in_band = None
            try:
                responses = behavior(request, context)
                if inspect.isasyncgen(responses):
                    async for response in responses:
                        in_band = _in_band_result(response) or in_band
                        yield response
                elif inspect.isawaitable(responses):
                    await responses
                result = in_band or _status_name(context, grpc.StatusCode.OK)
            except (asyncio.CancelledError, GeneratorExit):
                result = grpc.StatusCode.CANCELLED.name
                raise
            except BaseException:
                result = _status_name(context, grpc.StatusCode.UNKNOWN)
                raise
            finally:
                self.observe(service, action, result, time.perf_counter() - start)

        return timed


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """The interceptors every service's server runs with."""
    return [RpcMetrics()]


# -- per-topic counts ------------------------------------------------------------------


class TopicCounters:
    """Messages and bytes per topic (and other fixed labels), one cached child pair per
    label tuple: ``count(topic, n, size)`` costs two ``inc`` calls."""

    def __init__(self, messages: Counter, throughput: Counter) -> None:
        self._messages = messages
        self._throughput = throughput
        self._children: dict[tuple[str, ...], tuple[Any, Any]] = {}

    def _pair(self, labels: tuple[str, ...]) -> tuple[Any, Any]:
        pair = self._children.get(labels)
        if pair is None:
            pair = self._children[labels] = (self._messages.labels(*labels), self._throughput.labels(*labels))
        return pair

    def count(self, labels: tuple[str, ...], messages: int, size_bytes: int) -> None:
        if messages:
            m, t = self._pair(labels)
            m.inc(messages)
            t.inc(size_bytes)

    def forget(self, labels: tuple[str, ...]) -> None:
        """Drop a label tuple's series (a deleted topic)."""
        if self._children.pop(labels, None) is not None:
            for metric in (self._messages, self._throughput):
                with contextlib.suppress(KeyError):
                    metric.remove(*labels)


# -- read on scrape --------------------------------------------------------------------

T = TypeVar("T")
#: One sample read on scrape: (family name, label values, value).
Sample = tuple[str, "list[str] | tuple[str, ...]", float]


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], T], *, timeout_s: float) -> T:
    """``fn()`` on ``loop``'s thread (directly when that is this thread or the loop is
    not running), waiting at most ``timeout_s``."""
    if loop is None or not loop.is_running():
        return fn()
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if current is loop:
        return fn()
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the scraping thread
            done.set_exception(exc)

    loop.call_soon_threadsafe(run)
    try:
        return done.result(timeout=timeout_s)
    finally:
        done.cancel()


def _listed(read: Callable[[T], Iterable[Sample]], source: T) -> list[Sample]:
    return list(read(source))


class ScrapeCollector(Collector, Generic[T]):
    """Metric families computed when Prometheus scrapes, from sources added with
    ``add`` (held weakly; ``discard`` on close). ``families()`` makes the empty families
    (also what ``describe`` reports, so registering never reads a source);
    ``read(source)`` yields one source's samples as (family name, label values, value),
    on the event loop the source was added from; a source is in a scrape whole or not
    at all."""

    def __init__(
        self,
        name: str,
        *,
        families: Callable[[], dict[str, Any]],
        read: Callable[[T], Iterable[Sample]],
        registry: CollectorRegistry | None = REGISTRY,
        timeout_s: float = SCRAPE_TIMEOUT_S,
    ) -> None:
        self.name = name
        self._families = families
        self._read = read
        self._timeout_s = timeout_s
        self._sources: dict[int, tuple[weakref.ref[Any], asyncio.AbstractEventLoop | None]] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def add(self, source: T) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        key = id(source)
        ref = weakref.ref(source, lambda _r: self._forget(key))
        with self._lock:
            self._sources[key] = (ref, loop)

    def discard(self, source: T) -> None:
        self._forget(id(source))

    def _forget(self, key: int) -> None:
        with self._lock:
            self._sources.pop(key, None)

    def describe(self) -> Iterable[Metric]:
        return list(self._families().values())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        with self._lock:
            sources = list(self._sources.values())
        for ref, loop in sources:
            source = ref()
            if source is None:
                continue
            try:
                samples = call_on_loop(loop, functools.partial(_listed, self._read, source), timeout_s=self._timeout_s)
            except Exception as exc:  # noqa: BLE001 - one source must not fail the scrape
                SCRAPE_ERRORS.labels(self.name).inc()
                log.warning("metrics: could not read %s for a scrape: %s", self.name, exc or type(exc).__name__)
                continue
            for family, labels, value in samples:
                families[family].add_metric(labels, value)  # a *MetricFamily
        yield from families.values()
