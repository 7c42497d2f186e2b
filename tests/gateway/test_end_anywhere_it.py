"""END_TRANSACTION through any gateway replica (better than RocketMQ #9431, where a commit
through a different proxy fails, and #8313, where it waits for a check), and on the same
cluster the v2 offset calls lag monitors use: a local
cluster (store, pull, txcheck, gateway) plus a second gateway process; transactional
messages sent through one gateway with the v2 protocol are committed or rolled back
through the other. The check interval is the default 30 s, so no check can be what
decides: the committed message is readable as soon as END answers, the rolled-back one
never is."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from support import EtcdServer, LocalCluster, ServiceProcess, free_port, new_local_cluster
from support.processes import private_prefix
from support.scratch import scoped_dir

from txmq import Admin
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc


@dataclass
class Two:
    cluster: LocalCluster
    a: str
    b: str
    store: str


@pytest.fixture(scope="module")
def two(etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Two]:
    base = scoped_dir(request, tmp_path_factory, "end-anywhere")
    prefix = private_prefix()
    cluster = new_local_cluster(base, etcd_endpoints=etcd.endpoint, etcd_prefix=prefix)
    cluster.start()
    b = ServiceProcess(
        "gateway", port=free_port(), etcd_endpoints=etcd.endpoint, etcd_prefix=prefix,
        log_path=cluster.log_dir / "gateway-b.log",
    )  # fmt: skip
    try:
        b.start()
        yield Two(cluster, cluster.services["gateway"].address, b.address, cluster.services["store"].address)
    finally:
        b.stop()
        cluster.stop()


def _send(stub: svc_grpc.MessagingServiceStub, topic: str, body: bytes, client: str) -> tuple[str, str]:
    req = svc.SendMessageRequest()
    m = req.messages.add()
    m.topic.name = topic
    m.body = body
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = pb.TRANSACTION
    m.system_properties.born_timestamp.seconds = int(time.time())
    m.system_properties.born_host = "127.0.0.1"
    m.system_properties.body_encoding = pb.IDENTITY
    res = stub.SendMessage(req, metadata=(("x-mq-client-id", client),), timeout=10)
    assert res.status.code == pb.OK, res.status
    [entry] = res.entries
    return entry.message_id, entry.transaction_id


def _end(stub, topic: str, message_id: str, transaction_id: str, resolution: int, client: str) -> None:  # type: ignore[no-untyped-def]
    req = svc.EndTransactionRequest(
        message_id=message_id, transaction_id=transaction_id, resolution=resolution, source=pb.SOURCE_CLIENT
    )
    req.topic.name = topic
    res = stub.EndTransaction(req, metadata=(("x-mq-client-id", client),), timeout=10)
    assert res.status.code == pb.OK, res.status


def _visible(store: str, topic: str) -> list[bytes]:
    with grpc.insecure_channel(store) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        out: list[bytes] = []
        for q in range(8):
            try:
                r = stub.GetMessage(store_pb2.GetMessageRequest(topic=topic, queue_id=q, offset=0), timeout=10)
            except grpc.RpcError:
                continue
            out += [m.message.body for m in r.messages]
        return sorted(out)


def test_sent_through_one_gateway_ended_through_the_other(two: Two) -> None:
    topic = f"TxAnywhere-{uuid.uuid4().hex[:8]}"
    with Admin(two.cluster.bootstrap) as admin:
        admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    client = f"client-{uuid.uuid4().hex[:8]}"
    with grpc.insecure_channel(two.a) as ca, grpc.insecure_channel(two.b) as cb:
        a, b = svc_grpc.MessagingServiceStub(ca), svc_grpc.MessagingServiceStub(cb)
        kept = _send(a, topic, b"commit-elsewhere", client)
        dropped = _send(a, topic, b"rollback-elsewhere", client)
        assert _visible(two.store, topic) == []  # half messages: invisible
        _end(b, topic, *kept, pb.COMMIT, client)
        # Readable as soon as END answered (no check round could have run: 30 s interval).
        assert _visible(two.store, topic) == [b"commit-elsewhere"]
        _end(b, topic, *dropped, pb.ROLLBACK, client)
        # The same decision again through the first gateway is answered like the first.
        _end(a, topic, *kept, pb.COMMIT, client)
    assert _visible(two.store, topic) == [b"commit-elsewhere"]


def test_offsets_for_lag_monitors(two: Two) -> None:
    """GetOffset / QueryOffset (RocketMQ's proxy: UNIMPLEMENTED, #10434, which blocks
    KEDA): a queue's first and last offsets, the first stored at a time, and a group's
    committed offset, for the queues QueryRoute returns."""
    from google.protobuf.timestamp_pb2 import Timestamp

    topic = f"Offsets-{uuid.uuid4().hex[:8]}"
    group = f"G-{uuid.uuid4().hex[:8]}"
    with Admin(two.cluster.bootstrap) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    with grpc.insecure_channel(two.store) as sc:
        store = store_pb2_grpc.StoreStub(sc)
        for i in range(3):
            store.SendMessage(
                store_pb2.SendMessageRequest(message=common_pb2.Message(topic=topic, body=b"m%d" % i, queue_id=1)),
                timeout=10,
            )
        after_ms = int(time.time() * 1000) + 60_000
        store.CommitConsumeOffset(
            store_pb2.CommitConsumeOffsetRequest(consumer_group=group, topic=topic, queue_id=1, offset=2), timeout=10
        )
    client = f"client-{uuid.uuid4().hex[:8]}"
    md = (("x-mq-client-id", client),)
    with grpc.insecure_channel(two.b) as ch:
        gw = svc_grpc.MessagingServiceStub(ch)
        route = svc.QueryRouteRequest()
        route.topic.name = topic
        [q1] = [q for q in gw.QueryRoute(route, metadata=md, timeout=10).message_queues if q.id == 1]

        def query(policy: int, ts_ms: int = 0) -> int:
            req = svc.QueryOffsetRequest(message_queue=q1, query_offset_policy=policy)
            if ts_ms:
                req.timestamp.CopyFrom(Timestamp(seconds=ts_ms // 1000, nanos=(ts_ms % 1000) * 1_000_000))
            res = gw.QueryOffset(req, metadata=md, timeout=10)
            assert res.status.code == pb.OK, res.status
            return res.offset

        assert (query(pb.BEGINNING), query(pb.END)) == (0, 3)
        assert query(pb.TIMESTAMP, 1) == 0 and query(pb.TIMESTAMP, after_ms) == 3
        get = svc.GetOffsetRequest(message_queue=q1)
        get.group.name = group
        res = gw.GetOffset(get, metadata=md, timeout=10)
        assert res.status.code == pb.OK and res.offset == 2
        get.group.name = "G-never-committed"
        assert gw.GetOffset(get, metadata=md, timeout=10).status.code == pb.OFFSET_NOT_FOUND
        get.group.name = ""
        assert gw.GetOffset(get, metadata=md, timeout=10).status.code == pb.ILLEGAL_CONSUMER_GROUP
