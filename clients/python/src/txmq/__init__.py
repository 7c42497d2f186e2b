"""txmq: the Python SDK for the txmq transactional message broker."""

from txmq.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InternalError,
    NotFoundError,
    NotImplementedYetError,
    PayloadTooLargeError,
    TooManyRequestsError,
    TxmqError,
    UnavailableError,
    UpstreamTimeoutError,
)

__all__ = [
    "BadRequestError",
    "ConflictError",
    "ForbiddenError",
    "InternalError",
    "NotFoundError",
    "NotImplementedYetError",
    "PayloadTooLargeError",
    "TooManyRequestsError",
    "TxmqError",
    "UnavailableError",
    "UpstreamTimeoutError",
]
