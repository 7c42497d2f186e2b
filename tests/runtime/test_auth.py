"""The auth core without a server: policies, resource names from requests, signatures on a
manual clock, sealed secrets, the book as etcd feeds it."""

from __future__ import annotations

import pytest
from support.clock import ManualClock

from txmq import signing
from txmq.errors import TxmqError
from txmq.v1 import auth_pb2, common_pb2, errors_pb2, store_pb2, txcheck_pb2
from txmq_runtime.auth import (
    Authenticator,
    AuthKeys,
    CompiledAcl,
    Guard,
    Principal,
    Sealer,
    UserBook,
    access_of,
    names_at,
    parse_resource,
    txmq_methods,
    validate_acl,
)
from txmq_runtime.registry import encode

A = auth_pb2.Action
R = auth_pb2.ResourceType
ALLOW = auth_pb2.Policy.DECISION_ALLOW
DENY = auth_pb2.Policy.DECISION_DENY
NOW_S = 1_795_000_000  # 2026-11-18


def policy(resource: str, *actions: int, decision: int = ALLOW, ips: tuple[str, ...] = ()) -> auth_pb2.Policy:
    return auth_pb2.Policy(resource=resource, actions=list(actions), decision=decision, source_ips=list(ips))


def acl(*policies: auth_pb2.Policy) -> CompiledAcl:
    return CompiledAcl.of(auth_pb2.Acl(username="u", policies=list(policies)))


def test_every_rpc_has_an_access_rule() -> None:
    missing = [f"{m.containing_service.full_name}/{m.name}" for m in txmq_methods() if access_of(m) is None]
    assert missing == []
    assert sum(1 for _ in txmq_methods()) >= 50  # the Store, Pull, txcheck, Route and Auth services


def test_every_field_path_names_a_string_field() -> None:
    for method in txmq_methods():
        for check in access_of(method).checks:
            if not check.field:
                continue
            descriptor = method.input_type
            for part in check.field.split("."):
                field = descriptor.fields_by_name.get(part)
                assert field is not None, f"{method.full_name}: {check.field} has no {part}"
                descriptor = field.message_type
            assert (descriptor is None) != check.when_set or field.message_type is None, method.full_name


def test_resource_patterns() -> None:
    assert parse_resource("*") == (None, "", True)
    assert parse_resource("Cluster") == (R.RESOURCE_TYPE_CLUSTER, "", True)
    assert parse_resource("Topic:orders") == (R.RESOURCE_TYPE_TOPIC, "orders", False)
    assert parse_resource("group:pay-*") == (R.RESOURCE_TYPE_GROUP, "pay-", True)
    assert parse_resource("Topic:*") == (R.RESOURCE_TYPE_TOPIC, "", True)
    for bad in ("Topic", "Topic:", "Queue:x", "Topic:a*b", "Cluster:x"):
        with pytest.raises(ValueError):
            parse_resource(bad)


def test_deny_by_default_literal_prefix_any_and_deny_wins() -> None:
    rules = acl(
        policy("Topic:orders", A.ACTION_PUB),
        policy("Topic:pay-*", A.ACTION_SUB, A.ACTION_PUB),
        policy("Topic:pay-secret", A.ACTION_ALL, decision=DENY),
        policy("Group:*", A.ACTION_SUB),
    )
    T, G = R.RESOURCE_TYPE_TOPIC, R.RESOURCE_TYPE_GROUP
    assert rules.decide(T, "orders", A.ACTION_PUB, None).allowed
    assert not rules.decide(T, "orders", A.ACTION_SUB, None).allowed  # no rule: denied
    assert not rules.decide(T, "orders2", A.ACTION_PUB, None).allowed  # literal, not prefix
    assert rules.decide(T, "pay-in", A.ACTION_SUB, None).allowed
    verdict = rules.decide(T, "pay-secret", A.ACTION_PUB, None)
    assert not verdict.allowed and verdict.rule == "Topic:pay-secret"  # deny wins over the prefix allow
    assert rules.decide(G, "anything", A.ACTION_SUB, None).allowed
    assert not rules.decide(G, "anything", A.ACTION_DELETE, None).allowed
    # An empty name (a list of all topics) is matched by any-rules only.
    assert not rules.decide(T, "", A.ACTION_PUB, None).allowed
    assert acl(policy("Topic:*", A.ACTION_LIST)).decide(T, "", A.ACTION_LIST, None).allowed
    assert acl(policy("*", A.ACTION_ALL)).decide(R.RESOURCE_TYPE_CLUSTER, "", A.ACTION_GET, None).allowed


def test_source_addresses() -> None:
    rules = acl(policy("Topic:t", A.ACTION_PUB, ips=("10.0.0.0/8", "::1")))
    T = R.RESOURCE_TYPE_TOPIC
    assert rules.decide(T, "t", A.ACTION_PUB, "10.1.2.3").allowed
    assert rules.decide(T, "t", A.ACTION_PUB, "::1").allowed
    assert not rules.decide(T, "t", A.ACTION_PUB, "192.168.0.1").allowed
    assert not rules.decide(T, "t", A.ACTION_PUB, None).allowed


def test_acl_validation_is_typed() -> None:
    with pytest.raises(TxmqError) as err:
        validate_acl(auth_pb2.Acl(username="u", policies=[policy("Queue:x", A.ACTION_PUB)]))
    assert err.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
    with pytest.raises(TxmqError):
        validate_acl(auth_pb2.Acl(username="u", policies=[auth_pb2.Policy(resource="Topic:x", decision=ALLOW)]))
    with pytest.raises(TxmqError):
        validate_acl(auth_pb2.Acl(username="a/b"))


def test_names_at() -> None:
    send = store_pb2.SendMessageRequest(message=common_pb2.Message(topic="t1"))
    assert names_at(send, "message.topic") == ["t1"]
    assert names_at(send, "producer_group", when_set=True) is None
    assert names_at(store_pb2.SendMessageRequest(), "message.topic") is None  # no message: nothing to check
    batch = store_pb2.SendBatchRequest(messages=[common_pb2.Message(topic="a"), common_pb2.Message(topic="b")])
    assert names_at(batch, "messages.topic") == ["a", "b"]
    assert names_at(store_pb2.ListTopicsRequest(), "include_system") == ["False"]
    commit = store_pb2.CommitConsumeOffsetRequest(consumer_group="g")
    assert names_at(commit, "fence", when_set=True) is None
    commit.fence.epoch = 3
    assert names_at(commit, "fence", when_set=True) == []  # set: a cluster-wide check
    hello = txcheck_pb2.ProducerCommand(hello=txcheck_pb2.ProducerHello(producer_group="pg"))
    assert names_at(hello, "hello.producer_group") == ["pg"]
    assert names_at(hello, "end_transaction.producer_group") is None


def book_with(sealer: Sealer, keys: AuthKeys, *users: tuple[str, str, bool, bool]) -> UserBook:
    book = UserBook(keys, sealer)
    items = []
    for name, secret, super_user, disabled in users:
        stored = auth_pb2.StoredUser(
            user=auth_pb2.User(username=name, super_user=super_user, disabled=disabled),
            sealed_secret=sealer.seal(name, secret),
        )
        items.append((keys.user(name), encode(stored)))
    book.reset(items)
    return book


def signed(name: str, secret: str, now_s: float) -> list[tuple[str, str]]:
    return list(signing.auth_metadata(signing.Credentials(name, secret), now_s=now_s))


def test_signatures_on_a_manual_clock() -> None:
    keys = AuthKeys("/t")
    sealer = Sealer("service-secret-0123456789")
    book = book_with(sealer, keys, ("alice", "alice-secret", False, False), ("bob", "bob-secret-x", False, True))
    clock = ManualClock(wall_ms=NOW_S * 1000)
    auth = Authenticator(book, clock_skew_ms=60_000, clock=clock)
    principal = auth.authenticate(signed("alice", "alice-secret", NOW_S), {}, "ipv4:10.0.0.7:4000")
    assert principal == Principal("alice", False, "signature", "10.0.0.7")

    def code(metadata, ctx=None) -> int:
        with pytest.raises(TxmqError) as err:
            auth.authenticate(metadata, ctx or {}, "ipv6:[::1]:1")
        return err.value.code

    assert code([]) == errors_pb2.CODE_UNAUTHENTICATED
    assert code(signed("alice", "wrong-secret", NOW_S)) == errors_pb2.CODE_INVALID_CREDENTIALS
    assert code(signed("carol", "whatever-1", NOW_S)) == errors_pb2.CODE_INVALID_CREDENTIALS
    assert code(signed("bob", "bob-secret-x", NOW_S)) == errors_pb2.CODE_INVALID_CREDENTIALS  # disabled
    # The clock-skew window, both ways, edges included.
    assert auth.authenticate(signed("alice", "alice-secret", NOW_S - 60), {}, "").username == "alice"
    assert code(signed("alice", "alice-secret", NOW_S - 61)) == errors_pb2.CODE_REQUEST_EXPIRED
    assert code(signed("alice", "alice-secret", NOW_S + 61)) == errors_pb2.CODE_REQUEST_EXPIRED
    header = signed("alice", "alice-secret", NOW_S)[0]
    for bad_date in ("x", "20010101T000000Z", "20991231T235959Z", "2026-11-18T00:00"):
        assert code([header, (signing.DATE_HEADER, bad_date)]) == errors_pb2.CODE_REQUEST_EXPIRED
    assert code([(signing.AUTHORIZATION_HEADER, "Basic abc")]) == errors_pb2.CODE_UNAUTHENTICATED
    assert code([(signing.AUTHORIZATION_HEADER, "x" * 5000)]) == errors_pb2.CODE_UNAUTHENTICATED
    assert code([(signing.AUTHORIZATION_HEADER, b"\xff\xfe")]) == errors_pb2.CODE_UNAUTHENTICATED
    # Java clients send upper-case hex.
    upper = [(k, v.replace(v.rpartition("=")[2], v.rpartition("=")[2].upper()) if k == "authorization" else v)
             for k, v in signed("alice", "alice-secret", NOW_S)]  # fmt: skip
    assert auth.authenticate(upper, {}, "").username == "alice"
    # A client certificate naming an enabled user.
    cert = {"x509_common_name": [b"alice"]}
    assert auth.authenticate([], cert, "").via == "certificate"
    assert code([], {"x509_common_name": [b"bob"]}) == errors_pb2.CODE_INVALID_CREDENTIALS
    assert code([], {"x509_common_name": [b"nobody"]}) == errors_pb2.CODE_INVALID_CREDENTIALS


def test_during_a_key_roll_the_services_identity_signs_with_either_key() -> None:
    """The book holds one secret for the services' identity; a process accepting both keys
    of a roll takes a signature with either for that identity, and for no other user."""
    old, new = "old-service-secret-0123", "new-service-secret-4567"
    keys, sealer = AuthKeys("/t"), Sealer(new, (old,))
    book = book_with(sealer, keys, ("svc", new, True, False), ("alice", "alice-secret", False, False))
    clock = ManualClock(wall_ms=NOW_S * 1000)
    auth = Authenticator(book, clock_skew_ms=60_000, clock=clock, own_identity=("svc", (new, old)))
    for secret in (new, old):
        assert auth.authenticate(signed("svc", secret, NOW_S), {}, "").username == "svc"
    for who, secret in (("svc", "a-third-secret-key-x"), ("alice", old), ("alice", new)):
        with pytest.raises(TxmqError) as err:
            auth.authenticate(signed(who, secret, NOW_S), {}, "")
        assert err.value.code == errors_pb2.CODE_INVALID_CREDENTIALS
    # Without the roll's key only the book's secret signs.
    alone = Authenticator(book, clock_skew_ms=60_000, clock=clock, own_identity=("svc", (new,)))
    with pytest.raises(TxmqError):
        alone.authenticate(signed("svc", old, NOW_S), {}, "")


def test_sealed_secrets() -> None:
    sealer = Sealer("service-secret-0123456789")
    sealed = sealer.seal("alice", "s3cret-value")
    assert b"s3cret" not in sealed
    assert sealer.open("alice", sealed) == "s3cret-value"
    assert sealer.open("mallory", sealed) is None  # bound to the user
    assert Sealer("another-service-secret").open("alice", sealed) is None
    assert sealer.open("alice", sealed[:-1] + bytes([sealed[-1] ^ 1])) is None
    # A book fed with a secret sealed by another cluster keeps the user, without a secret.
    keys = AuthKeys("/t")
    book = book_with(Sealer("another-service-secret"), keys, ("alice", "alice-secret", False, False))
    book._sealer = sealer
    book.reset(
        [(keys.user("alice"), encode(auth_pb2.StoredUser(user=auth_pb2.User(username="alice"), sealed_secret=sealed)))]
    )
    assert book.secret_for("alice") == "s3cret-value"


def test_guard_system_topics_and_super_users() -> None:
    keys = AuthKeys("/t")
    book = UserBook(keys, Sealer("service-secret-0123456789"))
    book.put(keys.acl("u"), encode(auth_pb2.Acl(username="u", policies=[policy("*", A.ACTION_ALL)])))
    guard = Guard(book)
    user = Principal("u", False, "signature", None)
    guard.check(user, R.RESOURCE_TYPE_TOPIC, "orders", A.ACTION_SUB)
    with pytest.raises(TxmqError) as err:
        guard.check(user, R.RESOURCE_TYPE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", A.ACTION_SUB)
    assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
    assert err.value.metadata["resource"] == "Topic:RMQ_SYS_TRANS_HALF_TOPIC"
    guard.check(
        Principal("root", True, "signature", None), R.RESOURCE_TYPE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", A.ACTION_SUB
    )
    book.delete(keys.acl("u"))
    with pytest.raises(TxmqError):
        guard.check(user, R.RESOURCE_TYPE_TOPIC, "orders", A.ACTION_SUB)


def test_remembered_decisions_follow_the_book() -> None:
    keys = AuthKeys("/t")
    book = UserBook(keys, Sealer("service-secret-0123456789"))
    book.put(keys.acl("u"), encode(auth_pb2.Acl(username="u", policies=[policy("Topic:t", A.ACTION_PUB)])))
    guard = Guard(book)
    user = Principal("u", False, "signature", "10.0.0.1")
    guard.check(user, R.RESOURCE_TYPE_TOPIC, "t", A.ACTION_PUB)
    guard.check(user, R.RESOURCE_TYPE_TOPIC, "t", A.ACTION_PUB)  # remembered
    book.put(
        keys.acl("u"), encode(auth_pb2.Acl(username="u", policies=[policy("Topic:t", A.ACTION_PUB, decision=DENY)]))
    )
    with pytest.raises(TxmqError):
        guard.check(user, R.RESOURCE_TYPE_TOPIC, "t", A.ACTION_PUB)
    book.reset([])  # etcd read again, nothing there: denied by default
    with pytest.raises(TxmqError):
        guard.check(user, R.RESOURCE_TYPE_TOPIC, "t", A.ACTION_PUB)
    book.put(keys.acl("u"), encode(auth_pb2.Acl(username="u", policies=[policy("Topic:t", A.ACTION_PUB)])))
    guard.check(user, R.RESOURCE_TYPE_TOPIC, "t", A.ACTION_PUB)
    # Another source address is another decision (source-address rules).
    book.put(
        keys.acl("u"),
        encode(auth_pb2.Acl(username="u", policies=[policy("Topic:t", A.ACTION_PUB, ips=("10.0.0.0/8",))])),
    )
    guard.check(user, R.RESOURCE_TYPE_TOPIC, "t", A.ACTION_PUB)
    with pytest.raises(TxmqError):
        guard.check(Principal("u", False, "signature", "192.168.1.1"), R.RESOURCE_TYPE_TOPIC, "t", A.ACTION_PUB)
