"""Transactions end to end with real processes: store and txcheck processes on a real
etcd (private prefix), transactional producers in this process and in child processes.
The services run with short check intervals; tests wait for outcomes, never for times."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import aetcd
import grpc
import pytest
from support import ServiceFactory, ServiceProcess

from txmq import Admin, LocalTransactionState, Message, TransactionListener, TransactionProducer
from txmq.v1 import store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

FAST = (
    "--transaction_check_interval_ms", "200",
    "--transaction_timeout_ms", "300",
    "--leader_ttl_ms", "1000",
    "--registration_ttl_ms", "1000",
)  # fmt: skip
WAIT_S = 30.0


def wait_for(what: str, predicate: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Listener(TransactionListener):
    def __init__(self, execute: LocalTransactionState, checks: list[LocalTransactionState] | None = None) -> None:
        self.execute = execute
        self.answers = list(checks or [])
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg, arg):
        if arg == "raise":
            raise RuntimeError("local transaction failed")
        return self.execute

    def check_local_transaction(self, msg):
        with self.lock:
            self.checked.append(msg.unique_id)
            return self.answers.pop(0) if self.answers else LocalTransactionState.UNKNOWN


def visible(store_address: str, topic: str) -> list[bytes]:
    with grpc.insecure_channel(store_address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        out = []
        for q in range(4):
            r = stub.GetMessage(store_pb2.GetMessageRequest(topic=topic, queue_id=q, offset=0), timeout=5)
            out += [m.message.body for m in r.messages]
        return out


def query(address: str, txid: str) -> txcheck_pb2.QueryTransactionResponse:
    with grpc.insecure_channel(address) as ch:
        return txcheck_pb2_grpc.TransactionStub(ch).QueryTransaction(
            txcheck_pb2.QueryTransactionRequest(transaction_id=txid), timeout=5
        )


def new_topic(store: ServiceProcess) -> str:
    topic = f"Tx-{uuid.uuid4().hex[:8]}"
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    return topic


@pytest.fixture
def cluster(service_factory: ServiceFactory) -> tuple[ServiceProcess, ServiceProcess]:
    store = service_factory.store()
    txcheck = service_factory.start("txcheck", *FAST)
    return store, txcheck


def test_commit_rollback_and_unknown_checked_until_commit(cluster) -> None:
    store, txcheck = cluster
    topic = new_topic(store)
    listener = Listener(LocalTransactionState.COMMIT)
    with TransactionProducer(group="PG_IT", endpoint=store.address, listener=listener) as producer:
        producer.start(wait_channel=10)
        assert producer.channel_open
        committed = producer.send_message_in_transaction(Message(topic, b"commit"), arg=1)
        assert committed.local_transaction_state is LocalTransactionState.COMMIT
        assert committed.transaction_id == committed.msg_id
        assert visible(store.address, topic) == [b"commit"]

        listener.execute = LocalTransactionState.ROLLBACK
        rolled = producer.send_message_in_transaction(Message(topic, b"rollback"))
        assert rolled.local_transaction_state is LocalTransactionState.ROLLBACK

        listener.execute = LocalTransactionState.UNKNOWN
        listener.answers = [LocalTransactionState.UNKNOWN, LocalTransactionState.COMMIT]
        pending = producer.send_message_in_transaction(Message(topic, b"unknown"))
        assert pending.local_transaction_state is LocalTransactionState.UNKNOWN
        wait_for("the checked commit", lambda: b"unknown" in visible(store.address, topic))
        assert listener.checked[:2] == [pending.transaction_id] * 2
        assert sorted(visible(store.address, topic)) == [b"commit", b"unknown"]  # rollback never shows

        failed = producer.send_message_in_transaction(Message(topic, b"raised"), arg="raise")
        assert failed.local_transaction_state is LocalTransactionState.UNKNOWN
        assert isinstance(failed.local_exception, RuntimeError)

        info = producer.query_transaction(pending.transaction_id)
        kinds = [k for _, k, _ in info.timeline]
        assert info.resolution is LocalTransactionState.COMMIT and info.producer_group == "PG_IT"
        assert kinds[0] == "half_stored" and kinds.count("check_sent") >= 2 and "committed" in kinds
        assert info.committed is not None and info.committed.topic == topic
        rolled_info = query(txcheck.address, rolled.transaction_id)
        assert rolled_info.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK
    assert sorted(visible(store.address, topic)) == [b"commit", b"unknown"]


def test_retried_commit_is_delivered_once(cluster) -> None:
    store, txcheck = cluster
    topic = new_topic(store)
    with TransactionProducer(group="PG_TWICE", endpoint=store.address, listener=Listener(LocalTransactionState.COMMIT)) as p:
        r = p.send_message_in_transaction(Message(topic, b"once"))
        p.end_transaction(r, LocalTransactionState.COMMIT)  # a retried one-way call
        with pytest.raises(Exception) as info:
            p.end_transaction(r, LocalTransactionState.ROLLBACK)
        assert "ALREADY_RESOLVED" in str(info.value)
    assert visible(store.address, topic) == [b"once"]


def test_killed_producer_is_checked_through_another_of_its_group(cluster, tmp_path: Path) -> None:
    store, txcheck = cluster
    topic = new_topic(store)
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("producer_proc.py")), store.address, "PG_KILL", topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        lines = iter(child.stdout.readline, "")
        txid = next(line.split()[1] for line in lines if line.startswith("TXID"))
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    survivor = Listener(LocalTransactionState.COMMIT, [LocalTransactionState.COMMIT] * 100)
    with TransactionProducer(group="PG_KILL", endpoint=store.address, listener=survivor) as p:
        p.start(wait_channel=10)
        wait_for("the survivor's commit", lambda: b"from-the-killed-producer" in visible(store.address, topic))
        assert txid in survivor.checked
    assert visible(store.address, topic) == [b"from-the-killed-producer"]


def _leader(etcd_endpoint: str, key: str) -> str | None:
    import asyncio

    async def get() -> str | None:
        host, port = etcd_endpoint.rsplit(":", 1)
        async with aetcd.Client(host=host, port=int(port)) as client:
            got = await client.get(key.encode())
            return None if got is None else got.value.decode()

    return asyncio.run(get())


def test_two_replicas_one_leads_the_other_takes_over(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    a = service_factory.start("txcheck", *FAST, "--instance_id", "txcheck-a")
    b = service_factory.start("txcheck", *FAST, "--instance_id", "txcheck-b")
    key = f"{service_factory.etcd_prefix}/txcheck/leaders/store-0"
    first = wait_for("a leader", lambda: _leader(service_factory.etcd_endpoints, key))
    assert first in ("txcheck-a", "txcheck-b")
    topic = new_topic(store)
    listener = Listener(LocalTransactionState.COMMIT)
    with TransactionProducer(group="PG_HA", endpoint=store.address, listener=listener) as p:
        p.start(wait_channel=10)
        assert p.send_message_in_transaction(Message(topic, b"before")).local_transaction_state is LocalTransactionState.COMMIT
        (a if first == "txcheck-a" else b).kill()
        second = "txcheck-b" if first == "txcheck-a" else "txcheck-a"
        wait_for("the takeover", lambda: _leader(service_factory.etcd_endpoints, key) == second)
        listener.execute = LocalTransactionState.UNKNOWN
        listener.answers = [LocalTransactionState.COMMIT] * 100
        # The producer's channel may have been on the killed replica: it reconnects.
        pending = p.send_message_in_transaction(Message(topic, b"after"))
        wait_for("the check by the new leader", lambda: b"after" in visible(store.address, topic))
        assert pending.transaction_id in listener.checked
    assert sorted(visible(store.address, topic)) == [b"after", b"before"]


def test_cli_show_and_resume(cluster) -> None:
    from click.testing import CliRunner
    from txmq_cli.main import cli

    store, _ = cluster
    topic = new_topic(store)
    with TransactionProducer(group="PG_CLI", endpoint=store.address, listener=Listener(LocalTransactionState.COMMIT)) as p:
        r = p.send_message_in_transaction(Message(topic, b"cli"))
    runner = CliRunner()
    shown = runner.invoke(cli, ["transaction", "show", r.transaction_id, "--endpoint", store.address])
    assert shown.exit_code == 0, shown.output
    assert "state COMMIT" in shown.output and "half_stored" in shown.output and f"committed copy: {topic}" in shown.output
    refused = runner.invoke(cli, ["transaction", "resume", r.transaction_id, "--endpoint", store.address])
    assert refused.exit_code == 1 and "ALREADY_RESOLVED" in refused.output
