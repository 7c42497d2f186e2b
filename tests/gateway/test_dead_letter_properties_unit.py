"""The gateway's dead letters (a SimpleConsumer's, consumer_dead_letters.py) keep what the
message is: its RocketMQ 5 message type and message group, as the store's dead letters
of the SDK's consumers do (tests/store/test_dead_letter_properties.py, with the same
properties). What the system set for the original's delivery is dropped; a v2 client
reading the dead letter sees a FIFO message of its group."""

from __future__ import annotations

from txmq.protocol import PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_MESSAGE_TYPE, PROPERTY_SHARDING_KEY, dlq_topic
from txmq.v1 import common_pb2
from txmq_gateway.consumer_dead_letters import dead_letter_copy
from txmq_gateway.convert import to_v2_message
from txmq_gateway.v2 import pb

GROUP = "CG_DLQ_PROPS"
# The same in tests/store/test_dead_letter_properties.py.
PROPS = {PROPERTY_MESSAGE_TYPE: "FIFO", PROPERTY_SHARDING_KEY: "order-7", "__RMQ_BORN_HOST": "10.0.0.1", "k": "v"}
KEPT = {PROPERTY_MESSAGE_TYPE: "FIFO", PROPERTY_SHARDING_KEY: "order-7", "k": "v", PROPERTY_DLQ_ORIGIN_TOPIC: "TopicA"}


def test_the_gateways_dead_letter_keeps_the_message_type_and_group() -> None:
    view = common_pb2.MessageView(
        message=common_pb2.Message(topic="TopicA", body=b"x", unique_id="U-1", properties=PROPS), store_timestamp_ms=1
    )
    copy = dead_letter_copy(view, dlq_topic(GROUP), "TopicA")
    assert dict(copy.properties) == KEPT
    seen = to_v2_message(common_pb2.MessageView(message=copy, store_timestamp_ms=2))
    assert seen.system_properties.message_type == pb.FIFO
    assert seen.system_properties.message_group == "order-7"
