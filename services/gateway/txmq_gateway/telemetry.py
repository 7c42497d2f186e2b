"""Client sessions of the v2 protocol: Telemetry streams, heartbeats, terminations.

INTERFACE ONLY (being implemented): see the docstrings."""

from __future__ import annotations

from collections.abc import AsyncIterator

from txmq_gateway.backend import Backend
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.v2 import pb, svc


class ClientHub:
    """Every client this gateway knows, by client id."""

    def __init__(self, backend: Backend, settings: GatewaySettings) -> None:
        self.backend = backend
        self.settings = settings

    def heartbeat(self, client_id: str, client_type: int, group: str) -> None:
        """A Heartbeat: the client is alive."""
        raise NotImplementedError

    def terminate(self, client_id: str, group: str) -> None:
        """NotifyClientTermination: forget the client now."""
        raise NotImplementedError

    def session(
        self, client_id: str, commands: AsyncIterator[svc.TelemetryCommand]
    ) -> AsyncIterator[svc.TelemetryCommand]:
        """One Telemetry stream: answers to the client's settings, and commands pushed
        to it (RecoverOrphanedTransactionCommand for a producer)."""
        raise NotImplementedError

    async def close(self) -> None:
        """End every session (the gateway is stopping)."""


def server_settings(client: pb.Settings, settings: GatewaySettings) -> pb.Settings:
    """The settings the gateway answers a client's settings with."""
    raise NotImplementedError
