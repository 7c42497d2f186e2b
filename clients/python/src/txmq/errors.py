"""Typed errors shared by the SDK and the services.

A failed call carries a gRPC status code and a ``txmq.v1.ErrorDetail`` (domain code,
message, retriable flag, metadata) in the trailing metadata key ``txmq-error-bin``.
``TxmqError.from_rpc_error`` turns a ``grpc.RpcError`` back into the typed error; the
services raise ``TxmqError`` subclasses from their cores and map them in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import grpc

from txmq.v1 import errors_pb2

Code = errors_pb2.Code
ERROR_DETAIL_KEY = "txmq-error-bin"

# Errors echo what the caller sent (a topic, a key, an expression). Sent whole, a 1 MB
# topic name makes the trailer exceed gRPC's metadata limit (8 KiB soft, 16 KiB hard) and
# the client gets "Stream removed" instead of the error. ``to_detail`` and
# ``status_details`` bound what goes on the wire; the error object keeps everything.
MAX_MESSAGE_BYTES = 1024
MAX_METADATA_KEY_BYTES = 64
MAX_METADATA_VALUE_BYTES = 256
#: A serialized ErrorDetail never exceeds this (base64 in the trailer: 4/3 of it).
MAX_DETAIL_BYTES = 3 * 1024
#: The gRPC status message (percent-encoded in the ``grpc-message`` trailer: up to 3x).
MAX_STATUS_DETAILS_BYTES = 512
#: Metadata key naming how many entries were left out to stay within MAX_DETAIL_BYTES.
METADATA_DROPPED_KEY = "metadata_dropped"


def clip(text: str, max_bytes: int) -> str:
    """``text`` when its UTF-8 form fits ``max_bytes``; else its first ``max_bytes``
    bytes (whole characters) and a visible marker with the full length: ``…(N bytes)``."""
    if len(text) * 4 <= max_bytes:  # cannot be longer (at most 4 bytes per character)
        return text
    raw = text.encode("utf-8", "replace")
    if len(raw) <= max_bytes:
        return text
    return f"{raw[:max_bytes].decode('utf-8', 'ignore')}…({len(raw)} bytes)"


class TxmqError(Exception):
    """Base of every txmq error. ``code`` is a ``txmq.v1.Code`` value."""

    grpc_status: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN
    default_code: ClassVar[int] = errors_pb2.CODE_UNSPECIFIED
    default_retriable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        retriable: bool | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = self.default_code if code is None else code
        self.retriable = self.default_retriable if retriable is None else retriable
        self.metadata = dict(metadata or {})
        #: The call failed in gRPC's transport, with no answer from a txmq service
        #: (set by ``from_rpc_error``; never sent on).
        self.transport = False

    @property
    def unreachable(self) -> bool:
        """No txmq service answered: the address refused or did not answer in time
        (UNAVAILABLE or DEADLINE_EXCEEDED from the transport, not from a service)."""
        return self.transport and self.code in (errors_pb2.CODE_UNAVAILABLE, errors_pb2.CODE_UPSTREAM_TIMEOUT)

    @property
    def code_name(self) -> str:
        try:
            return Code.Name(self.code)
        except ValueError:
            return str(self.code)

    def __str__(self) -> str:
        return f"[{self.code_name}] {self.message}"

    def to_detail(self) -> errors_pb2.ErrorDetail:
        """The wire form, bounded: the message clipped to MAX_MESSAGE_BYTES, metadata
        keys and values to MAX_METADATA_KEY_BYTES / MAX_METADATA_VALUE_BYTES (``clip``:
        with a ``…(N bytes)`` marker), and metadata entries past MAX_DETAIL_BYTES left out
        (their number in ``metadata_dropped``), so the trailer always fits."""
        detail = errors_pb2.ErrorDetail(
            code=self.code, message=clip(self.message, MAX_MESSAGE_BYTES), retriable=self.retriable
        )
        budget = MAX_DETAIL_BYTES - detail.ByteSize() - 32  # room for metadata_dropped
        dropped = 0
        for key, value in self.metadata.items():
            k, v = clip(str(key), MAX_METADATA_KEY_BYTES), clip(str(value), MAX_METADATA_VALUE_BYTES)
            cost = len(k.encode()) + len(v.encode()) + 8  # map entry framing, generously
            if cost > budget or k in detail.metadata:
                dropped += 1
                continue
            detail.metadata[k] = v
            budget -= cost
        if dropped:
            detail.metadata[METADATA_DROPPED_KEY] = str(dropped)
        return detail

    def status_details(self) -> str:
        """The gRPC status message for this error: ``str(self)``, clipped."""
        return clip(str(self), MAX_STATUS_DETAILS_BYTES)

    @staticmethod
    def for_code(code: int) -> type[TxmqError]:
        """The error class for a domain code (by its HTTP-like range)."""
        return _BY_RANGE.get(code // 100, InternalError if code >= 50000 else TxmqError)

    @staticmethod
    def from_detail(detail: errors_pb2.ErrorDetail) -> TxmqError:
        cls = TxmqError.for_code(detail.code)
        return cls(detail.message, code=detail.code, retriable=detail.retriable, metadata=dict(detail.metadata))

    @staticmethod
    def from_rpc_error(err: grpc.RpcError) -> TxmqError:
        """Decode a failed call. Calls that carry no ErrorDetail (transport failures,
        deadlines) map by gRPC status alone."""
        trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
        for key, value in trailing or ():
            if key == ERROR_DETAIL_KEY:
                detail = errors_pb2.ErrorDetail()
                detail.ParseFromString(value)
                return TxmqError.from_detail(detail)
        status = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        text = err.details() if hasattr(err, "details") else str(err)
        cls, code = _BY_GRPC_STATUS.get(status, (InternalError, errors_pb2.CODE_INTERNAL_ERROR))
        # Without an ErrorDetail no txmq service decided this: a broken stream
        # (INTERNAL: RST_STREAM, UNKNOWN, ABORTED, CANCELLED by the peer) may well pass.
        made = cls(f"{status.name}: {text}", code=code, retriable=True if status in _TRANSIENT_STATUSES else None)
        made.transport = True
        return made


class BadRequestError(TxmqError):
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT
    default_code = errors_pb2.CODE_BAD_REQUEST


class UnauthenticatedError(TxmqError):
    """No credentials, unknown ones, a signature that does not match or is too old."""

    grpc_status = grpc.StatusCode.UNAUTHENTICATED
    default_code = errors_pb2.CODE_UNAUTHENTICATED


class ForbiddenError(TxmqError):
    grpc_status = grpc.StatusCode.PERMISSION_DENIED
    default_code = errors_pb2.CODE_FORBIDDEN


class NotFoundError(TxmqError):
    grpc_status = grpc.StatusCode.NOT_FOUND
    default_code = errors_pb2.CODE_NOT_FOUND


class ConflictError(TxmqError):
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION
    default_code = errors_pb2.CODE_CONFLICT


class PayloadTooLargeError(TxmqError):
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT
    default_code = errors_pb2.CODE_PAYLOAD_TOO_LARGE


class TooManyRequestsError(TxmqError):
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED
    default_code = errors_pb2.CODE_TOO_MANY_REQUESTS
    default_retriable = True


class InternalError(TxmqError):
    grpc_status = grpc.StatusCode.INTERNAL
    default_code = errors_pb2.CODE_INTERNAL_ERROR


class NotImplementedYetError(TxmqError):
    grpc_status = grpc.StatusCode.UNIMPLEMENTED
    default_code = errors_pb2.CODE_NOT_IMPLEMENTED


class UnavailableError(TxmqError):
    grpc_status = grpc.StatusCode.UNAVAILABLE
    default_code = errors_pb2.CODE_UNAVAILABLE
    default_retriable = True


class UpstreamTimeoutError(TxmqError):
    grpc_status = grpc.StatusCode.DEADLINE_EXCEEDED
    default_code = errors_pb2.CODE_UPSTREAM_TIMEOUT
    default_retriable = True


_BY_RANGE: dict[int, type[TxmqError]] = {
    400: BadRequestError,
    401: UnauthenticatedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    429: TooManyRequestsError,
    500: InternalError,
    501: NotImplementedYetError,
    503: UnavailableError,
    504: UpstreamTimeoutError,
}

_BY_GRPC_STATUS: dict[grpc.StatusCode, tuple[type[TxmqError], int]] = {
    grpc.StatusCode.UNAVAILABLE: (UnavailableError, errors_pb2.CODE_UNAVAILABLE),
    grpc.StatusCode.DEADLINE_EXCEEDED: (UpstreamTimeoutError, errors_pb2.CODE_UPSTREAM_TIMEOUT),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (TooManyRequestsError, errors_pb2.CODE_TOO_MANY_REQUESTS),
    grpc.StatusCode.UNIMPLEMENTED: (NotImplementedYetError, errors_pb2.CODE_NOT_IMPLEMENTED),
    grpc.StatusCode.INVALID_ARGUMENT: (BadRequestError, errors_pb2.CODE_BAD_REQUEST),
    grpc.StatusCode.NOT_FOUND: (NotFoundError, errors_pb2.CODE_NOT_FOUND),
    grpc.StatusCode.PERMISSION_DENIED: (ForbiddenError, errors_pb2.CODE_FORBIDDEN),
    grpc.StatusCode.UNAUTHENTICATED: (UnauthenticatedError, errors_pb2.CODE_UNAUTHENTICATED),
    grpc.StatusCode.FAILED_PRECONDITION: (ConflictError, errors_pb2.CODE_CONFLICT),
    grpc.StatusCode.ALREADY_EXISTS: (ConflictError, errors_pb2.CODE_CONFLICT),
}


_TRANSIENT_STATUSES = frozenset(
    {
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)


def error(code: int, message: str, **metadata: str) -> TxmqError:
    """Build the right TxmqError subclass for a domain code: ``raise error(Code.CODE_TOPIC_NOT_FOUND, ...)``."""
    return TxmqError.for_code(code)(message, code=code, metadata=metadata or None)
