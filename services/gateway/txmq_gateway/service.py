"""The gateway process: ``apache.rocketmq.v2.MessagingService`` over the stores, pull
instances and txcheck replicas of the cluster view, besides Route, health and reflection."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

import grpc

from txmq_gateway.access import Authorizer
from txmq_gateway.auth import Authenticator
from txmq_gateway.backend import Backend
from txmq_gateway.consumer import SimpleConsumerCore
from txmq_gateway.convert import HANDLE_KEY_SECRET, HandleSigner
from txmq_gateway.metrics import COLLECTOR as GATEWAY_METRICS
from txmq_gateway.ownership import Forwarder, GroupOwnership, GroupRouter
from txmq_gateway.producer import ProducerCore
from txmq_gateway.servicer import MessagingServicer, add_messaging_servicer
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.telemetry import ClientHub
from txmq_runtime import secrets
from txmq_runtime.etcd import RETRYABLE
from txmq_runtime.net import join_host_port
from txmq_runtime.server import ServiceContext, ServiceParts, StartupFailed
from txmq_runtime.tls import TlsError, read_pem

log = logging.getLogger("txmq.gateway.service")

#: gRPC's own logger: it logs a text header value that is not UTF-8 ("Invalid encoding on").
GRPC_CORE_LOGGER = "grpc._cython.cygrpc"

# How long start-up waits for the first read of the consumer-group owners in etcd.
OWNERSHIP_STARTUP_TIMEOUT_S = 30.0


def serve_tls(server: grpc.aio.Server, settings: GatewaySettings, address: str) -> str:
    """Add the v2 TLS port (same services as the service port) with the service's
    certificate (tls_cert_file, tls_key_file) and client certificates as
    tls_port_client_auth says, whatever tls_mode and tls_client_auth say of the service
    port; its host:port for routes."""
    try:
        key = read_pem(settings.tls_key_file, setting="tls_key_file", kind="PRIVATE KEY")
        cert = read_pem(settings.tls_cert_file, setting="tls_cert_file", kind="CERTIFICATE")
        ca = None
        if settings.tls_port_client_auth != "none":
            ca = read_pem(settings.tls_ca_file, setting="tls_ca_file", kind="CERTIFICATE")
    except TlsError as exc:
        raise StartupFailed(str(exc)) from None
    target = join_host_port(settings.host, settings.tls_port)
    # gRPC's Python API has no "ask, but let in without one": a CA comes with requiring one.
    credentials = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=settings.tls_port_client_auth == "require"
    )
    try:
        port = server.add_secure_port(target, credentials)
    except RuntimeError:  # grpc: "Failed to bind to address ..."
        raise StartupFailed(f"cannot listen on {target} (in use?); choose another with --tls-port") from None
    host, _, _ = address.rpartition(":")
    return f"{host}:{port}"


class HeaderEncodingLog(logging.Filter):
    """gRPC reads a text header value that is not UTF-8 as latin-1, and logs the
    UnicodeDecodeError with a traceback each time (``Invalid encoding on <value>``): a
    client could fill the disk. The gateway refuses such values where it reads them
    (``auth.header_text``: a typed status). This turns those records into one WARNING a
    minute at most, without the traceback or the value, counting the rest."""

    def __init__(self, *, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._every_s = every_s
        self._clock = clock
        self._last: float | None = None
        self._quiet = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith("Invalid encoding on")):
            return True
        now = self._clock()
        if self._last is not None and now - self._last < self._every_s:
            self._quiet += 1
            return False
        record.msg = "a text header value that is not UTF-8 reached the gateway (refused where it is read)%s"
        record.args = (f"; {self._quiet} more since the last such line" if self._quiet else "",)
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self._last, self._quiet = now, 0
        return True


def quiet_header_encoding_log() -> None:
    """Put HeaderEncodingLog on gRPC's logger (once per process)."""
    grpc_log = logging.getLogger(GRPC_CORE_LOGGER)
    if not any(isinstance(f, HeaderEncodingLog) for f in grpc_log.filters):
        grpc_log.addFilter(HeaderEncodingLog())


async def handle_signer(ctx: ServiceContext[GatewaySettings]) -> HandleSigner:
    """The signer of transaction handles, keyed by the cluster's secret in etcd (made by
    the first gateway that starts): a handle one gateway issued is accepted by all. With
    auth the secret is sealed in etcd under auth_secret_key (txmq_runtime.secrets)."""
    key = secrets.secret_key(ctx.keys.prefix, HANDLE_KEY_SECRET)
    timeout_s = ctx.settings.etcd_startup_timeout_ms / 1000
    box = None if ctx.security is None else secrets.SecretBox(ctx.security.secret_key, ctx.security.secret_keys[1:])
    try:
        return HandleSigner(await secrets.get_or_create(ctx.etcd, key, give_up_after_s=timeout_s, box=box))
    except RETRYABLE as exc:
        raise StartupFailed(f"could not read the transaction-handle key {key} from etcd: {exc}") from None
    except secrets.SecretUnusable as exc:
        raise StartupFailed(str(exc)) from None


def authentication(ctx: ServiceContext[GatewaySettings]) -> tuple[Authenticator, Authorizer | None, str]:
    """How v2 callers are checked, and a phrase saying so for the start-up line: with
    ``auth_enabled``, as txmq's users (the cluster's user book, signature required on every
    call) with their permissions (access.py); otherwise by the one configured
    access_key/secret_key pair, if any, with no permissions beyond it."""
    settings = ctx.settings
    single = bool(settings.access_key and settings.secret_key)
    if ctx.security is None:
        return Authenticator.from_settings(settings), None, "by access_key" if single else "off"
    book = ctx.security.book

    def secret_for(access_key: str) -> bytes | None:
        secret = book.secret_for(access_key)  # None: unknown, disabled, or not unsealable here
        return None if secret is None else secret.encode()

    auth = Authenticator(secret_for, clock_skew_ms=settings.auth_clock_skew_ms)
    if single:
        log.warning(
            "gateway: both auth_enabled and access_key/secret_key are set: auth_enabled wins, v2 clients sign as "
            "txmq users (the user book) and access_key %r is not accepted unless it is such a user",
            settings.access_key,
        )
    return auth, Authorizer(book, ctx.security.guard), "as txmq's users with their permissions (auth_enabled)"


async def setup(ctx: ServiceContext[GatewaySettings]) -> ServiceParts:
    settings = ctx.settings
    quiet_header_encoding_log()
    handles = await handle_signer(ctx)
    backend = Backend(ctx.cluster, timeout_ms=settings.backend_rpc_timeout_ms)
    # The id the runtime registers this instance under (named here: group owners in etcd
    # and receipt handles carry it).
    instance_id = settings.instance_id or f"gateway-{socket.gethostname()}-{os.getpid()}"
    consumer = SimpleConsumerCore(backend, settings, instance_id=instance_id, handles=handles)
    GATEWAY_METRICS.add(consumer)
    clients = ClientHub(backend, settings, on_client_gone=consumer.client_gone, handles=handles)
    # Consumer groups are owned by one replica each (ownership.py): its lease lives as
    # long as the instance's registration would (registration_ttl_ms).
    ownership = GroupOwnership(
        ctx.etcd,
        etcd_prefix=ctx.keys.prefix,
        instance_id=instance_id,
        address=ctx.address,
        ttl_ms=settings.registration_ttl_ms,
        on_lost=consumer.drop_group,
    )
    router = GroupRouter(ownership, Forwarder(instance_id=instance_id, timeout_ms=settings.backend_rpc_timeout_ms))
    auth, access, how = authentication(ctx)
    servicer = MessagingServicer(
        address=ctx.address,
        auth=auth,
        access=access,
        backend=backend,
        producer=ProducerCore(backend, settings, handles=handles),
        consumer=consumer,
        clients=clients,
        route_client_endpoints=settings.route_client_endpoints,
        router=router,
    )
    if settings.tls_port >= 0:
        servicer.tls_address = serve_tls(ctx.server, settings, ctx.address)
    name = add_messaging_servicer(ctx.server, servicer)
    log.info(
        "gateway: RocketMQ 5 clients connect to %s%s (authentication %s)",
        ctx.address,
        f", TLS on {servicer.tls_address}" if servicer.tls_address else "",
        how,
    )

    async def stopping() -> None:
        await clients.close()
        await consumer.close()  # the final offset commit, then the groups move at once
        await router.close()

    async def close() -> None:
        GATEWAY_METRICS.discard(consumer)
        await stopping()
        await backend.close()

    await ownership.start(timeout_s=OWNERSHIP_STARTUP_TIMEOUT_S)
    return ServiceParts(service_names=[name], close=close, stopping=stopping, instance_id=instance_id)
