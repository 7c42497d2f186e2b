"""The v2 calls RocketMQ's own proxy lacks or gets wrong, through a real gateway with raw
v2 stubs on a local cluster (store, pull, txcheck, gateway): several messages in one
SendMessageRequest stored all or nothing (rocketmq-apis #68); UpdateOffset and PullMessage
(RocketMQ #10434: UNIMPLEMENTED there); a receive's await shorter than the deadline
(RocketMQ #7986)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from support import EtcdServer, LocalCluster, new_local_cluster
from support.processes import private_prefix
from support.scratch import scoped_dir

from txmq import Admin
from txmq.protocol import MESSAGE_TYPE_PRIORITY, TOPIC_ATTRIBUTE_MESSAGE_TYPE
from txmq.v1 import store_pb2, store_pb2_grpc


@pytest.fixture(scope="module")
def cluster(
    etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    cluster = new_local_cluster(
        scoped_dir(request, tmp_path_factory, "v2-calls"), etcd_endpoints=etcd.endpoint, etcd_prefix=private_prefix()
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


MD = (("x-mq-client-id", f"client-{uuid.uuid4().hex[:8]}"),)


def _topic(cluster: LocalCluster, queues: int = 2) -> str:
    topic = f"V2Calls-{uuid.uuid4().hex[:8]}"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    return topic


def _message(topic: str, body: bytes) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name=topic), body=body)
    sp = m.system_properties
    sp.message_id = uuid.uuid4().hex.upper()
    sp.message_type = pb.NORMAL
    sp.born_timestamp.seconds = int(time.time())
    sp.born_host = "127.0.0.1"
    sp.body_encoding = pb.IDENTITY
    return m


def _stored(cluster: LocalCluster, topic: str) -> list[bytes]:
    with grpc.insecure_channel(cluster.services["store"].address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        out: list[bytes] = []
        for q in range(2):
            r = stub.GetMessage(store_pb2.GetMessageRequest(topic=topic, queue_id=q, offset=0), timeout=10)
            out += [m.message.body for m in r.messages]
        return out


@pytest.fixture
def gateway(cluster: LocalCluster) -> Iterator[svc_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(cluster.services["gateway"].address) as ch:
        yield svc_grpc.MessagingServiceStub(ch)


def test_a_batch_is_stored_all_or_nothing(cluster: LocalCluster, gateway: svc_grpc.MessagingServiceStub) -> None:
    topic = _topic(cluster)
    bad = svc.SendMessageRequest(messages=[_message(topic, b"a"), _message(topic, b"b"), _message(topic, b"")])
    res = gateway.SendMessage(bad, metadata=MD, timeout=10)
    assert res.status.code == pb.MESSAGE_BODY_EMPTY and "message 3 of the batch" in res.status.message, res.status
    assert [e.status.code for e in res.entries] == [pb.MESSAGE_BODY_EMPTY] * 3
    mixed = svc.SendMessageRequest(messages=[_message(topic, b"a"), _message(_topic(cluster), b"b")])
    res = gateway.SendMessage(mixed, metadata=MD, timeout=10)
    assert res.status.code == pb.BAD_REQUEST and "one topic" in res.status.message, res.status
    assert _stored(cluster, topic) == []

    good = svc.SendMessageRequest(messages=[_message(topic, b"m%d" % i) for i in range(3)])
    res = gateway.SendMessage(good, metadata=MD, timeout=10)
    assert res.status.code == pb.OK, res.status
    assert [e.message_id for e in res.entries] == [m.system_properties.message_id for m in good.messages]
    assert [e.offset for e in res.entries] == [0, 1, 2]  # one queue, in order
    assert _stored(cluster, topic) == [b"m0", b"m1", b"m2"]


def _queue(gateway: svc_grpc.MessagingServiceStub, topic: str, queue_id: int) -> pb.MessageQueue:
    route = svc.QueryRouteRequest(topic=pb.Resource(name=topic))
    [q] = [q for q in gateway.QueryRoute(route, metadata=MD, timeout=10).message_queues if q.id == queue_id]
    return q


def _pull(
    gateway: svc_grpc.MessagingServiceStub,
    group: str,
    mq: pb.MessageQueue,
    offset: int,
    timeout: float = 10,
    **fields: object,
) -> tuple[pb.Status, list[pb.Message], int | None]:
    request = svc.PullMessageRequest(group=pb.Resource(name=group), message_queue=mq, offset=offset, **fields)  # type: ignore[arg-type]
    status, messages, next_offset = None, [], None
    for frame in gateway.PullMessage(request, metadata=MD, timeout=timeout):
        kind = frame.WhichOneof("content")
        if kind == "status":
            assert status is None and not messages, "the status comes first"
            status = frame.status
        elif kind == "message":
            messages.append(frame.message)
        else:
            next_offset = frame.next_offset
    assert status is not None
    return status, messages, next_offset


def test_update_offset_then_get_offset(cluster: LocalCluster, gateway: svc_grpc.MessagingServiceStub) -> None:
    topic = _topic(cluster)
    group = f"G-{uuid.uuid4().hex[:8]}"
    assert (
        gateway.SendMessage(
            svc.SendMessageRequest(messages=[_message(topic, b"m%d" % i) for i in range(3)]), metadata=MD, timeout=10
        ).status.code
        == pb.OK
    )
    queue_id = next(q for q in range(2) if _count(cluster, topic, q) == 3)
    mq = _queue(gateway, topic, queue_id)

    def update(offset: int, group: str = group) -> pb.Status:
        req = svc.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=mq, offset=offset)
        return gateway.UpdateOffset(req, metadata=MD, timeout=10).status

    assert update(2).code == pb.OK
    get = svc.GetOffsetRequest(group=pb.Resource(name=group), message_queue=mq)
    res = gateway.GetOffset(get, metadata=MD, timeout=10)
    assert (res.status.code, res.offset) == (pb.OK, 2)
    assert update(1).code == pb.OK  # back: a pull consumer may rewind
    assert gateway.GetOffset(get, metadata=MD, timeout=10).offset == 1
    assert update(4).code == pb.ILLEGAL_OFFSET  # beyond the max offset (3)
    assert update(-1).code == pb.ILLEGAL_OFFSET
    assert update(1, group="").code == pb.ILLEGAL_CONSUMER_GROUP
    # A group receiving with ReceiveMessage here: the gateway keeps its offsets.
    from google.protobuf.duration_pb2 import Duration

    popping = f"G-{uuid.uuid4().hex[:8]}"
    receive = svc.ReceiveMessageRequest(
        group=pb.Resource(name=popping),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(),
    )
    list(gateway.ReceiveMessage(receive, metadata=MD, timeout=10))
    refused = update(1, group=popping)
    assert refused.code == pb.PRECONDITION_FAILED and "ReceiveMessage" in refused.message, refused
    mq.id = 7
    assert update(0).code == pb.BAD_REQUEST


def _count(cluster: LocalCluster, topic: str, queue_id: int) -> int:
    with grpc.insecure_channel(cluster.services["store"].address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        r = stub.GetMessage(store_pb2.GetMessageRequest(topic=topic, queue_id=queue_id, offset=0), timeout=10)
        return len(r.messages)


def test_pull_message(cluster: LocalCluster, gateway: svc_grpc.MessagingServiceStub) -> None:
    topic = _topic(cluster)
    group = f"G-{uuid.uuid4().hex[:8]}"
    batch = [_message(topic, b"m%d" % i) for i in range(5)]
    for i, m in enumerate(batch):
        m.system_properties.tag = "A" if i % 2 == 0 else "B"
    assert gateway.SendMessage(svc.SendMessageRequest(messages=batch), metadata=MD, timeout=10).status.code == pb.OK
    queue_id = next(q for q in range(2) if _count(cluster, topic, q) == 5)
    mq = _queue(gateway, topic, queue_id)

    status, messages, next_offset = _pull(gateway, group, mq, 0, batch_size=3)
    assert status.code == pb.OK, status
    assert [m.body for m in messages] == [b"m0", b"m1", b"m2"] and next_offset == 3
    assert [m.system_properties.queue_offset for m in messages] == [0, 1, 2]
    status, messages, next_offset = _pull(gateway, group, mq, 3, batch_size=32)
    assert [m.body for m in messages] == [b"m3", b"m4"] and next_offset == 5
    tagged = pb.FilterExpression(type=pb.TAG, expression="A")
    status, messages, next_offset = _pull(gateway, group, mq, 0, filter_expression=tagged)
    assert [m.body for m in messages] == [b"m0", b"m2", b"m4"] and next_offset == 5

    # Nothing new: the long poll ends at its await (300 ms), well before the deadline.
    from google.protobuf.duration_pb2 import Duration

    started = time.monotonic()
    status, messages, next_offset = _pull(
        gateway, group, mq, 5, long_polling_timeout=Duration(nanos=300_000_000), timeout=10
    )
    took = time.monotonic() - started
    assert (status.code, messages, next_offset) == (pb.MESSAGE_NOT_FOUND, [], 5), status
    assert 0.25 <= took < 3, took

    status, messages, next_offset = _pull(gateway, group, mq, 9)
    assert status.code == pb.ILLEGAL_OFFSET and next_offset is not None, status
    status, _, _ = _pull(gateway, group, mq, -1)
    assert status.code == pb.ILLEGAL_OFFSET
    status, _, _ = _pull(gateway, "", mq, 0)
    assert status.code == pb.ILLEGAL_CONSUMER_GROUP
    mq.id = 7
    status, _, _ = _pull(gateway, group, mq, 0)
    assert status.code == pb.BAD_REQUEST and "queue id 7" in status.message, status


@pytest.mark.parametrize(("await_ms", "deadline_s", "at_most_s"), [(0, 5, 1.0), (100, 5, 1.0), (20_000, 1.5, 1.5)])
def test_receive_answers_when_its_await_ends_and_before_the_deadline(
    cluster: LocalCluster, gateway: svc_grpc.MessagingServiceStub, await_ms: int, deadline_s: float, at_most_s: float
) -> None:
    """Any await from 0 up to the call's deadline (RocketMQ #7986: its proxy raises a
    short one to 5 s and refuses when the deadline leaves less); a longer one is cut to
    the deadline less a reserve, so the answer never comes after the client gave up."""
    from google.protobuf.duration_pb2 import Duration

    topic = _topic(cluster)
    request = svc.ReceiveMessageRequest(
        group=pb.Resource(name=f"G-{uuid.uuid4().hex[:8]}"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=await_ms // 1000, nanos=(await_ms % 1000) * 1_000_000),
    )
    started = time.monotonic()
    frames = list(gateway.ReceiveMessage(request, metadata=MD, timeout=deadline_s))
    took = time.monotonic() - started
    assert [f.status.code for f in frames] == [pb.MESSAGE_NOT_FOUND], frames
    held_s = min(await_ms / 1000, deadline_s - 0.5)  # the gateway keeps 500 ms to answer in
    assert held_s * 0.9 <= took < at_most_s, took


def test_recall_a_delayed_message(cluster: LocalCluster, gateway: svc_grpc.MessagingServiceStub) -> None:
    """RecallMessage (RocketMQ's proxy refuses it unless enabled, #9855): the handle a
    delayed send answered cancels it; the same handle on another topic, too late, or
    malformed is a typed status."""
    topic = _topic(cluster)
    sent = {}
    for name, delay_s in (("recalled", 3), ("kept", 3)):
        m = _message(topic, name.encode())
        m.system_properties.message_type = pb.DELAY
        m.system_properties.delivery_timestamp.seconds = int(time.time()) + delay_s
        (entry,) = gateway.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=MD, timeout=10).entries
        assert entry.status.code == pb.OK and entry.recall_handle.startswith("txr1."), entry
        sent[name] = entry.recall_handle
    now = gateway.SendMessage(svc.SendMessageRequest(messages=[_message(topic, b"now")]), metadata=MD, timeout=10)
    assert now.entries[0].recall_handle == ""

    def recall(handle: str, on: str = topic) -> svc.RecallMessageResponse:
        request = svc.RecallMessageRequest(topic=pb.Resource(name=on), recall_handle=handle)
        return gateway.RecallMessage(request, metadata=MD, timeout=10)

    assert recall(sent["recalled"], on="Elsewhere").status.code == pb.BAD_REQUEST
    answer = recall(sent["recalled"])
    assert answer.status.code == pb.OK and answer.message_id, answer
    assert recall("txr1.garbage").status.code == pb.BAD_REQUEST
    deadline = time.monotonic() + 30
    while sorted(_stored(cluster, topic)) != [b"kept", b"now"] and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # a later tick must not deliver the recalled one
    assert sorted(_stored(cluster, topic)) == [b"kept", b"now"]
    late = recall(sent["kept"])
    assert late.status.code == pb.PRECONDITION_FAILED and "CODE_MESSAGE_ALREADY_DELIVERED" in late.status.message


def test_priority_messages(cluster: LocalCluster, gateway: svc_grpc.MessagingServiceStub) -> None:
    """PRIORITY messages (RocketMQ 5.4): stored in the queue of their priority, read back
    with it; a priority topic's route accepts PRIORITY only; a priority on a plain topic or
    out of range is a typed refusal."""
    topic = f"V2Prio-{uuid.uuid4().hex[:8]}"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(
            topic, read_queue_nums=3, write_queue_nums=3,
            attributes={TOPIC_ATTRIBUTE_MESSAGE_TYPE: MESSAGE_TYPE_PRIORITY},
        )  # fmt: skip
    route = gateway.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=MD, timeout=10)
    assert {tuple(q.accept_message_types) for q in route.message_queues} == {(pb.PRIORITY,)}

    def send(to: str, priority: int) -> svc.SendMessageResponse:
        m = _message(to, b"p%d" % priority)
        m.system_properties.message_type = pb.PRIORITY
        m.system_properties.priority = priority
        return gateway.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)

    for p in (2, 0, 1):
        assert send(topic, p).status.code == pb.OK
    assert send(topic, 3).status.code == pb.BAD_REQUEST  # queues 0..2: priorities 0..2
    plain = _topic(cluster)
    assert send(plain, 1).status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    with grpc.insecure_channel(cluster.services["store"].address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        for q in range(3):
            r = stub.GetMessage(store_pb2.GetMessageRequest(topic=topic, queue_id=q, offset=0), timeout=10)
            assert [m.message.body for m in r.messages] == [b"p%d" % q]
    broker = pb.Broker(name=route.message_queues[0].broker.name)
    frames = list(
        gateway.PullMessage(
            svc.PullMessageRequest(
                group=pb.Resource(name=f"G-{uuid.uuid4().hex[:8]}"),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=2, broker=broker),
                offset=0, batch_size=8,
            ),
            metadata=MD, timeout=10,
        )
    )  # fmt: skip
    (got,) = [f.message for f in frames if f.HasField("message")]
    assert (got.system_properties.priority, got.system_properties.message_type) == (2, pb.PRIORITY)
    assert "TXMQ_PRIORITY" not in got.user_properties
