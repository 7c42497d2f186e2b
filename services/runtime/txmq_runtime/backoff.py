"""The one backoff of txmq's services: how long a loop waits before it dials (or asks)
again after a failure. Built on tenacity's ``wait_exponential_jitter``:

    delay(n) = min(first_ms * 2 ** (n - 1) + uniform(0, jitter_ms), max_ms)    n = 1, 2, ...

Two shapes, one policy type (``BackoffPolicy``, declared once where it is used):

- ``Backoff``: a loop that re-dials by itself (a stream re-opened, a leader looked for
  again): ``await backoff.sleep()`` after a failure, ``backoff.reset()`` after a success.
  Sleeps go through the injected ``Clock``, so a manual clock drives it in tests.
- ``retrying(policy, ...)``: a tenacity ``AsyncRetrying`` for a whole call that is
  retried (etcd calls: ``txmq_runtime.etcd.retrying``).

The SDK (clients/python) does not depend on tenacity; it has its own small
``txmq._backoff`` with the same formula.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, before_sleep_log, stop_never
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base, wait_exponential_jitter

from txmq_runtime.clock import SYSTEM_CLOCK, Clock


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Exponential backoff from ``first_ms``, doubling per failure up to ``max_ms``, plus
    a random ``[0, jitter_ms]`` so that many loops failing together do not retry
    together."""

    first_ms: float
    max_ms: float
    jitter_ms: float = 0

    def __post_init__(self) -> None:
        if not 0 < self.first_ms <= self.max_ms or self.jitter_ms < 0:
            raise ValueError(f"invalid backoff {self}: need 0 < first_ms <= max_ms and jitter_ms >= 0")

    def wait(self) -> wait_base:
        """The tenacity wait strategy (seconds, as tenacity counts)."""
        return wait_exponential_jitter(
            multiplier=self.first_ms / 1000, max=self.max_ms / 1000, jitter=self.jitter_ms / 1000
        )

    def delay_ms(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1-based)."""
        return self.wait()(_Attempt(failures)) * 1000  # type: ignore[arg-type]


@dataclass(slots=True)
class _Attempt:
    """What tenacity's wait strategies read of a RetryCallState."""

    attempt_number: int


class Backoff:
    """The waits of one re-dialling loop (module docstring)."""

    def __init__(self, policy: BackoffPolicy, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.policy = policy
        self._wait = policy.wait()
        self._clock = clock
        #: Failures since the last ``reset``.
        self.failures = 0

    def next_delay_ms(self) -> float:
        """Count one more failure; the wait before the next attempt."""
        self.failures += 1
        return self._wait(_Attempt(self.failures)) * 1000  # type: ignore[arg-type]

    def reset(self) -> None:
        """An attempt succeeded: the next failure waits ``first_ms`` again."""
        self.failures = 0

    async def sleep(self, *, at_most_ms: float | None = None) -> None:
        """Count one more failure and wait before the next attempt (never longer than
        ``at_most_ms``: a caller's deadline)."""
        delay = self.next_delay_ms()
        if at_most_ms is not None:
            delay = max(0.0, min(delay, at_most_ms))
        await self._clock.sleep_ms(delay)


def retrying(
    policy: BackoffPolicy,
    *,
    retry: retry_base,
    stop: stop_base = stop_never,
    logger: logging.Logger | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> AsyncRetrying:
    """A tenacity ``AsyncRetrying`` that waits by ``policy`` on ``clock`` (each retry
    logged as a warning on ``logger``); the last failure is re-raised."""
    kwargs: dict[str, Any] = {}
    if logger is not None:
        kwargs["before_sleep"] = before_sleep_log(logger, logging.WARNING)

    async def sleep(seconds: float) -> None:
        await clock.sleep_ms(seconds * 1000)

    return AsyncRetrying(retry=retry, wait=policy.wait(), stop=stop, sleep=sleep, reraise=True, **kwargs)
