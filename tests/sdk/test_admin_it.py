"""Admin against the real session cluster: topic and group CRUD, offsets, status."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from txmq import (
    Admin,
    BadRequestError,
    ConflictError,
    Message,
    NotFoundError,
    Perm,
    Producer,
    ServiceKind,
    TopicConfig,
)
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc


def test_topic_crud(admin: Admin, unique_name: Callable[[str], str], wait_route: Callable[..., None]) -> None:
    name = unique_name("sdk-crud")
    created = admin.create_topic(name, read_queue_nums=3, write_queue_nums=2, attributes={"message.type": "NORMAL"})
    assert created == TopicConfig(name, 3, 2, Perm.READ | Perm.WRITE, {"message.type": "NORMAL"})
    assert admin.get_topic(name) == created
    assert name in {t.name for t in admin.list_topics()}

    route = admin.topic_route(name)  # no wait: CreateTopic answers once the route is published
    assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queues] == [(3, 2)]
    assert len(route.write_queues()) == 2 and len(route.read_queues()) == 3

    with pytest.raises(ConflictError) as info:
        admin.create_topic(name)
    assert info.value.code == errors_pb2.CODE_TOPIC_ALREADY_EXISTS
    # exist_ok: the existing topic, unchanged (not the settings asked for).
    assert admin.create_topic(name, read_queue_nums=8, exist_ok=True) == created

    updated = admin.update_topic(name, write_queue_nums=3, perm=Perm.READ)
    assert (updated.read_queue_nums, updated.write_queue_nums, updated.perm) == (3, 3, Perm.READ)
    assert updated.attributes == {"message.type": "NORMAL"}  # untouched fields keep their value
    assert admin.get_topic(name) == updated

    admin.delete_topic(name)
    with pytest.raises(NotFoundError) as info:
        admin.get_topic(name)
    assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND
    assert name not in {t.name for t in admin.list_topics()}
    with pytest.raises(NotFoundError):
        admin.delete_topic(name)


def test_topic_defaults_come_from_the_store(admin: Admin, unique_name: Callable[[str], str]) -> None:
    name = unique_name("sdk-default")
    created = admin.create_topic(name)
    try:
        assert created.read_queue_nums == created.write_queue_nums > 0
        assert created.perm == Perm.READ | Perm.WRITE
    finally:
        admin.delete_topic(name)


def test_system_topics_are_listed_only_on_request(admin: Admin) -> None:
    assert not any(t.name.startswith("RMQ_SYS_") for t in admin.list_topics())
    assert any(t.name.startswith("RMQ_SYS_") for t in admin.list_topics(include_system=True))


def test_bad_names_are_refused_before_any_call(admin: Admin) -> None:
    with pytest.raises(BadRequestError) as info:
        admin.create_topic("no spaces")
    assert info.value.code == errors_pb2.CODE_ILLEGAL_TOPIC
    with pytest.raises(BadRequestError) as info:
        admin.create_subscription_group("no/slash")
    assert info.value.code == errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP


def test_subscription_group_crud(admin: Admin, unique_name: Callable[[str], str]) -> None:
    name = unique_name("sdk-group")
    created = admin.create_subscription_group(name, retry_max_times=5)
    assert (created.group_name, created.consume_enable, created.retry_max_times) == (name, True, 5)
    assert admin.get_subscription_group(name) == created
    assert name in {g.group_name for g in admin.list_subscription_groups()}
    with pytest.raises(ConflictError) as info:
        admin.create_subscription_group(name)
    assert info.value.code == errors_pb2.CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS
    assert admin.create_subscription_group(name, retry_max_times=1, exist_ok=True) == created

    updated = admin.update_subscription_group(name, consume_enable=False)
    assert (updated.consume_enable, updated.retry_max_times) == (False, 5)
    assert admin.get_subscription_group(name).consume_enable is False

    admin.delete_subscription_group(name)
    with pytest.raises(NotFoundError) as info:
        admin.get_subscription_group(name)
    assert info.value.code == errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND


def test_queue_and_consume_offsets(
    admin: Admin, producer: Producer, new_topic: Callable[..., str], unique_name: Callable[[str], str]
) -> None:
    topic = new_topic(queues=2)
    for i in range(3):
        producer.send(Message(topic, b"x", queue_id=0))
    offsets = admin.queue_offsets(topic)
    assert [(o.queue.queue_id, o.min_offset, o.max_offset) for o in offsets] == [(0, 0, 3), (1, 0, 0)]
    assert offsets[0].last_store_timestamp_ms > 0 and offsets[1].last_store_timestamp_ms == 0

    # Consumers commit through the pull service or the store; here straight to the store.
    group = admin.create_subscription_group(unique_name("sdk-offsets")).group_name
    store = offsets[0].queue.store_id
    address = admin.topic_route(topic).store_address(store)
    with grpc.insecure_channel(address) as channel:
        store_pb2_grpc.StoreStub(channel).CommitConsumeOffset(
            store_pb2.CommitConsumeOffsetRequest(consumer_group=group, topic=topic, queue_id=0, offset=1), timeout=5
        )
    [committed] = admin.consume_offsets(group, topic)
    assert (committed.group, committed.queue.queue_id, committed.offset, committed.max_offset) == (group, 0, 1, 3)
    assert committed.lag == 2
    assert committed in admin.consume_offsets(group=group)
    admin.delete_subscription_group(group)


def test_view_message_errors(admin: Admin) -> None:
    with pytest.raises(BadRequestError) as info:
        admin.view_message("not-hex")
    assert info.value.code == errors_pb2.CODE_ILLEGAL_MESSAGE_ID
    with pytest.raises(NotFoundError):
        admin.query_message_by_unique_id("00000000000000000000000000000000")


def test_status_and_endpoints(admin: Admin) -> None:
    [status] = admin.store_status()
    assert status.store_id and status.commit_log_max_offset >= status.commit_log_min_offset
    stores = admin.endpoints(ServiceKind.STORE)
    assert [e.instance_id for e in stores] == [status.store_id]
    assert status.address == stores[0].address
    assert {e.kind for e in admin.endpoints()} >= {ServiceKind.STORE, ServiceKind.PULL, ServiceKind.TXCHECK}
    with pytest.raises(NotFoundError) as info:
        admin.store_status(store_id="no-such-store")
    assert info.value.code == errors_pb2.CODE_STORE_NOT_FOUND
