"""Value objects, proto conversions and client-side validation (no network)."""

import pytest

from txmq import BadRequestError, ForbiddenError, Message, MessageQueue, PayloadTooLargeError, Perm, SendStatus
from txmq._convert import (
    message_ext_from_proto,
    message_to_proto,
    send_result_from_proto,
    topic_config_from_proto,
    topic_config_to_proto,
    topic_route_from_proto,
)
from txmq.models import TopicConfig
from txmq.protocol import DELAY_PROPERTIES, PROPERTY_PRIORITY, RESERVED_PROPERTIES
from txmq.v1 import common_pb2, errors_pb2, route_pb2, store_pb2
from txmq.validation import check_message, check_topic


def test_message_normalises_keys_and_copies_properties() -> None:
    props = {"a": "1"}
    msg = Message("T", b"x", keys="k1", properties=props)
    props["b"] = "2"
    assert msg.keys == ("k1",)
    assert msg.properties == {"a": "1"}
    assert Message("T", bytearray(b"y"), keys=["a", "b"]).keys == ("a", "b")
    assert Message("T", b"z", properties=None).properties == {}
    with pytest.raises(TypeError):
        Message("T", "text")  # type: ignore[arg-type]


def test_message_to_proto_keeps_every_field() -> None:
    msg = Message(
        "T", b"body", tags="TagA", keys=("k1", "k2"), properties={"p": "v"}, unique_id="ID", flag=7, queue_id=3
    )
    pb = message_to_proto(msg, born_timestamp_ms=1234)
    assert (pb.topic, pb.body, pb.tags, list(pb.keys)) == ("T", b"body", "TagA", ["k1", "k2"])
    assert (dict(pb.properties), pb.unique_id, pb.flag, pb.queue_id, pb.born_timestamp_ms) == (
        {"p": "v"},
        "ID",
        7,
        3,
        1234,
    )
    bare = message_to_proto(Message("T", b"b"), born_timestamp_ms=1)
    assert not bare.HasField("queue_id") and bare.tags == "" and bare.unique_id == ""


def test_message_view_to_message_ext() -> None:
    view = common_pb2.MessageView(
        message=common_pb2.Message(
            topic="T",
            body=b"b",
            tags="TagA",
            keys=["k"],
            properties={"REAL_TOPIC": "X"},
            unique_id="U1",
            flag=1,
            queue_id=2,
            born_timestamp_ms=10,
        ),
        offset_msg_id="OFF",
        queue_offset=5,
        commit_log_offset=600,
        store_size_bytes=99,
        body_crc=42,
        sys_flag=4,
        born_host="10.0.0.1:5",
        store_timestamp_ms=11,
        store_host="10.0.0.2:6",
        reconsume_times=1,
        prepared_transaction_offset=77,
        store_id="store-0",
    )
    ext = message_ext_from_proto(view)
    assert ext.msg_id == "U1" and ext.unique_id == "U1"
    assert (ext.topic, ext.tags, ext.keys, ext.properties, ext.queue_id) == (
        "T",
        "TagA",
        ("k",),
        {"REAL_TOPIC": "X"},
        2,
    )
    assert (ext.queue_offset, ext.commit_log_offset, ext.offset_msg_id, ext.store_id) == (5, 600, "OFF", "store-0")
    assert (ext.born_timestamp_ms, ext.store_timestamp_ms, ext.born_host, ext.store_host) == (
        10,
        11,
        "10.0.0.1:5",
        "10.0.0.2:6",
    )
    assert (ext.reconsume_times, ext.prepared_transaction_offset, ext.sys_flag, ext.body_crc) == (1, 77, 4, 42)
    assert message_ext_from_proto(common_pb2.MessageView(message=common_pb2.Message(topic="T", body=b"b"))).tags is None


def test_send_result_from_proto() -> None:
    pb = store_pb2.SendResult(
        status=store_pb2.SEND_STATUS_FLUSH_DISK_TIMEOUT,
        msg_id="M",
        offset_msg_id="O",
        queue=common_pb2.MessageQueue(topic="T", store_id="s1", queue_id=4),
        queue_offset=9,
        commit_log_offset=100,
    )
    result = send_result_from_proto(pb)
    assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert result.message_queue == MessageQueue("T", "s1", 4)
    assert (result.msg_id, result.offset_msg_id, result.queue_offset, result.commit_log_offset) == ("M", "O", 9, 100)
    assert result.transaction_id is None


def test_topic_config_round_trip_and_perm_flags() -> None:
    cfg = TopicConfig("T", 4, 2, Perm.READ | Perm.WRITE, {"message.type": "TRANSACTION"})
    assert topic_config_from_proto(topic_config_to_proto(cfg)) == cfg
    assert topic_config_to_proto(cfg).perm == 6


def test_route_write_queues_are_ordered_and_skip_read_only_stores() -> None:
    route = topic_route_from_proto(
        route_pb2.QueryRouteResponse(
            topic="T",
            queues=[
                route_pb2.QueueData(store_id="s2", store_address="h:2", read_queue_nums=2, write_queue_nums=2, perm=6),
                route_pb2.QueueData(store_id="s1", store_address="h:1", read_queue_nums=3, write_queue_nums=1, perm=6),
                route_pb2.QueueData(store_id="s3", store_address="h:3", read_queue_nums=1, write_queue_nums=1, perm=4),
            ],
        )
    )
    assert route.write_queues() == [MessageQueue("T", "s1", 0), MessageQueue("T", "s2", 0), MessageQueue("T", "s2", 1)]
    assert len(route.read_queues()) == 6
    assert route.store_address("s2") == "h:2"


@pytest.mark.parametrize("topic", ["", "a b", "t/x", "x" * 128, "ü"])
def test_illegal_topic_names(topic: str) -> None:
    with pytest.raises(BadRequestError) as info:
        check_topic(topic)
    assert info.value.code == errors_pb2.CODE_ILLEGAL_TOPIC and not info.value.retriable


def test_legal_topic_names() -> None:
    for topic in ("T", "a-b_c%d|e", "x" * 127):
        check_topic(topic)


def _check(**overrides: object) -> None:
    fields: dict[str, object] = dict(topic="T", body=b"b", tags=None, keys=(), properties={}, flag=0, max_body_bytes=10)
    fields.update(overrides)
    check_message(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(RESERVED_PROPERTIES - DELAY_PROPERTIES))
def test_reserved_property_names_are_rejected(name: str) -> None:
    with pytest.raises(BadRequestError) as info:
        _check(properties={name: "v"})
    assert info.value.code == errors_pb2.CODE_ILLEGAL_MESSAGE
    assert info.value.metadata == {"property": name}


def test_message_checks() -> None:
    _check(properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "10", "color": "red"})  # user-settable, as in RocketMQ
    with pytest.raises(BadRequestError, match="empty"):
        _check(body=b"")
    with pytest.raises(PayloadTooLargeError) as info:
        _check(body=b"x" * 11)
    assert info.value.code == errors_pb2.CODE_MESSAGE_BODY_TOO_LARGE
    for bad in (
        {"properties": {"a\u0001": "v"}},
        {"properties": {"a": "v\u0002"}},
        {"keys": ["k\u0001"]},
        {"tags": "t\u0002"},
    ):
        with pytest.raises(BadRequestError):
            _check(**bad)
    for bad in ({"properties": {"": "v"}}, {"keys": ["two words"]}, {"keys": [""]}, {"flag": 2**31}):
        with pytest.raises(BadRequestError):
            _check(**bad)


@pytest.mark.parametrize(
    "topic", ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"]
)
def test_system_topics_are_refused(topic: str) -> None:
    with pytest.raises(ForbiddenError) as info:
        _check(topic=topic)
    assert info.value.code == errors_pb2.CODE_SYSTEM_TOPIC and not info.value.retriable


# -- delayed messages ---------------------------------------------------------------------


def test_a_delay_is_a_property() -> None:
    at = Message("T", b"x", delivery_timestamp_ms=1_700_000_005_000)
    assert at.properties == {"TIMER_DELIVER_MS": "1700000005000"} and at.is_delayed
    level = Message("T", b"x", delay_level=3)
    assert level.properties == {"DELAY": "3"} and level.is_delayed
    relative = Message("T", b"x", properties={"TIMER_DELAY_SEC": "30"})
    assert relative.is_delayed and not Message("T", b"x").is_delayed
    with pytest.raises(ValueError):
        Message("T", b"x", delivery_timestamp_ms=-1)
    with pytest.raises(ValueError):
        Message("T", b"x", delay_level="3")  # type: ignore[arg-type]
    for name in sorted(DELAY_PROPERTIES):
        _check(properties={name: "5"})  # producers may set them (the store checks the value)
    with pytest.raises(BadRequestError):
        _check(properties={"TIMER_OUT_MS": "5"})


def test_send_result_carries_the_delivery_time() -> None:
    pb = store_pb2.SendResult(
        status=store_pb2.SEND_STATUS_OK, msg_id="U", offset_msg_id="O",
        queue=common_pb2.MessageQueue(topic="T", store_id="s", queue_id=2), queue_offset=-1,
        commit_log_offset=7, deliver_at_ms=123,
    )  # fmt: skip
    r = send_result_from_proto(pb)
    assert (r.queue_offset, r.deliver_at_ms, r.message_queue.queue_id) == (-1, 123, 2)
    assert send_result_from_proto(store_pb2.SendResult(status=store_pb2.SEND_STATUS_OK)).deliver_at_ms == 0


def test_the_transactional_producer_refuses_a_delayed_message_before_sending() -> None:
    from txmq.transaction import TransactionListener, TransactionProducer

    class Listener(TransactionListener):
        def execute_local_transaction(self, msg, arg):  # type: ignore[no-untyped-def]
            raise AssertionError("not reached")

        def check_local_transaction(self, msg):  # type: ignore[no-untyped-def]
            raise AssertionError("not reached")

    producer = TransactionProducer("PG", "127.0.0.1:1", listener=Listener())  # never started: nothing is sent
    with pytest.raises(BadRequestError) as info:
        producer.send_message_in_transaction(Message("T", b"x", delay_level=2))
    assert info.value.code == errors_pb2.CODE_MESSAGE_TYPE_CONFLICT


def test_priority_is_a_property_and_comes_back_on_a_received_message() -> None:
    msg = Message("T", b"x", priority=7)
    assert msg.properties == {PROPERTY_PRIORITY: "7"} and msg.priority == 7
    assert message_to_proto(msg, born_timestamp_ms=1).properties[PROPERTY_PRIORITY] == "7"
    view = common_pb2.MessageView(message=common_pb2.Message(topic="T", body=b"x", properties={PROPERTY_PRIORITY: "2"}))
    assert message_ext_from_proto(view).priority == 2
    assert message_ext_from_proto(common_pb2.MessageView(message=common_pb2.Message(topic="T"))).priority is None
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError):
            Message("T", b"x", priority=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Message("T", b"x", priority=1, delay_level=3)  # RocketMQ's clients refuse both


def test_route_says_which_stores_hold_a_priority_topic() -> None:
    route = topic_route_from_proto(
        route_pb2.QueryRouteResponse(
            topic="T",
            queues=[
                route_pb2.QueueData(
                    store_id="s1", read_queue_nums=2, write_queue_nums=2, perm=6, message_type="PRIORITY"
                ),
                route_pb2.QueueData(store_id="s2", read_queue_nums=2, write_queue_nums=2, perm=6),
            ],
        )
    )
    assert route.is_priority("s1") and not route.is_priority("s2") and not route.is_priority("s3")
