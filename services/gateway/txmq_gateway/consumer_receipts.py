"""Receipt handles of the SimpleConsumer (the model: consumer.py): opaque tokens naming
the gateway epoch that issued them, the message's queue and offset, and the version of
its delivery. Every redelivery and change issues a new version, so older handles stop
working; a handle of another epoch (before a restart, or before the group moved to this
gateway) is refused. Handles are signed with the cluster's handle key (as transaction
ids are: convert.HandleSigner), so a client can neither forge one for a message it was
not given nor alter one it was given."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

from txmq_gateway.consumer_state import ConsumerTuning, InFlight, Subscription, Subscriptions
from txmq_gateway.convert import HandleSigner
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code

# What the MAC covers before the encoded fields: a transaction id's MAC under the same
# key never passes for a receipt handle, nor one of these for a transaction id.
_RECEIPT_MAC_CONTEXT = b"txmq-gateway receipt-handle v1\x00"


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """What a receipt handle names: the gateway epoch that issued it, the message's
    queue and offset, and the version of its delivery (bumped by every redelivery and
    change, so older handles stop working); ``owner``: the instance id of the gateway
    that owned the group (for the error a handle from another gateway gets)."""

    epoch: str
    store_id: str
    topic: str
    queue_id: int
    offset: int
    version: int
    owner: str = ""

    def encode(self, signer: HandleSigner) -> str:
        fields: dict[str, object] = {
            "e": self.epoch,
            "s": self.store_id,
            "t": self.topic,
            "q": self.queue_id,
            "o": self.offset,
            "v": self.version,
        }
        if self.owner:
            fields["g"] = self.owner
        return signer.sign(fields, context=_RECEIPT_MAC_CONTEXT)

    @classmethod
    def decode(cls, token: str, signer: HandleSigner) -> ReceiptHandle:
        """ValueError saying why when ``token`` is not a receipt handle this cluster's
        gateways issued."""
        fields = signer.open(token, context=_RECEIPT_MAC_CONTEXT)
        try:
            values = (fields["e"], fields["s"], fields["t"], fields["q"], fields["o"], fields["v"])
        except KeyError:
            raise ValueError("not a receipt handle") from None
        epoch, store_id, topic, queue_id, offset, version = values
        owner = fields.get("g", "")
        if not all(isinstance(v, str) for v in (epoch, store_id, topic, owner)) or not all(
            type(v) is int for v in (queue_id, offset, version)
        ):
            raise ValueError("not a receipt handle")
        return cls(epoch, store_id, topic, queue_id, offset, version, owner)  # type: ignore[arg-type]


class Receipts:
    """Issues the handles of this gateway epoch, finds the in-flight message a handle
    names, and remembers the handles acked lately (a retried ack answers OK)."""

    def __init__(
        self,
        subscriptions: Subscriptions,
        tuning: ConsumerTuning,
        *,
        epoch: str,
        instance_id: str,
        signer: HandleSigner,
    ) -> None:
        self.epoch = epoch
        self._signer = signer
        self.instance_id = instance_id  # named in receipt handles
        self._subscriptions = subscriptions
        self._tuning = tuning
        self._versions = itertools.count(1)
        self._recent_acks: OrderedDict[str, None] = OrderedDict()

    def issue(self, sub: Subscription, entry: InFlight) -> str:
        """A new version of ``entry``'s delivery (older handles stop working) and its
        handle."""
        entry.version = next(self._versions)
        q = entry.queue
        return ReceiptHandle(
            self.epoch, q.store_id, sub.topic, q.queue_id, entry.offset, entry.version, self.instance_id
        ).encode(self._signer)

    def find(self, group: str, topic: str, receipt_handle: str, message_id: str) -> tuple[Subscription, InFlight]:
        """The in-flight message a current handle names; INVALID_RECEIPT_HANDLE when the
        handle is malformed, from another gateway epoch, or superseded. Whether it
        expired is the caller's question (an auto-renewed message is renewed first)."""
        try:
            handle = ReceiptHandle.decode(receipt_handle, self._signer)
        except ValueError as exc:
            raise GatewayError(
                Code.INVALID_RECEIPT_HANDLE, f"the receipt handle was not issued by txmq: {exc}"
            ) from None
        if handle.epoch != self.epoch:
            issuer = f"gateway {handle.owner}" if handle.owner else "another gateway instance"
            raise GatewayError(
                Code.INVALID_RECEIPT_HANDLE,
                f"the receipt handle was issued by {issuer} (before a restart, or before the group "
                "moved to this gateway)",
            )
        if handle.topic != topic:
            raise GatewayError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is not one of topic {topic!r}")
        sub = self._subscriptions.get((group, topic))
        q = sub.queues.get((handle.store_id, handle.queue_id)) if sub is not None else None
        entry = q.in_flight.get(handle.offset) if q is not None else None
        if sub is None or entry is None or entry.version != handle.version:
            raise GatewayError(
                Code.INVALID_RECEIPT_HANDLE,
                "the receipt handle is stale: the message was acked, redelivered or its invisible duration changed",
            )
        unique_id = entry.view.message.unique_id
        if message_id and unique_id and message_id != unique_id:
            raise GatewayError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is not one of message {message_id}")
        return sub, entry

    def acked_lately(self, receipt_handle: str) -> bool:
        return receipt_handle in self._recent_acks

    def remember_ack(self, receipt_handle: str) -> None:
        self._recent_acks[receipt_handle] = None
        if len(self._recent_acks) > self._tuning.recent_acks:
            self._recent_acks.popitem(last=False)
