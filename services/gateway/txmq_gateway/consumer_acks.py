"""What a SimpleConsumer does with a receipt handle (the model: consumer.py): ack the
message, change its invisible duration, or forward it to the group's dead-letter
queue."""

from __future__ import annotations

import logging

from txmq.protocol import DLQ_GROUP_TOPIC_PREFIX
from txmq_gateway.consumer_dead_letters import DeadLetterQueues
from txmq_gateway.consumer_inflight import InFlightTracker
from txmq_gateway.consumer_receipts import Receipts
from txmq_gateway.consumer_state import InFlight, Subscription
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code
from txmq_runtime.clock import Clock

log = logging.getLogger("txmq.gateway.consumer")


class Acks:
    """AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue on the
    in-flight message a current receipt handle names."""

    def __init__(
        self,
        settings: GatewaySettings,
        clock: Clock,
        receipts: Receipts,
        tracker: InFlightTracker,
        dead_letters: DeadLetterQueues,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._receipts = receipts
        self._tracker = tracker
        self._dead_letters = dead_letters

    def _lookup(self, group: str, topic: str, receipt_handle: str, message_id: str) -> tuple[Subscription, InFlight]:
        """The in-flight message a current handle names; INVALID_RECEIPT_HANDLE when the
        handle is malformed, from another gateway epoch, superseded, or expired."""
        sub, entry = self._receipts.find(group, topic, receipt_handle, message_id)
        now = self._clock.now_ms()
        self._tracker.renew(sub, entry, now)
        if entry.deadline_ms <= now:
            raise GatewayError(Code.INVALID_RECEIPT_HANDLE, "the receipt handle is expired")
        return sub, entry

    async def ack(self, *, group: str, topic: str, receipt_handle: str, message_id: str) -> None:
        """Consumed: never deliver it to the group again."""
        if self._receipts.acked_lately(receipt_handle):
            return  # a retried ack
        sub, entry = self._lookup(group, topic, receipt_handle, message_id)
        self._tracker.settle(sub, entry)
        self._receipts.remember_ack(receipt_handle)

    async def change_invisible_duration(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str, invisible_ms: int
    ) -> str:
        """Invisible for ``invisible_ms`` from now; returns the new receipt handle (the
        old one stops working). Stops auto-renewal of the message."""
        high = self._settings.max_invisible_duration_ms
        if not 0 <= invisible_ms <= high:
            raise GatewayError(
                Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms is outside [0, {high}] ms"
            )
        sub, entry = self._lookup(group, topic, receipt_handle, message_id)
        self._tracker.stop_renewing(entry)
        entry.invisible_ms = invisible_ms
        self._tracker.schedule(sub, entry, self._clock.now_ms() + invisible_ms)
        self._tracker.compact(sub)
        sub.visible.fire()
        return self._receipts.issue(sub, entry)

    async def forward_to_dead_letter_queue(
        self, *, group: str, topic: str, receipt_handle: str, message_id: str
    ) -> None:
        """Move the message to %DLQ%<group> and ack it."""
        sub, entry = self._lookup(group, topic, receipt_handle, message_id)
        entry.forwarding = True
        try:
            await self._dead_letters.send(sub, entry)
        except BaseException:
            entry.forwarding = False
            if self._tracker.current(entry):  # its deadline may have been dropped meanwhile
                self._tracker.schedule(sub, entry, entry.deadline_ms)
            raise
        entry.forwarding = False
        self._tracker.settle(sub, entry)
        self._receipts.remember_ack(receipt_handle)
        log.info(
            "group %s: message %s of %s forwarded to %s%s on request",
            group, entry.view.message.unique_id, topic, DLQ_GROUP_TOPIC_PREFIX, group,
        )  # fmt: skip
