"""How a service reaches a locked-down etcd: TLS (etcd's ``--client-cert-auth``) and an
etcd user.

``aetcd`` takes a user name and password but only dials ``insecure_channel``, fetches its
auth token once in ``connect`` and never again. An etcd simple token dies with an etcd
restart and after ``--auth-token-ttl`` (5 min) unused, so a long-lived service would be
locked out for good. ``EtcdClient`` therefore opens the channel itself (TLS when the
settings give a CA) and leaves the token to ``_TokenInterceptor``: it fetches the token
on first use, sends it with every call, and when etcd answers "invalid auth token" fetches
a new one and makes a unary call again once. A stream (a watch, lease keep-alives) that
fails that way ends as any broken stream does; whoever reopens it (the mirrors, the
registration) makes a unary call first, which renews the token.

A user name or password etcd refuses is ``EtcdAuthFailed``: not an aetcd ``ClientError``,
so nothing retries it, and start-up ends with one line saying so. An etcd whose auth is
not on yet (Kubernetes: the chart's set-up job runs beside the services) is retried
until ``etcd_startup_timeout_ms``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aetcd
import aetcd.exceptions
import grpc
from aetcd import rpc, watcher
from pydantic import SecretStr

from txmq_runtime.tls import read_pem

_AUTHENTICATE = "/etcdserverpb.Auth/Authenticate"


class EtcdAuthFailed(Exception):
    """etcd refused this client's user name or password (or has auth turned off)."""


class EtcdAccessSettings(Protocol):
    """The etcd fields of ServiceSettings (read-only here)."""

    @property
    def etcd_tls_ca_file(self) -> str: ...
    @property
    def etcd_tls_cert_file(self) -> str: ...
    @property
    def etcd_tls_key_file(self) -> str: ...
    @property
    def etcd_username(self) -> str: ...
    @property
    def etcd_password(self) -> SecretStr: ...


@dataclass(frozen=True, slots=True)
class EtcdAccess:
    """What a client needs to pass etcd's checks: the CA etcd's certificate is checked
    with (None: plaintext), a client certificate and its key (None: none presented), and
    an etcd user ("": none, etcd's auth off or the certificate's common name used)."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    username: str = ""
    password: str = ""

    @classmethod
    def load(cls, settings: EtcdAccessSettings) -> EtcdAccess:
        """The files the settings name, read now (TlsError naming the setting when one
        cannot be read or is not PEM)."""

        def pem(setting: str, kind: str) -> bytes | None:
            path = getattr(settings, setting)
            return read_pem(path, setting=setting, kind=kind) if path else None

        return cls(
            ca=pem("etcd_tls_ca_file", "CERTIFICATE"),
            cert=pem("etcd_tls_cert_file", "CERTIFICATE"),
            key=pem("etcd_tls_key_file", "PRIVATE KEY"),
            username=settings.etcd_username,
            password=settings.etcd_password.get_secret_value(),
        )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials of the channel to etcd; None for plaintext."""
        if self.ca is None:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


class EtcdClient(aetcd.Client):
    """``aetcd.Client`` whose channel is TLS when ``access`` gives a CA and whose calls
    carry an etcd auth token when it gives a user (renewed as the module docstring says)."""

    def __init__(self, *, host: str, port: int, access: EtcdAccess, timeout: float, options: dict[str, Any]) -> None:
        super().__init__(host=host, port=port, timeout=timeout, options=options)
        self._access = access

    async def connect(self) -> None:
        """aetcd's ``connect`` with our channel; authentication happens on the first call."""
        if self._connected.is_set():
            return
        if self._is_connecting:  # type: ignore[has-type]  # another task is connecting: wait for it (as aetcd does)
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            self.channel = self._open_channel()
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout)
            self._connected.set()
        finally:
            self._is_connecting = False

    def _open_channel(self) -> grpc.aio.Channel:
        target = f"{self._host}:{self._port}"
        options = list(self._options.items())
        token = _Token(self._access.username, self._access.password, self._timeout) if self._access.username else None
        interceptors = [] if token is None else _token_interceptors(token)
        credentials = self._access.credentials()
        if credentials is None:
            channel = grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
        else:
            channel = grpc.aio.secure_channel(target, credentials, options=options, interceptors=interceptors)
        if token is not None:
            token.stub = rpc.AuthStub(channel)
        return channel


class _Token:
    """One etcd user's auth token: fetched on first use and again once ``forget`` is
    told etcd no longer takes it. Concurrent callers share one fetch."""

    def __init__(self, username: str, password: str, timeout: float | None) -> None:
        self._request = rpc.AuthenticateRequest(name=username, password=password)
        self._timeout = timeout
        self._value: str | None = None
        self._lock = asyncio.Lock()
        self.stub: Any = None

    async def get(self) -> str:
        if self._value is None:
            async with self._lock:
                if self._value is None:
                    self._value = await self._authenticate()
        return self._value

    def forget(self, stale: str) -> None:
        if self._value == stale:
            self._value = None

    async def _authenticate(self) -> str:
        try:
            reply = await self.stub.Authenticate(self._request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            # INVALID_ARGUMENT "authentication failed, invalid user ID or password": for
            # good. FAILED_PRECONDITION "authentication is not enabled": not yet (a
            # set-up job turning it on beside the services), retried as anything else
            # (etcd unreachable) is.
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise EtcdAuthFailed(f"etcd refused user {self._request.name!r}: {exc.details()}") from None
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise aetcd.exceptions.PreconditionFailedError(
                    f"etcd's auth is not on (yet) for user {self._request.name!r}: {exc.details()}"
                ) from None
            raise
        return str(reply.token)


def _token_rejected(exc: grpc.aio.AioRpcError) -> bool:
    """etcd's "invalid auth token" (expired, or etcd restarted and forgot it)."""
    return exc.code() == grpc.StatusCode.UNAUTHENTICATED and "invalid auth token" in (exc.details() or "")


def _with_token(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(details.metadata or ()), ("token", token))
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


def _is_authenticate(details: grpc.aio.ClientCallDetails) -> bool:
    method = details.method
    return (method.decode() if isinstance(method, bytes) else method) == _AUTHENTICATE


def _token_interceptors(token: _Token) -> list[grpc.aio.ClientInterceptor]:
    """The token on every kind of call, one interceptor object per kind: grpc.aio files an
    interceptor under the first kind it is (an if/elif on its type), so one object of every
    kind put the token on unary calls only. etcd refused every watch without it, and aetcd
    takes a refused watch (created and cancelled at once) for a live one that never sees
    an event: the mirrors of the user book and of the routes never saw a change."""
    return [_TokenInterceptor(token), _UnaryStreamTokenInterceptor(token), _StreamStreamTokenInterceptor(token)]


class _TokenInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """Puts the etcd auth token on a unary call; one etcd refuses for its token is made
    again once with a new one."""

    def __init__(self, token: _Token) -> None:
        self._token = token

    async def intercept_unary_unary(
        self, continuation: Callable[..., Awaitable[Any]], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        if _is_authenticate(client_call_details):
            return await continuation(client_call_details, request)
        token = await self._token.get()
        call = await continuation(_with_token(client_call_details, token), request)
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            if not _token_rejected(exc):
                raise
        self._token.forget(token)
        return await (await continuation(_with_token(client_call_details, await self._token.get()), request))


class _UnaryStreamTokenInterceptor(grpc.aio.UnaryStreamClientInterceptor):
    """Puts the etcd auth token on a server-streaming call."""

    def __init__(self, token: _Token) -> None:
        self._token = token

    async def intercept_unary_stream(
        self, continuation: Callable[..., Awaitable[Any]], client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(_with_token(client_call_details, await self._token.get()), request)


class _StreamStreamTokenInterceptor(grpc.aio.StreamStreamClientInterceptor):
    """Puts the etcd auth token on a bidirectional stream (a watch, lease keep-alives)."""

    def __init__(self, token: _Token) -> None:
        self._token = token

    async def intercept_stream_stream(
        self,
        continuation: Callable[..., Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await continuation(_with_token(client_call_details, await self._token.get()), request_iterator)
