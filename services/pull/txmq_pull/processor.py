"""The pull core (RocketMQ's PullMessageProcessor): validation in RocketMQ's order, the
read through the store, the store-status -> pull-status mapping, and the hold phase of
long polling. No gRPC here: requests and responses are the pull.proto messages, errors
are typed ``TxmqError``s; the servicer only adapts the call.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TypeVar

from txmq.errors import TxmqError, error
from txmq.protocol import PERM_READ, is_system_topic
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, store_pb2
from txmq.validation import check_group, check_topic
from txmq_pull.arrivals import ArrivalFeed
from txmq_pull.filters import PullFilter, load_filter
from txmq_pull.hold import ArrivalEvent, HoldService, QueueKey, ReadWatch, WakeReason
from txmq_pull.metrics import FROM_ARRIVALS, REPLICA_READS
from txmq_pull.settings import PullSettings
from txmq_pull.store_client import StoreClient, StoreClients
from txmq_runtime.clock import Clock

log = logging.getLogger("txmq.pull")
#: (group, queue) pairs read from a replica at most; the oldest pin goes first.
MAX_REPLICA_PINS = 100_000

DEFAULT_MAX_MESSAGES = 32
#: An answer made from arrivals holds at most this many record bytes (the store's
#: default in-memory transfer cap).
ARRIVAL_ANSWER_MAX_BYTES = 262_144

_S = store_pb2
_P = pull_pb2

# RocketMQ's PullMessageProcessor switch with the client's ResponseCode ->
# PullStatus mapping folded in: SUCCESS -> FOUND, PULL_NOT_FOUND -> NO_NEW_MSG,
# PULL_RETRY_IMMEDIATELY -> NO_MATCHED_MSG, PULL_OFFSET_MOVED -> OFFSET_ILLEGAL.
# None: depends on the request offset (offset 0 on an empty/unknown queue is "nothing yet").
STATUS_MAP: Mapping[int, int | None] = {
    _S.GET_MESSAGE_STATUS_FOUND: _P.PULL_STATUS_FOUND,
    _S.GET_MESSAGE_STATUS_MESSAGE_WAS_REMOVING: _P.PULL_STATUS_NO_MATCHED_MSG,
    _S.GET_MESSAGE_STATUS_NO_MATCHED_MESSAGE: _P.PULL_STATUS_NO_MATCHED_MSG,
    _S.GET_MESSAGE_STATUS_NO_MATCHED_LOGIC_QUEUE: None,
    _S.GET_MESSAGE_STATUS_NO_MESSAGE_IN_QUEUE: None,
    _S.GET_MESSAGE_STATUS_OFFSET_FOUND_NULL: _P.PULL_STATUS_NO_NEW_MSG,
    _S.GET_MESSAGE_STATUS_OFFSET_OVERFLOW_ONE: _P.PULL_STATUS_NO_NEW_MSG,
    _S.GET_MESSAGE_STATUS_OFFSET_OVERFLOW_BADLY: _P.PULL_STATUS_OFFSET_ILLEGAL,
    _S.GET_MESSAGE_STATUS_OFFSET_TOO_SMALL: _P.PULL_STATUS_OFFSET_ILLEGAL,
}


def pull_status(store_status: int, request_offset: int) -> int:
    """The PullStatus for a store's GetMessageStatus."""
    try:
        mapped = STATUS_MAP[store_status]
    except KeyError:
        raise error(
            errors_pb2.CODE_INTERNAL_ERROR, f"the store answered GetMessage with status {store_status}"
        ) from None
    if mapped is None:
        return _P.PULL_STATUS_OFFSET_ILLEGAL if request_offset != 0 else _P.PULL_STATUS_NO_NEW_MSG
    return mapped


def to_pull_response(reply: store_pb2.GetMessageResponse, request_offset: int) -> pull_pb2.PullMessageResponse:
    """The store's answer as the pull's; raw records pass through as they are."""
    return pull_pb2.PullMessageResponse(
        status=pull_status(reply.status, request_offset),
        next_begin_offset=reply.next_begin_offset,
        min_offset=reply.min_offset,
        max_offset=reply.max_offset,
        messages=reply.messages,
        records=reply.records,
        store_id=reply.store_id,
    )


V = TypeVar("V")


class ConfigCache:
    """Topic / group configs and store settings, reused for ``ttl_ms`` (they change rarely).
    Failures (an unknown topic included) are not cached: a topic created a moment ago is
    found at once."""

    def __init__(self, clock: Clock, ttl_ms: int) -> None:
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._entries: dict[tuple[str, ...], tuple[int, object]] = {}

    async def get(self, key: tuple[str, ...], load: Callable[[], Awaitable[V]]) -> V:
        now = self._clock.now_ms()
        hit = self._entries.get(key)
        if hit is not None and now < hit[0]:
            return hit[1]  # type: ignore[return-value]
        value = await load()
        if self._ttl_ms > 0:
            if len(self._entries) > 10_000:
                self._entries = {k: e for k, e in self._entries.items() if now < e[0]}
            self._entries[key] = (now + self._ttl_ms, value)
        return value

    def clear(self) -> None:
        self._entries.clear()


@dataclass(frozen=True, slots=True)
class ValidPull:
    """A pull that passed validation: where to read, with what filter."""

    key: QueueKey
    store: StoreClient
    group: str
    filter: PullFilter
    max_messages: int
    raw_records: bool = False


class PullProcessor:
    def __init__(
        self,
        settings: PullSettings,
        *,
        clients: StoreClients,
        hold: HoldService,
        clock: Clock,
        feed: ArrivalFeed | None = None,
    ) -> None:
        self.settings = settings
        self._clients = clients
        self._hold = hold
        self._clock = clock
        self._feed = feed
        self.configs = ConfigCache(clock, settings.config_cache_ttl_ms)
        # Replica reads (RocketMQ's suggestPullingFromSlave): a (group, queue) whose
        # consumer lags so far that its leader suggests a replica is read from a follower
        # of the store group until a read there no longer suggests it.
        self._from_replica: dict[tuple[str, QueueKey], str] = {}

    # -- validation ----------------------------------------------------------------------

    async def validate(self, req: pull_pb2.PullMessageRequest) -> ValidPull:
        """The request's shape, then RocketMQ's order: service readable; subscription group
        exists (auto-created when the store allows) and may consume; topic exists, is
        readable, is no system topic; queue id within the read queues; the expression
        parses; SQL92 only when enabled."""
        check_group(req.consumer_group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if not req.HasField("queue"):
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "queue is required")
        topic, queue_id = req.queue.topic, req.queue.queue_id
        check_topic(topic)
        if req.queue_offset < 0:
            raise error(errors_pb2.CODE_ILLEGAL_OFFSET, f"queue_offset {req.queue_offset} is negative")
        if req.HasField("commit_offset") and req.commit_offset < 0:
            raise error(errors_pb2.CODE_ILLEGAL_OFFSET, f"commit_offset {req.commit_offset} is negative")
        if req.max_messages < 0:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"max_messages {req.max_messages} is negative")
        if req.suspend_timeout_ms < 0:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"suspend_timeout_ms {req.suspend_timeout_ms} is negative")

        if not self.settings.service_readable:
            raise error(errors_pb2.CODE_SERVICE_NOT_READABLE, "pulling is forbidden on this pull service")
        store_id, store = await self._clients.resolve(req.queue)
        group = await self.group_config(store_id, store, req.consumer_group)
        if group.HasField("consume_enable") and not group.consume_enable:
            raise error(
                errors_pb2.CODE_CONSUME_DISABLED,
                f"subscription group {req.consumer_group!r} may not consume",
                group=req.consumer_group,
            )
        config = await self.configs.get(("topic", store_id, topic), lambda: store.get_topic(topic))
        if not config.perm & PERM_READ:
            raise error(errors_pb2.CODE_TOPIC_NOT_READABLE, f"topic {topic!r} is not readable", topic=topic)
        if is_system_topic(topic):
            raise error(errors_pb2.CODE_SYSTEM_TOPIC, f"consuming system topic {topic!r} is forbidden", topic=topic)
        if not 0 <= queue_id < config.read_queue_nums:
            raise error(
                errors_pb2.CODE_ILLEGAL_QUEUE_ID,
                f"queue id {queue_id} is illegal: topic {topic!r} has {config.read_queue_nums} read queue(s)",
                topic=topic,
                queue_id=str(queue_id),
            )
        pull_filter = await load_filter(
            req.filter if req.HasField("filter") else None,
            property_filter_enable=self.settings.property_filter_enable,
        )
        return ValidPull(
            key=QueueKey(store_id, topic, queue_id),
            store=store,
            group=req.consumer_group,
            filter=pull_filter,
            max_messages=req.max_messages or DEFAULT_MAX_MESSAGES,
            raw_records=req.raw_records,
        )

    async def group_config(self, store_id: str, store: StoreClient, name: str) -> common_pb2.SubscriptionGroupConfig:
        """The group's config on a store (cached for ``config_cache_ttl_ms``)."""
        return await self.configs.get(("group", store_id, name), lambda: self._find_group(store_id, store, name))

    async def _find_group(self, store_id: str, store: StoreClient, name: str) -> common_pb2.SubscriptionGroupConfig:
        """RocketMQ's findSubscriptionGroupConfig: the store's group, created on first use
        when the store's auto_create_subscription_group is on."""
        try:
            return await store.get_subscription_group(name)
        except TxmqError as exc:
            if exc.code != errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND:
                raise
            settings = await self.configs.get(("settings", store_id), store.settings)
            if settings.get("auto_create_subscription_group", "False").lower() != "true":
                raise
        try:
            created = await store.create_subscription_group(name)
            log.info("created subscription group %s on store %s (auto_create_subscription_group)", name, store_id)
            return created
        except TxmqError as exc:
            if exc.code != errors_pb2.CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS:
                raise
            return await store.get_subscription_group(name)

    # -- pulling -------------------------------------------------------------------------

    async def pull(
        self, req: pull_pb2.PullMessageRequest, *, answer_by_ms: int | None = None
    ) -> pull_pb2.PullMessageResponse:
        """Validate, store the consumer's committed offset, read; when nothing is there and
        the pull allows suspension, hold it (long polling). ``answer_by_ms`` (on this
        processor's clock): the caller's deadline, less a margin; the hold ends by then."""
        v = await self.validate(req)
        if self._feed is not None:
            self._feed.ensure(v.key.store_id)
        if req.HasField("commit_offset"):
            await v.store.commit_consume_offset(
                group=v.group,
                topic=v.key.topic,
                queue_id=v.key.queue_id,
                offset=req.commit_offset,
                client_id=req.client_id,
            )
        hold_ms = self._hold_time_ms(req)
        if hold_ms <= 0:
            return await self.read(v, req.queue_offset)
        watch = self._hold.watch(v.key)  # before the read: no arrival can slip between
        try:
            first = await self.read(v, req.queue_offset)
            if first.status != pull_pb2.PULL_STATUS_NO_NEW_MSG:
                return first
            now = self._clock.now_ms()
            deadline = now + hold_ms
            if answer_by_ms is not None:
                deadline = min(deadline, answer_by_ms)
                if deadline <= now:
                    return first  # the caller cannot wait
            with self._hold.admit():
                return await self._held(v, req.queue_offset, watch, deadline)
        finally:
            watch.close()

    def _hold_time_ms(self, req: pull_pb2.PullMessageRequest) -> int:
        if not req.suspend:
            return 0
        s = self.settings
        if not s.long_polling_enable:
            return s.short_polling_time_ms
        return min(req.suspend_timeout_ms or s.suspend_timeout_default_ms, s.suspend_timeout_max_ms)

    async def _held(
        self, v: ValidPull, offset: int, watch: ReadWatch, deadline_ms: int
    ) -> pull_pb2.PullMessageResponse:
        hold = self._hold
        try:
            while True:
                woken_by: list[ArrivalEvent] = []
                reason = await hold.park(
                    watch, offset=offset, matcher=v.filter, deadline_ms=deadline_ms, woken_by=woken_by
                )
                if reason is WakeReason.ARRIVAL:
                    answer = answer_from_arrivals(v, offset, woken_by) if v.raw_records else None
                    if answer is not None:
                        FROM_ARRIVALS.inc()
                        return answer  # no read: the arrival stream brought the records
                    return await self.read(v, offset)  # once, without suspension: whatever it finds
                if reason is WakeReason.TIMEOUT:
                    return _timed_out(await self.read(v, offset))
                # RECHECK: something may have arrived unseen. Read; park again if nothing
                # matched (past the non-matching messages, so they are not scanned again).
                watch = hold.watch(v.key)
                probe = await self.read(v, offset)
                if probe.status in (pull_pb2.PULL_STATUS_FOUND, pull_pb2.PULL_STATUS_OFFSET_ILLEGAL):
                    return probe
                if probe.status == pull_pb2.PULL_STATUS_NO_MATCHED_MSG:
                    offset = max(offset, probe.next_begin_offset)
        finally:
            watch.close()

    async def read(self, v: ValidPull, offset: int) -> pull_pb2.PullMessageResponse:
        request = store_pb2.GetMessageRequest(
            consumer_group=v.group,
            topic=v.key.topic,
            queue_id=v.key.queue_id,
            offset=offset,
            max_messages=v.max_messages,
            filter=v.filter.to_pb(),
            raw_records=v.raw_records,
        )
        return to_pull_response(await self._get_message(v, request), offset)

    async def _get_message(self, v: ValidPull, request: store_pb2.GetMessageRequest) -> store_pb2.GetMessageResponse:
        pin = (v.group, v.key)
        replica = self._from_replica.get(pin)
        if replica is not None:
            try:
                response = await self._clients.for_address(replica).get_message(request)
            except TxmqError as err:
                # Gone, or no longer a follower (it leads now): back to the group's leader.
                log.info("replica %s of store %s: %s; reading from its leader again", replica, v.key.store_id, err)
                del self._from_replica[pin]
            else:
                REPLICA_READS.inc()
                if not response.suggest_pulling_from_replica:
                    del self._from_replica[pin]  # caught up: the leader serves it again
                return response
        response = await v.store.get_message(request)
        if response.suggest_pulling_from_replica and response.status == store_pb2.GET_MESSAGE_STATUS_FOUND:
            followers = self._clients.locator.followers(v.key.store_id)
            if followers:
                self._from_replica[pin] = followers[hash(pin) % len(followers)]
                if len(self._from_replica) > MAX_REPLICA_PINS:
                    self._from_replica.pop(next(iter(self._from_replica)))
        return response

    # -- offsets -------------------------------------------------------------------------

    async def update_offset(self, req: pull_pb2.UpdateConsumerOffsetRequest) -> None:
        check_group(req.consumer_group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        check_topic(req.queue.topic)
        if req.offset < 0:
            raise error(errors_pb2.CODE_ILLEGAL_OFFSET, f"offset {req.offset} is negative")
        _, store = await self._clients.resolve(req.queue)
        await store.commit_consume_offset(
            group=req.consumer_group,
            topic=req.queue.topic,
            queue_id=req.queue.queue_id,
            offset=req.offset,
            client_id=req.client_id,
        )

    async def query_offset(self, req: pull_pb2.QueryConsumerOffsetRequest) -> pull_pb2.QueryConsumerOffsetResponse:
        check_group(req.consumer_group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        check_topic(req.queue.topic)
        _, store = await self._clients.resolve(req.queue)
        reply = await store.query_consume_offset(
            group=req.consumer_group, topic=req.queue.topic, queue_id=req.queue.queue_id
        )
        return pull_pb2.QueryConsumerOffsetResponse(found=reply.found, offset=reply.offset)


def answer_from_arrivals(
    v: ValidPull, offset: int, arrivals: list[ArrivalEvent]
) -> pull_pb2.PullMessageResponse | None:
    """What a read at ``offset`` right after these arrivals would answer, from the records
    they carry: the arrivals on the pull's queue from ``offset`` on, without a gap, all
    with their records, filtered as the store filters (tag code, SQL92 properties), at
    most ``max_messages`` / ``ARRIVAL_ANSWER_MAX_BYTES``. None when they cannot say
    (the first is not at ``offset``, a record is missing, nothing matched): then read."""
    run = sorted((a for a in arrivals if a.key == v.key and a.queue_offset >= offset), key=lambda a: a.queue_offset)
    if not run or run[0].queue_offset != offset:
        return None
    taken: list[bytes] = []
    size = 0
    next_offset = offset
    for a in run:
        if a.queue_offset != next_offset:
            if a.queue_offset < next_offset:
                continue  # the same arrival twice (a read watch and a held pull's batch)
            break  # a gap: answer what came before it
        if not a.record:
            break
        if len(taken) >= v.max_messages or (taken and size + len(a.record) > ARRIVAL_ANSWER_MAX_BYTES):
            break
        next_offset = a.queue_offset + 1
        if v.filter.matches_arrival(a.tag_code, a.properties):
            taken.append(a.record)
            size += len(a.record)
    if not taken:
        return None
    return pull_pb2.PullMessageResponse(
        status=pull_pb2.PULL_STATUS_FOUND,
        next_begin_offset=next_offset,
        min_offset=run[-1].min_offset,
        max_offset=run[-1].max_offset,
        records=b"".join(taken),
        store_id=v.key.store_id,
    )


def _timed_out(r: pull_pb2.PullMessageResponse) -> pull_pb2.PullMessageResponse:
    """A hold that ran out: what the last read found if it found messages or an illegal
    offset, else NO_NEW_MSG (non-matching messages that came meanwhile are skipped:
    next_begin_offset is past them)."""
    if r.status not in (pull_pb2.PULL_STATUS_FOUND, pull_pb2.PULL_STATUS_OFFSET_ILLEGAL):
        r.status = pull_pb2.PULL_STATUS_NO_NEW_MSG
    return r


def store_max_offsets(clients: StoreClients):
    """The hold backstop's view of the stores: one GetQueueOffsets per (store, topic)."""

    async def max_offsets(keys: Collection[QueueKey]) -> dict[QueueKey, int]:
        by_topic: dict[tuple[str, str], list[QueueKey]] = defaultdict(list)
        for key in keys:
            by_topic[(key.store_id, key.topic)].append(key)

        async def one(store_id: str, topic: str) -> Mapping[int, int]:
            try:
                offsets = await clients.client(store_id).queue_offsets(topic)
                return {queue_id: max_offset for queue_id, (_, max_offset) in offsets.items()}
            except TxmqError as exc:
                log.debug("backstop: max offsets of %s on %s: %s", topic, store_id, exc)
                return {}

        pairs = list(by_topic)
        found = await asyncio.gather(*(one(s, t) for s, t in pairs))
        result: dict[QueueKey, int] = {}
        for pair, offsets in zip(pairs, found, strict=True):
            for key in by_topic[pair]:
                if key.queue_id in offsets:
                    result[key] = offsets[key.queue_id]
        return result

    return max_offsets
