"""Client certificates as v2 identities on the gateway's TLS port
(``tls_port_client_auth require``), on a real gateway with auth: an unsigned call over a
connection whose certificate the cluster's CA signed is taken as the user its common name
names; a certificate naming no user gets UNAUTHORIZED; no certificate, or one of another
CA, no connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from support import ServiceFactory, free_port
from support.certs import LOOPBACK, Authority, cert_pem, key_pem
from support.waiting import wait_until

from txmq.v1 import auth_pb2
from txmq_gateway.v2 import pb, svc, svc_grpc
from txmq_runtime.auth import AuthKeys, Sealer
from txmq_runtime.auth_service import stored_user
from txmq_runtime.etcd import etcd_client

SERVICE, SECRET = "txmq-service", "client-certs-service-secret"


def heartbeat(address: str, credentials: grpc.ChannelCredentials, client_id: str) -> pb.Status:
    with grpc.secure_channel(address, credentials) as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        return stub.Heartbeat(
            svc.HeartbeatRequest(client_type=pb.PRODUCER), metadata=[("x-mq-client-id", client_id)], timeout=10
        ).status


async def add_user(endpoint: str, prefix: str, name: str) -> None:
    async with etcd_client(endpoint) as etcd:
        user = auth_pb2.User(username=name)
        await etcd.put(AuthKeys(prefix).user(name).encode(), stored_user(Sealer(SECRET), user, f"{name}-secret-1"))


@pytest.mark.slow
def test_a_client_certificate_names_the_user_of_an_unsigned_call(
    service_factory: ServiceFactory, tmp_path: Path
) -> None:
    ca = Authority.create(days=1)
    server_cert, server_key = ca.issue(LOOPBACK, days=1)
    files = {"ca": cert_pem(ca.cert), "cert": cert_pem(server_cert), "key": key_pem(server_key)}
    for name, pem in files.items():
        (tmp_path / name).write_bytes(pem)
    tls_port = free_port()
    service_factory.start(
        "gateway", "--auth_enabled=true", "--auth_access_key", SERVICE, "--auth_secret_key", SECRET,
        "--tls_port", str(tls_port), "--tls_cert_file", str(tmp_path / "cert"), "--tls_key_file", str(tmp_path / "key"),
        "--tls_ca_file", str(tmp_path / "ca"), "--tls_port_client_auth", "require",
    )  # fmt: skip
    address = f"127.0.0.1:{tls_port}"
    asyncio.run(add_user(service_factory.etcd_endpoints, service_factory.etcd_prefix, "alice"))

    def as_holder(authority: Authority, common_name: str | None) -> grpc.ChannelCredentials:
        if common_name is None:
            return grpc.ssl_channel_credentials(root_certificates=files["ca"])
        cert, key = authority.issue(LOOPBACK, common_name=common_name, days=1)
        return grpc.ssl_channel_credentials(
            root_certificates=files["ca"], private_key=key_pem(key), certificate_chain=cert_pem(cert)
        )

    alice = as_holder(ca, "alice")
    ok = wait_until(  # the gateway's copy of the user book follows etcd
        lambda: (s := heartbeat(address, alice, "c-alice")).code == pb.OK and s, what="alice known by certificate"
    )
    assert ok.code == pb.OK
    ghost = heartbeat(address, as_holder(ca, "ghost"), "c-ghost")
    assert (ghost.code, ghost.message) == (pb.UNAUTHORIZED, "the client certificate names no enabled user")
    for label, credentials in (("no certificate", as_holder(ca, None)),
                               ("one of another CA", as_holder(Authority.create(days=1), "alice"))):  # fmt: skip
        with pytest.raises(grpc.RpcError) as refused:  # no handshake
            heartbeat(address, credentials, "c-other")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, label
