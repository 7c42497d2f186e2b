"""KEDA's external scaler on a cluster with auth and mutual TLS, called the only way KEDA
can authenticate: a client certificate (TriggerAuthentication's tlsClientCert /
tlsClientKey) naming a txmq user, no signature. The user needs Get on the topic and on
the group (as ListConsumeOffsets); without them PERMISSION_DENIED, without a user
UNAUTHENTICATED."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from support.certs import LOOPBACK, Authority, TlsFiles, cert_pem, key_pem, service_tls_args
from support.processes import ServiceFactory

from txmq import TlsConfig, signing
from txmq.errors import TxmqError
from txmq.keda import externalscaler_pb2 as pb
from txmq.keda import externalscaler_pb2_grpc as pb_grpc
from txmq.v1 import auth_pb2, auth_pb2_grpc, common_pb2, errors_pb2, store_pb2, store_pb2_grpc

SERVICE_KEY = "txmq-service"
SERVICE_SECRET = "service-secret-0123456789"
AUTH_FLAGS = ("--auth_enabled=true", "--auth_access_key", SERVICE_KEY, "--auth_secret_key", SERVICE_SECRET)
ROOT = signing.Credentials(SERVICE_KEY, SERVICE_SECRET)
TOPIC, GROUP = "KedaAuthT", "KedaAuthG"
META = {"consumerGroup": GROUP, "topic": TOPIC, "scalerAddress": "txmq-pull:10912"}
A = auth_pb2.Action
ALLOW = auth_pb2.Policy.DECISION_ALLOW


@dataclass
class Secured:
    pull: str
    store: str
    authority: Authority
    service_tls: TlsConfig

    def keda(self, common_name: str) -> grpc.Channel:
        """A channel as KEDA opens it: mutual TLS with a client certificate naming a user."""
        cert, key = self.authority.issue(LOOPBACK, common_name=common_name, days=1)
        tls = TlsConfig(ca=cert_pem(self.authority.cert), cert=cert_pem(cert), key=key_pem(key))
        return grpc.secure_channel(self.pull, tls.channel_credentials(), options=tls.channel_options())

    def operator(self, address: str) -> grpc.Channel:
        return grpc.secure_channel(address, self.service_tls.channel_credentials())


@pytest.fixture
def secured(service_factory: ServiceFactory, tmp_path: Path) -> Iterator[Secured]:
    authority = Authority.create(days=1)
    cert, key = authority.issue(LOOPBACK, days=1)  # CN "txmq": no such user
    files = TlsFiles(tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")
    files.ca.write_bytes(cert_pem(authority.cert))
    files.cert.write_bytes(cert_pem(cert))
    files.key.write_bytes(key_pem(key))
    flags = (*service_tls_args(files), *AUTH_FLAGS)
    store = service_factory.store(*flags)
    pull = service_factory.start("pull", *flags)
    s = Secured(
        pull.address, store.address, authority, TlsConfig(ca_file=files.ca, cert_file=files.cert, key_file=files.key)
    )
    root = signing.auth_metadata(ROOT)
    with s.operator(s.pull) as channel:
        users = auth_pb2_grpc.AuthStub(channel)
        grants = {
            "keda": [A.ACTION_GET],  # what the scaler needs
            "consumer": [A.ACTION_SUB, A.ACTION_PUB],  # a consumer's rights, but not Get
        }
        for name, actions in grants.items():
            users.CreateUser(
                auth_pb2.CreateUserRequest(user=auth_pb2.User(username=name, secret_key=f"{name}-secret-0123")),
                metadata=root,
            )
            policies = [
                auth_pb2.Policy(resource=f"Topic:{TOPIC}", actions=actions, decision=ALLOW),
                auth_pb2.Policy(resource=f"Group:{GROUP}", actions=actions, decision=ALLOW),
            ]
            users.PutAcl(auth_pb2.PutAclRequest(acl=auth_pb2.Acl(username=name, policies=policies)), metadata=root)
    with s.operator(s.store) as channel:
        admin, store_stub = store_pb2_grpc.StoreAdminStub(channel), store_pb2_grpc.StoreStub(channel)
        admin.CreateTopic(
            store_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(name=TOPIC, read_queue_nums=1, write_queue_nums=1)
            ),
            metadata=root,
        )
        admin.CreateSubscriptionGroup(
            store_pb2.CreateSubscriptionGroupRequest(group=common_pb2.SubscriptionGroupConfig(group_name=GROUP)),
            metadata=root,
        )
        for i in range(3):
            store_stub.SendMessage(
                store_pb2.SendMessageRequest(message=common_pb2.Message(topic=TOPIC, body=b"m%d" % i, queue_id=0)),
                metadata=root,
            )
        store_stub.CommitConsumeOffset(
            store_pb2.CommitConsumeOffsetRequest(consumer_group=GROUP, topic=TOPIC, queue_id=0, offset=1), metadata=root
        )
    yield s


def calls(stub: pb_grpc.ExternalScalerStub) -> dict[str, object]:
    """Each RPC once, with KEDA's request; a stream's first push."""
    return {
        "IsActive": lambda: stub.IsActive(pb.ScaledObjectRef(scalerMetadata=META), timeout=10),
        "GetMetricSpec": lambda: stub.GetMetricSpec(pb.ScaledObjectRef(scalerMetadata=META), timeout=10),
        "GetMetrics": lambda: stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(scalerMetadata=META)), timeout=10
        ),
        "StreamIsActive": lambda: next(stub.StreamIsActive(pb.ScaledObjectRef(scalerMetadata=META), timeout=10)),
    }


def test_a_user_with_get_on_topic_and_group_scales_by_certificate(secured: Secured) -> None:
    with secured.keda("keda") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        assert stub.IsActive(pb.ScaledObjectRef(scalerMetadata=META), timeout=10).result is True
        metrics = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=pb.ScaledObjectRef(scalerMetadata=META)))
        assert [v.metricValue for v in metrics.metricValues] == [2]
        stream = stub.StreamIsActive(pb.ScaledObjectRef(scalerMetadata=META), timeout=10)
        assert next(stream).result is True
        stream.cancel()
        spec = stub.GetMetricSpec(pb.ScaledObjectRef(scalerMetadata=META), timeout=10)
        assert spec.metricSpecs[0].targetSize == 100


@pytest.mark.parametrize(
    ("common_name", "status", "code"),
    [
        ("consumer", grpc.StatusCode.PERMISSION_DENIED, errors_pb2.CODE_ACCESS_DENIED),
        ("txmq", grpc.StatusCode.UNAUTHENTICATED, None),  # a certificate naming no user
    ],
)
def test_others_are_refused(secured: Secured, common_name: str, status: grpc.StatusCode, code: int | None) -> None:
    with secured.keda(common_name) as channel:
        for name, call in calls(pb_grpc.ExternalScalerStub(channel)).items():
            with pytest.raises(grpc.RpcError) as exc:
                call()  # type: ignore[operator]
            assert exc.value.code() == status, name  # type: ignore[attr-defined]
            if code is not None:
                err = TxmqError.from_rpc_error(exc.value)  # type: ignore[arg-type]
                assert err.code == code, name
                assert err.metadata["action"] == "Get", name
