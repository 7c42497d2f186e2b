"""The gateway's EndTransaction is decided by the store holding the half message itself
(docs/transactions.md, "END straight to the store"): with every txcheck replica stopped,
an official client's commit is still readable as soon as EndTransaction answers."""

from __future__ import annotations

import uuid

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc
from support import EtcdServer, new_local_cluster
from support.processes import private_prefix

from txmq import Admin

from .test_end_anywhere_it import _end, _send, _visible


def test_a_commit_through_the_gateway_needs_no_txcheck(etcd: EtcdServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cluster = new_local_cluster(tmp_path, etcd_endpoints=etcd.endpoint, etcd_prefix=private_prefix())
    cluster.start()
    try:
        cluster.services["txcheck"].stop()
        topic = f"TxNoCheck-{uuid.uuid4().hex[:8]}"
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
        client = f"client-{uuid.uuid4().hex[:8]}"
        store = cluster.services["store"].address
        with grpc.insecure_channel(cluster.services["gateway"].address) as ch:
            gw = svc_grpc.MessagingServiceStub(ch)
            kept = _send(gw, topic, b"commit-without-txcheck", client)
            dropped = _send(gw, topic, b"rollback-without-txcheck", client)
            _end(gw, topic, *kept, pb.COMMIT, client)
            assert _visible(store, topic) == [b"commit-without-txcheck"]
            _end(gw, topic, *dropped, pb.ROLLBACK, client)
            _end(gw, topic, *kept, pb.COMMIT, client)  # answered like the first
        assert _visible(store, topic) == [b"commit-without-txcheck"]
    finally:
        cluster.stop()
