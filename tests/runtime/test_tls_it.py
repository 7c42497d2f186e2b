"""TLS on every port (txmq_runtime.tls): store, pull and txcheck with tls_mode enforcing
and tls_client_auth require (mutual TLS), certificates from one test CA
(support.certs, the generator `txmq up --tls` uses).

The SDK sends and pulls over TLS (pull -> store over mutual TLS); a transactional send
commits (txcheck -> store over mutual TLS); a plaintext client, a TLS client without a
client certificate and one with a certificate of another CA are all refused; the probe
port answers the health service in plaintext and nothing else; permissive mode serves
TLS on the service port and plaintext on plaintext_port; an unreadable certificate file
stops start-up with one line."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support import EtcdServer, ServiceFactory, ServiceProcess
from support.certs import TlsFiles, service_tls_args, tls_files, write_certificates
from support.scratch import scoped_dir
from support.topics import consume_all

from txmq import (
    Admin,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    TlsConfig,
    TransactionListener,
    TransactionProducer,
    TxmqError,
)
from txmq.v1 import store_pb2, store_pb2_grpc

TOPIC = "TlsTopic"
GROUP = "tls-consumers"


def extra_port(process: ServiceProcess, what: str) -> int:
    """The plaintext or probe port the service bound (its ready line names it)."""
    found = re.search(rf"{what} port (\d+)", process.process.log_path.read_text())
    assert found, f"no {what} port in {process.process.log_path}"
    return int(found[1])


@dataclass
class TlsCluster:
    store: ServiceProcess
    pull: ServiceProcess
    txcheck: ServiceProcess
    files: TlsFiles
    stranger: TlsFiles  # another CA and a certificate it signed
    factory: ServiceFactory  # starts more services of this cluster

    @property
    def tls(self) -> TlsConfig:
        return TlsConfig(ca_file=self.files.ca, cert_file=self.files.cert, key_file=self.files.key)


@pytest.fixture(scope="module")
def cluster(
    etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsCluster]:
    base = scoped_dir(request, tmp_path_factory, "tls")
    files = tls_files(base / "certs")
    stranger = tls_files(base / "stranger")
    factory = ServiceFactory(etcd_endpoints=etcd.endpoint, base_dir=base)
    args = [*service_tls_args(files), "--probe_port", "0"]
    try:
        store = factory.store(*args, wait=False)
        pull = factory.start("pull", *args, wait=False)
        txcheck = factory.start("txcheck", *args, "--transaction_check_interval_ms", "1000", wait=False)
        for process in (store, pull, txcheck):
            process.wait_serving()
        found = TlsCluster(store, pull, txcheck, files, stranger, factory)
        with Admin(store.address, tls=found.tls) as admin:
            admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
            admin.create_subscription_group(GROUP)
        yield found
    finally:
        factory.close()


def test_send_and_pull_over_mutual_tls(cluster: TlsCluster) -> None:
    with Producer("tls-producer", cluster.store.address, tls=cluster.tls) as producer:
        sent = [producer.send(Message(TOPIC, f"over-tls-{i}".encode())) for i in range(3)]
    with PullConsumer(GROUP, cluster.pull.address, tls=cluster.tls) as consumer:  # routes, then pull -> store
        bodies = {m.body for m in consume_all(consumer, TOPIC)}
    assert {f"over-tls-{i}".encode() for i in range(3)} <= bodies
    assert all(r.queue_offset >= 0 for r in sent)


class Commit(TransactionListener):
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_a_transaction_commits_through_txcheck_over_mutual_tls(cluster: TlsCluster) -> None:
    with TransactionProducer("tls-tx-producer", cluster.store.address, listener=Commit(), tls=cluster.tls) as producer:
        result = producer.send_message_in_transaction(Message(TOPIC, b"committed-over-tls"))
    assert result.local_transaction_state is LocalTransactionState.COMMIT
    deadline = time.monotonic() + 20
    with PullConsumer(GROUP, cluster.pull.address, tls=cluster.tls) as consumer:
        while b"committed-over-tls" not in {m.body for m in consume_all(consumer, TOPIC)}:
            assert time.monotonic() < deadline, "the committed message never became visible"
            time.sleep(0.2)


@pytest.mark.parametrize("client", ["plaintext", "no client certificate", "certificate of another CA"])
def test_clients_without_a_trusted_certificate_are_refused(cluster: TlsCluster, client: str) -> None:
    tls = {
        "plaintext": None,
        "no client certificate": TlsConfig(ca_file=cluster.files.ca),
        "certificate of another CA": TlsConfig(
            ca_file=cluster.files.ca, cert_file=cluster.stranger.cert, key_file=cluster.stranger.key
        ),
    }[client]
    with Admin(cluster.store.address, timeout=2, tls=tls) as admin, pytest.raises(TxmqError) as info:
        admin.list_topics()
    assert info.value.unreachable, info.value


def test_the_probe_port_serves_health_only_in_plaintext(cluster: TlsCluster) -> None:
    for process in (cluster.store, cluster.pull, cluster.txcheck):
        with grpc.insecure_channel(f"127.0.0.1:{extra_port(process, 'probe')}") as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as info:
                store_pb2_grpc.StoreAdminStub(channel).GetStoreStatus(store_pb2.GetStoreStatusRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_permissive_serves_tls_and_plaintext(service_factory: ServiceFactory, tmp_path: Path) -> None:
    files = tls_files(tmp_path / "certs")
    store = service_factory.store(*service_tls_args(files, mode="permissive"), "--plaintext_port", "0")
    plaintext = f"127.0.0.1:{extra_port(store, 'plaintext')}"
    tls = TlsConfig(ca_file=files.ca, cert_file=files.cert, key_file=files.key)
    request = store_pb2.GetStoreStatusRequest()
    with grpc.insecure_channel(plaintext) as channel:
        assert store_pb2_grpc.StoreAdminStub(channel).GetStoreStatus(request, timeout=5).store_id
    with grpc.secure_channel(store.address, tls.channel_credentials()) as channel:
        assert store_pb2_grpc.StoreAdminStub(channel).GetStoreStatus(request, timeout=5).store_id
    with grpc.insecure_channel(store.address) as channel, pytest.raises(grpc.RpcError) as info:
        store_pb2_grpc.StoreAdminStub(channel).GetStoreStatus(request, timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_an_unreadable_certificate_stops_start_up_in_one_line(service_factory: ServiceFactory, tmp_path: Path) -> None:
    files = tls_files(tmp_path / "certs")
    files.key.unlink()
    store = service_factory.store(*service_tls_args(files), wait=False)
    assert store.process.wait(timeout_s=30) == 1
    log = store.process.log_path.read_text()
    assert "did not start: tls_key_file" in log and "cannot be read" in log
    assert "Traceback" not in log


def test_the_cli_dials_over_tls(cluster: TlsCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """txmq's global --tls-* options, or their env vars; without them a TLS cluster is
    unreachable and the error says what to give."""
    from click.testing import CliRunner

    from txmq_cli.main import cli

    runner = CliRunner()
    files = cluster.files
    flags = ["--tls-ca-file", str(files.ca), "--tls-cert-file", str(files.cert), "--tls-key-file", str(files.key)]
    listed = runner.invoke(cli, [*flags, "topic", "list", "--endpoint", cluster.store.address])
    assert listed.exit_code == 0 and TOPIC in listed.output, listed.output

    plain = runner.invoke(cli, ["topic", "list", "--endpoint", cluster.store.address])
    assert plain.exit_code == 1 and "--tls-ca-file" in plain.output, plain.output

    half = runner.invoke(cli, [*flags[:4], "topic", "list", "--endpoint", cluster.store.address])
    assert half.exit_code == 2 and "--tls-cert-file and --tls-key-file go together" in half.output

    monkeypatch.setenv("TXMQ_TLS_CA_FILE", str(files.ca))
    monkeypatch.setenv("TXMQ_TLS_CERT_FILE", str(files.cert))
    monkeypatch.setenv("TXMQ_TLS_KEY_FILE", str(files.key))
    lag = runner.invoke(cli, ["lag", GROUP, "--endpoint", cluster.store.address])
    assert lag.exit_code == 0, lag.output


def test_gateway_under_mutual_tls_keeps_its_v2_tls_port(cluster: TlsCluster, tmp_path: Path) -> None:
    """The gateway on enforcing mutual TLS (like every service) still serves RocketMQ
    clients on its tls_port without client certificates (the official Python client here),
    and what they send reaches the store over mutual TLS."""
    import json
    import os
    import subprocess
    import sys

    from support import free_port

    scenarios = Path(__file__).resolve().parents[1] / "gateway" / "rmq_scenarios"
    tls_port = free_port()
    gateway = cluster.factory.start(
        "gateway", *service_tls_args(cluster.files), "--tls_port", str(tls_port), "--probe_port", "0"
    )
    assert "tls enforcing" in gateway.process.log_path.read_text()
    env = {**os.environ, "HOME": str(tmp_path), "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cluster.files.ca)}
    done = subprocess.run(
        [sys.executable, str(scenarios / "produce.py"), "--endpoint", f"127.0.0.1:{tls_port}", "--tls",
         "--topic", TOPIC, "--count", "2", "--key-prefix", "gw-tls", "--body-prefix", "gateway-over-tls"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    sent = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and [e for e in sent if e["event"] == "sent"], (
        done.stdout[-2000:],
        done.stderr[-2000:],
    )
    with PullConsumer(GROUP, cluster.pull.address, tls=cluster.tls) as consumer:
        bodies = {m.body for m in consume_all(consumer, TOPIC)}
    assert {b"gateway-over-tls-0", b"gateway-over-tls-1"} <= bodies


def test_a_server_name_stands_in_for_addresses_no_certificate_names(
    service_factory: ServiceFactory, tmp_path: Path
) -> None:
    """A certificate naming only txmq.internal (as one for pods dialled by their IPs):
    tls_server_name lets the services check each other against that name, and the SDK's
    TlsConfig(server_name=...) does the same; without it the host dialled must match."""

    files = write_certificates(tmp_path / "certs", hosts=["txmq.internal"], days=1)
    args = [*service_tls_args(files), "--tls_server_name", "txmq.internal"]
    store = service_factory.store(*args)
    pull = service_factory.start("pull", *args)
    tls = TlsConfig(ca_file=files.ca, cert_file=files.cert, key_file=files.key, server_name="txmq.internal")
    with Admin(store.address, tls=tls) as admin:
        admin.create_topic("ServerNameTopic", read_queue_nums=1, write_queue_nums=1)
        admin.create_subscription_group(GROUP)
    with Producer("server-name-producer", store.address, tls=tls) as producer:
        producer.send(Message("ServerNameTopic", b"checked-by-name"))
    with PullConsumer(GROUP, pull.address, tls=tls) as consumer:  # pull -> store: checked against the name
        assert [m.body for m in consume_all(consumer, "ServerNameTopic")] == [b"checked-by-name"]
    unnamed = TlsConfig(ca_file=files.ca, cert_file=files.cert, key_file=files.key)
    with Admin(store.address, timeout=2, tls=unnamed) as admin, pytest.raises(TxmqError) as info:
        admin.list_topics()  # 127.0.0.1 is not in the certificate
    assert info.value.unreachable


def test_the_analytics_export_dials_the_stores_over_tls(cluster: TlsCluster, tmp_path: Path) -> None:
    from txmq_analytics.remote import export_from_endpoint

    results = export_from_endpoint(cluster.store.address, tmp_path / "exports", tls=cluster.tls)
    assert len(results) == 1 and results[0].queues >= 2
    with pytest.raises(TxmqError):  # the stores refuse a plaintext export
        export_from_endpoint("127.0.0.1:1", tmp_path / "plain", stores=[cluster.store.address])


def test_a_replicated_store_group_ships_over_mutual_tls(etcd: EtcdServer, tmp_path: Path) -> None:
    """Two replicas, min_in_sync 2: the follower joins the in-sync set only by following
    the leader (store -> store), and a send is acknowledged only once the follower holds
    it, so both prove the replication link works over mutual TLS. LocalCluster(tls=...)
    is what `txmq up --tls` runs."""
    from support import new_local_cluster
    from support.processes import private_prefix

    files = tls_files(tmp_path / "certs")
    cluster = new_local_cluster(
        tmp_path / "cluster", etcd_endpoints=etcd.endpoint, etcd_prefix=private_prefix(), store_replicas=2, tls=files
    )
    cluster.start()
    try:
        tls = TlsConfig(ca_file=files.ca, cert_file=files.cert, key_file=files.key)
        with Admin(cluster.bootstrap, tls=tls) as admin:
            deadline = time.monotonic() + 30
            while True:
                groups = admin.store_group_status()
                if (groups and len(groups[0].in_sync) == 2) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            (group,) = groups
            assert len(group.in_sync) == 2 and {r.role for r in group.replicas} == {"leader", "follower"}
            admin.create_topic("ReplicatedTls", read_queue_nums=1, write_queue_nums=1)
        with Producer("replicated-tls", cluster.bootstrap, tls=tls, send_timeout=10) as producer:
            assert producer.send(Message("ReplicatedTls", b"shipped")).queue_offset == 0
    finally:
        cluster.stop()
