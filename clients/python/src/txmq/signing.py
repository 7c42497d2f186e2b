"""Request signing: one scheme for txmq's own protocol and RocketMQ 5's (apache.rocketmq.v2).

A call carries two metadata entries::

    x-mq-date-time: 20261126T114822Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>

the signature being HMAC-SHA1 of the date's text keyed by the secret key — what the official
RocketMQ 5 clients send, so one user works through the gateway and against the services.
The server accepts a date only within its clock-skew window (``auth_clock_skew_ms``), so a
captured header is useless once the window has passed. Hex case differs between clients
(Java: upper, Python: lower); it is compared case-insensitively.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
AUTHORIZATION_HEADER = "authorization"
#: RocketMQ's yyyyMMdd'T'HHmmss'Z', UTC.
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
#: A header longer than this is not parsed (a hostile client's megabyte header).
MAX_AUTHORIZATION_CHARS = 1024


@dataclass(frozen=True, slots=True)
class Credentials:
    """A user's access key and secret key (``txmq user create``)."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")


def sign(secret_key: bytes | str, date_time: str) -> str:
    """Lower-case hex HMAC-SHA1 of ``date_time`` keyed by ``secret_key``."""
    key = secret_key.encode() if isinstance(secret_key, str) else secret_key
    return hmac.new(key, date_time.encode(), hashlib.sha1).hexdigest()


def format_date(epoch_s: float) -> str:
    return time.strftime(DATE_FORMAT, time.gmtime(epoch_s))


def parse_date(text: str) -> int:
    """``20261126T114822Z`` -> seconds since the epoch; ValueError when malformed."""
    if len(text) != 16:
        raise ValueError(f"{DATE_HEADER} must look like 20261126T114822Z")
    return calendar.timegm(time.strptime(text, DATE_FORMAT))


def auth_metadata(credentials: Credentials, *, now_s: float | None = None) -> tuple[tuple[str, str], ...]:
    """The two metadata entries that sign a call made at ``now_s`` (default: now)."""
    date = format_date(time.time() if now_s is None else now_s)
    signature = sign(credentials.secret_key, date)
    header = f"{ALGORITHM} Credential={credentials.access_key}, SignedHeaders={DATE_HEADER}, Signature={signature}"
    return ((AUTHORIZATION_HEADER, header), (DATE_HEADER, date))


class MetadataSigner:
    """Signed metadata for each call, recomputed once a second (the date's resolution)."""

    def __init__(self, credentials: Credentials, *, clock: Callable[[], float] = time.time) -> None:
        self._credentials = credentials
        self._clock = clock
        self._second = -1
        self._metadata: tuple[tuple[str, str], ...] = ()

    def __call__(self) -> tuple[tuple[str, str], ...]:
        now = self._clock()
        second = int(now)
        if second != self._second:
            self._metadata = auth_metadata(self._credentials, now_s=now)
            self._second = second
        return self._metadata


def parse_authorization(header: str) -> dict[str, str]:
    """``ALGO K1=V1, K2=V2`` -> {"algorithm": ALGO, K1: V1, K2: V2} (malformed parts skipped)."""
    algorithm, _, rest = header.strip().partition(" ")
    fields = {"algorithm": algorithm}
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


class _ClientCallDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: list[tuple[str, str | bytes]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class SigningInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Signs every call of a (synchronous) channel as ``credentials``: the SDK's clients
    take ``credentials=`` and put this on each channel they open."""

    def __init__(self, credentials: Credentials) -> None:
        self._signer = MetadataSigner(credentials)

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _ClientCallDetails(details, [*(details.metadata or ()), *self._signer()])

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


class _AsyncSigning:
    """Adds the signed metadata to the calls of an asyncio channel. One object per call
    kind (the subclasses): ``grpc.aio`` files an interceptor under the first kind it is
    an instance of, so one object of all four kinds would sign unary calls only."""

    def __init__(self, signer: MetadataSigner) -> None:
        self._signer = signer

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        for key, value in self._signer():
            metadata.add(key, value)
        return details._replace(metadata=metadata)


class _AsyncSigningUnaryUnary(_AsyncSigning, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _AsyncSigningUnaryStream(_AsyncSigning, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(self._details(client_call_details), request)


class _AsyncSigningStreamUnary(_AsyncSigning, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


class _AsyncSigningStreamStream(_AsyncSigning, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return await continuation(self._details(client_call_details), request_iterator)


_ASYNC_KINDS = (_AsyncSigningUnaryUnary, _AsyncSigningUnaryStream, _AsyncSigningStreamUnary, _AsyncSigningStreamStream)


def async_interceptors(credentials: Credentials | None) -> list[grpc.aio.ClientInterceptor]:
    """Interceptors signing every call of a ``grpc.aio`` channel as ``credentials`` ([] for None)."""
    if credentials is None:
        return []
    signer = MetadataSigner(credentials)
    return [kind(signer) for kind in _ASYNC_KINDS]
