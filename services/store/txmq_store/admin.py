"""Topic and subscription-group administration and consume offsets: what the admin API
(CreateTopic .. DeleteSubscriptionGroup, CommitConsumeOffset and friends) changes, and
what a replicated group's follower takes from its leader (``adopt``).

The tables themselves (and their files) are in configs.py and offsets.py. Changes are
made on a group's leader only (``check_write``); each topic or subscription-group change
bumps ``config_version``, which replication ships to followers and waits for
(docs/replication.md "Through the stream, not yet through the log"). The size bounds of
a config are docs/store.md "Topic and subscription-group configs are bounded".
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict

from txmq.errors import TxmqError, error
from txmq.v1 import errors_pb2

from .configs import (
    DEFAULT_PERM,
    PERM_ALL,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
    TopicConfig,
    TopicConfigTable,
    WriteQueues,
)
from .dispatch import Dispatcher
from .model import ConsumeOffsetView
from .offsets import ConsumeOffsetTable
from .replication import CONFIG, config_document
from .settings import StoreSettings
from .validation import (
    check_config_size,
    check_group_name,
    check_topic_attributes,
    check_topic_name,
    check_writable_topic_name,
)

log = logging.getLogger("txmq.store")

MAX_QUEUE_NUMS = 1024


def not_found(code: int, what: str, **metadata: str) -> TxmqError:
    return error(code, f"{what} not found", **metadata)


class ConfigAdmin:
    """The topic, subscription-group and consume-offset tables as the admin API changes
    them. ``check_write`` raises unless this store takes configuration changes (a
    replicated group's leader); ``log_end`` is the commit log's end (a new topic's
    ``since_offset``); ``state_replicated(CONFIG)`` waits until a group's followers
    hold the configuration as it is now."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        topics: TopicConfigTable,
        groups: SubscriptionGroupTable,
        offsets: ConsumeOffsetTable,
        dispatcher: Dispatcher,
        queues: WriteQueues,
        clock: Callable[[], int],
        log_end: Callable[[], int],
        check_write: Callable[[], None],
        state_replicated: Callable[[str], Awaitable[None]],
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self._dispatcher = dispatcher
        self._queues = queues
        self._clock = clock
        self._log_end = log_end
        self._check_write = check_write
        self._state_replicated = state_replicated
        self.config_version = 0  # bumped by every topic / subscription-group change
        self._topic_listeners: list[Callable[[], Awaitable[None] | None]] = []
        self._topics_propagating: list[asyncio.Future[None]] = []

    # -- topic changes and who hears of them -----------------------------------------

    def add_topic_listener(self, callback: Callable[[], Awaitable[None] | None]) -> None:
        """``callback()`` runs after any topic is created, updated or deleted. It may
        return an awaitable that completes once the change has propagated (published to
        etcd); ``await topics_propagated()`` waits for those."""
        self._topic_listeners.append(callback)

    def topics_changed(self) -> None:
        self.config_version += 1
        for cb in self._topic_listeners:
            try:
                pending = cb()
            except Exception:
                log.exception("topic listener failed")
                continue
            if pending is not None:
                self._topics_propagating.append(asyncio.ensure_future(pending))

    def put_new_topics(self, configs: Iterable[TopicConfig]) -> None:
        """Topics a send creates (``auto_create_topic_enable``)."""
        added = False
        for cfg in configs:
            self.topics.put(cfg)
            added = True
        if added:
            self.topics_changed()

    async def topics_propagated(self) -> None:
        """Wait until the topic changes made so far have propagated, so an admin call
        that answers after this is visible to route look-ups at once. Call it right
        after the change (no await in between), so it waits for that change."""
        pending, self._topics_propagating = self._topics_propagating, []
        if pending:
            await asyncio.gather(*pending)
        await self._state_replicated(CONFIG)

    # -- topics ----------------------------------------------------------------------

    def topic_configs(self) -> list[TopicConfig]:
        """Every topic, system topics included."""
        return self.topics.all()

    def get_topic(self, name: str) -> TopicConfig:
        cfg = self.topics.get(name)
        if cfg is None:
            check_topic_name(name)  # an illegal name is ILLEGAL_TOPIC, not "not found"
            raise not_found(errors_pb2.CODE_TOPIC_NOT_FOUND, f"topic {name}", topic=name)
        return cfg

    def require_topic(self, topic: str) -> TopicConfig:
        check_topic_name(topic)
        cfg = self.topics.get(topic)
        if cfg is None:
            raise not_found(errors_pb2.CODE_TOPIC_NOT_FOUND, f"topic {topic}", topic=topic)
        return cfg

    def create_topic(
        self, name: str, *, read_queue_nums: int = 0, write_queue_nums: int = 0, perm: int = 0,
        attributes: dict[str, str] | None = None,
    ) -> TopicConfig:  # fmt: skip
        """0 queue nums: default_topic_queue_nums; perm 0: read + write."""
        self._check_write()
        check_writable_topic_name(name)
        check_topic_attributes(attributes or {}, topic=name)
        if self.topics.get(name) is not None:
            raise error(errors_pb2.CODE_TOPIC_ALREADY_EXISTS, f"topic {name} already exists", topic=name)
        n = self.settings.default_topic_queue_nums
        cfg = TopicConfig(
            name,
            _queue_nums(read_queue_nums or n, "read"),
            _queue_nums(write_queue_nums or n, "write"),
            _perm(perm or DEFAULT_PERM),
            dict(attributes or {}),
            since_offset=self._log_end(),
        )
        check_config_size(asdict(cfg), "topic", topic=name)
        self.topics.put(cfg)
        self.topics_changed()
        return cfg

    def update_topic(
        self, name: str, *, read_queue_nums: int = 0, write_queue_nums: int = 0, perm: int = 0,
        attributes: dict[str, str] | None = None,
    ) -> TopicConfig:  # fmt: skip
        """0 queue nums / perm keep the current value; attributes replace the current
        ones."""
        self._check_write()
        check_writable_topic_name(name)
        check_topic_attributes(attributes or {}, topic=name)
        old = self.get_topic(name)
        cfg = TopicConfig(
            name,
            _queue_nums(read_queue_nums, "read") if read_queue_nums else old.read_queue_nums,
            _queue_nums(write_queue_nums, "write") if write_queue_nums else old.write_queue_nums,
            _perm(perm) if perm else old.perm,
            dict(attributes or {}),
            since_offset=old.since_offset,
        )
        check_config_size(asdict(cfg), "topic", topic=name)
        self.topics.put(cfg)
        self.topics_changed()
        return cfg

    def delete_topic(self, name: str) -> None:
        """Removes the config, the consume queues and the committed offsets. The records
        stay in the commit log (until expiry) but never reach a new namesake's queues."""
        self._check_write()
        check_writable_topic_name(name)
        self.get_topic(name)
        self.topics.remove(name)
        self._dispatcher.delete_topic(name)
        self._queues.forget_topic(name)
        self.offsets.remove(topic=name)
        self.topics_changed()

    # -- subscription groups ---------------------------------------------------------

    def subscription_groups(self) -> list[SubscriptionGroupConfig]:
        return self.groups.all()

    def get_subscription_group(self, name: str) -> SubscriptionGroupConfig:
        cfg = self.groups.get(name)
        if cfg is None:
            check_group_name(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
            raise not_found(errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND, f"subscription group {name}", group=name)
        return cfg

    def create_subscription_group(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        self._check_write()
        check_group_name(cfg.group_name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if self.groups.get(cfg.group_name) is not None:
            raise error(
                errors_pb2.CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS,
                f"subscription group {cfg.group_name} already exists", group=cfg.group_name,
            )  # fmt: skip
        self.groups.put(_checked_group(cfg))
        self.config_version += 1
        return cfg

    def update_subscription_group(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        self._check_write()
        self._check_mutable_group(cfg.group_name)
        self.get_subscription_group(cfg.group_name)
        self.groups.put(_checked_group(cfg))
        self.config_version += 1
        return cfg

    def delete_subscription_group(self, name: str) -> None:
        """Removes the group and its committed offsets."""
        self._check_write()
        self._check_mutable_group(name)
        self.get_subscription_group(name)
        self.groups.remove(name)
        self.config_version += 1
        self.offsets.remove(group=name)

    def _check_mutable_group(self, name: str) -> None:
        check_group_name(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if self.groups.is_system(name):
            raise error(errors_pb2.CODE_FORBIDDEN, f"{name} is a system subscription group", group=name)

    def group_in_use(self, group: str) -> SubscriptionGroupConfig:
        """The config of a group a consumer uses (commits an offset, sends a message
        back); a group no config names yet is created with the defaults when
        ``auto_create_subscription_group``, else SUBSCRIPTION_GROUP_NOT_FOUND. The caller
        checked the name."""
        cfg = self.groups.get(group)
        if cfg is None:
            self._check_write()
            if not self.settings.auto_create_subscription_group:
                raise not_found(
                    errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND, f"subscription group {group}", group=group
                )
            cfg = SubscriptionGroupConfig(group)
            self.groups.put(cfg)
            self.config_version += 1
            log.info("created subscription group %s (auto_create_subscription_group)", group)
        return cfg

    # -- consume offsets -------------------------------------------------------------

    def commit_consume_offset(self, *, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._check_write()
        check_group_name(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        cfg = self.require_topic(topic)
        if not 0 <= queue_id < cfg.read_queue_nums:
            raise error(errors_pb2.CODE_ILLEGAL_QUEUE_ID, f"topic {topic} has no readable queue {queue_id}")
        if offset < 0:
            raise error(errors_pb2.CODE_ILLEGAL_OFFSET, f"offset {offset} is negative")
        self.group_in_use(group)
        self.offsets.commit(group, topic, queue_id, offset, now_ms=self._clock())

    def query_consume_offset(self, *, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed one."""
        check_group_name(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        check_topic_name(topic)
        if queue_id < 0:
            raise error(errors_pb2.CODE_ILLEGAL_QUEUE_ID, f"queue id {queue_id} is negative", queue_id=str(queue_id))
        committed = self.offsets.query(group, topic, queue_id)
        return None if committed is None else committed.offset

    def list_consume_offsets(self, *, group: str = "", topic: str = "") -> list[ConsumeOffsetView]:
        out = []
        for (g, t, q), committed in self.offsets.entries(group=group, topic=topic):
            cq = self._dispatcher.consume_queue(t, q)
            lo, hi = (cq.min_offset, cq.max_offset) if cq else (0, 0)
            out.append(ConsumeOffsetView(g, t, q, committed.offset, lo, hi, committed.updated_at_ms))
        return out

    async def persist_offsets(self) -> None:
        snap = self.offsets.snapshot()
        if snap is not None:
            await asyncio.to_thread(self.offsets.save, *snap)

    # -- replication -----------------------------------------------------------------

    def config_documents(self) -> tuple[bytes, bytes]:
        """The topic and subscription-group tables as shipped to followers."""
        return config_document(self.topics.document()), config_document(self.groups.document())

    def offsets_document(self) -> tuple[int, bytes]:
        """The consume offsets as shipped to followers, and their version."""
        return self.offsets.version, config_document(self.offsets.rows())

    def adopt(self, *, topics: bytes = b"", groups: bytes = b"", offsets: bytes = b"") -> None:
        """A follower takes its leader's tables (each shipped when it changed; empty:
        left as it is)."""
        if topics:
            before = {c.name for c in self.topics.all()}
            self.topics.adopt(json.loads(topics))
            for gone in before - {c.name for c in self.topics.all()}:
                self._dispatcher.delete_topic(gone)  # as delete_topic on the leader
                self._queues.forget_round_robin(gone)
            self.topics_changed()
        if groups:
            self.groups.adopt(json.loads(groups))
        if offsets:
            self.offsets.adopt(json.loads(offsets))


def _queue_nums(n: int, what: str) -> int:
    if not 1 <= n <= MAX_QUEUE_NUMS:
        raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"{what} queue nums {n} not in 1..{MAX_QUEUE_NUMS}")
    return n


def _perm(perm: int) -> int:
    if not 0 < perm <= PERM_ALL:
        raise error(
            errors_pb2.CODE_ILLEGAL_ARGUMENT, f"perm {perm} is not a combination of 4 (read), 2 (write), 1 (inherit)"
        )
    return perm


def _checked_group(cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    if cfg.retry_max_times < 0 or cfg.retry_queue_nums < 0:
        raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "retry_max_times and retry_queue_nums must not be negative")
    check_config_size(asdict(cfg), "subscription group", group=cfg.group_name)
    return cfg
