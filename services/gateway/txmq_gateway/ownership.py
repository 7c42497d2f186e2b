"""Consumer-group ownership across gateway replicas.

The SimpleConsumer state of a group (cursors, in-flight messages, receipt handles) lives
in one gateway's memory (consumer.py). So that any number of replicas can serve one
group's clients, each group is *owned* by exactly one live gateway, and the other
replicas forward that group's consumer calls (ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) to it:

    <etcd_prefix>/gateway/groups/<group, percent-encoded> -> {"instance_id", "address", "lease"}

- **Claim.** The first gateway that gets a consumer call for a group without an owner
  creates the key in an etcd transaction (only if absent), under an ownership lease of
  its own (TTL ``registration_ttl_ms``). Every replica keeps a watched copy of the prefix
  (``OwnerDirectory``), so finding the owner of a group costs no etcd round trip.
- **Forward.** A call for a group another live gateway owns goes to that gateway's
  ``MessagingService`` (``Forwarder``) with the client's metadata unchanged (client id,
  ``authorization`` and ``x-mq-date-time``, so the owner checks the client's signature
  itself: replicas share the access key) plus ``x-txmq-forwarded: <instance id>``. A
  forwarded call is never forwarded again: its receiver serves it when it owns the group
  or can claim it, and otherwise answers INTERNAL_SERVER_ERROR (ownership is moving; the
  client retries and the next call is forwarded to the new owner).
- **Takeover.** When an owner dies its lease expires and its keys go; the next call for
  one of its groups claims it. The new owner's state starts from the group's committed
  consume offsets (at-least-once: messages the old owner delivered and did not see acked
  come again; its receipt handles answer INVALID_RECEIPT_HANDLE at the new owner). A key
  naming this instance's id under another lease is a previous incarnation's (a restarted
  pod keeps its name): it is taken over at once.
- **Losing a group.** Ownership is a ``txmq_runtime.lease.FencedLease`` holding (the
  rules and why they are safe: docs/leases.md). An owner stops serving a group
  (``on_lost``: the consumer core drops the group's state and ends its held receives)
  when its key is deleted or names another owner, when its lease is found expired (a
  new lease is taken at once; the groups are claimed again by the next call), and when
  the lease's validity lapses (not refreshed for 2/3 of the TTL): etcd keeps the key at
  least a whole TTL after the last refresh, so the old owner has stopped before another
  gateway can claim the group. ``epoch(group)`` is the ownership's fencing token.
- A clean stop revokes the lease after the final offset commit: the groups move at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import grpc

from txmq_gateway.convert import duration
from txmq_gateway.names import check_group_name
from txmq_gateway.status import GatewayError, from_exception, shorten
from txmq_gateway.v2 import Code, svc, svc_grpc
from txmq_runtime import tls
from txmq_runtime.calls import channel_options
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.etcd import RETRYABLE, EtcdMirror
from txmq_runtime.lease import FencedLease, Holding, LeaseLapsed

log = logging.getLogger("txmq.gateway.ownership")

#: Marks a call one gateway forwarded to the owner of its group (value: the forwarder's
#: instance id). Its receiver never forwards it again.
FORWARDED_HEADER = "x-txmq-forwarded"
# Metadata a gRPC call sets itself: never copied onto a forwarded call.
_TRANSPORT_HEADERS = frozenset({"user-agent", "content-type", "te", "host", FORWARDED_HEADER})

Metadata = Iterable[tuple[str, str | bytes]]


def groups_prefix(etcd_prefix: str) -> str:
    return f"{etcd_prefix}/gateway/groups/"


def group_segment(group: str) -> str:
    """The key segment of a group: percent-encoded, so any name is one segment."""
    return quote(group, safe="")


@dataclass(frozen=True, slots=True)
class Owner:
    """Who owns a group: a gateway instance, where to reach its MessagingService, and the
    etcd lease its key lives under (the same instance id under another lease is another
    incarnation)."""

    instance_id: str
    address: str
    lease: int

    def encode(self) -> bytes:
        return json.dumps(
            {"instance_id": self.instance_id, "address": self.address, "lease": f"{self.lease:x}"}, sort_keys=True
        ).encode()

    @classmethod
    def decode(cls, value: bytes) -> Owner | None:
        """None when ``value`` is not an owner record."""
        try:
            fields = json.loads(value)
            owner = cls(str(fields["instance_id"]), str(fields["address"]), int(str(fields["lease"]), 16))
        except (ValueError, TypeError, KeyError):
            return None
        return owner if owner.instance_id and owner.address else None


class OwnerDirectory:
    """The mirrored groups prefix: group -> Owner (an ``EtcdMirror`` sink). ``on_change``
    hears of every group whose owner changed (None: no owner any more)."""

    def __init__(self, prefix: str, on_change: Callable[[str, Owner | None], None] | None = None) -> None:
        self._prefix = prefix
        self._owners: dict[str, Owner] = {}
        self._on_change = on_change

    def owner(self, group: str) -> Owner | None:
        return self._owners.get(group)

    def groups(self) -> dict[str, Owner]:
        return dict(self._owners)

    def _group(self, key: str) -> str | None:
        segment = key.removeprefix(self._prefix)
        if key == segment or not segment or "/" in segment:
            return None
        return unquote(segment)

    def reset(self, items: Iterable[tuple[str, bytes]]) -> None:
        old, self._owners = self._owners, {}
        for key, value in items:
            group = self._group(key)
            owner = Owner.decode(value) if group is not None else None
            if group is not None and owner is not None:
                self._owners[group] = owner
        for group in sorted(set(old) | set(self._owners)):
            if old.get(group) != self._owners.get(group):
                self._changed(group)

    def put(self, key: str, value: bytes) -> None:
        group = self._group(key)
        if group is None:
            return
        owner = Owner.decode(value)
        if owner is None:
            log.warning("ignoring etcd key %s: not an owner record", key)
            self._owners.pop(group, None)
        elif self._owners.get(group) == owner:
            return
        else:
            self._owners[group] = owner
        self._changed(group)

    def delete(self, key: str) -> None:
        group = self._group(key)
        if group is not None:
            # Reported even when the copy did not hold it (a re-read may predate a claim).
            self._owners.pop(group, None)
            self._changed(group)

    def _changed(self, group: str) -> None:
        if self._on_change is not None:
            self._on_change(group, self._owners.get(group))


class GroupOwnership:
    """Which consumer groups this gateway owns, and who owns the others (module
    docstring). ``route`` is asked before every consumer call; ``on_lost(group)`` is
    called (synchronously) when this gateway stops owning ``group``."""

    def __init__(
        self,
        etcd: Any,
        *,
        etcd_prefix: str,
        instance_id: str,
        address: str,
        ttl_ms: int,
        on_lost: Callable[[str], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._etcd = etcd
        self._prefix = groups_prefix(etcd_prefix)
        self.instance_id = instance_id
        self.address = address
        self._on_lost = on_lost
        self.lease = FencedLease(etcd, name=f"{instance_id} ownership", ttl_ms=ttl_ms, on_lost=self._lost, clock=clock)
        self.directory = OwnerDirectory(self._prefix, on_change=self._changed)
        self._mirror = EtcdMirror(etcd, prefix=self._prefix, sink=self.directory)
        self._checks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def ttl_s(self) -> int:
        return self.lease.ttl_s

    @property
    def lease_id(self) -> int | None:
        return self.lease.lease_id

    @property
    def owned(self) -> set[str]:
        """Groups this gateway serves (claimed, and not lost since; ``owns`` checks)."""
        return {unquote(k.removeprefix(self._prefix)) for k in self.lease.holdings}

    def key(self, group: str) -> str:
        return self._prefix + group_segment(group)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self, *, timeout_s: float, keep_alive: bool = True) -> None:
        """Mirror the prefix, take a lease and keep it alive (an etcd failure here is
        retried by the keep-alive loop). ``keep_alive=False``: the caller ticks."""
        await self._mirror.start(timeout_s=timeout_s)
        await self.tick()
        if keep_alive:
            self.lease.start()

    async def close(self) -> None:
        """Stop owning: revoke the lease (one try; its TTL is the fallback), so the keys
        go and other gateways claim the groups at once. Call after the consumer's final
        offset commit."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._checks):
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        await self._mirror.close()
        await self.lease.close()

    async def tick(self) -> None:
        """Keep (or get) the lease (``FencedLease.keep_alive``): expired, every owned group
        is lost and a new lease taken; etcd unreachable, the groups are lost once the
        lease's validity lapses."""
        await self.lease.keep_alive()

    def check_validity(self) -> None:
        """Lose every group when the lease has not been refreshed for too long (the
        lease's timer does this by itself)."""
        self.lease.check()

    # -- ownership -------------------------------------------------------------------

    def owns(self, group: str) -> bool:
        """Whether this gateway serves ``group`` right now."""
        return self.lease.holds(self.key(group)) is not None

    def epoch(self, group: str) -> int | None:
        """The fencing token of this gateway's ownership of ``group`` (None: not owned)."""
        held = self.lease.holds(self.key(group))
        return None if held is None else held.epoch

    def _mine(self) -> Owner | None:
        lease_id = self.lease.lease_id
        return None if lease_id is None else Owner(self.instance_id, self.address, lease_id)

    async def route(self, group: str, *, forwarded: bool = False) -> Owner | None:
        """None: serve ``group`` here (owned, or claimed now). An Owner: forward to it.
        GatewayError when neither can be done now (etcd unreachable, or a forwarded
        call for a group another gateway owns). An empty group is served here (the
        consumer core refuses it)."""
        if not group or self.owns(group):
            return None
        if self._closed:
            raise GatewayError(Code.INTERNAL_SERVER_ERROR, "the gateway is shutting down")
        if not forwarded:
            known = self.directory.owner(group)
            if known is not None and known.instance_id != self.instance_id:
                return known
        return await self._claim(group, forwarded=forwarded)

    def _previous_incarnation(self, value: bytes) -> bool:
        """A key naming this instance's id under another lease: a previous incarnation's
        (dead: a restarted pod keeps its name), or this process's own replaced lease."""
        owner = Owner.decode(value)
        return owner is not None and owner.instance_id == self.instance_id and owner != self._mine()

    async def _claim(self, group: str, *, forwarded: bool) -> Owner | None:
        # An etcd key and every message below name the group: only a legal name gets one
        # (the servicer checks requests' names first; this keeps any other caller honest).
        check_group_name(group)
        mine = self._mine()
        if mine is None or not self.lease.valid():
            raise GatewayError(
                Code.INTERNAL_SERVER_ERROR,
                f"this gateway cannot reach etcd to serve consumer group {shorten(group)}; retry later",
            )
        try:
            claim = await self.lease.campaign(self.key(group), mine.encode(), take_over=self._previous_incarnation)
        except LeaseLapsed:
            raise GatewayError(
                Code.INTERNAL_SERVER_ERROR, f"ownership of consumer group {shorten(group)} lapsed; retry"
            ) from None
        except RETRYABLE as exc:
            raise GatewayError(
                Code.INTERNAL_SERVER_ERROR,
                f"could not claim consumer group {shorten(group)} in etcd: {shorten(str(exc), 200)}; retry later",
            ) from exc
        if self._closed:
            raise GatewayError(Code.INTERNAL_SERVER_ERROR, "the gateway is shutting down")
        if claim.holding is not None:
            log.info("%s owns consumer group %s (epoch %d)", self.instance_id, group, claim.holding.epoch)
            return None
        if claim.holder is None:
            raise GatewayError(Code.INTERNAL_SERVER_ERROR, f"consumer group {shorten(group)} is changing owner; retry")
        current = Owner.decode(claim.holder)
        if current is None:
            raise GatewayError(
                Code.INTERNAL_SERVER_ERROR, f"the owner record of consumer group {shorten(group)} is unreadable"
            )
        if forwarded:
            raise GatewayError(
                Code.INTERNAL_SERVER_ERROR,
                f"consumer group {shorten(group)} is served by gateway {current.instance_id} ({current.address}); "
                "retry",
            )
        return current

    def _changed(self, group: str, owner: Owner | None) -> None:
        """The mirror saw the key of ``group`` change. For a group this gateway owns,
        check etcd itself before giving it up (the mirror may be behind a claim)."""
        if self.key(group) not in self.lease.holdings or (owner is not None and owner == self._mine()):
            return
        task = asyncio.get_running_loop().create_task(self._verify(group))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _verify(self, group: str) -> None:
        try:
            await self.lease.confirm([self.key(group)])
        except RETRYABLE:
            # Cannot tell: give it up (claimed again, same epoch, by the next call).
            self.lease.lose(self.key(group), "its key changed and etcd cannot confirm it")

    def _lost(self, holding: Holding, reason: str) -> None:
        group = unquote(holding.key.removeprefix(self._prefix))
        log.warning("%s no longer owns consumer group %s (%s): its state is dropped", self.instance_id, group, reason)
        try:
            self._on_lost(group)
        except Exception:
            log.exception("dropping consumer group %s failed", group)


# -- forwarding ------------------------------------------------------------------------


def is_forwarded(metadata: Metadata | None) -> bool:
    return any(k.lower() == FORWARDED_HEADER for k, _ in metadata or ())


def forward_metadata(metadata: Metadata | None, forwarder: str) -> list[tuple[str, str | bytes]]:
    """The client's metadata (client id, signature, date, request id, ...) for the call
    to the owner, marked as forwarded."""
    out: list[tuple[str, str | bytes]] = [
        (k, v) for k, v in metadata or () if not k.startswith((":", "grpc-")) and k.lower() not in _TRANSPORT_HEADERS
    ]
    out.append((FORWARDED_HEADER, forwarder or "1"))
    return out


def forwarding_channel(address: str) -> grpc.aio.Channel:
    """A channel to another gateway (TLS as the process's internal channels use it) that
    carries the client's credentials alone: not the services' own signature that
    ``txmq_runtime.calls.internal_channel`` adds with auth_enabled, so the owner can only
    authenticate the forwarded call as the client."""
    material = tls.current()
    if material is None:
        return grpc.aio.insecure_channel(address, options=channel_options())
    return grpc.aio.secure_channel(
        address, material.channel_credentials(), options=(*channel_options(), *material.channel_options())
    )


class Forwarder:
    """Calls the MessagingService of the gateway owning a group, on one channel per
    owner address (``forwarding_channel``)."""

    def __init__(
        self,
        *,
        instance_id: str,
        timeout_ms: int,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.timeout_s = timeout_ms / 1000
        self._channel_factory = channel_factory or forwarding_channel
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._background: set[asyncio.Task[None]] = set()

    def stub(self, address: str) -> svc_grpc.MessagingServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._channel_factory(address)
        return svc_grpc.MessagingServiceStub(channel)

    def _timeout(self, context: grpc.aio.ServicerContext) -> float:
        remaining = context.time_remaining()
        return self.timeout_s if remaining is None else max(0.0, remaining)

    @staticmethod
    def _failure(exc: grpc.aio.AioRpcError, owner: Owner, group: str) -> GatewayError:
        where = f"gateway {owner.instance_id} ({owner.address}), owner of consumer group {group!r}"
        log.warning("forwarding to %s failed: %s %s", where, exc.code().name, exc.details())
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return GatewayError(Code.PROXY_TIMEOUT, f"{where} did not answer in time")
        return GatewayError(
            Code.INTERNAL_SERVER_ERROR,
            f"{where} failed: {exc.code().name} {exc.details()}; the group moves to another gateway "
            "when that one's lease expires",
        )

    async def unary(self, method: str, request: Any, context: grpc.aio.ServicerContext, owner: Owner) -> Any:
        """The owner's answer to ``method`` (AckMessage, ChangeInvisibleDuration,
        ForwardMessageToDeadLetterQueue); GatewayError when it cannot be reached."""
        call = getattr(self.stub(owner.address), method)
        try:
            return await call(
                request,
                metadata=forward_metadata(context.invocation_metadata(), self.instance_id),
                timeout=self._timeout(context),
            )
        except grpc.aio.AioRpcError as exc:
            raise self._failure(exc, owner, request.group.name) from None

    async def receive(
        self, request: svc.ReceiveMessageRequest, context: grpc.aio.ServicerContext, owner: Owner
    ) -> AsyncIterator[svc.ReceiveMessageResponse]:
        """The owner's ReceiveMessage frames; a failure ends with a status frame. When
        the client goes away before the answer is written, the answer's messages are made
        visible again at the owner (as a receive served here would): while the owner
        still holds the receive, the call is cancelled; once messages are coming, the
        rest of them are read and all are released."""
        metadata = forward_metadata(context.invocation_metadata(), self.instance_id)
        call = self.stub(owner.address).ReceiveMessage(request, metadata=metadata, timeout=self._timeout(context))
        received: list[tuple[str, str]] = []  # (message id, receipt handle)
        try:
            try:
                async for frame in call:
                    if frame.HasField("message"):
                        m = frame.message
                        received.append((m.system_properties.message_id, m.system_properties.receipt_handle))
                    yield frame
            except grpc.aio.AioRpcError as exc:
                yield svc.ReceiveMessageResponse(status=from_exception(self._failure(exc, owner, request.group.name)))
        except (asyncio.CancelledError, GeneratorExit):
            if received:
                self._release(request, metadata, owner, received, call)
            else:
                call.cancel()
            raise

    def _release(
        self,
        request: svc.ReceiveMessageRequest,
        metadata: Sequence[tuple[str, str | bytes]],
        owner: Owner,
        received: list[tuple[str, str]],
        call: Any,
    ) -> None:
        async def release() -> None:
            try:
                async for frame in call:  # the rest of the answer
                    if frame.HasField("message"):
                        m = frame.message
                        received.append((m.system_properties.message_id, m.system_properties.receipt_handle))
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass  # cancelled mid-answer: the owner releases what it did not write
            stub = self.stub(owner.address)
            for message_id, handle in received:
                try:
                    await stub.ChangeInvisibleDuration(
                        svc.ChangeInvisibleDurationRequest(
                            group=request.group,
                            topic=request.message_queue.topic,
                            receipt_handle=handle,
                            message_id=message_id,
                            invisible_duration=duration(0),
                        ),
                        metadata=metadata,
                        timeout=self.timeout_s,
                    )
                except grpc.aio.AioRpcError as exc:  # it comes back after its duration anyway
                    log.debug("release of %s at %s failed: %s", message_id, owner.address, exc)

        task = asyncio.get_running_loop().create_task(release())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()


class GroupRouter:
    """What the servicer asks before a consumer call: serve here (None) or forward to the
    returned owner, and how to forward."""

    def __init__(self, ownership: GroupOwnership, forwarder: Forwarder) -> None:
        self.ownership = ownership
        self.forwarder = forwarder

    async def owner(self, group: str, metadata: Metadata | None) -> Owner | None:
        return await self.ownership.route(group, forwarded=is_forwarded(metadata))

    async def forward(self, method: str, request: Any, context: grpc.aio.ServicerContext, owner: Owner) -> Any:
        return await self.forwarder.unary(method, request, context, owner)

    def forward_receive(
        self, request: svc.ReceiveMessageRequest, context: grpc.aio.ServicerContext, owner: Owner
    ) -> AsyncIterator[svc.ReceiveMessageResponse]:
        return self.forwarder.receive(request, context, owner)

    async def close(self) -> None:
        await self.ownership.close()
        await self.forwarder.close()
