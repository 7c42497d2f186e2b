"""Dead letters of the SimpleConsumer (the model: consumer.py): a copy of the message
sent to ``%DLQ%<group>`` on the store that holds it.

A dead letter names its origin in TXMQ_DLQ_ORIGIN_TOPIC. RocketMQ's RETRY_TOPIC is
reserved for producers (the store refuses it in SendMessage); TXMQ_ names are hidden
from v2 consumers as RocketMQ hides RETRY_TOPIC."""

from __future__ import annotations

from txmq.protocol import DLQ_GROUP_TOPIC_PREFIX, PROPERTY_DLQ_ORIGIN_TOPIC, copied_properties
from txmq.v1 import common_pb2
from txmq_gateway.backend import Backend
from txmq_gateway.consumer_state import InFlight, Subscription


class DeadLetterQueues:
    """Sends dead letters, creating each store's %DLQ%<group> topic (one queue) on its
    first use."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._topics: set[tuple[str, str]] = set()

    async def send(self, sub: Subscription, entry: InFlight) -> None:
        """Send a copy of the message to %DLQ%<group> on the store that holds it."""
        store_id = entry.queue.store_id
        dlq = DLQ_GROUP_TOPIC_PREFIX + sub.group
        if (store_id, dlq) not in self._topics:
            await self._backend.ensure_topic(store_id, dlq, queue_nums=1)
            self._topics.add((store_id, dlq))
        await self._backend.send(store_id, dead_letter_copy(entry.view, dlq, sub.topic))


def dead_letter_copy(view: common_pb2.MessageView, dlq_topic: str, origin_topic: str) -> common_pb2.Message:
    """The message as sent to a dead-letter topic: body, tag, keys, unique id, flag,
    born time and properties kept, minus what the system set for the original's
    delivery (REAL_TOPIC, transaction bookkeeping, ...) but with its message type and
    group, as the store's dead letters (``copied_properties``); TXMQ_DLQ_ORIGIN_TOPIC
    names the origin."""
    src = view.message
    copy = common_pb2.Message(
        topic=dlq_topic,
        body=src.body,
        tags=src.tags,
        keys=list(src.keys),
        unique_id=src.unique_id,
        flag=src.flag,
        born_timestamp_ms=src.born_timestamp_ms or view.store_timestamp_ms,
    )
    copy.properties.update(copied_properties(src.properties))
    copy.properties[PROPERTY_DLQ_ORIGIN_TOPIC] = origin_topic
    return copy
