"""The SimpleConsumer model (ReceiveMessage / AckMessage / ChangeInvisibleDuration) over
txmq's queues and consume offsets.

INTERFACE ONLY (being implemented): see the docstrings."""

from __future__ import annotations

from dataclasses import dataclass

from txmq.v1 import common_pb2

from txmq_gateway.backend import Backend
from txmq_gateway.settings import GatewaySettings


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer, invisible to the group until ``invisible_ms``
    from now unless acked."""

    view: common_pb2.MessageView
    receipt_handle: str
    delivery_attempt: int
    invisible_ms: int


class SimpleConsumerCore:
    def __init__(self, backend: Backend, settings: GatewaySettings) -> None:
        self.backend = backend
        self.settings = settings

    async def receive(
        self,
        *,
        group: str,
        topic: str,
        filter: common_pb2.FilterExpression,
        batch_size: int,
        invisible_ms: int | None,
        long_polling_timeout_ms: int | None,
        client_id: str,
    ) -> list[Delivery]:
        """Up to ``batch_size`` visible messages of ``topic`` for ``group`` (waiting up to
        the long-polling timeout when there is none); empty list: none arrived."""
        raise NotImplementedError

    async def ack(self, *, group: str, topic: str, receipt_handle: str, message_id: str) -> None:
        """Consumed: never deliver it to the group again."""
        raise NotImplementedError

    async def change_invisible_duration(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str, invisible_ms: int
    ) -> str:
        """Invisible for ``invisible_ms`` from now; returns the new receipt handle."""
        raise NotImplementedError

    async def forward_to_dead_letter_queue(self, *, group: str, topic: str, receipt_handle: str, message_id: str) -> None:
        """Move the message to %DLQ%<group> and ack it."""
        raise NotImplementedError

    async def close(self) -> None:
        """Stop: wake held receives, stop timers."""
