"""Membership in etcd: the key layout, the keys an instance keeps alive under its lease
(write side), and the cluster as every service sees it (read side).

docs/etcd.md describes the layout, who writes what, and what happens when an instance
dies.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import aetcd
import aetcd.exceptions
import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from txmq.errors import TxmqError, clip, error
from txmq.protocol import TOPIC_ATTRIBUTE_MESSAGE_TYPE
from txmq.v1 import common_pb2, errors_pb2, route_pb2
from txmq_runtime.etcd import RETRYABLE, EtcdMirror, retrying

log = logging.getLogger("txmq.registry")

# etcd's default --max-txn-ops is 128: bigger key sets are written in several txns.
_MAX_TXN_OPS = 128
# etcd's default --max-request-bytes is 1.5 MiB: a transaction carries at most this much.
_MAX_TXN_BYTES = 1024 * 1024
#: The largest key + value a Registration sends (what services publish is a few hundred
#: bytes; user-derived values are bounded at their API well below this).
MAX_VALUE_BYTES = 512 * 1024


def kind_name(kind: int) -> str:
    """``SERVICE_KIND_STORE`` -> ``store``."""
    return common_pb2.ServiceKind.Name(kind).removeprefix("SERVICE_KIND_").lower()


@dataclass(frozen=True, slots=True)
class ServiceKey:
    kind: int
    instance_id: str


@dataclass(frozen=True, slots=True)
class StoreTopicKey:
    store_id: str
    topic: str


@dataclass(frozen=True, slots=True)
class EtcdKeys:
    """The key layout under one prefix (``/txmq`` by default)::

    <prefix>/services/<kind>/<instance_id>   -> Endpoint (proto JSON)
    <prefix>/stores/<store_id>/topics/<topic> -> TopicConfig (proto JSON)
    """

    prefix: str

    def __post_init__(self) -> None:
        if not self.prefix.startswith("/") or self.prefix.endswith("/"):
            raise ValueError(f"etcd prefix must start and not end with '/': {self.prefix!r}")

    @property
    def root(self) -> str:
        return self.prefix + "/"

    def service(self, kind: int, instance_id: str) -> str:
        _check_segment("instance id", instance_id)
        return f"{self.prefix}/services/{kind_name(kind)}/{instance_id}"

    def store_topics(self, store_id: str) -> str:
        _check_segment("store id", store_id)
        return f"{self.prefix}/stores/{store_id}/topics/"

    def store_topic(self, store_id: str, topic: str) -> str:
        _check_segment("topic", topic)
        return self.store_topics(store_id) + topic

    def view_range(self) -> tuple[str, str]:
        """[start, end) of the keys a ClusterView reads: ``services/`` through ``stores/``
        (``store-groups/`` lies between). Nothing else under the prefix: users, secrets
        and the other services' own keys need not be readable by every service."""
        return f"{self.prefix}/services/", f"{self.prefix}/stores0"  # "0" follows "/": the end of stores/

    def parse(self, key: str) -> ServiceKey | StoreTopicKey | None:
        """What a key under the prefix names; None for keys this layout does not own."""
        if not key.startswith(self.root):
            return None
        parts = key.removeprefix(self.root).split("/")
        if len(parts) == 3 and parts[0] == "services":
            try:
                kind = common_pb2.ServiceKind.Value("SERVICE_KIND_" + parts[1].upper())
            except ValueError:
                return None
            return ServiceKey(kind, parts[2])
        if len(parts) == 4 and parts[0] == "stores" and parts[2] == "topics":
            return StoreTopicKey(parts[1], parts[3])
        return None


def _check_segment(what: str, value: str) -> None:
    if not value or "/" in value:
        raise ValueError(f"{what} must be non-empty and contain no '/': {value!r}")


def encode(message: Message) -> bytes:
    """A value as etcd keeps it: the message's proto JSON (field names as in the proto)."""
    return json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None).encode()


class Registration:
    """The keys one instance keeps in etcd, all under one lease of ``ttl_ms``.

    The lease is refreshed every third of its TTL. When it is lost (expired while etcd
    was unreachable, etcd restarted with fresh data) or a write fails, every key is
    written again under a new lease, with backoff. ``close`` revokes the lease, so the
    keys vanish at once; an instance that dies without closing vanishes after the TTL.

    One bad key never costs the others (issue 16: a topic with 2 MB of attributes made
    its store vanish from etcd). A value over ``max_value_bytes`` is refused before it is
    sent; a write etcd refuses for good (request too large, invalid) is split, so every
    other key of it is still written, and the refused key is dropped (or keeps the value
    etcd holds). ``put`` and ``replace`` return those refusals as typed errors
    (CODE_PAYLOAD_TOO_LARGE / CODE_ILLEGAL_ARGUMENT); a re-registration under a new lease
    drops them the same way (logged), so it cannot be poisoned by one key either.
    """

    def __init__(self, client: aetcd.Client, *, ttl_ms: int, max_value_bytes: int = MAX_VALUE_BYTES) -> None:
        self._client = client
        self._ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self._max_value_bytes = max_value_bytes
        self._keys: dict[str, bytes] = {}
        self._lease_id: int | None = None
        self._refresh_s = self._ttl_s / 3
        self._lock = asyncio.Lock()  # one writer at a time, so no key lands on a stale lease
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def lease_id(self) -> int | None:
        return self._lease_id

    async def start(self, *, give_up_after_s: float) -> None:
        """Grant the lease and write the keys put so far; then keep them alive."""
        await retrying(give_up_after_s=give_up_after_s)(self._register)
        self._task = asyncio.create_task(self._keep_alive(), name="etcd-registration")

    async def put(self, key: str, value: bytes) -> list[TxmqError]:
        """Keep ``key`` = ``value`` under the lease. Before ``start`` this only records it.
        An etcd failure is logged, not raised: every key is written again with the next
        lease. The same holds for ``replace``. Returns the refusals (see the class)."""
        return await self._apply(stale=[], changed={key: value} if self._keys.get(key) != value else {})

    async def delete(self, key: str) -> None:
        """Stop keeping ``key`` (exactly that key)."""
        if key in self._keys:
            await self._apply(stale=[key], changed={})

    async def replace(self, values: Mapping[str, bytes], *, prefix: str) -> list[TxmqError]:
        """Make the keys starting with ``prefix`` exactly ``values``."""
        stale = [k for k in self._keys if k.startswith(prefix) and k not in values]
        changed = {k: v for k, v in values.items() if self._keys.get(k) != v}
        return await self._apply(stale=stale, changed=changed)

    async def _apply(self, *, stale: list[str], changed: dict[str, bytes]) -> list[TxmqError]:
        refusals: list[TxmqError] = []
        for key in [k for k, v in changed.items() if len(k.encode()) + len(v) > self._max_value_bytes]:
            value = changed.pop(key)
            refusals.append(_refusal(key, f"{len(value)} bytes, at most {self._max_value_bytes} per key"))
        previous = {k: self._keys[k] for k in changed if k in self._keys}
        for key in stale:
            del self._keys[key]
        self._keys.update(changed)
        if not (stale or changed):
            return refusals
        async with self._lock:
            lease_id = self._lease_id
            if lease_id is None:
                return refusals  # not registered (yet, or any more): recorded for the next lease
            try:
                refused = await self._write(stale, changed, lease_id)
            except RETRYABLE as exc:
                log.warning("could not update %d etcd key(s): %s", len(stale) + len(changed), exc)
                self._lost.set()
                return refusals
            for key, reason in refused.items():
                if key in previous:
                    self._keys[key] = previous[key]  # what etcd still holds
                else:
                    self._keys.pop(key, None)
                log.warning("etcd refused key %s (%s); kept out of the registration", clip(key, 200), reason)
                refusals.append(_refusal(key, reason))
        return refusals

    async def close(self) -> None:
        """Stop refreshing and revoke the lease (one try: the TTL is the fallback)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        async with self._lock:
            if self._lease_id is None:
                return
            try:
                await self._client.revoke_lease(self._lease_id)
            except RETRYABLE as exc:
                log.warning(
                    "could not revoke etcd lease %x (its keys expire in %d s): %s", self._lease_id, self._ttl_s, exc
                )
            self._lease_id = None

    async def _register(self) -> None:
        async with self._lock:
            lease = await self._client.lease(self._ttl_s)
            try:
                refused = await self._write([], dict(self._keys), lease.id)
            except RETRYABLE:
                await _revoke_quietly(self._client, lease.id)  # no half-written lease left behind
                raise
            for key, reason in refused.items():
                self._keys.pop(key, None)
                log.error("etcd refused key %s (%s) at registration; the other keys are registered", clip(key, 200),
                          reason)  # fmt: skip
            old, self._lease_id = self._lease_id, lease.id
            self._refresh_s = max(lease.ttl, 1) / 3
            self._lost.clear()
        log.info("registered %d etcd key(s) under lease %x (ttl %d s)", len(self._keys), lease.id, lease.ttl)
        if old is not None:
            # The keys moved to the new lease; revoking the old one drops only keys deleted
            # while etcd was unreachable.
            await _revoke_quietly(self._client, old)

    async def _keep_alive(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), self._refresh_s)
            except TimeoutError:
                pass
            if not self._lost.is_set():
                try:
                    reply = await self._client.refresh_lease(self._lease_id)
                    if reply is not None and reply.TTL > 0:
                        continue
                    log.warning("etcd lease %x expired; registering again", self._lease_id)
                except RETRYABLE as exc:
                    log.warning("etcd lease %x keep-alive failed (%s); registering again", self._lease_id, exc)
            await retrying()(self._register)

    async def _write(self, deletes: list[str], puts: Mapping[str, bytes], lease_id: int) -> dict[str, str]:
        """Delete and put under ``lease_id``, in transactions of at most _MAX_TXN_OPS
        operations and _MAX_TXN_BYTES; a transaction etcd refuses for good is written
        again key by key, so only the keys etcd refuses on their own are left out.
        Returns them (key -> etcd's reason). Transient failures raise."""
        tx = self._client.transactions
        batch: list[tuple[str, object]] = []
        size = 0
        refused: dict[str, str] = {}
        items: list[tuple[str, bytes | None]] = [(k, None) for k in deletes] + list(puts.items())
        for key, value in items:
            cost = len(key.encode()) + (len(value) if value is not None else 0)
            if batch and (len(batch) >= _MAX_TXN_OPS or size + cost > _MAX_TXN_BYTES):
                await self._commit(batch, refused)
                batch, size = [], 0
            op = tx.delete(key.encode()) if value is None else tx.put(key.encode(), value, lease=lease_id)
            batch.append((key, op))
            size += cost
        if batch:
            await self._commit(batch, refused)
        return refused

    async def _commit(self, batch: list[tuple[str, object]], refused: dict[str, str]) -> None:
        try:
            await self._client.transaction(compare=[], success=[op for _, op in batch], failure=[])
        except RETRYABLE as exc:
            if not refused_for_good(exc):
                raise
            if len(batch) == 1:
                refused[batch[0][0]] = str(exc) or type(exc).__name__
                return
            for one in batch:  # find the key(s) etcd refuses; write the others
                await self._commit([one], refused)


def refused_for_good(exc: BaseException) -> bool:
    """etcd refused the request itself (too large, invalid): sending it again fails
    again. Not: etcd unreachable, slow, or out of space (RESOURCE_EXHAUSTED "database
    space exceeded" refuses every write until an operator acts: no one key is to blame)."""
    if isinstance(exc, aetcd.exceptions.InvalidArgumentError):
        return True
    cause = exc.__cause__
    return (
        isinstance(cause, grpc.RpcError)
        and cause.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        and "larger than max" in (cause.details() or "")
    )


def _refusal(key: str, reason: str) -> TxmqError:
    too_large = "too large" in reason or "larger than max" in reason or "at most" in reason
    return error(
        errors_pb2.CODE_PAYLOAD_TOO_LARGE if too_large else errors_pb2.CODE_ILLEGAL_ARGUMENT,
        f"etcd key {clip(key, 200)} was not registered: {reason}",
        key=key,
    )


async def _revoke_quietly(client: aetcd.Client, lease_id: int) -> None:
    try:
        await client.revoke_lease(lease_id)
    except RETRYABLE:
        pass  # it expires by itself


class ClusterState:
    """Live endpoints and the topics each store serves, decoded from etcd keys."""

    def __init__(self, keys: EtcdKeys) -> None:
        self._keys = keys
        self._endpoints: dict[ServiceKey, common_pb2.Endpoint] = {}
        self._topics: dict[str, dict[str, common_pb2.TopicConfig]] = {}  # topic -> store id ->

    def reset(self, items: Iterable[tuple[str, bytes]]) -> None:
        self._endpoints.clear()
        self._topics.clear()
        for key, value in items:
            self.put(key, value)

    def put(self, key: str, value: bytes) -> None:
        match self._keys.parse(key):
            case ServiceKey() as sk:
                endpoint = self._decode(key, value, common_pb2.Endpoint())
                if endpoint is not None:
                    self._endpoints[sk] = endpoint
            case StoreTopicKey(store_id, topic):
                config = self._decode(key, value, common_pb2.TopicConfig())
                if config is not None:
                    self._topics.setdefault(topic, {})[store_id] = config

    def delete(self, key: str) -> None:
        match self._keys.parse(key):
            case ServiceKey() as sk:
                self._endpoints.pop(sk, None)
            case StoreTopicKey(store_id, topic):
                stores = self._topics.get(topic, {})
                stores.pop(store_id, None)
                if not stores:
                    self._topics.pop(topic, None)

    def endpoints(self, kind: int = common_pb2.SERVICE_KIND_UNSPECIFIED) -> list[common_pb2.Endpoint]:
        """Live instances of ``kind`` (every kind when UNSPECIFIED), by kind then id."""
        return [
            self._endpoints[k]
            for k in sorted(self._endpoints, key=lambda k: (k.kind, k.instance_id))
            if kind in (common_pb2.SERVICE_KIND_UNSPECIFIED, k.kind)
        ]

    def queues(self, topic: str) -> list[route_pb2.QueueData]:
        """The topic's queues on every live store that serves it, by store id."""
        result = []
        for store_id, config in sorted(self._topics.get(topic, {}).items()):
            endpoint = self._endpoints.get(ServiceKey(common_pb2.SERVICE_KIND_STORE, store_id))
            if endpoint is None:
                continue  # its lease is going: the topic keys follow the endpoint key
            result.append(
                route_pb2.QueueData(
                    store_id=store_id,
                    store_address=endpoint.address,
                    read_queue_nums=config.read_queue_nums,
                    write_queue_nums=config.write_queue_nums,
                    perm=config.perm,
                    message_type=config.attributes.get(TOPIC_ATTRIBUTE_MESSAGE_TYPE, ""),
                )
            )
        return result

    @staticmethod
    def _decode(key: str, value: bytes, message):
        try:
            return json_format.Parse(value, message, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            log.warning("ignoring etcd key %s: %s", key, exc)
            return None


_SERVICE_KINDS = frozenset(common_pb2.ServiceKind.values())


class ClusterView:
    """The cluster as a service sees it: a watched copy of etcd, so look-ups cost no
    etcd round trip. A topic the copy does not know, and a kind of service the copy has
    none of (``listed_endpoints``), are read from etcd directly before being called
    unknown, so a topic created or a service registered a moment ago is found at once."""

    def __init__(self, client: aetcd.Client, keys: EtcdKeys) -> None:
        self._client = client
        self._keys = keys
        self._state = ClusterState(keys)
        start, end = keys.view_range()
        self._mirror = EtcdMirror(client, prefix=start, range_end=end, sink=self._state)

    async def start(self, *, timeout_s: float) -> None:
        await self._mirror.start(timeout_s=timeout_s)

    async def close(self) -> None:
        await self._mirror.close()

    def endpoints(self, kind: int = common_pb2.SERVICE_KIND_UNSPECIFIED) -> list[common_pb2.Endpoint]:
        return self._state.endpoints(kind)

    async def listed_endpoints(self, kind: int = common_pb2.SERVICE_KIND_UNSPECIFIED) -> list[common_pb2.Endpoint]:
        """``endpoints``, for clients (Route.ListEndpoints): none in the copy is checked
        in etcd itself (a service that registered a moment ago, before the watch said so)."""
        found = self._state.endpoints(kind)
        if found or kind not in _SERVICE_KINDS:  # a kind no service has: nothing to read
            return found
        fresh = await self._fresh(f"endpoints of kind {kind}")
        return found if fresh is None else fresh.endpoints(kind)

    async def route(self, topic: str) -> tuple[list[route_pb2.QueueData], ClusterState]:
        """The topic's queues, and the state they were read from (for its endpoints)."""
        queues = self._state.queues(topic)
        if queues:
            return queues, self._state
        fresh = await self._fresh(f"topic {topic}")
        return (queues, self._state) if fresh is None else (fresh.queues(topic), fresh)

    async def _fresh(self, what: str) -> ClusterState | None:
        """The cluster as etcd holds it now; None when etcd does not answer (the caller
        answers from the copy)."""
        fresh = ClusterState(self._keys)
        try:
            start, end = self._keys.view_range()
            snapshot = await self._client.get_range(start.encode(), end.encode())
        except RETRYABLE as exc:
            log.warning("etcd read for %s failed, answering from the cached view: %s", what, exc)
            return None
        fresh.reset((kv.key.decode(), kv.value) for kv in snapshot)
        return fresh
