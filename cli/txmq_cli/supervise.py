"""Keeping a local cluster's processes running, as a pod's kubelet keeps its containers.

``txmq up`` starts every process and waits until each is ready (``LocalCluster.start``);
from then on a ``Supervisor`` watches them. Its rule:

- A child that dies after it was ready is reported (``Died``: name, pid, exit code or
  signal, log) and started again, with the same flags, ports and data, after a back-off
  (``txmq_runtime.backoff``: 1 s doubling to 30 s); ``Restarted`` is reported when the
  new run logs its ready line. The back-off starts again at 1 s once a child has stayed
  ready for ``stable_after_ms``.
- A restarted child that dies before it is ready, or is not ready within
  ``ready_timeout_ms`` (then it is killed), counts as a failed start. ``crash_loop_limit``
  failed starts in a row (a crash loop) end the supervision: ``CannotStart``, and
  ``txmq up`` stops everything with exit code 1. Becoming ready clears the count.

The core only decides: ``tick()`` looks at every child once and returns what happened,
without waiting, and measures time on an injected ``Clock``, so its tests drive fake
children with a manual clock and never sleep. The caller calls it in a loop.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from txmq_runtime.backoff import Backoff, BackoffPolicy
from txmq_runtime.clock import SYSTEM_CLOCK, Clock


class Child(Protocol):
    """A process the supervisor keeps running (``txmq_cli.cluster.ClusterMember``)."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def log_path(self) -> Path: ...

    @property
    def returncode(self) -> int | None:
        """None while it runs; its exit code once it ended (negative: the signal that ended it)."""
        ...

    def ready(self) -> bool:
        """Whether this run has logged its ready line (does not wait)."""
        ...

    def respawn(self) -> None:
        """Start it again with the same flags, ports and data."""
        ...

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        ...

    def last_log_line(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How dead children are restarted (module docstring)."""

    backoff: BackoffPolicy = field(default_factory=lambda: BackoffPolicy(first_ms=1_000, max_ms=30_000))
    #: Ready this long: the next death waits ``backoff.first_ms`` again.
    stable_after_ms: int = 60_000
    #: This many failed starts in a row (dead or not ready in time before the ready line): give up.
    crash_loop_limit: int = 5
    #: A restarted child not ready after this long is killed (a failed start).
    ready_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.crash_loop_limit < 1 or self.stable_after_ms < 0 or self.ready_timeout_ms <= 0:
            raise ValueError(f"invalid restart policy {self}")


def describe_exit(returncode: int | None) -> str:
    """``exited with code 1``, ``was killed by SIGKILL``."""
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _failed_starts(n: int) -> str:
    return f"{n} failed start{'' if n == 1 else 's'}"


def _seconds(ms: float) -> str:
    return f"{ms / 1000:g} s"


@dataclass(frozen=True, slots=True)
class Died:
    """A child ended (or was killed for not getting ready) and will be started again."""

    name: str
    pid: int | None
    #: ``exited with code 1``, ``was killed by SIGKILL``; ``... before it was ready`` or
    #: ``was not ready within 60 s (killed)`` for a failed start.
    reason: str
    log_path: Path
    restart_in_ms: float
    #: Failed starts in a row, this one included; 0: it died after it was ready.
    failed_starts: int

    def __str__(self) -> str:
        count = "" if self.failed_starts == 0 else f" ({_failed_starts(self.failed_starts)} in a row)"
        return (
            f"{self.name} (pid {self.pid}) {self.reason}{count}; "
            f"restarting it in {_seconds(self.restart_in_ms)}; log {self.log_path}"
        )


@dataclass(frozen=True, slots=True)
class Restarted:
    """A restarted child logged its ready line."""

    name: str
    pid: int | None
    #: Restarts of this child since the supervision began.
    restarts: int

    def __str__(self) -> str:
        return f"{self.name} restarted (pid {self.pid}) and is ready again"


Event = Died | Restarted


class CannotStart(RuntimeError):
    """A child keeps failing to start (a crash loop): the cluster cannot run."""

    def __init__(self, name: str, *, reason: str, failed_starts: int, log_path: Path, last_line: str) -> None:
        self.name = name
        self.log_path = log_path
        last = f"; its last line: {last_line.strip()}" if last_line.strip() else ""
        super().__init__(
            f"{name} cannot start ({failed_starts} failed starts in a row; the last {reason}); log {log_path}{last}"
        )


class _State(enum.Enum):
    READY = "ready"  # running, its ready line logged
    WAITING = "waiting"  # dead, to be started again at restart_at_ms
    STARTING = "starting"  # started again, its ready line not logged yet


@dataclass(slots=True)
class _Watch:
    child: Child
    backoff: Backoff
    state: _State
    since_ms: int  # when the state began
    restart_at_ms: int = 0
    failed_starts: int = 0
    restarts: int = 0


class Supervisor:
    """Watches children that are running and ready (module docstring)."""

    def __init__(self, children: Iterable[Child], *, policy: RestartPolicy | None = None, clock: Clock = SYSTEM_CLOCK):
        self.policy = policy or RestartPolicy()
        self._clock = clock
        now = clock.now_ms()
        self._watches = [
            _Watch(child, Backoff(self.policy.backoff, clock=clock), _State.READY, now) for child in children
        ]

    def tick(self) -> list[Event]:
        """Look at every child once: report deaths, start those whose back-off is over,
        report those ready again. Raises CannotStart on a crash loop."""
        events: list[Event] = []
        for watch in self._watches:
            event = self._look(watch, self._clock.now_ms())
            if event is not None:
                events.append(event)
        return events

    def _look(self, w: _Watch, now: int) -> Event | None:
        child = w.child
        if w.state is _State.READY:
            if now - w.since_ms >= self.policy.stable_after_ms:
                w.backoff.reset()
            code = child.returncode
            if code is None:
                return None
            return self._wait(w, now, describe_exit(code), failed_start=False)
        if w.state is _State.WAITING:
            if now >= w.restart_at_ms:
                child.respawn()
                w.state, w.since_ms = _State.STARTING, now
            return None
        # STARTING
        code = child.returncode  # before the log: a ready line logged before the exit is seen
        if child.ready():
            w.state, w.since_ms, w.failed_starts = _State.READY, now, 0
            w.restarts += 1
            return Restarted(child.name, child.pid, w.restarts)
        if code is not None:
            return self._wait(w, now, f"{describe_exit(code)} before it was ready", failed_start=True)
        if now - w.since_ms >= self.policy.ready_timeout_ms:
            pid = child.pid
            child.kill()
            reason = f"was not ready within {_seconds(self.policy.ready_timeout_ms)} (killed)"
            return self._wait(w, now, reason, failed_start=True, pid=pid)
        return None

    def _wait(self, w: _Watch, now: int, reason: str, *, failed_start: bool, pid: int | None = None) -> Died:
        """``w``'s child ended: schedule its restart, or give up on a crash loop."""
        child = w.child
        if failed_start:
            w.failed_starts += 1
            if w.failed_starts >= self.policy.crash_loop_limit:
                raise CannotStart(
                    child.name,
                    reason=reason,
                    failed_starts=w.failed_starts,
                    log_path=child.log_path,
                    last_line=child.last_log_line(),
                )
        delay = w.backoff.next_delay_ms()
        w.state, w.since_ms, w.restart_at_ms = _State.WAITING, now, now + int(delay)
        return Died(
            child.name,
            child.pid if pid is None else pid,
            reason,
            child.log_path,
            delay,
            w.failed_starts if failed_start else 0,
        )
