"""Conversions between the public value objects and the generated protobuf messages.

Kept apart so the public types never expose protobuf, and each conversion exists once
for every client (producer, admin, consumers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from txmq.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from txmq.models import (
    ConsumeOffset,
    Endpoint,
    Perm,
    QueueData,
    QueueOffsets,
    ServiceKind,
    StoreStatus,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicRoute,
)
from txmq.v1 import common_pb2, route_pb2, store_pb2


def message_to_proto(msg: Message, *, born_timestamp_ms: int) -> common_pb2.Message:
    # Empty fields left unset (the same bytes on the wire): setting them costs ~4x.
    pb = common_pb2.Message(
        topic=msg.topic, body=msg.body, unique_id=msg.unique_id or "", born_timestamp_ms=born_timestamp_ms
    )
    if msg.tags:
        pb.tags = msg.tags
    if msg.keys:
        pb.keys.extend(msg.keys)
    if msg.properties:
        pb.properties.update(msg.properties)
    if msg.flag:
        pb.flag = msg.flag
    if msg.queue_id is not None:
        pb.queue_id = msg.queue_id
    return pb


def add_messages_to_proto(container: Any, msgs: Sequence[Message], *, queue_id: int, born_timestamp_ms: int) -> None:
    """Append ``msgs`` to a repeated ``common_pb2.Message`` field, each bound for
    ``queue_id``: as ``message_to_proto`` but built in place, not built and copied."""
    add = container.add
    for msg in msgs:
        pb = add(topic=msg.topic, body=msg.body, unique_id=msg.unique_id or "",
                 born_timestamp_ms=born_timestamp_ms, queue_id=queue_id)  # fmt: skip
        if msg.tags:
            pb.tags = msg.tags
        if msg.keys:
            pb.keys.extend(msg.keys)
        if msg.properties:
            pb.properties.update(msg.properties)
        if msg.flag:
            pb.flag = msg.flag


def message_ext_from_proto(view: common_pb2.MessageView) -> MessageExt:
    m = view.message
    return MessageExt(
        m.topic,
        m.body,
        tags=m.tags or None,
        keys=tuple(m.keys),
        properties=dict(m.properties),
        unique_id=m.unique_id or None,
        flag=m.flag,
        queue_id=m.queue_id,
        offset_msg_id=view.offset_msg_id,
        queue_offset=view.queue_offset,
        commit_log_offset=view.commit_log_offset,
        store_size_bytes=view.store_size_bytes,
        body_crc=view.body_crc,
        sys_flag=view.sys_flag,
        born_timestamp_ms=m.born_timestamp_ms,
        born_host=view.born_host,
        store_timestamp_ms=view.store_timestamp_ms,
        store_host=view.store_host,
        reconsume_times=view.reconsume_times,
        prepared_transaction_offset=view.prepared_transaction_offset,
        store_id=view.store_id,
    )


def message_queue_from_proto(pb: common_pb2.MessageQueue) -> MessageQueue:
    return MessageQueue(pb.topic, pb.store_id, pb.queue_id)


def message_queue_to_proto(mq: MessageQueue) -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=mq.topic, store_id=mq.store_id, queue_id=mq.queue_id)


SEND_STATUSES = {s.value: s for s in SendStatus}


def send_result_from_proto(pb: store_pb2.SendResult) -> SendResult:
    return SendResult(
        status=SendStatus(pb.status),
        msg_id=pb.msg_id,
        offset_msg_id=pb.offset_msg_id,
        message_queue=message_queue_from_proto(pb.queue),
        queue_offset=pb.queue_offset,
        commit_log_offset=pb.commit_log_offset,
        transaction_id=pb.transaction_id or None,
        duplicate=pb.duplicate,
        deliver_at_ms=pb.deliver_at_ms,
    )


def send_results_from_proto(pbs: Iterable[store_pb2.SendResult]) -> list[SendResult]:
    """``send_result_from_proto`` of each, with one MessageQueue per queue (a batch
    goes to one queue) and the status looked up, not parsed."""
    queues: dict[tuple[str, str, int], MessageQueue] = {}
    statuses = SEND_STATUSES
    out: list[SendResult] = []
    append = out.append
    for pb in pbs:
        q = pb.queue
        key = (q.topic, q.store_id, q.queue_id)
        mq = queues.get(key)
        if mq is None:
            mq = queues[key] = MessageQueue(*key)
        status = statuses.get(pb.status)
        append(
            SendResult(
                SendStatus(pb.status) if status is None else status,  # unknown: SendStatus raises, as above
                pb.msg_id,
                pb.offset_msg_id,
                mq,
                pb.queue_offset,
                pb.commit_log_offset,
                pb.transaction_id or None,
                pb.duplicate,
                pb.deliver_at_ms,
            )
        )
    return out


def endpoint_from_proto(pb: common_pb2.Endpoint) -> Endpoint:
    return Endpoint(
        kind=ServiceKind(pb.kind),
        instance_id=pb.instance_id,
        address=pb.address,
        started_at_ms=pb.started_at_ms,
        labels=dict(pb.labels),
    )


def topic_route_from_proto(pb: route_pb2.QueryRouteResponse) -> TopicRoute:
    return TopicRoute(
        topic=pb.topic,
        queues=tuple(
            QueueData(
                store_id=q.store_id,
                store_address=q.store_address,
                read_queue_nums=q.read_queue_nums,
                write_queue_nums=q.write_queue_nums,
                perm=Perm(q.perm),
                message_type=q.message_type,
            )
            for q in pb.queues
        ),
        store_endpoints=tuple(endpoint_from_proto(e) for e in pb.store_endpoints),
        pull_endpoints=tuple(endpoint_from_proto(e) for e in pb.pull_endpoints),
        txcheck_endpoints=tuple(endpoint_from_proto(e) for e in pb.txcheck_endpoints),
    )


def topic_config_from_proto(pb: common_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(
        name=pb.name,
        read_queue_nums=pb.read_queue_nums,
        write_queue_nums=pb.write_queue_nums,
        perm=Perm(pb.perm),
        attributes=dict(pb.attributes),
    )


def topic_config_to_proto(cfg: TopicConfig) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        name=cfg.name,
        read_queue_nums=cfg.read_queue_nums,
        write_queue_nums=cfg.write_queue_nums,
        perm=int(cfg.perm),
        attributes=cfg.attributes,
    )


def group_config_from_proto(pb: common_pb2.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(
        group_name=pb.group_name,
        # Absent means the default, as on create.
        consume_enable=pb.consume_enable if pb.HasField("consume_enable") else True,
        consume_broadcast_enable=pb.consume_broadcast_enable,
        retry_max_times=pb.retry_max_times,
        retry_queue_nums=pb.retry_queue_nums,
    )


def group_config_to_proto(cfg: SubscriptionGroupConfig) -> common_pb2.SubscriptionGroupConfig:
    return common_pb2.SubscriptionGroupConfig(
        group_name=cfg.group_name,
        consume_enable=cfg.consume_enable,
        consume_broadcast_enable=cfg.consume_broadcast_enable,
        retry_max_times=cfg.retry_max_times,
        retry_queue_nums=cfg.retry_queue_nums,
    )


def queue_offsets_from_proto(topic: str, store_id: str, pb: store_pb2.QueueOffsets) -> QueueOffsets:
    return QueueOffsets(
        queue=MessageQueue(topic, store_id, pb.queue_id),
        min_offset=pb.min_offset,
        max_offset=pb.max_offset,
        last_store_timestamp_ms=pb.last_store_timestamp_ms,
    )


def consume_offset_from_proto(store_id: str, pb: store_pb2.ConsumeOffset) -> ConsumeOffset:
    return ConsumeOffset(
        group=pb.consumer_group,
        queue=MessageQueue(pb.topic, store_id, pb.queue_id),
        offset=pb.offset,
        min_offset=pb.min_offset,
        max_offset=pb.max_offset,
        updated_at_ms=pb.updated_at_ms,
    )


def store_status_from_proto(address: str, pb: store_pb2.GetStoreStatusResponse) -> StoreStatus:
    return StoreStatus(
        store_id=pb.store_id,
        address=address,
        flush_mode=pb.flush_mode,
        commit_log_min_offset=pb.commit_log_min_offset,
        commit_log_max_offset=pb.commit_log_max_offset,
        commit_log_flushed_offset=pb.commit_log_flushed_offset,
        dispatched_offset=pb.dispatched_offset,
        segment_count=pb.segment_count,
        recovered_from_crash=pb.recovered_from_crash,
        started_at_ms=pb.started_at_ms,
        settings=dict(pb.settings),
    )
