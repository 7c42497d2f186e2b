"""Soak: a cluster left idle for many ping-policy windows keeps its links.

Every service pings its links every second (keepalive_time_ms) and permits pings every
half second (keepalive_permit_time_ms), so the idle period below spans dozens of policy
windows. With the settings txmq had before (clients pinging, servers on gRPC's default
policy: no ping within 5 minutes without data), the store could answer GOAWAY
too_many_pings when a call followed unanswered pings, and the pull service's arrival
stream failed (a WARNING) and re-dialed; whether that happens within this test depends on
timing (gRPC's default client budget of two pings without data mostly hid it), while a
server that does not permit what its clients send is cut every time. After the idle
period, with no warning or error in any service's log: a long poll held since before the
idle period is woken by a send, a transaction check reaches its producer over the channel
it opened before the idle period, and the gateway serves the official RocketMQ client.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from support import EtcdServer, LocalCluster, new_local_cluster
from support.processes import private_prefix
from support.scripts import STORE_FAST, TXCHECK_FAST, ScriptRunner, wait_for

from txmq import Admin, LocalTransactionState, Message, Producer, TransactionListener, TransactionProducer
from txmq.v1 import common_pb2, pull_pb2, pull_pb2_grpc

pytestmark = pytest.mark.slow

KEEPALIVE = (
    "--keepalive-time-ms", "1000",
    "--keepalive-timeout-ms", "5000",
    "--keepalive-permit-time-ms", "500",
)  # fmt: skip
IDLE_S = 15.0  # 30 policy windows
# A consumer elsewhere pulls without holding now and then: the pull service's channel to
# the store carries a call every few seconds, as in a quiet production cluster. (A call
# re-arms gRPC's default client ping budget, two pings without data; without calls the
# old client settings fell silent after two pings, which hid the cut.)
SPORADIC_PULL_S = 5.0
SCENARIOS = Path(__file__).resolve().parents[1] / "gateway" / "rmq_scenarios"
SERVICES = ("store", "pull", "txcheck", "gateway")
# A Python log record at WARNING or above (txmq_runtime.server's format), or one of gRPC
# core's own lines at W or E ("E1123 22:56:18.764542 ...").
BAD_LINE = re.compile(r" (WARNING|ERROR|CRITICAL) \[|^[WE]\d{4} |GOAWAY|too_many_pings|Traceback", re.IGNORECASE)


class Rmq(ScriptRunner):
    """The official RocketMQ 5 Python client, in processes of its own, against the gateway."""

    def __init__(self, cluster: LocalCluster, home: Path) -> None:
        super().__init__([cluster.log_dir / f"{s}.log" for s in SERVICES])
        self.endpoint = cluster.gateway_address
        self.home = home

    def argv(self, script: str, args: tuple[str, ...], endpoint: str | None) -> list[str]:
        return [sys.executable, str(SCENARIOS / script), "--endpoint", endpoint or self.endpoint, *args]

    def child_env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1", "HOME": str(self.home)}


class CheckedLater(TransactionListener):
    """UNKNOWN when the transaction runs; COMMIT when the broker asks."""

    def __init__(self) -> None:
        self.checked = threading.Event()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        self.checked.set()
        return LocalTransactionState.COMMIT


class PullRequest:
    """Pulls an empty queue without holding every SPORADIC_PULL_S."""

    def __init__(self, stub: pull_pb2_grpc.PullStub, topic: str, queue: Any, suffix: str) -> None:
        self._stub = stub
        self._request = pull_pb2.PullMessageRequest(
            consumer_group=f"soak-sporadic-{suffix}",
            queue=common_pb2.MessageQueue(topic=topic, store_id=queue.store_id, queue_id=queue.queue_id),
            max_messages=8,
            suspend=False,
            client_id=f"soak-sporadic-{suffix}",
        )

    def run_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(SPORADIC_PULL_S, left))
            reply = self._stub.PullMessage(self._request, timeout=10)
            assert reply.status == pull_pb2.PULL_STATUS_NO_NEW_MSG


@pytest.fixture
def idle_cluster(etcd: EtcdServer, tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = new_local_cluster(
        tmp_path / "cluster",
        etcd_endpoints=etcd.endpoint,
        etcd_prefix=private_prefix(),
        service_args=list(KEEPALIVE),
        txcheck_args=list(TXCHECK_FAST),
        store_args=list(STORE_FAST),
        # No backstop re-check of held pulls: only the arrival stream can wake one.
        pull_args=["--hold-check-interval-ms", "600000"],
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def bad_lines(cluster: LocalCluster) -> dict[str, list[str]]:
    out = {}
    for service in SERVICES:
        lines = (cluster.log_dir / f"{service}.log").read_text(errors="replace").splitlines()
        if found := [line for line in lines if BAD_LINE.search(line)]:
            out[service] = found
    return out


def test_idle_links_survive_many_ping_policy_windows(
    idle_cluster: LocalCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = idle_cluster
    caplog.set_level(logging.INFO, logger="txmq.transaction.channel")
    suffix = uuid.uuid4().hex[:10]
    topic, group = f"Soak-{suffix}", f"soak-tx-{suffix}"
    home = tmp_path / "client-home"
    home.mkdir()
    rmq = Rmq(cluster, home)
    with Admin(cluster.bootstrap) as admin, grpc.insecure_channel(cluster.pull_address) as pull_channel:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        other_topic = f"SoakOther-{suffix}"
        admin.create_topic(other_topic, read_queue_nums=1, write_queue_nums=1)
        # Every link the checks below use is opened before the idle period.
        rmq.run("produce.py", "--topic", topic, "--key-prefix", "before")  # gateway -> store
        [queue] = admin.queue_offsets(topic)
        listener = CheckedLater()
        producer = TransactionProducer(group, cluster.bootstrap, listener=listener)
        producer.start(wait_channel=30)
        assert producer.channel_open
        try:
            pull = pull_pb2_grpc.PullStub(pull_channel)
            held = pull.PullMessage.future(
                pull_pb2.PullMessageRequest(
                    consumer_group=f"soak-consumer-{suffix}",
                    queue=common_pb2.MessageQueue(
                        topic=topic, store_id=queue.queue.store_id, queue_id=queue.queue.queue_id
                    ),
                    queue_offset=queue.max_offset,
                    max_messages=8,
                    suspend=True,
                    suspend_timeout_ms=120_000,
                    client_id=f"soak-{suffix}",
                ),
                timeout=150,
            )
            # The point of the test: no messages meanwhile, only the sporadic pulls.
            sporadic = PullRequest(pull, other_topic, admin.queue_offsets(other_topic)[0].queue, suffix)
            sporadic.run_for(IDLE_S)
            assert not held.done(), held.result()

            # The held pull is answered by a send (through the store's arrival stream).
            with Producer(group=f"soak-plain-{suffix}", endpoint=cluster.bootstrap) as plain:
                plain.send(Message(topic, b"after-idle", keys=("after-idle",)))
            reply = held.result(timeout=60)
            assert reply.status == pull_pb2.PULL_STATUS_FOUND
            assert [m.message.body for m in reply.messages] == [b"after-idle"]

            # A transaction left UNKNOWN is checked over the channel opened before.
            result = producer.send_message_in_transaction(Message(topic, b"tx-after-idle", keys=("tx",)))
            assert result.local_transaction_state == LocalTransactionState.UNKNOWN
            assert listener.checked.wait(60), rmq.explain("no check reached the producer")
            wait_for("the checked transaction's commit", lambda: admin.query_messages_by_key(topic, "tx"), rmq.explain)
        finally:
            producer.shutdown()

        # The gateway serves the official client after the idle period.
        sent = rmq.run("produce.py", "--topic", topic, "--key-prefix", "after")
        assert sent.events("sent") and not sent.errors(), rmq.explain("the official client could not send")
        assert admin.query_messages_by_key(topic, "after-0")

    channel_events = [r.getMessage() for r in caplog.records if r.name == "txmq.transaction.channel"]
    assert len([e for e in channel_events if "open" in e]) == 1, channel_events
    assert not [e for e in channel_events if "broke" in e], channel_events
    txcheck_log = (cluster.log_dir / "txcheck.log").read_text()
    assert txcheck_log.count(f"producer channel open: group {group}") == 1
    assert bad_lines(cluster) == {}
