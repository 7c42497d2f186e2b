"""Forged transaction ids through real gateways (issue 16): a local cluster (store, pull,
txcheck, gateway A) plus a second gateway process B with authentication on, both under
one etcd prefix, so they share the transaction-handle key in etcd.

- A forged id (valid JSON with no MAC, a wrong MAC, a real id with an altered offset, the
  overflow and deep-nesting ids that answered INTERNAL) gets INVALID_TRANSACTION_ID and
  writes nothing to the store's commit log; the half message stays invisible.
- A real transaction sent through A is committed through B, and one is rolled back
  through B after B restarted (the key comes back from etcd).
- B refuses signatures dated outside the window, and a binary header that is not UTF-8
  does not turn a good call into INTERNAL."""

from __future__ import annotations

import base64
import json
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
from txmq.v1 import store_pb2, store_pb2_grpc
from txmq_gateway.auth import sign
from txmq_gateway.convert import encode_token

AK, SK = "forgery-ak", "forgery-sk"


@dataclass
class Two:
    cluster: LocalCluster
    a: str
    b: ServiceProcess
    store: str


@pytest.fixture(scope="module")
def two(etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Two]:
    base = scoped_dir(request, tmp_path_factory, "forgery")
    prefix = private_prefix()
    cluster = new_local_cluster(base, etcd_endpoints=etcd.endpoint, etcd_prefix=prefix)
    cluster.start()
    b = ServiceProcess(
        "gateway", port=free_port(), etcd_endpoints=etcd.endpoint, etcd_prefix=prefix,
        log_path=cluster.log_dir / "gateway-b.log", args=["--access_key", AK, "--secret_key", SK],
    )  # fmt: skip
    try:
        b.start()
        yield Two(cluster, cluster.services["gateway"].address, b, cluster.services["store"].address)
    finally:
        b.stop()
        cluster.stop()


def metadata(client: str, *, date: str | None = None) -> tuple[tuple[str, str], ...]:
    date = date or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return (
        ("x-mq-client-id", client),
        ("x-mq-date-time", date),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={AK}, SignedHeaders=x-mq-date-time, Signature={sign(SK.encode(), date)}",
        ),
    )


def send_half(stub: svc_grpc.MessagingServiceStub, topic: str, body: bytes, client: str) -> tuple[str, str]:
    req = svc.SendMessageRequest()
    m = req.messages.add()
    m.topic.name = topic
    m.body = body
    m.system_properties.message_id = uuid.uuid4().hex.upper()
    m.system_properties.message_type = pb.TRANSACTION
    m.system_properties.born_timestamp.seconds = int(time.time())
    m.system_properties.born_host = "127.0.0.1"
    m.system_properties.body_encoding = pb.IDENTITY
    res = stub.SendMessage(req, metadata=metadata(client), timeout=10)
    assert res.status.code == pb.OK, res.status
    [entry] = res.entries
    return entry.message_id, entry.transaction_id


def end(
    stub: svc_grpc.MessagingServiceStub, topic: str, message_id: str, transaction_id: str, resolution: int, client: str
) -> pb.Status:
    req = svc.EndTransactionRequest(
        message_id=message_id, transaction_id=transaction_id, resolution=resolution, source=pb.SOURCE_CLIENT
    )
    req.topic.name = topic
    return stub.EndTransaction(req, metadata=metadata(client), timeout=10).status


def visible(store: str, topic: str) -> list[bytes]:
    with grpc.insecure_channel(store) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        out: list[bytes] = []
        for q in range(4):
            r = stub.GetMessage(store_pb2.GetMessageRequest(topic=topic, queue_id=q, offset=0), timeout=10)
            out += [m.message.body for m in r.messages]
        return sorted(out)


def commit_log_end(store: str) -> int:
    with grpc.insecure_channel(store) as ch:
        status = store_pb2_grpc.StoreAdminStub(ch).GetStoreStatus(store_pb2.GetStoreStatusRequest(), timeout=10)
        return status.commit_log_max_offset


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def new_topic(two: Two, name: str) -> str:
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    with Admin(two.cluster.bootstrap) as admin:
        admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    return topic


def test_forged_transaction_ids_are_refused_and_write_nothing(two: Two) -> None:
    topic = new_topic(two, "Forged")
    client = f"client-{uuid.uuid4().hex[:8]}"
    with grpc.insecure_channel(two.a) as ca, grpc.insecure_channel(two.b.address) as cb:
        a, b = svc_grpc.MessagingServiceStub(ca), svc_grpc.MessagingServiceStub(cb)
        message_id, real = send_half(a, topic, b"half", client)
        fields_text, _, mac = real.partition(".")
        fields = json.loads(base64.urlsafe_b64decode(fields_text + "=="))
        store_id = fields["s"]
        altered = {**fields, "c": fields["c"] + 1}  # point the decision somewhere else
        forged = {
            "valid JSON, no MAC": encode_token({"s": store_id, "c": 0, "q": 0, "t": message_id}),
            "wrong MAC": encode_token({"s": store_id, "c": 0, "q": 0, "t": message_id}) + "." + b64(b"\0" * 16),
            "altered offset": encode_token(altered) + "." + mac,
            "zeroed MAC": real[: -len(mac)] + b64(bytes(16)),
            "overflow": encode_token({"s": store_id, "c": 10**40, "q": 0, "t": message_id}),
            "deep nesting": b64(b"[" * 700),
            "too long": "A" * 100_000,
        }
        before = commit_log_end(two.store)
        for what, transaction_id in forged.items():
            for stub in (a, b):
                status = end(stub, topic, message_id, transaction_id, pb.COMMIT, client)
                assert status.code == pb.INVALID_TRANSACTION_ID, (what, status)
                assert "not issued by txmq" in status.message and len(status.message) < 250, (what, status)
        assert commit_log_end(two.store) == before  # no op message, nothing at all
        assert visible(two.store, topic) == []
        # The real id still works afterwards, at the other gateway.
        assert end(b, topic, message_id, real, pb.COMMIT, client).code == pb.OK
    assert visible(two.store, topic) == [b"half"]


def test_a_handle_of_one_gateway_ends_at_the_other_also_after_a_restart(two: Two) -> None:
    topic = new_topic(two, "Across")
    client = f"client-{uuid.uuid4().hex[:8]}"
    with grpc.insecure_channel(two.a) as ca:
        a = svc_grpc.MessagingServiceStub(ca)
        kept = send_half(a, topic, b"kept", client)
        dropped = send_half(a, topic, b"dropped", client)
        with grpc.insecure_channel(two.b.address) as cb:
            assert end(svc_grpc.MessagingServiceStub(cb), topic, *kept, pb.COMMIT, client).code == pb.OK
        assert visible(two.store, topic) == [b"kept"]
        two.b.stop()
        two.b.restart()  # it reads the same key from etcd
        with grpc.insecure_channel(two.b.address) as cb:
            b = svc_grpc.MessagingServiceStub(cb)
            assert end(b, topic, *dropped, pb.ROLLBACK, client).code == pb.OK
            # B's own handles are accepted by A.
            again = send_half(b, topic, b"through-b", client)
        assert end(a, topic, *again, pb.COMMIT, client).code == pb.OK
    assert visible(two.store, topic) == [b"kept", b"through-b"]


def test_signatures_out_of_the_window_are_unauthorized_at_the_real_gateway(two: Two) -> None:
    route = svc.QueryRouteRequest()
    route.topic.name = new_topic(two, "Dated")
    with grpc.insecure_channel(two.b.address) as cb:
        b = svc_grpc.MessagingServiceStub(cb)
        assert b.QueryRoute(route, metadata=metadata("c1"), timeout=10).status.code == pb.OK
        for date in ("20010101T000000Z", "20991231T235959Z", "x"):
            status = b.QueryRoute(route, metadata=metadata("c1", date=date), timeout=10).status
            assert status.code == pb.UNAUTHORIZED and "x-mq-date-time" in status.message, (date, status)
        # A binary header that is not UTF-8 (gRPC passes it as bytes): no INTERNAL.
        md = (*metadata("c1"), ("x-anything-bin", b"\xff\xfe"))
        assert b.QueryRoute(route, metadata=md, timeout=10).status.code == pb.OK
        telemetry = b.Telemetry(iter([svc.TelemetryCommand()]), metadata=(*metadata("c1", date="x"),), timeout=10)
        first = next(iter(telemetry))
        assert first.status.code == pb.UNAUTHORIZED
