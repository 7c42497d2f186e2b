"""The gateway's TLS port: the official Python client with ``tls_enable=True`` (what
RocketMQ's Java client does by default) sends through it, routes name the TLS port to a
client that came in over TLS, the plaintext port keeps serving, and a plaintext client
cannot talk to the TLS port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from support import LocalCluster, ServiceProcess, free_port
from support.certs import tls_files
from support.scratch import scoped_dir

from txmq import Admin
from txmq_gateway.v2 import pb, svc, svc_grpc

SCENARIOS = Path(__file__).resolve().parent / "rmq_scenarios"
TOPIC = "GatewayTlsTopic"


class TlsGateway:
    def __init__(self, process: ServiceProcess, tls_address: str, ca: Path) -> None:
        self.process = process
        self.tls_address = tls_address
        self.ca = ca


@pytest.fixture(scope="module")
def tls_gateway(
    txmq_cluster: LocalCluster, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsGateway]:
    directory = scoped_dir(request, tmp_path_factory, "gateway-tls")
    files = tls_files(directory)  # a CA and a certificate for 127.0.0.1 / localhost it signed
    ca, cert, key = files.ca, files.cert, files.key
    tls_port = free_port()
    gateway = ServiceProcess(
        "gateway",
        port=free_port(),
        etcd_endpoints=txmq_cluster.etcd_endpoints,
        log_path=directory / "gateway.log",
        args=["--tls_port", str(tls_port), "--tls_cert_file", str(cert), "--tls_key_file", str(key)],
    )
    gateway.start()
    with Admin(txmq_cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    try:
        yield TlsGateway(gateway, f"127.0.0.1:{tls_port}", ca)
    finally:
        gateway.stop()


def route(channel: grpc.Channel) -> svc.QueryRouteResponse:
    return svc_grpc.MessagingServiceStub(channel).QueryRoute(
        svc.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=[("x-mq-client-id", "tls-test")], timeout=10
    )


def test_routes_name_the_port_the_client_came_in_on(tls_gateway: TlsGateway) -> None:
    credentials = grpc.ssl_channel_credentials(root_certificates=tls_gateway.ca.read_bytes())
    with grpc.secure_channel(tls_gateway.tls_address, credentials) as channel:
        over_tls = route(channel)
    with grpc.insecure_channel(tls_gateway.process.address) as channel:
        plain = route(channel)
    port = lambda r: r.message_queues[0].broker.endpoints.addresses[0].port  # noqa: E731
    assert over_tls.status.code == pb.OK and plain.status.code == pb.OK
    assert port(over_tls) == int(tls_gateway.tls_address.rsplit(":", 1)[1])
    assert port(plain) == int(tls_gateway.process.address.rsplit(":", 1)[1])


def test_plaintext_client_cannot_use_the_tls_port(tls_gateway: TlsGateway) -> None:
    with grpc.insecure_channel(tls_gateway.tls_address) as channel, pytest.raises(grpc.RpcError) as info:
        route(channel)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_official_client_sends_over_tls(tls_gateway: TlsGateway, txmq_cluster: LocalCluster, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tls_gateway.ca)}
    done = subprocess.run(
        [sys.executable, str(SCENARIOS / "produce.py"), "--endpoint", tls_gateway.tls_address, "--tls",
         "--topic", TOPIC, "--count", "2", "--key-prefix", "tls-key", "--body-prefix", "over-tls"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    sent = [e for e in events if e["event"] == "sent"]
    assert done.returncode == 0 and len(sent) == 2, (done.stdout[-2000:], done.stderr[-2000:])
    with Admin(txmq_cluster.bootstrap) as admin:
        stored = admin.query_messages_by_key(TOPIC, "tls-key-all")
    assert sorted(m.body for m in stored) == [b"over-tls-0", b"over-tls-1"]
    assert sorted(m.unique_id for m in stored) == sorted(e["message_id"] for e in sent)


def test_tls_port_needs_certificate_files() -> None:
    from txmq_gateway.settings import GatewaySettings

    with pytest.raises(ValueError, match="tls_cert_file"):
        GatewaySettings(tls_port=0)
