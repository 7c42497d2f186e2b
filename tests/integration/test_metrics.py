"""Every service's /metrics over HTTP, on real processes: a send, a pull, a held long
poll woken by a send, transactions (commit, rollback, a check answered with commit), a
RocketMQ v2 call to the gateway; each figure moves by what was done."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import ServiceFactory, ServiceProcess

from txmq import Admin, LocalTransactionState, Message, Producer, TransactionListener, TransactionProducer
from txmq.protocol import TRANS_HALF_TOPIC
from txmq.v1 import common_pb2, pull_pb2, pull_pb2_grpc, store_pb2, store_pb2_grpc

pytestmark = pytest.mark.slow

METRICS_LINE = re.compile(r"metrics on http://(\S+)/metrics \(bound port \d+\)")
WAIT_S = 30.0
FAST_TXCHECK = (
    "--transaction_check_interval_ms", "200",
    "--transaction_timeout_ms", "300",
)  # fmt: skip


def metrics_address(process: ServiceProcess) -> str:
    """host:port the service logged for its /metrics server."""
    found = METRICS_LINE.search(Path(process.process.log_path).read_text())
    assert found, f"no metrics line in {process.process.log_path}"
    return found.group(1)


Samples = list[tuple[str, dict[str, str], float]]


def scrape(address: str) -> Samples:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def value(samples: Samples, name: str, /, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels`` (0: none)."""
    return sum(v for n, ls, v in samples if n == name and all(ls.get(k) == want for k, want in labels.items()))


def wait_for(what: str, predicate: Callable[[], object]) -> object:
    deadline = time.monotonic() + WAIT_S
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return result


class Listener(TransactionListener):
    def __init__(self) -> None:
        self.execute = LocalTransactionState.COMMIT
        self.checked: list[str] = []

    def execute_local_transaction(self, msg, arg):
        return self.execute

    def check_local_transaction(self, msg):
        self.checked.append(msg.unique_id)
        return LocalTransactionState.COMMIT


def test_every_service_exports_what_it_did(service_factory: ServiceFactory) -> None:
    store = service_factory.store("--flush_mode", "sync", "--metrics_port", "0")
    txcheck = service_factory.start("txcheck", *FAST_TXCHECK, "--metrics_port", "0")
    pull = service_factory.start("pull", "--metrics_port", "0")
    # metrics_host: the gateway's /metrics on another loopback address than its gRPC port.
    gateway = service_factory.start("gateway", "--metrics_port", "0", "--metrics_host", "127.0.0.2")
    ports = {
        name: metrics_address(p)
        for name, p in (("store", store), ("txcheck", txcheck), ("pull", pull), ("gateway", gateway))
    }
    assert len(set(ports.values())) == 4
    assert ports["gateway"].startswith("127.0.0.2:") and ports["store"].startswith("127.0.0.1:")
    before = {name: scrape(port) for name, port in ports.items()}
    for name, samples in before.items():
        assert value(samples, "process_cpu_seconds_total") > 0, name  # the default collectors are there

    def delta(target: str, name: str, /, **labels: str) -> float:
        return value(scrape(ports[target]), name, **labels) - value(before[target], name, **labels)

    topic = f"Metrics-{uuid.uuid4().hex[:8]}"
    group = f"CG-{uuid.uuid4().hex[:8]}"
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    with grpc.insecure_channel(store.address) as ch:
        store_id = (
            store_pb2_grpc.StoreAdminStub(ch).GetStoreStatus(store_pb2.GetStoreStatusRequest(), timeout=10).store_id
        )
        # An error is counted under its status.
        with pytest.raises(grpc.RpcError) as missing:
            store_pb2_grpc.StoreAdminStub(ch).GetTopic(store_pb2.GetTopicRequest(name="NoSuchTopic"), timeout=10)
    error_code = missing.value.code().name
    assert error_code not in ("OK", "UNKNOWN", "INTERNAL")

    bodies = [b"a", b"b" * 10, b"c" * 100, b"d" * 1000, b"e" * 2000]
    with Producer(group="PG-metrics", endpoint=store.address) as producer:
        for body in bodies:
            producer.send(Message(topic, body))
    sent_bytes = sum(map(len, bodies))

    queue = common_pb2.MessageQueue(topic=topic, store_id=store_id, queue_id=0)
    with grpc.insecure_channel(pull.address) as ch:
        stub = pull_pb2_grpc.PullStub(ch)
        first = stub.PullMessage(
            pull_pb2.PullMessageRequest(consumer_group=group, queue=queue, queue_offset=0, max_messages=32), timeout=10
        )
        assert [m.message.body for m in first.messages] == bodies
        stub.UpdateConsumerOffset(
            pull_pb2.UpdateConsumerOffsetRequest(consumer_group=group, queue=queue, offset=2), timeout=10
        )

        # A held long poll, woken by a send.
        held: list[pull_pb2.PullMessageResponse] = []
        holder = threading.Thread(
            target=lambda: held.append(
                stub.PullMessage(
                    pull_pb2.PullMessageRequest(
                        consumer_group=group, queue=queue, queue_offset=5, max_messages=32, suspend=True,
                        suspend_timeout_ms=25_000,
                    ),
                    timeout=30,
                )
            )
        )  # fmt: skip
        holder.start()
        try:
            wait_for("the pull to be held", lambda: value(scrape(ports["pull"]), "txmq_pull_held_requests") == 1)
            with Producer(group="PG-metrics", endpoint=store.address) as producer:
                producer.send(Message(topic, b"wake"))
        finally:
            holder.join(timeout=35)
        assert [m.message.body for m in held[0].messages] == [b"wake"]
    sent_bytes += 4

    # store: in, out, sizes, latency, flush, lag, gauges
    assert delta("store", "rocketmq_messages_in_total", topic=topic) == 6
    assert delta("store", "rocketmq_throughput_in_total", topic=topic) == sent_bytes
    assert delta("store", "rocketmq_messages_out_total", topic=topic) == 6
    assert delta("store", "rocketmq_throughput_out_total", topic=topic) == sent_bytes
    assert delta("store", "rocketmq_message_size_bucket", le="1024.0") == 5  # 1, 10, 100, 1000 and "wake"
    assert delta("store", "rocketmq_message_size_bucket", le="4096.0") == 6  # and 2000
    assert delta("store", "rocketmq_message_size_sum") == sent_bytes
    # The SDK sends over SendStream: each of the six sequential sends is one frame, timed.
    assert delta("store", "rocketmq_rpc_latency_count", service="Store", action="SendStream", result="OK") == 6
    assert delta("store", "rocketmq_rpc_latency_count", service="StoreAdmin", action="GetTopic", result=error_code) == 1
    assert delta("store", "txmq_store_flush_seconds_count") >= 1  # sync flush: a group commit per send at most
    now = scrape(ports["store"])
    lag = dict(consumer_group=group, topic=topic, queue_id="0", store_id=store_id)
    assert value(now, "rocketmq_consumer_lag_messages", **lag) == 6 - 2
    assert value(now, "txmq_store_disk_free_bytes", store_id=store_id) > 0
    assert value(now, "rocketmq_storage_size", store_id=store_id) > 0
    assert value(now, "rocketmq_storage_flush_behind_bytes", store_id=store_id) == 0  # sync flush
    assert (
        value(now, "txmq_store_commitlog_bytes", store_id=store_id)
        - value(before["store"], "txmq_store_commitlog_bytes", store_id=store_id)
        > sent_bytes
    )

    # pull: what consumers got, the long poll and its end, latency
    assert delta("pull", "txmq_pull_messages_total", consumer_group=group, topic=topic) == 6
    assert delta("pull", "txmq_pull_bytes_total", consumer_group=group, topic=topic) == sent_bytes
    assert delta("pull", "txmq_pull_long_polls_total", outcome="arrival") == 1
    assert delta("pull", "txmq_pull_long_polls_total") == 1
    assert value(scrape(ports["pull"]), "txmq_pull_held_requests") == 0
    assert delta("pull", "rocketmq_rpc_latency_count", service="Pull", action="PullMessage", result="OK") == 2
    assert delta("pull", "rocketmq_rpc_latency_count", service="Pull", action="UpdateConsumerOffset", result="OK") == 1

    # txcheck: a commit, a rollback, an UNKNOWN committed by the check
    listener = Listener()
    with TransactionProducer(group="PG-metrics-tx", endpoint=store.address, listener=listener) as producer:
        producer.start(wait_channel=10)
        producer.send_message_in_transaction(Message(topic, b"commit"))
        listener.execute = LocalTransactionState.ROLLBACK
        producer.send_message_in_transaction(Message(topic, b"rollback"))
        listener.execute = LocalTransactionState.UNKNOWN
        pending = producer.send_message_in_transaction(Message(topic, b"unknown"))
        # The producer's own ENDs go straight to the store; the check's answer through txcheck.
        decided = "txmq_store_transaction_decisions_total"
        wait_for("the checked commit", lambda: delta("store", decided, decision="commit", outcome="first") == 2)
        assert pending.transaction_id in listener.checked
    assert delta("store", decided, decision="rollback", outcome="first") == 1
    assert delta("txcheck", "rocketmq_commit_messages_total") == 1  # the checked one, relayed
    assert delta("txcheck", "rocketmq_rollback_messages_total") == 0
    sent = delta("txcheck", "txmq_txcheck_checks_sent_total")
    answered = delta("txcheck", "txmq_txcheck_checks_answered_total")
    assert 1 <= answered <= sent
    assert delta("txcheck", "txmq_txcheck_discarded_total") == 0
    # Three half messages, and each check puts its half message back renewed (RocketMQ's check).
    assert delta("store", "rocketmq_messages_in_total", topic=TRANS_HALF_TOPIC) == 3 + sent
    assert delta("store", "rocketmq_messages_in_total", topic=topic) == 6 + 2  # the two commits
    wait_for(
        "the check loop to pass every half message",
        lambda: value(scrape(ports["store"]), "rocketmq_half_messages", store_id=store_id) == 0,
    )

    # gateway: RocketMQ v2 calls by action and in-band status code
    from txmq_gateway.v2 import pb, svc, svc_grpc

    with grpc.insecure_channel(gateway.address) as ch:
        stub = svc_grpc.MessagingServiceStub(ch)
        md = [("x-mq-client-id", "metrics-test")]
        ok = stub.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=md, timeout=10)
        assert ok.status.code == pb.Code.OK
        nope = stub.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")), metadata=md, timeout=10)
        # A SimpleConsumer receive: the messages are in flight until acked.
        receive = svc.ReceiveMessageRequest(
            group=pb.Resource(name="GW-metrics"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
            filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"),
            batch_size=32,
        )
        frames = list(stub.ReceiveMessage(receive, metadata=md, timeout=30))
        received = [f.message for f in frames if f.HasField("message")]
        assert sorted(m.body for m in received) == sorted([*bodies, b"wake", b"commit", b"unknown"])
        assert frames[-1].status.code == pb.Code.OK
        inflight = dict(consumer_group="GW-metrics", topic=topic)
        assert value(scrape(ports["gateway"]), "rocketmq_consumer_inflight_messages", **inflight) == 8
        first = received[0]
        acked = stub.AckMessage(
            svc.AckMessageRequest(
                group=pb.Resource(name="GW-metrics"),
                topic=pb.Resource(name=topic),
                entries=[
                    svc.AckMessageEntry(
                        message_id=first.system_properties.message_id,
                        receipt_handle=first.system_properties.receipt_handle,
                    )
                ],
            ),
            metadata=md,
            timeout=10,
        )
        assert acked.status.code == pb.Code.OK
        assert value(scrape(ports["gateway"]), "rocketmq_consumer_inflight_messages", **inflight) == 7
    not_found = pb.Code.Name(nope.status.code)
    assert not_found != "OK"
    gw = dict(service="MessagingService", action="QueryRoute")
    assert delta("gateway", "rocketmq_rpc_latency_count", **gw, result="OK") == 1
    assert delta("gateway", "rocketmq_rpc_latency_count", **gw, result=not_found) == 1
    gw["action"] = "ReceiveMessage"
    assert delta("gateway", "rocketmq_rpc_latency_count", **gw, result="OK") == 1
    assert (
        delta("gateway", "rocketmq_rpc_latency_count", service="MessagingService", action="AckMessage", result="OK")
        == 1
    )
