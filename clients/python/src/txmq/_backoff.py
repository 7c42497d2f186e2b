"""The SDK's one backoff: the wait before retry ``n`` of a loop is ``first`` doubled per
failure in a row, at most ``maximum`` (seconds, as the SDK's public API counts):

    delay(n) = min(first * 2 ** (n - 1), maximum)        n = 1, 2, ...

The services use ``txmq_runtime.backoff`` (tenacity) with the same formula; the SDK
keeps its dependencies to grpcio and protobuf, and needs only this formula: its loops
wait on their own stop events and deadlines.
"""

from __future__ import annotations


def delay(failures: int, *, first: float, maximum: float) -> float:
    """The wait after the ``failures``-th failure in a row (1-based)."""
    if failures <= 1:
        return min(first, maximum)
    return min(first * 2.0 ** min(failures - 1, 64), maximum)


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

    def next_delay(self) -> float:
        """Count one more failure; the wait (seconds) before the next attempt."""
        self.failures += 1
        return delay(self.failures, first=self.first, maximum=self.maximum)

    def reset(self) -> None:
        self.failures = 0
