"""What the SDK's background loops (the push consumer's pulls, heartbeats, rebalances
and commits) do with a failed call: retry, or stop.

- ``retriable(err)``: a retry may help. That is ``TxmqError.retriable`` (UNAVAILABLE,
  TOO_MANY_REQUESTS, UPSTREAM_TIMEOUT, a broken stream), plus two "not found" codes that
  a running cluster produces while a store restarts: ``CODE_STORE_NOT_FOUND`` (the pull
  service knows no live store of that id) and ``CODE_TOPIC_NOT_FOUND`` (no *live* store
  serves the topic). Everything else (a bad SQL92 expression, a group that may not
  consume or does not exist, a topic that is not readable, a damaged record) fails
  the same way every time: the loop stops and reports it.
- ``FailureLog``: a retrying loop logs the first failure of a run, then at most one line
  per ``repeat_interval`` (with the count), and one line when it recovers; never a line
  per attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2

# Non-retriable by their range, but produced by a store restart while the cluster runs.
TRANSIENT_CODES = frozenset({errors_pb2.CODE_STORE_NOT_FOUND, errors_pb2.CODE_TOPIC_NOT_FOUND})

DEFAULT_REPEAT_INTERVAL_S = 60.0


def retriable(err: TxmqError) -> bool:
    """Whether a background loop should try ``err``'s call again (with backoff)."""
    return err.retriable or err.code in TRANSIENT_CODES


@dataclass(slots=True)
class _Run:
    first_at: float
    logged_at: float
    failures: int = 1


class FailureLog:
    """Bounded logging for retrying loops, per key (e.g. one queue's pulls)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        repeat_interval: float = DEFAULT_REPEAT_INTERVAL_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._repeat_interval = repeat_interval
        self._now = now
        self._runs: dict[Hashable, _Run] = {}

    def failed(self, key: Hashable, what: str, err: TxmqError | str) -> None:
        """One failure of ``key``'s call (``what`` names it: "pull of T@s#0")."""
        now = self._now()
        run = self._runs.get(key)
        if run is None:
            self._runs[key] = _Run(first_at=now, logged_at=now)
            self._log.warning("%s failed, retrying with backoff: %s", what, err)
            return
        run.failures += 1
        if now - run.logged_at >= self._repeat_interval:
            run.logged_at = now
            self._log.warning(
                "%s still failing (%d failures in %.0fs), retrying: %s", what, run.failures, now - run.first_at, err
            )

    def recovered(self, key: Hashable, what: str) -> None:
        """``key``'s call succeeded: one line if it had failed."""
        run = self._runs.pop(key, None)
        if run is not None:
            self._log.info(
                "%s works again after %d failure(s) in %.0fs", what, run.failures, self._now() - run.first_at
            )

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s run without a line (the queue was released)."""
        self._runs.pop(key, None)

    def failing(self, key: Hashable) -> int:
        """Failures in a row of ``key`` (0: none)."""
        run = self._runs.get(key)
        return run.failures if run is not None else 0
