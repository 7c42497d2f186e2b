"""Authentication and permissions on real processes, table-driven over every RPC of every
txmq service (the access options in protos/): no credentials -> UNAUTHENTICATED, a user
without the permission -> PERMISSION_DENIED, with it -> the call gets past auth (and, for
the calls a user makes every day, works)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from support.certs import LOOPBACK, Authority, TlsFiles, cert_pem, key_pem, service_tls_args
from support.processes import ServiceFactory
from support.waiting import wait_until

from txmq import Admin, Message, Policy, Producer, TlsConfig, signing
from txmq.errors import ERROR_DETAIL_KEY, TxmqError, UnauthenticatedError
from txmq.v1 import auth_pb2, auth_pb2_grpc, errors_pb2
from txmq_runtime.auth import access_of, txmq_methods

SERVICE_KEY = "txmq-service"
SERVICE_SECRET = "service-secret-0123456789"
AUTH_FLAGS = ("--auth_enabled=true", "--auth_access_key", SERVICE_KEY, "--auth_secret_key", SERVICE_SECRET)
TOPIC, GROUP = "AuthT1", "AuthG1"
A = auth_pb2.Action
ALLOW = auth_pb2.Policy.DECISION_ALLOW

#: Where each service's RPCs are served.
SERVED_BY = {
    "txmq.v1.Store": "store",
    "txmq.v1.StoreAdmin": "store",
    "txmq.v1.ConsumerControl": "store",
    "txmq.v1.StoreReplication": "store",
    "txmq.v1.Pull": "pull",
    "txmq.v1.Transaction": "txcheck",
    "txmq.v1.TransactionPeer": "txcheck",
    "txmq.v1.Route": "pull",
    "txmq.v1.Auth": "txcheck",
    # KEDA's contract, its access declared in txmq_runtime.auth.FOREIGN_ACCESS.
    "externalscaler.ExternalScaler": "pull",
}


@dataclass
class Cluster:
    addresses: dict[str, str]
    logs: dict[str, Path]
    #: mutual TLS: what clients dial with (a certificate naming no user), and the CA to
    #: issue client certificates naming users; None: plaintext.
    tls: TlsConfig | None = None
    authority: Authority | None = None
    tls_env: dict[str, str] = field(default_factory=dict)

    def channel(self, address: str, tls: TlsConfig | None = None) -> grpc.Channel:
        tls = tls or self.tls
        if tls is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, tls.channel_credentials(), options=tls.channel_options())

    def client_tls(self, common_name: str) -> TlsConfig:
        """A client certificate naming ``common_name`` (a user, under mutual TLS)."""
        assert self.authority is not None and self.tls is not None
        cert, key = self.authority.issue(LOOPBACK, common_name=common_name, days=1)
        return TlsConfig(ca=cert_pem(self.authority.cert), cert=cert_pem(cert), key=key_pem(key))


def creds(name: str, secret: str) -> signing.Credentials:
    return signing.Credentials(name, secret)


ROOT = creds(SERVICE_KEY, SERVICE_SECRET)
ALICE = creds("alice", "alice-secret-1")  # may do everything on AuthT1 / AuthG1
BOB = creds("bob", "bob-secret-12")  # may do everything, but on other topics and groups


@pytest.fixture(params=["plaintext", "mtls"])
def cluster(service_factory: ServiceFactory, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    flags: tuple[str, ...] = AUTH_FLAGS
    authority = tls = None
    tls_env: dict[str, str] = {}
    if request.param == "mtls":  # enforcing TLS, client certificates required
        authority = Authority.create(days=1)
        cert, key = authority.issue(LOOPBACK, days=1)  # CN "txmq": no such user
        files = TlsFiles(tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")
        files.ca.write_bytes(cert_pem(authority.cert))
        files.cert.write_bytes(cert_pem(cert))
        files.key.write_bytes(key_pem(key))
        flags = (*service_tls_args(files), *AUTH_FLAGS)
        tls = TlsConfig(ca_file=files.ca, cert_file=files.cert, key_file=files.key)
        tls_env = {
            "TXMQ_TLS_CA_FILE": str(files.ca),
            "TXMQ_TLS_CERT_FILE": str(files.cert),
            "TXMQ_TLS_KEY_FILE": str(files.key),
        }
    store = service_factory.store(*flags)
    pull = service_factory.start("pull", *flags)
    txcheck = service_factory.start("txcheck", *flags)
    c = Cluster(
        {"store": store.address, "pull": pull.address, "txcheck": txcheck.address},
        {"store": store.process.log_path, "pull": pull.process.log_path, "txcheck": txcheck.process.log_path},
        tls,
        authority,
        tls_env,
    )
    with c.channel(c.addresses["txcheck"]) as channel:
        stub = auth_pb2_grpc.AuthStub(channel)
        meta = signing.auth_metadata(ROOT)
        for who, resource_suffix in ((ALICE, ""), (BOB, "-other")):
            stub.CreateUser(
                auth_pb2.CreateUserRequest(user=auth_pb2.User(username=who.access_key, secret_key=who.secret_key)),
                metadata=meta,
            )
            policies = [
                auth_pb2.Policy(resource=f"Topic:{TOPIC}{resource_suffix}", actions=[A.ACTION_ALL], decision=ALLOW),
                auth_pb2.Policy(resource=f"Group:{GROUP}{resource_suffix}", actions=[A.ACTION_ALL], decision=ALLOW),
            ]
            if who is ALICE:
                policies += [
                    auth_pb2.Policy(resource="Cluster", actions=[A.ACTION_ALL], decision=ALLOW),
                    # Lists of every topic / group need an any-rule.
                    auth_pb2.Policy(resource="Topic:*", actions=[A.ACTION_LIST], decision=ALLOW),
                    auth_pb2.Policy(resource="Group:*", actions=[A.ACTION_LIST], decision=ALLOW),
                ]
            stub.PutAcl(
                auth_pb2.PutAclRequest(acl=auth_pb2.Acl(username=who.access_key, policies=policies)), metadata=meta
            )
    yield c


def build_request(method) -> object:  # type: ignore[no-untyped-def]
    """The method's request with every resource field its access option names set to
    AuthT1 / AuthG1 (fences left out)."""
    request = method.input_type._concrete_class()
    for check in access_of(method).checks:
        if not check.field or (check.when_set and check.field == "fence"):
            continue
        value = TOPIC if check.type == auth_pb2.RESOURCE_TYPE_TOPIC else GROUP
        *path, last = check.field.split(".")
        target = request
        for part in path:
            field = target.DESCRIPTOR.fields_by_name[part]
            if field.is_repeated:
                existing = getattr(target, part)
                target = existing[0] if len(existing) else existing.add()
            else:
                target = getattr(target, part)
        field = target.DESCRIPTOR.fields_by_name[last]
        if field.is_repeated:
            getattr(target, last).append(value)
        else:
            setattr(target, last, value)
    if method.full_name == "txmq.v1.Transaction.ProducerChannel":
        request.ClearField("end_transaction")  # one of the oneof: the hello
        request.ClearField("end_transactions")
        request.hello.producer_group = GROUP
    return request


def call(cluster: Cluster, address: str, method, request, who: signing.Credentials | None) -> grpc.StatusCode | None:  # type: ignore[no-untyped-def]
    """The call's status (None: OK, or a stream that stayed open past the auth check)."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    metadata = signing.auth_metadata(who) if who else None
    serialize = type(request).SerializeToString
    deserialize = method.output_type._concrete_class.FromString
    with cluster.channel(address) as channel:
        try:
            if not method.client_streaming and not method.server_streaming:
                channel.unary_unary(path, serialize, deserialize)(request, timeout=5, metadata=metadata)
            elif method.client_streaming:
                responses = channel.stream_stream(path, serialize, deserialize)(
                    iter([request]), timeout=2, metadata=metadata
                )
                next(responses, None)
            else:
                responses = channel.unary_stream(path, serialize, deserialize)(request, timeout=2, metadata=metadata)
                next(responses, None)
        except grpc.RpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                detail = dict(exc.trailing_metadata() or ()).get(ERROR_DETAIL_KEY)
                assert detail, f"{path}: {code} without an ErrorDetail"
            return code if code != grpc.StatusCode.DEADLINE_EXCEEDED else None
    return None


AUTH_REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def test_every_rpc_checks_its_caller(cluster: Cluster) -> None:
    # Alice creates her topic: an ordinary admin call that works.
    with Admin(cluster.addresses["store"], tls=cluster.tls, credentials=ALICE) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    checked = 0
    failures = []
    for method in txmq_methods():
        service = method.containing_service.full_name
        access = access_of(method)
        address = cluster.addresses[SERVED_BY[service]]
        request = build_request(method)
        name = f"{service}/{method.name}"
        anonymous = call(cluster, address, method, request, None)
        alice = call(cluster, address, method, request, ALICE)
        bob = call(cluster, address, method, request, BOB)
        root = call(cluster, address, method, request, ROOT)
        checked += 1
        if access.scope == auth_pb2.ACCESS_SCOPE_ANYONE:
            expect = {"anonymous": anonymous not in AUTH_REFUSALS, "alice": alice not in AUTH_REFUSALS}
        elif access.scope == auth_pb2.ACCESS_SCOPE_SUPER_USER:
            expect = {
                "anonymous": anonymous == grpc.StatusCode.UNAUTHENTICATED,
                "alice": alice == grpc.StatusCode.PERMISSION_DENIED,
                "bob": bob == grpc.StatusCode.PERMISSION_DENIED,
                "root": root not in AUTH_REFUSALS,
            }
        else:
            expect = {
                "anonymous": anonymous == grpc.StatusCode.UNAUTHENTICATED,
                "alice": alice not in AUTH_REFUSALS,
                "root": root not in AUTH_REFUSALS,
            }
            if any((c.field and not c.when_set) or not c.field for c in access.checks):
                expect["bob"] = bob == grpc.StatusCode.PERMISSION_DENIED
        wrong = [who for who, ok in expect.items() if not ok]
        if wrong:
            failures.append(f"{name}: {wrong} (anonymous={anonymous}, alice={alice}, bob={bob}, root={root})")
    assert failures == [], "\n".join(failures)
    assert checked >= 50


def test_users_work_through_the_sdk_and_are_refused_elsewhere(cluster: Cluster) -> None:
    with Admin(cluster.addresses["store"], tls=cluster.tls, credentials=ALICE) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        with pytest.raises(TxmqError) as err:
            admin.create_topic("SomeoneElses", read_queue_nums=1, write_queue_nums=1)
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
        assert err.value.metadata["resource"] == "Topic:SomeoneElses"
    with Producer(GROUP, cluster.addresses["store"], tls=cluster.tls, credentials=ALICE) as producer:
        result = producer.send(Message(topic=TOPIC, body=b"hello"))
        assert result.msg_id
    with Producer(GROUP, cluster.addresses["store"], tls=cluster.tls, credentials=BOB) as producer:
        with pytest.raises(TxmqError) as err:
            producer.send(Message(topic=TOPIC, body=b"not yours"))
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
    with Producer(GROUP, cluster.addresses["store"], tls=cluster.tls) as producer:
        with pytest.raises(TxmqError) as err:
            producer.send(Message(topic=TOPIC, body=b"who?"))
        # No user: no signature (and, under mutual TLS, a certificate naming no user).
        assert isinstance(err.value, UnauthenticatedError)


def test_checks_only_the_handler_can_make(cluster: Cluster) -> None:
    """Topics inside sent records, of a message read by id, of messages found by unique id."""
    from txmq.ids import new_unique_ids
    from txmq.records import encode_for_send
    from txmq.v1 import store_pb2, store_pb2_grpc

    with Admin(cluster.addresses["store"], tls=cluster.tls, credentials=ROOT) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        admin.create_topic("AuthPrivate", read_queue_nums=1, write_queue_nums=1)
    with Producer("root-group", cluster.addresses["store"], tls=cluster.tls, credentials=ROOT) as producer:
        private = producer.send(Message(topic="AuthPrivate", body=b"not for alice"))
    with cluster.channel(cluster.addresses["store"]) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        mine, theirs = new_unique_ids(2)
        frame = store_pb2.RecordFrame(
            sequence=1,
            records=encode_for_send(TOPIC, 0, b"ok", mine) + encode_for_send("AuthPrivate", 0, b"sneaky", theirs),
        )
        ack = stub.SendRecords(frame, metadata=signing.auth_metadata(ALICE))
        assert ack.error.code == errors_pb2.CODE_ACCESS_DENIED, ack
        assert "AuthPrivate" in ack.error.message
        # All or nothing: not even the record to her own topic was stored.
        found = stub.QueryMessages(
            store_pb2.QueryMessagesRequest(topic=TOPIC, unique_id=mine), metadata=signing.auth_metadata(ALICE)
        )
        assert list(found.messages) == []
        ok = stub.SendRecords(
            store_pb2.RecordFrame(sequence=2, records=encode_for_send(TOPIC, 0, b"ok", mine)),
            metadata=signing.auth_metadata(ALICE),
        )
        assert not ok.HasField("error") and len(ok.commit_log_offsets) == 1
        # SendStream: the same check per frame, the stream goes on.
        frames = [
            store_pb2.RecordFrame(sequence=3, records=encode_for_send("AuthPrivate", 0, b"x", new_unique_ids(1)[0])),
            store_pb2.RecordFrame(sequence=4, records=encode_for_send(TOPIC, 0, b"y", new_unique_ids(1)[0])),
        ]
        acks = stub.SendStream(iter(frames), metadata=signing.auth_metadata(ALICE), timeout=10)
        first, second = next(acks), next(acks)
        acks.cancel()
        assert first.error.code == errors_pb2.CODE_ACCESS_DENIED
        assert not second.HasField("error")
        # Reading someone else's message by its id.
        with pytest.raises(grpc.RpcError) as err:
            stub.ViewMessage(
                store_pb2.ViewMessageRequest(offset_msg_id=private.offset_msg_id), metadata=signing.auth_metadata(ALICE)
            )
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        view = stub.ViewMessage(
            store_pb2.ViewMessageRequest(offset_msg_id=private.offset_msg_id), metadata=signing.auth_metadata(ROOT)
        )
        assert view.message.message.topic == "AuthPrivate"
        # A query by unique id without a topic finds only what she may read.
        by_id = store_pb2.QueryMessagesRequest(unique_id=private.msg_id)
        assert list(stub.QueryMessages(by_id, metadata=signing.auth_metadata(ALICE)).messages) == []
        assert len(stub.QueryMessages(by_id, metadata=signing.auth_metadata(ROOT)).messages) == 1


def test_users_and_acls_through_the_admin_api(cluster: Cluster) -> None:
    with Admin(cluster.addresses["pull"], tls=cluster.tls, credentials=ROOT) as root:
        assert root.whoami() == {
            "username": SERVICE_KEY, "super_user": True, "authenticated_by": "signature", "auth_enabled": True
        }  # fmt: skip
        carol = root.create_user("carol", "carol-secret-1")
        assert not carol.super_user and not carol.disabled
        with pytest.raises(TxmqError) as err:
            root.create_user("carol", "another-secret")
        assert err.value.code == errors_pb2.CODE_USER_ALREADY_EXISTS
        with pytest.raises(TxmqError) as err:
            root.create_user("carol2", "short")
        assert err.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
        with pytest.raises(TxmqError) as err:
            root.put_acl("carol", [Policy("Queue:x", ("Pub",))])
        assert err.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
        root.put_acl(
            "carol", [Policy("Topic:Carol*", ("Create", "Pub")), Policy("Topic:CarolSecret", ("All",), allow=False)]
        )
        assert [str(p) for p in root.get_acl("carol")] == [
            "Allow Topic:Carol* Create,Pub",
            "Deny Topic:CarolSecret All",
        ]
        assert {u.username for u in root.list_users()} >= {"alice", "bob", "carol", SERVICE_KEY}
        assert "carol" in root.list_acls()
    with Admin(cluster.addresses["store"], tls=cluster.tls, credentials=ROOT) as at_store:
        # Written through the pull service; the store's copy of the book follows by its own
        # etcd watch, a moment later (a loaded machine made that moment visible).
        wait_until(lambda: "carol" in at_store.list_acls(), what="carol's ACL in the store's copy of the book")
    carol_creds = creds("carol", "carol-secret-1")
    with Admin(cluster.addresses["store"], tls=cluster.tls, credentials=carol_creds) as carol_admin:
        assert carol_admin.whoami()["username"] == "carol"
        carol_admin.create_topic("CarolOrders", read_queue_nums=1, write_queue_nums=1)
        with pytest.raises(TxmqError) as err:
            carol_admin.create_topic("CarolSecret", read_queue_nums=1, write_queue_nums=1)
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED  # the deny wins over the prefix
        with pytest.raises(TxmqError) as err:
            carol_admin.list_users()  # user management is for super users
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
    with Admin(cluster.addresses["pull"], tls=cluster.tls, credentials=ROOT) as root:
        root.update_user("carol", disabled=True)
    with Admin(cluster.addresses["store"], tls=cluster.tls, credentials=carol_creds) as carol_admin:
        for _ in range(50):  # the store's copy of the book follows etcd's watch
            # A call carol may make (Create on Carol*; she lacks Get): until the disable
            # arrives it is let in and finds the topic there.
            try:
                carol_admin.create_topic("CarolOrders", read_queue_nums=1, write_queue_nums=1)
            except TxmqError as exc:
                if exc.code != errors_pb2.CODE_TOPIC_ALREADY_EXISTS:
                    assert exc.code == errors_pb2.CODE_INVALID_CREDENTIALS
                    break
            time.sleep(0.1)
        else:
            raise AssertionError("a disabled user was still let in")
    with Admin(cluster.addresses["pull"], tls=cluster.tls, credentials=ROOT) as root:
        root.delete_user("carol")
        with pytest.raises(TxmqError) as err:
            root.get_acl("carol")
        assert err.value.code == errors_pb2.CODE_USER_NOT_FOUND
        with pytest.raises(TxmqError) as err:
            root.delete_user(SERVICE_KEY)
        assert err.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
    # The audit log: administrative calls and denials, never a secret.
    txcheck_log = cluster.logs["txcheck"].read_text()
    store_log = cluster.logs["store"].read_text()
    assert "allowed /txmq.v1.Auth/CreateUser user=txmq-service" in cluster.logs["pull"].read_text()
    assert "denied /txmq.v1.StoreAdmin/CreateTopic user=carol" in store_log
    assert "allowed /txmq.v1.StoreAdmin/CreateTopic user=carol" in store_log
    for text in (txcheck_log, store_log, cluster.logs["pull"].read_text()):
        # (The harness's "--- starting: <argv>" line shows the flag this test passes the
        # secret with; production passes it in TXMQ_<SERVICE>_AUTH_SECRET_KEY.)
        logged = "\n".join(line for line in text.splitlines() if not line.startswith("--- "))
        assert "carol-secret-1" not in logged and SERVICE_SECRET not in logged
        assert "Traceback" not in logged


def test_the_cli_manages_users_and_acls(cluster: Cluster) -> None:
    from click.testing import CliRunner

    from txmq_cli.main import cli

    runner = CliRunner()
    root_env = {
        **cluster.tls_env,
        "TXMQ_ACCESS_KEY": SERVICE_KEY,
        "TXMQ_SECRET_KEY": SERVICE_SECRET,
        "TXMQ_ENDPOINT": cluster.addresses["store"],
    }

    def txmq(*args: str, env: dict[str, str] = root_env) -> str:
        result = runner.invoke(cli, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert txmq("whoami").strip() == f"{SERVICE_KEY} (super user), by signature"
    txmq("user", "create", "dave", "--secret-key", "dave-secret-1")
    txmq("acl", "allow", "dave", "Topic:Dave*", "Pub", "Create", "--source", "127.0.0.0/8")
    txmq("acl", "deny", "dave", "Topic:DaveSecret", "All")
    assert txmq("acl", "show", "dave").splitlines() == [
        "dave:",
        "  Allow Topic:Dave* Pub,Create from 127.0.0.0/8",
        "  Deny Topic:DaveSecret All",
    ]
    dave_env = {**root_env, "TXMQ_ACCESS_KEY": "dave", "TXMQ_SECRET_KEY": "dave-secret-1"}
    assert txmq("whoami", env=dave_env).strip() == "dave, by signature"
    txmq("topic", "create", "DaveOrders", env=dave_env)
    refused = runner.invoke(cli, ["topic", "create", "DaveSecret"], env=dave_env)
    assert refused.exit_code == 1 and "ACCESS_DENIED" in refused.output and "Traceback" not in refused.output
    anonymous = runner.invoke(
        cli, ["topic", "list"], env={**cluster.tls_env, "TXMQ_ENDPOINT": cluster.addresses["store"]}
    )
    assert anonymous.exit_code == 1
    assert "CODE_UNAUTHENTICATED" in anonymous.output or "CODE_INVALID_CREDENTIALS" in anonymous.output
    txmq("acl", "remove", "dave", "Topic:DaveSecret")
    assert "DaveSecret" not in txmq("acl", "list")
    assert "dave" in txmq("user", "list")
    txmq("user", "delete", "dave")
    assert "dave" not in txmq("user", "list")


def test_a_user_ends_only_transactions_on_topics_it_may_publish_to(cluster: Cluster) -> None:
    """END_TRANSACTION needs Pub on the producer group (the interceptor) and on the half
    message's own topic (the store, told by txcheck who ended it)."""
    from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

    with Admin(cluster.addresses["store"], tls=cluster.tls, credentials=ROOT) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        admin.create_topic("AuthPrivate", read_queue_nums=1, write_queue_nums=1)

    def half(topic: str) -> store_pb2.SendResult:
        with cluster.channel(cluster.addresses["store"]) as channel:
            response = store_pb2_grpc.StoreStub(channel).SendMessage(
                store_pb2.SendMessageRequest(
                    message=common_pb2.Message(topic=topic, body=b"half"),
                    producer_group=GROUP,  # alice may Pub on this group
                    transaction_prepared=True,
                ),
                metadata=signing.auth_metadata(ROOT),
            )
        return response.result

    def end(result: store_pb2.SendResult, who: signing.Credentials) -> grpc.RpcError | None:
        request = txcheck_pb2.EndTransactionRequest(
            producer_group=GROUP,
            transaction_id=result.transaction_id or result.msg_id,
            commit_log_offset=result.commit_log_offset,
            tran_state_table_offset=result.queue_offset,
            resolution=txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT,
        )
        with cluster.channel(cluster.addresses["txcheck"]) as channel:
            try:
                txcheck_pb2_grpc.TransactionStub(channel).EndTransaction(request, metadata=signing.auth_metadata(who))
            except grpc.RpcError as exc:
                return exc
        return None

    theirs, mine = half("AuthPrivate"), half(TOPIC)
    refused = end(theirs, ALICE)
    assert refused is not None and refused.code() == grpc.StatusCode.PERMISSION_DENIED, refused
    detail = TxmqError.from_rpc_error(refused)
    assert detail.code == errors_pb2.CODE_ACCESS_DENIED and detail.metadata["resource"] == "Topic:AuthPrivate"
    assert end(mine, ALICE) is None  # her own topic: committed
    assert end(theirs, ROOT) is None  # still pending after her refusal: the owner commits it


def test_a_client_certificate_names_the_user(cluster: Cluster) -> None:
    """Under mutual TLS a call without a signature is the user its certificate names."""
    if cluster.tls is None:
        pytest.skip("client certificates need mutual TLS")
    with Admin(cluster.addresses["store"], tls=cluster.client_tls("alice")) as alice:
        assert alice.whoami()["authenticated_by"] == "certificate"
        alice.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)  # her topic
        with pytest.raises(TxmqError) as err:
            alice.create_topic("NotAlices", read_queue_nums=1, write_queue_nums=1)
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
    with Producer(GROUP, cluster.addresses["store"], tls=cluster.client_tls("alice")) as producer:
        assert producer.send(Message(topic=TOPIC, body=b"by certificate")).msg_id
    # A signature wins over the certificate: bob's certificate, alice's signature.
    with Admin(cluster.addresses["store"], tls=cluster.client_tls("bob"), credentials=ALICE) as signed:
        assert signed.whoami()["username"] == "alice"
    with Admin(cluster.addresses["store"], tls=cluster.client_tls("mallory")) as stranger:
        with pytest.raises(TxmqError) as err:
            stranger.get_topic(TOPIC)
        assert err.value.code == errors_pb2.CODE_INVALID_CREDENTIALS
