"""Keepalive on txmq's gRPC links, client and server side, in one place.

A long-lived link may carry no call for hours: the pull service's arrival stream from a
store (what wakes long polls), the gateway's and txcheck's channels, a producer channel.
Its client pings every ``keepalive_time_ms``, calls or not, so a peer that vanished
without a FIN (a dead node, a dropped NAT entry) is found within ``keepalive_time_ms +
keepalive_timeout_ms``. gRPC servers police pings: by default one that gets pings more
often than every 5 minutes while it sends no data, or any ping while no call is open,
answers GOAWAY ``too_many_pings`` after two strikes, cutting every stream on the link.
So every txmq server permits pings every ``keepalive_permit_time_ms``, calls or not, and
the settings require ``keepalive_permit_time_ms * 2 <= keepalive_time_ms``: a client
pinging at the service's own pace never earns a strike, even with timer jitter.

Clients outside the runtime: the SDK pings every 30 s (``txmq._client``), at least twice
the servers' default permit; the official RocketMQ 5 clients (Python, Node.js) send no
keepalive pings at all, and their BDP pings follow data the server sent, which resets its
strikes. The servers also ping their clients (same interval), so a producer channel or a
RocketMQ client's Telemetry stream whose client is gone is closed instead of lingering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: Defaults of the settings (ServiceSettings) and of processes that set nothing.
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
KEEPALIVE_PERMIT_TIME_MS = 10_000
#: Pings to etcd at most this often (twice etcd's default --grpc-keepalive-min-time).
ETCD_MIN_PING_MS = 10_000

GrpcOptions = tuple[tuple[str, int], ...]


class KeepaliveSettings(Protocol):
    keepalive_time_ms: int
    keepalive_timeout_ms: int
    keepalive_permit_time_ms: int


@dataclass(frozen=True, slots=True)
class Keepalive:
    time_ms: int = KEEPALIVE_TIME_MS
    timeout_ms: int = KEEPALIVE_TIMEOUT_MS
    permit_time_ms: int = KEEPALIVE_PERMIT_TIME_MS

    @classmethod
    def of(cls, settings: KeepaliveSettings) -> Keepalive:
        return cls(settings.keepalive_time_ms, settings.keepalive_timeout_ms, settings.keepalive_permit_time_ms)

    def _pinging(self) -> GrpcOptions:
        return (
            ("grpc.keepalive_time_ms", self.time_ms),
            ("grpc.keepalive_timeout_ms", self.timeout_ms),
            # Ping idle links too (a channel between calls, a stream with nothing to say).
            ("grpc.keepalive_permit_without_calls", 1),
            # Default 2: the pinger falls silent after two pings without data, which is
            # exactly when an idle link needs them.
            ("grpc.http2.max_pings_without_data", 0),
        )

    def client_options(self) -> GrpcOptions:
        """Options of a channel to another txmq service."""
        return self._pinging()

    def etcd_options(self) -> GrpcOptions:
        """Options of a channel to etcd: pings while streams (watches, lease keep-alives)
        are open, never more often than ``ETCD_MIN_PING_MS`` (etcd answers pings closer
        together than its --grpc-keepalive-min-time, 5 s by default, with GOAWAY), so a
        dead etcd connection is noticed in time_ms + timeout_ms, not the kernel's TCP
        timeout."""
        return (
            ("grpc.keepalive_time_ms", max(self.time_ms, ETCD_MIN_PING_MS)),
            ("grpc.keepalive_timeout_ms", self.timeout_ms),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
        )

    def server_options(self) -> GrpcOptions:
        """Options of a txmq service's server: the ping policy, and its own pings."""
        return (
            *self._pinging(),
            # The policy (grpc core's name for it): pings this close together, with or
            # without calls, are no strike.
            ("grpc.http2.min_ping_interval_without_data_ms", self.permit_time_ms),
        )


_current = Keepalive()


def configure(keepalive: Keepalive) -> None:
    """Set this process's keepalive (``run_service`` does, from the service's settings)."""
    global _current
    _current = keepalive


def current() -> Keepalive:
    return _current
