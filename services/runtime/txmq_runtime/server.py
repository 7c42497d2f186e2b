"""How every txmq service runs.

``serve`` (the ``python -m txmq_<service>`` entry) loads settings and calls
``run_service``, which:

1. binds a ``grpc.aio`` server to host:port (port 0: a free one) and learns the port:
   plaintext, or TLS as ``tls_mode`` says (txmq_runtime.tls; permissive also binds
   ``plaintext_port``), plus a health-only plaintext server on ``probe_port`` if set;
2. connects to etcd and starts the cluster view (a watched copy of the membership);
3. calls the service's ``setup``, which adds its servicers and may record extra keys to
   keep under the instance's lease (the store's topics);
4. adds Route, health and reflection, starts serving, registers the instance in etcd,
   then reports SERVING through the health service and logs one "ready" line; the
   readiness name (``txmq.protocol.READY_HEALTH_SERVICE``) follows the service's own
   readiness when its setup gives one (``ServiceParts.readiness``: a store replica is
   ready only while in sync), else it is SERVING from then on;
5. on SIGTERM/SIGINT: NOT_SERVING, revoke the registration (so routes stop naming this
   instance), let in-flight RPCs finish for ``shutdown_grace_ms``, close the service,
   close etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import aetcd
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from pydantic import ValidationError

from txmq import signing
from txmq.protocol import READY_HEALTH_SERVICE
from txmq.v1 import auth_pb2, auth_pb2_grpc, common_pb2
from txmq_runtime import calls, keepalive, metrics, tls
from txmq_runtime.auth_service import AuthServicer, AuthStartupError, BookWrites, Security
from txmq_runtime.etcd import RETRYABLE, close_client, etcd_client
from txmq_runtime.etcd_access import EtcdAccess, EtcdAuthFailed
from txmq_runtime.grpc_errors import RejectUnparseable
from txmq_runtime.net import join_host_port
from txmq_runtime.registry import ClusterView, EtcdKeys, Registration, encode, kind_name
from txmq_runtime.route import add_route_servicer
from txmq_runtime.settings import ServiceSettings, load_settings

log = logging.getLogger("txmq.server")
#: The ready / stopping / stopped lines: logged at any --log-level, because tools
#: (`txmq up`, the tests' process fixtures) read readiness from the log.
lifecycle = logging.getLogger("txmq.lifecycle")

SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", calls.MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", calls.MAX_MESSAGE_BYTES),
    # Fail loudly on a port in use instead of sharing it with another process.
    ("grpc.so_reuseport", 0),
)


class StartupFailed(Exception):
    """Start-up cannot succeed (etcd unreachable, port taken): one line says why."""


S = TypeVar("S", bound=ServiceSettings)


@dataclass(slots=True)
class ServiceContext(Generic[S]):
    """What a service's setup gets to build itself."""

    kind: int
    settings: S
    server: grpc.aio.Server
    #: host:port clients dial (the advertised address, else host:bound port).
    address: str
    etcd: aetcd.Client
    keys: EtcdKeys
    #: Keys put here live under this instance's lease (written once it registers).
    registration: Registration
    cluster: ClusterView
    #: Auth of this process when ``auth_enabled`` (its user book and guard), else None:
    #: for a service that checks its callers itself (the gateway's v2 protocol).
    security: Security | None = None


@dataclass(slots=True)
class ServiceParts:
    """What a service's setup returns."""

    #: Full names of the gRPC services it added (for health and reflection).
    service_names: Sequence[str]
    #: Called on stop, after the server stopped serving.
    close: Callable[[], Awaitable[None]] | None = None
    #: Called on stop before the server's grace period: end long-lived calls (streams,
    #: held pulls) so they answer now instead of holding the stop for the whole grace.
    stopping: Callable[[], Awaitable[None]] | None = None
    #: Overrides the instance id from the settings (a store registers under its store id).
    instance_id: str | None = None
    #: Overrides the kind the instance registers as (a replica of a store group registers
    #: as SERVICE_KIND_STORE_REPLICA; its group's leader publishes the store endpoint).
    kind: int | None = None
    #: Readiness beyond "serving" (READY_HEALTH_SERVICE): called once the service is
    #: up with a function that the service calls with True / False whenever its
    #: readiness changes. None: ready as soon as it serves.
    readiness: Callable[[Callable[[bool], None]], None] | None = None


Setup = Callable[[ServiceContext[S]], Awaitable[ServiceParts]]


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a service runs on (``event_loop`` setting): uvloop, else asyncio's."""
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def serve(*, kind: int, settings_cls: type[S], setup: Setup[S], argv: Sequence[str] | None = None) -> None:
    """Process entry point: settings from ``argv`` (default: ``sys.argv[1:]``), env vars
    and defaults; run until SIGTERM/SIGINT. Exits 1 when start-up fails."""
    try:
        settings = load_settings(settings_cls, sys.argv[1:] if argv is None else argv)
    except ValidationError as exc:
        # One line per bad setting, naming it; no traceback.
        for problem in exc.errors():
            where = ".".join(str(part) for part in problem["loc"])
            print(
                f"txmq-{kind_name(kind)}: invalid settings: {where + ': ' if where else ''}{problem['msg']}",
                file=sys.stderr,
            )
        sys.exit(2)
    configure_logging(settings.log_level)
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner:
            runner.run(run_service(kind=kind, settings=settings, setup=setup))
    except StartupFailed as exc:
        log.error("%s did not start: %s", kind_name(kind), exc)
        sys.exit(1)
    except Exception:
        log.exception("%s failed", kind_name(kind))
        sys.exit(1)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s",
        force=True,
    )
    lifecycle.setLevel(logging.INFO)


class _Signals:
    """SIGTERM/SIGINT: during start-up, cancel it; once serving, set ``stop``."""

    def __init__(self, task: asyncio.Task[None]) -> None:
        self.stop = asyncio.Event()
        self.starting = True
        self._task = task

    def __call__(self) -> None:
        if self.starting and not self.stop.is_set():
            self._task.cancel()
        self.stop.set()


async def run_service(*, kind: int, settings: S, setup: Setup[S]) -> None:
    """Run one service until SIGTERM/SIGINT (see the module docstring). A signal during
    start-up (a store recovering a large log, etcd not there yet) abandons it, undoing
    what was done so far."""
    task = asyncio.current_task()
    assert task is not None
    signals = _Signals(task)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signals)
    name = kind_name(kind)
    try:
        await _serve_until(signals, kind=kind, settings=settings, setup=setup)
    except asyncio.CancelledError:
        if not signals.stop.is_set():
            raise  # not ours
        task.uncancel()
        log.info("%s stopped during start-up", name)


async def _serve_until(signals: _Signals, *, kind: int, settings: S, setup: Setup[S]) -> None:
    name = kind_name(kind)
    ka, material, security = _configure_links(settings)
    access = _etcd_access(settings)
    ports = _bind_service(settings, ka, material, security)
    keys = EtcdKeys(settings.etcd_prefix)
    health_servicer = health.aio.HealthServicer()
    for health_name in ("", READY_HEALTH_SERVICE):
        await health_servicer.set(health_name, health_pb2.HealthCheckResponse.NOT_SERVING)
    probe_server, probe_port = _bind_probe(settings, health_servicer)
    etcd = etcd_client(settings.etcd_endpoints, access)  # after every bind: a failed one leaves no client

    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(close_client, etcd)
        cluster = await _join_cluster(stack, settings, etcd, keys, security)
        registration = Registration(etcd, ttl_ms=settings.registration_ttl_ms)
        ctx = ServiceContext(
            kind=kind,
            settings=settings,
            server=ports.server,
            address=ports.address,
            etcd=etcd,
            keys=keys,
            registration=registration,
            cluster=cluster,
            security=security,
        )
        parts = await setup(ctx)
        if parts.close is not None:
            stack.push_async_callback(parts.close)

        served = _add_runtime_services(ports.server, parts, cluster, health_servicer, security)
        await ports.server.start()
        stack.push_async_callback(_stop_server, ports.server, grace_s=settings.shutdown_grace_ms / 1000)
        if probe_server is not None:
            await probe_server.start()
            stack.push_async_callback(_stop_server, probe_server, grace_s=0)
        if parts.stopping is not None:
            stack.push_async_callback(parts.stopping)  # LIFO: runs before _stop_server

        instance_id = await _register(stack, settings, kind, parts, ports, registration, keys, security)
        await _report_serving(stack, health_servicer, served, parts)
        signals.starting = False
        lifecycle.info(
            "%s %s ready on %s (bound port %d, etcd lease %x%s)",
            name,
            instance_id,
            ports.address,
            ports.port,
            registration.lease_id,
            _ports_note(settings.tls_mode, ports.plaintext_port, probe_port),
        )

        await signals.stop.wait()
        lifecycle.info("%s %s stopping", name, instance_id)
    lifecycle.info("%s %s stopped", name, instance_id)


def _etcd_access(settings: ServiceSettings) -> EtcdAccess:
    """What the etcd client presents (TLS files, user); StartupFailed when a file is bad."""
    try:
        return EtcdAccess.load(settings)
    except tls.TlsError as exc:
        raise StartupFailed(str(exc)) from None


def _last_error(exc: BaseException) -> str:
    """``: <the last etcd error>`` when the timeout carries one (a TLS handshake etcd
    refused, a permission etcd denied), else nothing."""
    cause = exc.__cause__
    return "" if cause is None else f": last error: {' '.join(str(cause).split())}"


def _configure_links(settings: ServiceSettings) -> tuple[keepalive.Keepalive, tls.TlsMaterial | None, Security | None]:
    """This process's keepalive, TLS material and auth, for its server and for the
    channels it dials (txmq_runtime.calls). StartupFailed when the TLS files are bad."""
    ka = keepalive.Keepalive.of(settings)
    keepalive.configure(ka)  # the channels this process dials (txmq_runtime.calls)
    try:
        material = tls.TlsMaterial.load(settings)
    except tls.TlsError as exc:
        raise StartupFailed(str(exc)) from None
    tls.configure(material)  # likewise: internal calls use TLS unless tls_mode is disabled
    return ka, material, _security(settings)


@dataclass(slots=True)
class _Ports:
    """The service's server, bound and not started, and where it listens."""

    server: grpc.aio.Server
    port: int
    #: The plaintext port beside TLS (tls_mode permissive), else None.
    plaintext_port: int | None
    #: host:port clients dial (the advertised address, else host:bound port).
    address: str


def _bind_service(
    settings: ServiceSettings, ka: keepalive.Keepalive, material: tls.TlsMaterial | None, security: Security | None
) -> _Ports:
    """The service's server with its interceptors, bound to ``port`` (TLS as
    ``tls_mode`` says) and, when permissive, to ``plaintext_port``."""
    server = grpc.aio.server(
        options=(*SERVER_OPTIONS, *ka.server_options()),
        interceptors=[
            RejectUnparseable(),
            *([security.interceptor] if security is not None else []),
            *metrics.server_interceptors(),
        ],
    )
    if material is None:
        port = _bind(server, settings.host, settings.port, "--port")
    else:
        port = _bind(server, settings.host, settings.port, "--port", material.server_credentials())
    plaintext_port = None
    if settings.tls_mode == tls.PERMISSIVE:
        plaintext_port = _bind(server, settings.host, settings.plaintext_port, "--plaintext-port")
    address = settings.advertised_address or join_host_port(_advertised_host(settings.host), port)
    return _Ports(server, port, plaintext_port, address)


def _bind_probe(
    settings: ServiceSettings, health_servicer: health.aio.HealthServicer
) -> tuple[grpc.aio.Server | None, int | None]:
    """The probe server and its port when ``probe_port`` is set, else (None, None)."""
    if settings.probe_port < 0:
        return None, None
    # Health only, plaintext: probes that cannot speak TLS (Kubernetes' gRPC probes)
    # see the same statuses as the service port, and nothing else is served here.
    probe_server = grpc.aio.server(options=SERVER_OPTIONS)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, probe_server)
    return probe_server, _bind(probe_server, settings.host, settings.probe_port, "--probe-port")


async def _join_cluster(
    stack: contextlib.AsyncExitStack,
    settings: ServiceSettings,
    etcd: aetcd.Client,
    keys: EtcdKeys,
    security: Security | None,
) -> ClusterView:
    """Start the cluster view and, with auth, the user book: StartupFailed when etcd does
    not answer within ``etcd_startup_timeout_ms``. Their closes go on ``stack``."""
    cluster = ClusterView(etcd, keys)
    startup_s = settings.etcd_startup_timeout_ms / 1000
    try:
        await cluster.start(timeout_s=startup_s)
    except EtcdAuthFailed as exc:
        raise StartupFailed(f"{exc} (--etcd-username; --etcd-password)") from None
    except TimeoutError as exc:
        raise StartupFailed(
            f"etcd at {settings.etcd_endpoints} not reachable within {startup_s:g} s "
            f"(--etcd-endpoints; --etcd-startup-timeout-ms{'; --etcd-tls-*' if settings.etcd_tls_ca_file else ''})"
            f"{_last_error(exc)}"
        ) from None
    stack.push_async_callback(cluster.close)
    if security is not None:
        try:
            await security.start(etcd, timeout_s=startup_s)
        except (AuthStartupError, TimeoutError) as exc:
            raise StartupFailed(f"auth: {exc}") from None
        stack.push_async_callback(security.close)
    return cluster


def _add_runtime_services(
    server: grpc.aio.Server,
    parts: ServiceParts,
    cluster: ClusterView,
    health_servicer: health.aio.HealthServicer,
    security: Security | None,
) -> list[str]:
    """Add what every service serves beside its own: Route, health, Auth (with auth) and
    reflection. Returns the names of the services to report SERVING."""
    route_name = add_route_servicer(server, cluster)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    served = [*parts.service_names, route_name]
    if security is not None:
        auth_pb2_grpc.add_AuthServicer_to_server(AuthServicer(security, cluster, enabled=True), server)
        served.append(auth_pb2.DESCRIPTOR.services_by_name["Auth"].full_name)
    reflection.enable_server_reflection(
        [*served, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server,
    )
    return served


async def _register(
    stack: contextlib.AsyncExitStack,
    settings: ServiceSettings,
    kind: int,
    parts: ServiceParts,
    ports: _Ports,
    registration: Registration,
    keys: EtcdKeys,
    security: Security | None,
) -> str:
    """Serve /metrics, then register the instance in etcd (its endpoint labelled with
    the metrics and plaintext addresses, and whether it writes the user book) and keep
    the registration alive until ``stack`` closes. Returns the instance id.
    StartupFailed when etcd does not take it."""
    labels = {} if security is None else security.book_writes.labels()
    metrics_host = settings.metrics_host or settings.host
    if (metrics_port := metrics.serve(host=metrics_host, port=settings.metrics_port, stack=stack)) is not None:
        labels["metrics"] = join_host_port(_advertised_host(metrics_host), metrics_port)
    if ports.plaintext_port is not None:
        labels["plaintext"] = join_host_port(_advertised_host(settings.host), ports.plaintext_port)
    name = kind_name(kind)
    instance_id = parts.instance_id or settings.instance_id or f"{name}-{socket.gethostname()}-{os.getpid()}"
    registered_kind = parts.kind or kind
    endpoint = common_pb2.Endpoint(
        kind=registered_kind,
        instance_id=instance_id,
        address=ports.address,
        started_at_ms=time.time_ns() // 1_000_000,
        labels=labels,
    )
    await registration.put(keys.service(registered_kind, instance_id), encode(endpoint))
    try:
        await registration.start(give_up_after_s=settings.etcd_startup_timeout_ms / 1000)
    except RETRYABLE as exc:
        raise StartupFailed(f"could not register in etcd at {settings.etcd_endpoints}: {exc}") from None
    stack.push_async_callback(registration.close)
    return instance_id


async def _report_serving(
    stack: contextlib.AsyncExitStack,
    health_servicer: health.aio.HealthServicer,
    served: list[str],
    parts: ServiceParts,
) -> None:
    """SERVING for every service, readiness as the service says (``parts.readiness``);
    on stop (``stack``) NOT_SERVING again, before anything else closes."""
    for service in ["", *served]:
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    stack.push_async_callback(health_servicer.enter_graceful_shutdown)
    readiness = _Readiness(health_servicer)
    stack.push_async_callback(readiness.close)  # LIFO: before the graceful shutdown
    if parts.readiness is None:
        readiness.set(True)
    else:
        parts.readiness(readiness.set)


class _Readiness:
    """The READY_HEALTH_SERVICE status: ``set`` may be called at any time on the event
    loop; one task applies the latest value, in order (setting a health status may wait
    for its watchers)."""

    def __init__(self, health_servicer: health.aio.HealthServicer) -> None:
        self._health = health_servicer
        self._wanted: bool | None = None
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._apply(), name="readiness")

    def set(self, ready: bool) -> None:
        self._wanted = ready
        self._changed.set()

    async def _apply(self) -> None:
        applied: bool | None = None
        while True:
            await self._changed.wait()
            self._changed.clear()
            wanted = self._wanted
            if wanted is not None and wanted != applied:
                applied = wanted
                status = (
                    health_pb2.HealthCheckResponse.SERVING if wanted else health_pb2.HealthCheckResponse.NOT_SERVING
                )
                await self._health.set(READY_HEALTH_SERVICE, status)

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def _bind(
    server: grpc.aio.Server, host: str, port: int, flag: str, credentials: grpc.ServerCredentials | None = None
) -> int:
    """Add a port (TLS with ``credentials``); the port bound. StartupFailed naming
    ``flag`` when it cannot be bound."""
    target = join_host_port(host, port)
    try:
        if credentials is None:
            return server.add_insecure_port(target)
        return server.add_secure_port(target, credentials)
    except RuntimeError:  # grpc: "Failed to bind to address ..."
        raise StartupFailed(f"cannot listen on {target} (in use?); choose another with {flag}") from None


def _ports_note(tls_mode: str, plaintext_port: int | None, probe_port: int | None) -> str:
    """What the ready line says beyond the service port: its TLS mode and the extra ports
    (tests and tools read the bound ports from it)."""
    note = "" if tls_mode == tls.DISABLED else f", tls {tls_mode}"
    if plaintext_port is not None:
        note += f", plaintext port {plaintext_port}"
    if probe_port is not None:
        note += f", probe port {probe_port}"
    return note


def _security(settings: ServiceSettings) -> Security | None:
    """Auth for this process (``auth_enabled``): its interceptor, and the identity its own
    calls to other services are signed with (txmq_runtime.calls)."""
    if not settings.auth_enabled:
        calls.configure_credentials(None)
        return None
    secret = settings.auth_secret_key.get_secret_value()
    calls.configure_credentials(signing.Credentials(settings.auth_access_key, secret))
    accepted = settings.auth_accepted_secret_key.get_secret_value()
    try:
        book_writes = BookWrites.of(settings)
    except tls.TlsError as exc:
        raise StartupFailed(str(exc)) from None
    return Security(
        prefix=settings.etcd_prefix,
        access_key=settings.auth_access_key,
        secret_key=secret,
        accepted_secret_keys=(accepted,) if accepted else (),
        clock_skew_ms=settings.auth_clock_skew_ms,
        book_writes=book_writes,
    )


async def _stop_server(server: grpc.aio.Server, *, grace_s: float) -> None:
    await server.stop(grace_s)


def _advertised_host(bind_host: str) -> str:
    # A wildcard bind is not dialable: advertise the host name instead.
    return socket.gethostname() if bind_host in ("", "0.0.0.0", "::", "[::]") else bind_host
