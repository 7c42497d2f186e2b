"""Topic attributes and subscription groups are bounded at the API (issue 16: a topic
created with 2 MB of attributes made the store vanish from etcd): too many attributes,
an empty name, a name or value over its limit, or a config over MAX_CONFIG_BYTES are
refused with a typed error, and nothing is created or changed."""

from __future__ import annotations

import pytest

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2
from txmq_store.configs import SubscriptionGroupConfig
from txmq_store.message_store import MessageStore
from txmq_store.validation import (
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_CONFIG_BYTES,
    MAX_TOPIC_ATTRIBUTES,
)

from .conftest import GrpcStore

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOO_MUCH = {
    "2 MB value": ({"a": "x" * 2_000_000}, errors_pb2.CODE_PAYLOAD_TOO_LARGE),
    "long name": ({"n" * (MAX_ATTRIBUTE_KEY_BYTES + 1): "v"}, errors_pb2.CODE_PAYLOAD_TOO_LARGE),
    "long value": ({"a": "v" * (MAX_ATTRIBUTE_VALUE_BYTES + 1)}, errors_pb2.CODE_PAYLOAD_TOO_LARGE),
    "multi-byte value": ({"a": "é" * (MAX_ATTRIBUTE_VALUE_BYTES // 2 + 1)}, errors_pb2.CODE_PAYLOAD_TOO_LARGE),
    "too many": ({f"a{i}": "v" for i in range(MAX_TOPIC_ATTRIBUTES + 1)}, errors_pb2.CODE_ILLEGAL_ARGUMENT),
    "empty name": ({"": "v"}, errors_pb2.CODE_ILLEGAL_ARGUMENT),
    "config over the total": (
        {f"a{i:02d}": "v" * MAX_ATTRIBUTE_VALUE_BYTES for i in range(MAX_CONFIG_BYTES // MAX_ATTRIBUTE_VALUE_BYTES)},
        errors_pb2.CODE_PAYLOAD_TOO_LARGE,
    ),
}


@pytest.mark.parametrize("case", list(TOO_MUCH))
async def test_oversized_attributes_are_refused_and_nothing_changes(store: MessageStore, case: str) -> None:
    attributes, code = TOO_MUCH[case]
    with pytest.raises(TxmqError) as info:
        store.create_topic("TopicB", attributes=attributes)
    assert info.value.code == code
    assert store.admin.topics.get("TopicB") is None
    store.create_topic("TopicB", attributes={"+message.type": "NORMAL"})
    with pytest.raises(TxmqError) as info:
        store.admin.update_topic("TopicB", attributes=attributes)
    assert info.value.code == code
    assert store.admin.get_topic("TopicB").attributes == {"+message.type": "NORMAL"}


async def test_attributes_within_the_limits_are_kept(store: MessageStore) -> None:
    near = {f"a{i:02d}": "v" * 1024 for i in range(MAX_TOPIC_ATTRIBUTES)}  # 64 KiB of values: too much
    with pytest.raises(TxmqError):
        store.create_topic("TopicB", attributes=near)
    fits = {f"a{i:02d}": "v" * 900 for i in range(MAX_TOPIC_ATTRIBUTES)}
    assert store.create_topic("TopicB", attributes=fits).attributes == fits
    one = {"n" * MAX_ATTRIBUTE_KEY_BYTES: "v" * MAX_ATTRIBUTE_VALUE_BYTES}
    assert store.admin.update_topic("TopicB", attributes=one).attributes == one


async def test_subscription_groups_are_bounded(store: MessageStore) -> None:
    with pytest.raises(TxmqError) as info:
        store.admin.create_subscription_group(SubscriptionGroupConfig("G" * 2_000_000))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP
    assert len(info.value.to_detail().SerializeToString()) < 4096  # the echo is clipped on the wire
    store.admin.create_subscription_group(SubscriptionGroupConfig("G" * 255))


async def test_over_grpc_a_2_mb_attribute_is_a_typed_error(grpc_store: GrpcStore) -> None:
    topic = common_pb2.TopicConfig(name="TopicB", attributes={"a": "x" * 2_000_000})
    for call in (grpc_store.admin.CreateTopic, grpc_store.admin.UpdateTopic):
        request = (
            store_pb2.CreateTopicRequest if call == grpc_store.admin.CreateTopic else store_pb2.UpdateTopicRequest
        )(topic=topic)
        with pytest.raises(Exception) as info:
            await call(request, timeout=10)
        err = TxmqError.from_rpc_error(info.value)  # type: ignore[arg-type]
        assert not err.transport and err.code == errors_pb2.CODE_PAYLOAD_TOO_LARGE, info.value
