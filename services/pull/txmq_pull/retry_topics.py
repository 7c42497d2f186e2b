"""A consumer group's retry topic, ``%RETRY%<group>``, created when the group's members
first heartbeat, on every store that serves a topic they subscribe (RocketMQ creates it
in the broker's heartbeat handler: ClientManageProcessor.heartBeat calls
createTopicInSendMessageBackMethod; docs/consumers.md "Retries and dead letters").

Every member subscribes the retry topic from the start, so when it exists before the
first send-back, every member's first rebalance already shares its queues; created only
by the first send-back, the members other than the sender would take them on at their
next periodic rebalance. The store still creates it with a send-back too (a store that
joined later, a pull service that could not reach the store).

The topic gets the group's ``retry_queue_nums`` on that store (the group created there
first with the store's ``auto_create_subscription_group``, as for a pull). Every
heartbeat looks for stores not done yet (a store that starts serving the topics later
gets it at the next one); each (group, store) is done once per pull instance
(remembered for the last ``REMEMBERED_MAX`` pairs). A failure does not fail the
heartbeat: it is logged once and tried again at the next one.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

from txmq.errors import TxmqError
from txmq.protocol import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic, retry_topic
from txmq.v1 import common_pb2, errors_pb2
from txmq_pull.store_client import StoreClient, StoreClients

log = logging.getLogger("txmq.pull.retry")

#: (group, store id) pairs remembered (the retry topic exists / creating it failed).
REMEMBERED_MAX = 10_000

#: The group's config on a store: ``PullProcessor.group_config``.
GroupConfig = Callable[[str, StoreClient, str], Awaitable[common_pb2.SubscriptionGroupConfig]]


class RetryTopics:
    def __init__(self, clients: StoreClients, group_config: GroupConfig) -> None:
        self._clients = clients
        self._group_config = group_config
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._failing: OrderedDict[tuple[str, str], None] = OrderedDict()  # logged already

    async def ensure(self, group: str, topics: Iterable[str]) -> None:
        """Create ``%RETRY%<group>`` on each live store serving one of ``topics`` where
        it was not made sure of before. Never raises a store's error."""
        store_ids: set[str] = set()
        for topic in topics:
            if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)) or is_system_topic(topic):
                continue
            try:
                store_ids.update(await self._clients.locator.stores_serving(topic))
            except TxmqError as err:  # an unknown topic: the consumer's pulls say so
                log.debug("no stores for topic %s of group %s: %s", topic, group, err)
        for store_id in sorted(store_ids):
            if (group, store_id) in self._known:
                continue
            try:
                await self._create(group, store_id)
            except TxmqError as err:
                if (group, store_id) not in self._failing:  # once, not at every heartbeat
                    log.info("creating %s on store %s failed (tried again at each heartbeat): %s",
                             retry_topic(group), store_id, err)  # fmt: skip
                remember(self._failing, (group, store_id))
                continue
            self._failing.pop((group, store_id), None)
            remember(self._known, (group, store_id))

    async def _create(self, group: str, store_id: str) -> None:
        store = self._clients.client(store_id)
        config = await self._group_config(store_id, store, group)
        topic = retry_topic(group)
        try:
            await store.create_topic(topic, queue_nums=max(1, config.retry_queue_nums))
        except TxmqError as err:
            if err.code != errors_pb2.CODE_TOPIC_ALREADY_EXISTS:
                raise
            return
        log.info("created %s on store %s (the group's first heartbeat here)", topic, store_id)


def remember(pairs: OrderedDict[tuple[str, str], None], pair: tuple[str, str]) -> None:
    pairs[pair] = None
    while len(pairs) > REMEMBERED_MAX:
        pairs.popitem(last=False)
