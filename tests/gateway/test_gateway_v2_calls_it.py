"""The v2 calls RocketMQ's own proxy lacks or gets wrong, through a real gateway with raw
v2 stubs on a local cluster (store, pull, txcheck, gateway): several messages in one
SendMessageRequest stored all or nothing (rocketmq-apis #68)."""

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

from txmq import Admin
from txmq.v1 import store_pb2, store_pb2_grpc


@pytest.fixture(scope="module")
def cluster(etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = new_local_cluster(
        tmp_path_factory.mktemp("v2-calls"), etcd_endpoints=etcd.endpoint, etcd_prefix=private_prefix()
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
