"""``Admin``'s topic calls: topics are configured per store node, as in RocketMQ."""

from __future__ import annotations

import dataclasses
from typing import Any

from txmq._admin_base import AdminBase, Store
from txmq._convert import queue_offsets_from_proto, topic_config_from_proto, topic_config_to_proto
from txmq.errors import TxmqError
from txmq.models import READ_WRITE, Perm, QueueOffsets, TopicConfig
from txmq.v1 import errors_pb2, store_pb2
from txmq.validation import check_topic


class TopicAdmin(AdminBase):
    def create_topic(
        self,
        name: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: Perm = READ_WRITE,
        attributes: dict[str, str] | None = None,
        store_id: str | None = None,
        exist_ok: bool = False,
    ) -> TopicConfig:
        """Create the topic on every store (or on ``store_id``). Queue counts default to
        the store's ``default_topic_queue_nums``. Returns the config as stored. A store
        that has the topic already raises ``CODE_TOPIC_ALREADY_EXISTS``; with
        ``exist_ok`` its topic is left as it is (not compared or changed) and returned."""
        check_topic(name)
        config = TopicConfig(name, read_queue_nums or 0, write_queue_nums or 0, perm, dict(attributes or {}))
        request = store_pb2.CreateTopicRequest(topic=topic_config_to_proto(config))

        def create(store: Store) -> TopicConfig:
            try:
                return topic_config_from_proto(self._call(store, self._admin_stub(store).CreateTopic, request).topic)
            except TxmqError as err:
                if not (exist_ok and err.code == errors_pb2.CODE_TOPIC_ALREADY_EXISTS):
                    raise
            found = self._call(store, self._admin_stub(store).GetTopic, store_pb2.GetTopicRequest(name=name))
            return topic_config_from_proto(found.topic)

        answers = [create(s) for s in self._stores(store_id)]  # every store, in order
        return answers[0]

    def update_topic(
        self,
        name: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: Perm | None = None,
        attributes: dict[str, str] | None = None,
        store_id: str | None = None,
    ) -> TopicConfig:
        """Change the given fields on every store that has the topic (or on ``store_id``);
        fields left as None keep their value. ``attributes`` replaces the whole map."""
        check_topic(name)
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("read_queue_nums", read_queue_nums),
                ("write_queue_nums", write_queue_nums),
                ("perm", perm),
                ("attributes", attributes),
            )
            if v is not None
        }

        def update(store: Store) -> TopicConfig:
            current = topic_config_from_proto(
                self._call(store, self._admin_stub(store).GetTopic, store_pb2.GetTopicRequest(name=name)).topic
            )
            wanted = topic_config_to_proto(dataclasses.replace(current, **changes))
            answer = self._call(store, self._admin_stub(store).UpdateTopic, store_pb2.UpdateTopicRequest(topic=wanted))
            return topic_config_from_proto(answer.topic)

        return self._on_stores_having(store_id, update)[0]

    def delete_topic(self, name: str, *, store_id: str | None = None) -> None:
        """Delete the topic from every store that has it (or from ``store_id``)."""
        check_topic(name)
        request = store_pb2.DeleteTopicRequest(name=name)
        self._on_stores_having(store_id, lambda s: self._call(s, self._admin_stub(s).DeleteTopic, request))

    def get_topic(self, name: str, *, store_id: str | None = None) -> TopicConfig:
        check_topic(name)
        request = store_pb2.GetTopicRequest(name=name)
        return self._first_store_having(
            store_id, lambda s: topic_config_from_proto(self._call(s, self._admin_stub(s).GetTopic, request).topic)
        )

    def list_topics(self, *, include_system: bool = False, store_id: str | None = None) -> list[TopicConfig]:
        """Topics of every store (or of ``store_id``), by name; a topic on several stores
        is listed once, as its first store has it."""
        request = store_pb2.ListTopicsRequest(include_system=include_system)
        found: dict[str, TopicConfig] = {}
        for store in self._stores(store_id):
            for pb in self._call(store, self._admin_stub(store).ListTopics, request).topics:
                found.setdefault(pb.name, topic_config_from_proto(pb))
        return sorted(found.values(), key=lambda t: t.name)

    def queue_offsets(self, topic: str) -> list[QueueOffsets]:
        """Min/max offsets of every queue of the topic, on every store that has it."""
        check_topic(topic)
        result: list[QueueOffsets] = []
        for store in self._stores_of_topic(topic):
            response = self._call(
                store, self._store_stub(store).GetQueueOffsets, store_pb2.GetQueueOffsetsRequest(topic=topic)
            )
            result.extend(queue_offsets_from_proto(topic, store.store_id, q) for q in response.queues)
        return sorted(result, key=lambda o: o.queue)
