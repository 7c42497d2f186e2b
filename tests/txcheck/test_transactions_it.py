"""Transactions end to end with real processes: store and txcheck processes on a real
etcd (private prefix), transactional producers in this process and in child processes.
The services run with short check intervals; tests wait for outcomes, never for times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import ServiceFactory, ServiceProcess

from txmq import LocalTransactionState, Message, TransactionProducer
from txmq.v1 import txcheck_pb2

from .helpers import FAST, Listener, leader_of, new_topic, query, visible, wait_for


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
    with TransactionProducer(
        group="PG_TWICE", endpoint=store.address, listener=Listener(LocalTransactionState.COMMIT)
    ) as p:
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


def test_two_replicas_one_leads_the_other_takes_over(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    a = service_factory.start("txcheck", *FAST, "--instance_id", "txcheck-a")
    b = service_factory.start("txcheck", *FAST, "--instance_id", "txcheck-b")
    key = f"{service_factory.etcd_prefix}/txcheck/leaders/store-0"
    first = wait_for("a leader", lambda: leader_of(service_factory.etcd_endpoints, key))
    assert first in ("txcheck-a", "txcheck-b")
    topic = new_topic(store)
    listener = Listener(LocalTransactionState.COMMIT)
    with TransactionProducer(group="PG_HA", endpoint=store.address, listener=listener) as p:
        p.start(wait_channel=10)
        assert (
            p.send_message_in_transaction(Message(topic, b"before")).local_transaction_state
            is LocalTransactionState.COMMIT
        )
        (a if first == "txcheck-a" else b).kill()
        second = "txcheck-b" if first == "txcheck-a" else "txcheck-a"
        wait_for("the takeover", lambda: leader_of(service_factory.etcd_endpoints, key) == second)
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
    with TransactionProducer(
        group="PG_CLI", endpoint=store.address, listener=Listener(LocalTransactionState.COMMIT)
    ) as p:
        r = p.send_message_in_transaction(Message(topic, b"cli"))
    runner = CliRunner()
    shown = runner.invoke(cli, ["transaction", "show", r.transaction_id, "--endpoint", store.address])
    assert shown.exit_code == 0, shown.output
    assert (
        "state COMMIT" in shown.output and "half_stored" in shown.output and f"committed copy: {topic}" in shown.output
    )
    refused = runner.invoke(cli, ["transaction", "resume", r.transaction_id, "--endpoint", store.address])
    assert refused.exit_code == 1 and "ALREADY_RESOLVED" in refused.output


def test_discarded_transaction_is_shown_and_resumed(service_factory: ServiceFactory) -> None:
    from click.testing import CliRunner

    from txmq_cli.main import cli

    store = service_factory.store()
    service_factory.start("txcheck", *FAST, "--transaction_check_max", "1")
    topic = new_topic(store)
    listener = Listener(LocalTransactionState.UNKNOWN)  # checks answer UNKNOWN until told otherwise
    runner = CliRunner()
    with TransactionProducer(group="PG_RESUME", endpoint=store.address, listener=listener) as p:
        p.start(wait_channel=10)
        r = p.send_message_in_transaction(Message(topic, b"resumed"))
        not_yet = runner.invoke(cli, ["transaction", "resume", r.transaction_id, "--endpoint", store.address])
        assert not_yet.exit_code == 1 and "TRANSACTION_NOT_FOUND" in not_yet.output  # never discarded
        wait_for("the discard", lambda: p.query_transaction(r.transaction_id).discarded)
        info = p.query_transaction(r.transaction_id)
        assert info.resolution is LocalTransactionState.UNKNOWN
        assert "discarded" in [k for _, k, _ in info.timeline]
        shown = runner.invoke(cli, ["transaction", "show", r.transaction_id, "--endpoint", store.address])
        assert shown.exit_code == 0 and "state UNKNOWN (discarded" in shown.output, shown.output
        assert visible(store.address, topic) == []

        listener.answers = [LocalTransactionState.COMMIT] * 100
        resumed = runner.invoke(
            cli, ["transaction", "resume", r.transaction_id, "--endpoint", store.address, "--store-id", "store-0"]
        )
        assert resumed.exit_code == 0, resumed.output
        assert resumed.output.startswith(f"resumed {r.transaction_id} on store-0: half queue offset")
        wait_for("the commit after the resume", lambda: visible(store.address, topic) == [b"resumed"])
        info = p.query_transaction(r.transaction_id)
        assert info.resolution is LocalTransactionState.COMMIT and not info.discarded
        assert "resumed" in [k for _, k, _ in info.timeline]
        with pytest.raises(Exception) as refused:
            p.resume_transaction(r.transaction_id)
        assert "ALREADY_RESOLVED" in str(refused.value)
    assert visible(store.address, topic) == [b"resumed"]
