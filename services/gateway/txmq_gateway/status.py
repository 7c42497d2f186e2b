"""Statuses of the v2 protocol: every answer carries ``Status{code, message}`` (the gRPC
call itself succeeds). txmq's domain codes map onto the nearest v2 code."""

from __future__ import annotations

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2 as E
from txmq_gateway.v2 import Code, pb

_BY_TXMQ_CODE: dict[int, int] = {
    E.CODE_OK: Code.OK,
    E.CODE_BAD_REQUEST: Code.BAD_REQUEST,
    E.CODE_ILLEGAL_TOPIC: Code.ILLEGAL_TOPIC,
    E.CODE_ILLEGAL_QUEUE_ID: Code.BAD_REQUEST,
    E.CODE_ILLEGAL_OFFSET: Code.ILLEGAL_OFFSET,
    E.CODE_ILLEGAL_MESSAGE: Code.BAD_REQUEST,
    E.CODE_ILLEGAL_CONSUMER_GROUP: Code.ILLEGAL_CONSUMER_GROUP,
    E.CODE_ILLEGAL_PRODUCER_GROUP: Code.BAD_REQUEST,
    E.CODE_ILLEGAL_FILTER_EXPRESSION: Code.ILLEGAL_FILTER_EXPRESSION,
    E.CODE_ILLEGAL_MESSAGE_ID: Code.ILLEGAL_MESSAGE_ID,
    E.CODE_ILLEGAL_TRANSACTION_ID: Code.INVALID_TRANSACTION_ID,
    E.CODE_ILLEGAL_ARGUMENT: Code.BAD_REQUEST,
    E.CODE_ILLEGAL_DELIVERY_TIME: Code.ILLEGAL_DELIVERY_TIME,
    E.CODE_ILLEGAL_PRIORITY: Code.BAD_REQUEST,  # v2 has no code of its own for it
    E.CODE_MESSAGE_TYPE_CONFLICT: Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    E.CODE_FORBIDDEN: Code.FORBIDDEN,
    E.CODE_TOPIC_NOT_WRITABLE: Code.FORBIDDEN,
    E.CODE_TOPIC_NOT_READABLE: Code.FORBIDDEN,
    E.CODE_SYSTEM_TOPIC: Code.FORBIDDEN,
    E.CODE_CONSUME_DISABLED: Code.FORBIDDEN,
    E.CODE_SERVICE_NOT_READABLE: Code.FORBIDDEN,
    E.CODE_SERVICE_NOT_WRITABLE: Code.FORBIDDEN,
    E.CODE_TRANSACTION_NOT_ALLOWED: Code.FORBIDDEN,
    E.CODE_SQL92_NOT_ENABLED: Code.ILLEGAL_FILTER_EXPRESSION,
    E.CODE_NOT_FOUND: Code.NOT_FOUND,
    E.CODE_TOPIC_NOT_FOUND: Code.TOPIC_NOT_FOUND,
    E.CODE_SUBSCRIPTION_GROUP_NOT_FOUND: Code.CONSUMER_GROUP_NOT_FOUND,
    E.CODE_MESSAGE_NOT_FOUND: Code.MESSAGE_NOT_FOUND,
    E.CODE_TRANSACTION_NOT_FOUND: Code.INVALID_TRANSACTION_ID,
    E.CODE_STORE_NOT_FOUND: Code.NOT_FOUND,
    E.CODE_CONSUME_OFFSET_NOT_FOUND: Code.OFFSET_NOT_FOUND,
    E.CODE_CONFLICT: Code.PRECONDITION_FAILED,
    E.CODE_TOPIC_ALREADY_EXISTS: Code.PRECONDITION_FAILED,
    E.CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS: Code.PRECONDITION_FAILED,
    E.CODE_TRANSACTION_ALREADY_RESOLVED: Code.PRECONDITION_FAILED,
    E.CODE_MESSAGE_ALREADY_DELIVERED: Code.PRECONDITION_FAILED,
    E.CODE_TRANSACTION_MISMATCH: Code.INVALID_TRANSACTION_ID,
    E.CODE_TRANSACTION_EXPIRED: Code.INVALID_TRANSACTION_ID,
    E.CODE_PAYLOAD_TOO_LARGE: Code.PAYLOAD_TOO_LARGE,
    E.CODE_MESSAGE_BODY_TOO_LARGE: Code.MESSAGE_BODY_TOO_LARGE,
    E.CODE_MESSAGE_PROPERTIES_TOO_LARGE: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    E.CODE_BATCH_TOO_LARGE: Code.PAYLOAD_TOO_LARGE,
    E.CODE_TOO_MANY_REQUESTS: Code.TOO_MANY_REQUESTS,
    E.CODE_INTERNAL_ERROR: Code.INTERNAL_ERROR,
    E.CODE_STORAGE_ERROR: Code.INTERNAL_SERVER_ERROR,
    E.CODE_NOT_IMPLEMENTED: Code.NOT_IMPLEMENTED,
    E.CODE_UNAVAILABLE: Code.INTERNAL_SERVER_ERROR,
    E.CODE_SERVICE_NOT_READY: Code.INTERNAL_SERVER_ERROR,
    E.CODE_NO_LIVE_PRODUCER: Code.INTERNAL_SERVER_ERROR,
    E.CODE_UPSTREAM_TIMEOUT: Code.PROXY_TIMEOUT,
}


class GatewayError(Exception):
    """A refusal in v2 terms (a v2 ``Code`` and a message), raised by the gateway's cores."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"[{Code.Name(self.code)}] {self.message}"


#: Longest piece of client input quoted in a status message.
MAX_QUOTED_CHARS = 64


def shorten(text: str | bytes, limit: int = MAX_QUOTED_CHARS) -> str:
    """``text`` quoted for a status or log message (repr, so control characters show
    escaped), cut to its first ``limit`` characters with its length when longer."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} {'bytes' if isinstance(text, bytes) else 'characters'})"


def ok(message: str = "OK") -> pb.Status:
    return pb.Status(code=Code.OK, message=message)


def status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)


def v2_code(txmq_code: int) -> int:
    """The v2 code for a txmq domain code (INTERNAL_ERROR when unmapped)."""
    return _BY_TXMQ_CODE.get(txmq_code, Code.INTERNAL_ERROR)


def from_exception(exc: BaseException) -> pb.Status:
    """The status answering a failure: GatewayError as is, TxmqError mapped (its domain
    code name kept in the message), anything else INTERNAL_ERROR."""
    if isinstance(exc, GatewayError):
        return status(exc.code, exc.message)
    if isinstance(exc, TxmqError):
        return status(v2_code(exc.code), f"{exc.code_name}: {exc.message}")
    return status(Code.INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")


def overall(entries: list[pb.Status], what: str) -> pb.Status:
    """The status of a batch answer: the entry's own for one entry, else OK when every
    entry is OK and MULTIPLE_RESULTS otherwise (RocketMQ's proxy does the same)."""
    if len(entries) == 1:
        return entries[0]
    if all(e.code == Code.OK for e in entries):
        return ok()
    return status(Code.MULTIPLE_RESULTS, f"some {what} failed; see the entries")
