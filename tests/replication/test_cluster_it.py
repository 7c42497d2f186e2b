"""A whole local cluster whose store is a replicated group of three (``txmq up
--store-replicas 3``): the SDK's producer follows a leader change by itself, and a
consumer through the pull service reads every acknowledged message after it."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from support import new_local_cluster
from support.topics import consume_all
from support.waiting import wait_until

from txmq import (
    Admin,
    LocalTransactionState,
    Message,
    Producer,
    PullConsumer,
    SendStatus,
    TransactionListener,
    TransactionProducer,
)
from txmq.errors import TxmqError
from txmq.v1 import store_pb2, store_pb2_grpc

TOPIC = "GroupClusterTopic"


class _ByBody(TransactionListener):
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT if msg.body.startswith(b"commit") else LocalTransactionState.ROLLBACK

    def check_local_transaction(self, msg) -> LocalTransactionState:
        return LocalTransactionState.COMMIT if msg.body.startswith(b"commit") else LocalTransactionState.ROLLBACK


def _leader(cluster) -> str | None:
    for name, service in cluster.services.items():
        if not name.startswith("store") or not service.process.running():
            continue
        try:
            with grpc.insecure_channel(service.address) as channel:
                st = store_pb2_grpc.StoreReplicationStub(channel).GetReplicaStatus(
                    store_pb2.GetReplicaStatusRequest(), timeout=2
                )
        except grpc.RpcError:
            continue
        if st.role == "leader":
            return name
    return None


@pytest.mark.timeout(300)
def test_sdk_producer_and_pull_consumer_across_a_kill_9_of_the_leader(tmp_path):
    cluster = new_local_cluster(
        tmp_path,
        store_replicas=3,
        store_args=["--flush_mode", "sync", "--replica_lease_ms", "2000", "--replica_lag_max_ms", "2000"],
    )
    cluster.start()
    try:
        bootstrap = cluster.pull_address  # a stable service answers route look-ups
        with Admin(bootstrap) as admin:

            def created() -> bool:  # the group takes writes once two replicas are in sync
                try:
                    admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
                except TxmqError as exc:
                    assert exc.retriable, exc
                    return False
                return True

            wait_until(created, what="the topic created on the group's leader")
        acked: dict[str, bytes] = {}
        errors: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            with Producer("group-cluster-producer", bootstrap, send_timeout=10.0) as producer:
                i = 0
                while not stop.is_set():
                    body = f"m{i}".encode()
                    i += 1
                    try:
                        result = producer.send(Message(TOPIC, body))
                    except TxmqError as exc:
                        errors.append(str(exc))
                        continue
                    if result.status is SendStatus.OK:
                        acked[result.msg_id] = body

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        wait_until(lambda: len(acked) >= 200, what="200 sends acknowledged")
        leader = _leader(cluster)
        assert leader is not None
        cluster.services[leader].kill()
        count = len(acked)
        began = time.monotonic()
        wait_until(lambda: len(acked) >= count + 200, what="200 more sends after the leader was killed")
        print(f"sends resumed {time.monotonic() - began:.2f} s after the kill; errors seen by the producer: {errors}")
        stop.set()
        thread.join(timeout=30)
        assert not errors, errors[:3]

        # Transactions through txcheck reach the new leader: commits become visible,
        # rollbacks never do.
        committed, rolled_back = set(), set()
        with TransactionProducer("group-cluster-tx", bootstrap, listener=_ByBody(), send_timeout=10.0) as tx:
            for i in range(6):
                body = f"{'commit' if i % 2 == 0 else 'rollback'}-{i}".encode()
                result = tx.send_message_in_transaction(Message(TOPIC, body))
                assert result.status is SendStatus.OK, result
                (committed if i % 2 == 0 else rolled_back).add(result.msg_id)

        seen: dict[str, int] = {}
        with PullConsumer("group-cluster-consumer", bootstrap) as consumer:

            def read() -> dict[str, int]:
                seen.clear()
                for m in consume_all(consumer, TOPIC):
                    seen[m.msg_id] = seen.get(m.msg_id, 0) + 1
                return seen

            wait_until(lambda: committed <= set(read()), what="the committed transactions visible")
        assert not rolled_back & set(seen), "a rolled-back transaction is visible"
        lost = [mid for mid in acked if mid not in seen]
        assert not lost, f"{len(lost)} acknowledged messages lost of {len(acked)}"
        duplicated = [mid for mid in acked if seen[mid] > 1]
        print(f"acknowledged {len(acked)}, lost 0, stored twice after a retried send {len(duplicated)}")
    finally:
        cluster.stop()
