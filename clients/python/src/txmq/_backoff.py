"""The SDK's one backoff: the wait before retry ``n`` of a loop is ``first`` doubled per
failure in a row, at most ``maximum`` (seconds, as the SDK's public API counts):

    delay(n) = min(first * 2 ** (n - 1), maximum)        n = 1, 2, ...

A refusal that says how long to wait (``metadata.retry_after_ms``: a user over its
byte-rate quota, ``CODE_QUOTA_EXCEEDED``) is waited at least that long, passed as
``after``: a retry sooner would only be refused again.

The services use ``txmq_runtime.backoff`` (tenacity) with the same formula; the SDK
keeps its dependencies to grpcio and protobuf, and needs only this formula: its loops
wait on their own stop events and deadlines.
"""

from __future__ import annotations

from txmq.errors import TxmqError

#: ErrorDetail metadata: milliseconds before a retry can be admitted.
RETRY_AFTER_KEY = "retry_after_ms"


def retry_after(err: TxmqError | None) -> float:
    """The wait (seconds) ``err`` asks for; 0 when it names none."""
    text = err.metadata.get(RETRY_AFTER_KEY) if err is not None else None
    try:
        return max(0.0, int(text) / 1000) if text else 0.0
    except ValueError:
        return 0.0


def delay(failures: int, *, first: float, maximum: float, after: TxmqError | None = None) -> float:
    """The wait after the ``failures``-th failure in a row (1-based); at least what
    ``after`` (the failure) asks for, even beyond ``maximum`` (a caller with a deadline
    caps it there)."""
    if failures <= 1:
        wait = min(first, maximum)
    else:
        wait = min(first * 2.0 ** min(failures - 1, 64), maximum)
    return max(wait, retry_after(after)) if after is not None else wait


class Backoff:
    """The waits of one retrying loop: ``next_delay()`` after each failure, ``reset()``
    after a success."""

    def __init__(self, *, first: float, maximum: float) -> None:
        if not 0 < first <= maximum:
            raise ValueError(f"need 0 < first <= maximum, got first={first}, maximum={maximum}")
        self.first = first
        self.maximum = maximum
        #: Failures since the last ``reset``.
        self.failures = 0

    def next_delay(self, after: TxmqError | None = None) -> float:
        """Count one more failure (``after``, when known); the wait (seconds) before the
        next attempt."""
        self.failures += 1
        return delay(self.failures, first=self.first, maximum=self.maximum, after=after)

    def reset(self) -> None:
        self.failures = 0
