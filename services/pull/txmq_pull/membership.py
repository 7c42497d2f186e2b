"""Consumer-group membership from heartbeats (RocketMQ's ConsumerManager, reduced to what
rebalancing needs): each group's client ids with the time each was last heard from; a
client silent for ``expiry_ms`` is gone. State is per pull instance and in memory: a
consumer heartbeats the pull instance(s) it pulls from.

What a consumer leaves behind is bounded: its client id (``MAX_CLIENT_ID_BYTES``) and
topics (``MAX_HEARTBEAT_TOPICS`` valid topic names) are checked, and once it expires
nothing of it is kept -- its group goes with its last member. Expiry runs on every call
(oldest first, so it costs what it removes) and, while no call comes, from ``run``.

Consistent subscriptions (RocketMQ #2954): a heartbeat that carries ``subscriptions``
must subscribe exactly the topics, each with exactly the filter, of every other live
member of the group that carries them; otherwise it is refused with
``CODE_SUBSCRIPTION_CONFLICT`` and not recorded (a member that was live is forgotten, so
the others do not allocate queues to it). Both a different filter for one topic and a
different set of topics are refused: the group's queues of a topic are divided among
all members, so a member that does not subscribe a topic (or filters it differently)
silently skips messages of the queues it gets. A rolling upgrade that changes the
subscription therefore parks the new members (refused, holding no queues) while the old
ones consume everything; once the last old member leaves or expires, the next heartbeat
defines the group anew. Heartbeats without subscriptions (older clients) are not
checked and not compared against."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

from txmq.errors import TxmqError, clip, error
from txmq.protocol import MAX_HEARTBEAT_TOPICS
from txmq.v1 import common_pb2, errors_pb2, pull_pb2
from txmq.validation import check_client_id, check_filter_expression_size, check_group, check_topic
from txmq_runtime.clock import Clock

#: How much of each expression / client id a conflict's message shows (UTF-8 bytes).
MAX_SHOWN_BYTES = 200

# topic -> (filter type name, normalized expression)
Subscriptions = dict[str, tuple[str, str]]


def normalize_subscriptions(subscriptions: Sequence[pull_pb2.Subscription]) -> Subscriptions | None:
    """Each topic's (type, expression) in a form where equal filters compare equal: TAG
    tags trimmed, de-duplicated and sorted (empty is ``*``); SQL92 trimmed. None when
    the heartbeat carries no subscriptions."""
    if not subscriptions:
        return None
    if len(subscriptions) > MAX_HEARTBEAT_TOPICS:
        raise error(
            errors_pb2.CODE_ILLEGAL_ARGUMENT,
            f"the heartbeat names {len(subscriptions)} subscriptions, more than the limit of {MAX_HEARTBEAT_TOPICS}",
            subscriptions=str(len(subscriptions)),
            limit=str(MAX_HEARTBEAT_TOPICS),
        )
    subs: Subscriptions = {}
    for sub in subscriptions:
        check_topic(sub.topic)
        if sub.topic in subs:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"the heartbeat subscribes topic {sub.topic!r} more than once",
                topic=sub.topic,
            )
        text = sub.filter.expression.strip()
        if sub.filter.type == common_pb2.FILTER_TYPE_SQL92:
            check_filter_expression_size(text, kind="SQL92")
            subs[sub.topic] = ("SQL92", text)
        else:
            check_filter_expression_size(text, kind="tag")
            tags = sorted({t.strip() for t in text.split("||") if t.strip()})
            subs[sub.topic] = ("TAG", "*" if not tags or tags == ["*"] else " || ".join(tags))
    return subs


def _shown(subs: Subscriptions, topic: str) -> str:
    if topic not in subs:
        return "nothing (the topic is not subscribed)"
    kind, expression = subs[topic]
    return f"{kind} {clip(expression, MAX_SHOWN_BYTES)!r}"


def _conflict(
    group: str, client_id: str, mine: Subscriptions, other_id: str, theirs: Subscriptions
) -> TxmqError | None:
    """CODE_SUBSCRIPTION_CONFLICT naming the first topic the two subscribe differently."""
    for topic in sorted(mine.keys() | theirs.keys()):
        if mine.get(topic) == theirs.get(topic):
            continue
        return error(
            errors_pb2.CODE_SUBSCRIPTION_CONFLICT,
            f"consumer group {clip(group, MAX_SHOWN_BYTES)!r}: client {clip(client_id, MAX_SHOWN_BYTES)!r} "
            f"subscribes topic {clip(topic, MAX_SHOWN_BYTES)!r} with {_shown(mine, topic)}, but live member "
            f"{clip(other_id, MAX_SHOWN_BYTES)!r} subscribes it with {_shown(theirs, topic)}; every member of a "
            f"group must subscribe the same topics with the same filters",
            topic=topic,
            other_client_id=other_id,
        )
    return None


class ConsumerGroups:
    def __init__(self, clock: Clock, *, expiry_ms: int) -> None:
        self._clock = clock
        self._expiry_ms = expiry_ms
        # group -> client id -> the topics it last named
        self._groups: dict[str, dict[str, tuple[str, ...]]] = {}
        # group -> client id -> its subscriptions (members that sent them only)
        self._subscriptions: dict[str, dict[str, Subscriptions]] = {}
        # (group, client id) -> last heard from, least recently heard first
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._poke = asyncio.Event()

    def heartbeat(
        self,
        group: str,
        client_id: str,
        topics: Sequence[str] = (),
        *,
        leaving: bool = False,
        subscriptions: Sequence[pull_pb2.Subscription] = (),
    ) -> list[str]:
        """Record ``client_id`` as alive in ``group`` (or, ``leaving``, forget it); the
        group's live ids, sorted. ``subscriptions`` that differ from another live
        member's raise CODE_SUBSCRIPTION_CONFLICT (and forget ``client_id``)."""
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        check_client_id(client_id)
        if len(topics) > MAX_HEARTBEAT_TOPICS:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"the heartbeat names {len(topics)} topics, more than the limit of {MAX_HEARTBEAT_TOPICS}",
                topics=str(len(topics)),
                limit=str(MAX_HEARTBEAT_TOPICS),
            )
        for topic in topics:
            check_topic(topic)
        subs = None if leaving else normalize_subscriptions(subscriptions)
        now = self._clock.now_ms()
        self.expire(now)
        key = (group, client_id)
        if leaving:
            self._forget(key)
        else:
            if subs is not None:
                for other_id, theirs in self._subscriptions.get(group, {}).items():
                    if other_id == client_id:
                        continue
                    conflict = _conflict(group, client_id, subs, other_id, theirs)
                    if conflict is not None:
                        self._forget(key)
                        raise conflict
                self._subscriptions.setdefault(group, {})[client_id] = subs
            else:
                self._drop_subscriptions(group, client_id)
            if not self._seen:
                self._poke.set()  # the expiry loop sleeps without a deadline while nobody is known
            self._seen[key] = now
            self._seen.move_to_end(key)
            self._groups.setdefault(group, {})[client_id] = tuple(topics)
        return sorted(self._groups.get(group, ()))

    def members(self, group: str) -> list[str]:
        """The live client ids of ``group``, sorted."""
        self.expire(self._clock.now_ms())
        return sorted(self._groups.get(group, ()))

    def topics(self, group: str, client_id: str) -> tuple[str, ...]:
        """The topics ``client_id`` last said it consumes in ``group``."""
        return self._groups.get(group, {}).get(client_id, ())

    def subscriptions(self, group: str, client_id: str) -> Subscriptions | None:
        """What ``client_id`` last said it subscribes in ``group`` (normalized), if it said."""
        return self._subscriptions.get(group, {}).get(client_id)

    @property
    def client_count(self) -> int:
        """Consumers known (live, or expired but not yet removed), over every group."""
        return len(self._seen)

    @property
    def group_count(self) -> int:
        return len(self._groups)

    def expire(self, now: int | None = None) -> int:
        """Forget every consumer silent for ``expiry_ms``; how many there were."""
        now = self._clock.now_ms() if now is None else now
        seen = self._seen
        removed = 0
        while seen:
            key, last = next(iter(seen.items()))
            if now - last < self._expiry_ms:
                break
            self._forget(key)
            removed += 1
        return removed

    def next_expiry_ms(self) -> int | None:
        """When the least recently heard consumer expires; None when nobody is known."""
        if not self._seen:
            return None
        return next(iter(self._seen.values())) + self._expiry_ms

    async def run(self) -> None:
        """Expire consumers on time while no call comes (until cancelled)."""
        while True:
            self._poke.clear()
            self.expire()
            await self._clock.wait(self._poke, self.next_expiry_ms())

    def _forget(self, key: tuple[str, str]) -> None:
        group, client_id = key
        self._seen.pop(key, None)
        clients = self._groups.get(group)
        if clients is not None:
            clients.pop(client_id, None)
            if not clients:
                del self._groups[group]
        self._drop_subscriptions(group, client_id)

    def _drop_subscriptions(self, group: str, client_id: str) -> None:
        subs = self._subscriptions.get(group)
        if subs is not None:
            subs.pop(client_id, None)
            if not subs:
                del self._subscriptions[group]
