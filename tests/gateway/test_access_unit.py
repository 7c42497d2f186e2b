"""Users and permissions of the v2 protocol without processes (access.py): the table
covers every method of apache.rocketmq.v2.MessagingService and names real request fields;
decisions per RPC for allowed and refused users on a user book fed as etcd feeds it; and
through the servicer: UNAUTHORIZED / FORBIDDEN answered the v2 way (response status,
stream status frame, Telemetry command status) with nothing done, denials counted and
logged once a minute."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from txmq import signing
from txmq.v1 import auth_pb2
from txmq_gateway.access import ACCESS, SUB, TOPIC, Authorizer, Need, describe_access
from txmq_gateway.auth import BAD_CREDENTIALS, Authenticator
from txmq_gateway.servicer import MessagingServicer, add_messaging_servicer
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError, ok
from txmq_gateway.telemetry import ClientHub
from txmq_gateway.v2 import SERVICE_NAME, Code, pb, svc, svc_grpc
from txmq_runtime.auth import DENIED, AuthKeys, Guard, Principal, Sealer, UserBook
from txmq_runtime.registry import encode

A = auth_pb2.Action
ALLOW = auth_pb2.Policy.DECISION_ALLOW
DENY = auth_pb2.Policy.DECISION_DENY
DOCS = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"
METHODS = svc.DESCRIPTOR.services_by_name["MessagingService"].methods
T, G = "Orders", "Billing"
SECRETS = {
    "alice": "alice-secret-1",  # Pub + Sub on T, Sub on G
    "reader": "reader-secret-1",  # Sub on T and G only
    "writer": "writer-secret-1",  # Pub on T only
    "nobody": "nobody-secret-1",  # no ACL at all
    "everything": "everything-secret",  # * All (still not system topics)
    "denied": "denied-secret-1",  # Topic:* All but a Deny on T
    "root": "root-secret-123",  # super user
    "off": "off-secret-123",  # disabled
}
NOW_S = 1_790_000_000.0


def policy(resource: str, *actions: int, decision: int = ALLOW) -> auth_pb2.Policy:
    return auth_pb2.Policy(resource=resource, actions=list(actions), decision=decision)


ACLS = {
    "alice": [policy(f"Topic:{T}", A.ACTION_PUB, A.ACTION_SUB), policy(f"Group:{G}", A.ACTION_SUB)],
    "reader": [policy(f"Topic:{T}", A.ACTION_SUB), policy(f"Group:{G}", A.ACTION_SUB)],
    "writer": [policy(f"Topic:{T}", A.ACTION_PUB)],
    "everything": [policy("*", A.ACTION_ALL)],
    "denied": [policy("*", A.ACTION_ALL), policy(f"Topic:{T}", A.ACTION_ALL, decision=DENY)],
}


def make_book() -> UserBook:
    keys = AuthKeys("/t")
    sealer = Sealer("service-secret-0123456789")
    book = UserBook(keys, sealer)
    items = []
    for name, secret in SECRETS.items():
        user = auth_pb2.User(username=name, super_user=name == "root", disabled=name == "off")
        items.append((keys.user(name), encode(auth_pb2.StoredUser(user=user, sealed_secret=sealer.seal(name, secret)))))
    for name, policies in ACLS.items():
        items.append((keys.acl(name), encode(auth_pb2.Acl(username=name, policies=policies))))
    book.reset(items)
    return book


BOOK = make_book()
AUTHORIZER = Authorizer(BOOK, Guard(BOOK))


def who(name: str) -> Principal:
    return AUTHORIZER.principal(name, "ipv4:10.1.2.3:4000")


def decide(method: str, user: str, request: Message) -> int:
    """The v2 code a user's request gets from the table (OK or FORBIDDEN)."""
    try:
        AUTHORIZER.check(method, who(user), request)
    except GatewayError as err:
        assert err.code == Code.FORBIDDEN
        return err.code
    return Code.OK


# -- the table ------------------------------------------------------------------------------------


def test_the_table_covers_every_method_of_the_service() -> None:
    served = {m.name for m in METHODS}
    assert served == set(ACCESS), f"missing: {served - set(ACCESS)}, unknown: {set(ACCESS) - served}"
    assert len(served) >= 17


def _string_at(descriptor: Any, path: str) -> bool:
    for part in path.split("."):
        field = descriptor.fields_by_name.get(part)
        if field is None:
            return False
        if field.message_type is None:
            return field.type == field.TYPE_STRING and part == path.rsplit(".", 1)[-1]
        descriptor = field.message_type
    return False


@pytest.mark.parametrize("method", [m.name for m in METHODS])
def test_every_need_names_a_string_field_of_the_request(method: str) -> None:
    by_name = {m.name: m for m in METHODS}
    request = svc.TelemetryCommand.DESCRIPTOR if method == "Telemetry" else by_name[method].input_type
    for need in ACCESS[method]:
        assert _string_at(request, need.field), f"{method}: {need.field} is not a string field of {request.name}"
        assert need.actions


def test_the_docs_hold_the_table() -> None:
    text = DOCS.read_text()
    missing = [row for row in describe_access() if row not in text]
    assert missing == [], "docs/gateway.md lacks (or has an outdated) row:\n" + "\n".join(missing)


def test_names_read_defaults_unless_optional() -> None:
    need = Need(TOPIC, (SUB,), "message_queue.topic.name")
    assert need.names(svc.ReceiveMessageRequest()) == [""]  # unset: the empty name, checked
    optional = Need(TOPIC, (SUB,), "settings.subscription.subscriptions.topic.name", optional=True)
    assert optional.names(svc.TelemetryCommand()) == []
    command = svc.TelemetryCommand(
        settings=pb.Settings(
            subscription=pb.Subscription(
                subscriptions=[
                    pb.SubscriptionEntry(topic=pb.Resource(name="a")),
                    pb.SubscriptionEntry(topic=pb.Resource(name="")),
                    pb.SubscriptionEntry(topic=pb.Resource(name="b")),
                ]
            )
        )
    )
    assert optional.names(command) == ["a", "b"]


# -- decisions ------------------------------------------------------------------------------------


def topic(name: str = T) -> pb.Resource:
    return pb.Resource(name=name)


def queue(name: str = T) -> pb.MessageQueue:
    return pb.MessageQueue(topic=topic(name), id=0, broker=pb.Broker(name="store-0"))


def message(name: str = T) -> pb.Message:
    return pb.Message(topic=topic(name), body=b"x", system_properties=pb.SystemProperties(message_id="m1"))


def producer_settings(*topics: str) -> svc.TelemetryCommand:
    return svc.TelemetryCommand(
        settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[topic(t) for t in topics]))
    )


def consumer_settings(group: str = G, *topics: str) -> svc.TelemetryCommand:
    entries = [pb.SubscriptionEntry(topic=topic(t)) for t in topics or (T,)]
    return svc.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=entries),
        )
    )


def group() -> pb.Resource:
    return pb.Resource(name=G)


#: method -> a request naming T and G, and who may make it (besides root, everything, alice).
REQUESTS: dict[str, tuple[Message, set[str]]] = {
    "QueryRoute": (svc.QueryRouteRequest(topic=topic()), {"reader", "writer"}),
    "Heartbeat": (svc.HeartbeatRequest(group=group(), client_type=pb.SIMPLE_CONSUMER), {"reader", "denied"}),
    "SendMessage": (svc.SendMessageRequest(messages=[message()]), {"writer"}),
    "QueryAssignment": (svc.QueryAssignmentRequest(topic=topic(), group=group()), {"reader"}),
    "ReceiveMessage": (svc.ReceiveMessageRequest(group=group(), message_queue=queue()), {"reader"}),
    "AckMessage": (svc.AckMessageRequest(group=group(), topic=topic()), {"reader"}),
    "ForwardMessageToDeadLetterQueue": (
        svc.ForwardMessageToDeadLetterQueueRequest(group=group(), topic=topic()),
        {"reader"},
    ),
    "ChangeInvisibleDuration": (svc.ChangeInvisibleDurationRequest(group=group(), topic=topic()), {"reader"}),
    "PullMessage": (svc.PullMessageRequest(group=group(), message_queue=queue()), {"reader"}),
    "UpdateOffset": (svc.UpdateOffsetRequest(group=group(), message_queue=queue()), {"reader"}),
    "GetOffset": (svc.GetOffsetRequest(group=group(), message_queue=queue()), {"reader"}),
    "QueryOffset": (svc.QueryOffsetRequest(message_queue=queue()), {"reader"}),
    "EndTransaction": (svc.EndTransactionRequest(topic=topic(), transaction_id="x"), {"writer"}),
    "Telemetry": (producer_settings(T), {"writer"}),
    "NotifyClientTermination": (
        svc.NotifyClientTerminationRequest(group=group()),
        {"reader", "writer", "nobody", "denied"},
    ),
    "RecallMessage": (svc.RecallMessageRequest(topic=topic()), {"writer"}),
    "SyncLiteSubscription": (svc.SyncLiteSubscriptionRequest(topic=topic(), group=group()), {"reader"}),
}


def test_every_method_has_a_decision_case() -> None:
    assert set(REQUESTS) == {m.name for m in METHODS}


@pytest.mark.parametrize("method", sorted(REQUESTS))
def test_who_may_make_each_call(method: str) -> None:
    request, others = REQUESTS[method]
    allowed = {"root", "everything", "alice", *others}
    got = {user: decide(method, user, request) for user in SECRETS if user != "off"}
    expected = {user: Code.OK if user in allowed else Code.FORBIDDEN for user in got}
    assert got == expected


def test_route_needs_pub_or_sub_and_the_refusal_names_both() -> None:
    with pytest.raises(GatewayError) as err:
        AUTHORIZER.check("QueryRoute", who("nobody"), svc.QueryRouteRequest(topic=topic()))
    assert err.value.code == Code.FORBIDDEN
    assert err.value.message == f"user nobody may not Pub or Sub on Topic:{T}: no rule allows it"
    with pytest.raises(GatewayError) as err:
        AUTHORIZER.check("QueryRoute", who("denied"), svc.QueryRouteRequest(topic=topic()))
    assert err.value.message == f"user denied may not Pub or Sub on Topic:{T}: denied by 'Topic:{T}'"


def test_a_send_needs_pub_on_every_message_topic() -> None:
    both = svc.SendMessageRequest(messages=[message(), message("Elsewhere")])
    with pytest.raises(GatewayError) as err:
        AUTHORIZER.check("SendMessage", who("alice"), both)
    assert err.value.code == Code.FORBIDDEN
    assert err.value.message == "user alice may not Pub on Topic:Elsewhere: no rule allows it"
    assert decide("SendMessage", "everything", both) == Code.OK
    # An empty topic is matched only by any-rules (the core then says ILLEGAL_TOPIC).
    assert decide("SendMessage", "alice", svc.SendMessageRequest(messages=[message("")])) == Code.FORBIDDEN
    assert decide("SendMessage", "everything", svc.SendMessageRequest(messages=[message("")])) == Code.OK


def test_system_topics_are_for_super_users_only() -> None:
    half = svc.QueryRouteRequest(topic=topic("RMQ_SYS_TRANS_HALF_TOPIC"))
    assert decide("QueryRoute", "everything", half) == Code.FORBIDDEN
    assert decide("QueryRoute", "root", half) == Code.OK
    send = svc.SendMessageRequest(messages=[message("RMQ_SYS_TRANS_OP_HALF_TOPIC")])
    assert decide("SendMessage", "everything", send) == Code.FORBIDDEN


def test_heartbeats_check_the_group_of_consumers_only() -> None:
    producer = svc.HeartbeatRequest(client_type=pb.PRODUCER)
    assert decide("Heartbeat", "nobody", producer) == Code.OK
    producer_naming_a_group = svc.HeartbeatRequest(client_type=pb.PRODUCER, group=group())
    assert decide("Heartbeat", "nobody", producer_naming_a_group) == Code.OK
    push = svc.HeartbeatRequest(client_type=pb.PUSH_CONSUMER, group=pb.Resource(name="Other"))
    assert decide("Heartbeat", "alice", push) == Code.FORBIDDEN
    assert decide("Heartbeat", "nobody", svc.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER)) == Code.OK  # no group


def test_telemetry_commands() -> None:
    assert decide("Telemetry", "nobody", svc.TelemetryCommand()) == Code.OK  # nothing named
    assert decide("Telemetry", "writer", producer_settings(T)) == Code.OK
    assert decide("Telemetry", "reader", producer_settings(T)) == Code.FORBIDDEN
    assert decide("Telemetry", "alice", producer_settings(T, "Elsewhere")) == Code.FORBIDDEN
    assert decide("Telemetry", "reader", consumer_settings()) == Code.OK
    assert decide("Telemetry", "writer", consumer_settings()) == Code.FORBIDDEN
    assert decide("Telemetry", "reader", consumer_settings("OtherGroup")) == Code.FORBIDDEN
    assert decide("Telemetry", "reader", consumer_settings(G, T, "Elsewhere")) == Code.FORBIDDEN
    answer = svc.TelemetryCommand(
        recover_orphaned_transaction_command=svc.RecoverOrphanedTransactionCommand(message=message())
    )
    assert decide("Telemetry", "writer", answer) == Code.OK
    assert decide("Telemetry", "reader", answer) == Code.FORBIDDEN


def test_a_method_missing_from_a_table_is_refused_to_users() -> None:
    narrow = Authorizer(BOOK, Guard(BOOK), table={})
    with pytest.raises(GatewayError) as err:
        narrow.check("QueryRoute", who("everything"), svc.QueryRouteRequest(topic=topic()))
    assert err.value.code == Code.FORBIDDEN and "no access rule" in err.value.message
    narrow.check("QueryRoute", who("root"), svc.QueryRouteRequest(topic=topic()))


def test_principals_carry_the_super_user_flag_and_the_peer_address() -> None:
    assert who("root") == Principal("root", True, "signature", "10.1.2.3")
    assert AUTHORIZER.principal("alice", "ipv6:[::1]:5").source == "::1"


# -- through the servicer -------------------------------------------------------------------------


def lookup(access_key: str) -> bytes | None:
    secret = BOOK.secret_for(access_key)
    return None if secret is None else secret.encode()


def signed(user: str, secret: str | None = None) -> list[tuple[str, str | bytes]]:
    creds = signing.Credentials(user, secret or SECRETS[user])
    return [("x-mq-client-id", f"client-of-{user}"), *signing.auth_metadata(creds, now_s=NOW_S)]


class Context:
    def __init__(self, metadata: list[tuple[str, str | bytes]]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> list[tuple[str, str | bytes]]:
        return self.metadata

    def peer(self) -> str:
        return "ipv4:10.1.2.3:4000"

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def time_remaining(self) -> float:
        return 5.0


class Recorder:
    """Stands in for the cores: records what reached them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def send(self, request: svc.SendMessageRequest) -> svc.SendMessageResponse:
        self.calls.append("send")
        return svc.SendMessageResponse(status=ok())

    async def end_transaction(self, request: svc.EndTransactionRequest) -> None:
        self.calls.append("end_transaction")

    async def receive(self, **_: Any) -> list[Any]:
        self.calls.append("receive")
        return []

    async def ack(self, **_: Any) -> None:
        self.calls.append("ack")

    async def pull(self, **_: Any) -> Any:
        from txmq_gateway.consumer import Pulled

        self.calls.append("pull")
        return Pulled(Code.MESSAGE_NOT_FOUND, "no new message", [], 0)

    async def update_offset(self, **_: Any) -> None:
        self.calls.append("update_offset")

    def heartbeat(self, *_: Any) -> None:
        self.calls.append("heartbeat")

    def terminate(self, *_: Any) -> None:
        self.calls.append("terminate")

    def claim(self, *_: Any) -> None:
        pass


def servicer(recorder: Recorder, clients: Any = None) -> MessagingServicer:
    return MessagingServicer(
        address="127.0.0.1:1",
        auth=Authenticator(lookup, clock=lambda: int(NOW_S * 1000)),
        backend=None,  # type: ignore[arg-type]
        producer=recorder,  # type: ignore[arg-type]
        consumer=recorder,  # type: ignore[arg-type]
        clients=clients or recorder,
        access=Authorizer(BOOK, Guard(BOOK)),
    )


def denied_count(method: str, reason: str) -> float:
    value = DENIED.labels(f"/{SERVICE_NAME}/{method}", reason)._value.get()
    return float(value)


async def test_unary_calls_are_refused_with_their_response_status_and_do_nothing() -> None:
    recorder = Recorder()
    rpc = servicer(recorder)
    send = svc.SendMessageRequest(messages=[message()])
    before = denied_count("SendMessage", "access_denied")
    refused = await rpc.SendMessage(send, Context(signed("reader")))  # type: ignore[arg-type]
    assert refused.status.code == Code.FORBIDDEN
    assert refused.status.message == f"user reader may not Pub on Topic:{T}: no rule allows it"
    assert recorder.calls == []
    assert denied_count("SendMessage", "access_denied") == before + 1
    sent = await rpc.SendMessage(send, Context(signed("writer")))  # type: ignore[arg-type]
    assert sent.status.code == Code.OK and recorder.calls == ["send"]

    end = svc.EndTransactionRequest(topic=topic(), transaction_id="x", resolution=pb.COMMIT)
    assert (await rpc.EndTransaction(end, Context(signed("reader")))).status.code == Code.FORBIDDEN  # type: ignore[arg-type]
    assert recorder.calls == ["send"]
    assert (await rpc.EndTransaction(end, Context(signed("writer")))).status.code == Code.OK  # type: ignore[arg-type]
    assert recorder.calls == ["send", "end_transaction"]

    ack = svc.AckMessageRequest(group=group(), topic=topic(), entries=[svc.AckMessageEntry(receipt_handle="h")])
    assert (await rpc.AckMessage(ack, Context(signed("writer")))).status.code == Code.FORBIDDEN  # type: ignore[arg-type]
    assert recorder.calls == ["send", "end_transaction"]


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ([("x-mq-client-id", "c")], "authorization header is required"),
        (signed("stranger", "whatever-secret"), BAD_CREDENTIALS),
        (signed("off"), BAD_CREDENTIALS),  # disabled
        (signed("alice", "not-her-secret"), BAD_CREDENTIALS),
    ],
)
async def test_without_a_valid_user_every_call_is_unauthorized(
    metadata: list[tuple[str, str | bytes]], why: str
) -> None:
    recorder = Recorder()
    rpc = servicer(recorder)
    before = denied_count("Heartbeat", "unauthenticated")
    beat = await rpc.Heartbeat(svc.HeartbeatRequest(client_type=pb.PRODUCER), Context(metadata))  # type: ignore[arg-type]
    assert (beat.status.code, beat.status.message) == (Code.UNAUTHORIZED, why)
    assert denied_count("Heartbeat", "unauthenticated") == before + 1
    frames = [f async for f in rpc.Telemetry(_commands(), Context(metadata))]  # type: ignore[arg-type]
    assert [f.status.code for f in frames] == [Code.UNAUTHORIZED]
    done = await rpc.NotifyClientTermination(svc.NotifyClientTerminationRequest(), Context(metadata))  # type: ignore[arg-type]
    assert done.status.code == Code.UNAUTHORIZED
    assert recorder.calls == []


def as_client(client_id: str, user: str) -> Context:
    return Context([("x-mq-client-id", client_id), *signed(user)[1:]])


async def test_a_client_id_belongs_to_the_user_who_first_named_it() -> None:
    """Another user naming a client id in use is refused before anything is done: it could
    otherwise end that client's producer channels or release its auto-renewed messages.
    Once the client is forgotten the id is free again; super users may act for any client."""
    hub = ClientHub(None, GatewaySettings(etcd_endpoints="127.0.0.1:1"))  # type: ignore[arg-type]
    rpc = servicer(Recorder(), clients=hub)
    beat = svc.HeartbeatRequest(client_type=pb.PRODUCER)
    assert (await rpc.Heartbeat(beat, as_client("shared", "writer"))).status.code == Code.OK  # type: ignore[arg-type]
    before = denied_count("NotifyClientTermination", "access_denied")
    for call in (
        rpc.Heartbeat(beat, as_client("shared", "reader")),  # type: ignore[arg-type]
        rpc.NotifyClientTermination(svc.NotifyClientTerminationRequest(), as_client("shared", "reader")),  # type: ignore[arg-type]
    ):
        refused = await call
        assert refused.status.code == Code.FORBIDDEN
        assert "client id 'shared' is in use by another user" in refused.status.message
    assert denied_count("NotifyClientTermination", "access_denied") == before + 1
    frames = [f async for f in rpc.Telemetry(_commands(), as_client("shared", "reader"))]  # type: ignore[arg-type]
    assert [f.status.code for f in frames] == [Code.FORBIDDEN]
    assert hub.client("shared") is not None  # not ended by the refused termination
    root = await rpc.Heartbeat(beat, as_client("shared", "root"))  # type: ignore[arg-type]
    assert root.status.code == Code.OK
    done = await rpc.NotifyClientTermination(svc.NotifyClientTerminationRequest(), as_client("shared", "writer"))  # type: ignore[arg-type]
    assert done.status.code == Code.OK and hub.client("shared") is None
    assert (await rpc.Heartbeat(beat, as_client("shared", "reader"))).status.code == Code.OK  # type: ignore[arg-type]
    await hub.close()


async def test_a_refused_receive_is_one_status_frame() -> None:
    recorder = Recorder()
    rpc = servicer(recorder)
    request = svc.ReceiveMessageRequest(group=pb.Resource(name="NotHers"), message_queue=queue())
    frames = [f async for f in rpc.ReceiveMessage(request, Context(signed("alice")))]  # type: ignore[arg-type]
    assert [f.status.code for f in frames] == [Code.FORBIDDEN]
    assert "user alice may not Sub on Group:NotHers" in frames[0].status.message
    assert recorder.calls == []
    request.group.name = G
    frames = [f async for f in rpc.ReceiveMessage(request, Context(signed("alice")))]  # type: ignore[arg-type]
    assert [f.status.code for f in frames] == [Code.MESSAGE_NOT_FOUND] and recorder.calls == ["receive"]


async def test_a_producer_heartbeat_needs_only_a_user() -> None:
    recorder = Recorder()
    rpc = servicer(recorder)
    beat = await rpc.Heartbeat(svc.HeartbeatRequest(client_type=pb.PRODUCER), Context(signed("nobody")))  # type: ignore[arg-type]
    assert beat.status.code == Code.OK and recorder.calls == ["heartbeat"]
    consumer = svc.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=group())
    beat = await rpc.Heartbeat(consumer, Context(signed("nobody")))  # type: ignore[arg-type]
    assert beat.status.code == Code.FORBIDDEN and recorder.calls == ["heartbeat"]


async def _commands(*commands: svc.TelemetryCommand) -> AsyncIterator[svc.TelemetryCommand]:
    for command in commands:
        yield command


async def test_refused_telemetry_settings_are_answered_forbidden_and_change_nothing() -> None:
    hub = ClientHub(None, GatewaySettings(etcd_endpoints="127.0.0.1:1"))  # type: ignore[arg-type]
    rpc = servicer(Recorder(), clients=hub)
    metadata = signed("reader")
    frames = [
        f
        async for f in rpc.Telemetry(
            _commands(producer_settings(T), consumer_settings()),
            Context(metadata),  # type: ignore[arg-type]
        )
    ]
    assert [f.status.code for f in frames] == [Code.FORBIDDEN, Code.OK]
    assert frames[0].status.message == f"user reader may not Pub on Topic:{T}: no rule allows it"
    assert not frames[0].HasField("settings") and frames[1].settings.subscription.group.name == G
    assert hub.producer_channels("client-of-reader") == {}  # no producer channel: no checks of T
    info = hub.client("client-of-reader")
    assert info is not None and info.client_type == pb.SIMPLE_CONSUMER
    await hub.close()


async def test_denials_are_logged_once_a_minute_per_user_and_method(caplog: pytest.LogCaptureFixture) -> None:
    rpc = servicer(Recorder())
    request = svc.QueryRouteRequest(topic=topic("Secret"))
    caplog.set_level(logging.INFO, logger="txmq.audit")
    for _ in range(3):
        answer = await rpc.QueryRoute(request, Context(signed("writer")))  # type: ignore[arg-type]
        assert answer.status.code == Code.FORBIDDEN
    lines = [r.getMessage() for r in caplog.records if r.name == "txmq.audit"]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"denied /{SERVICE_NAME}/QueryRoute user=writer peer=ipv4:10.1.2.3:4000: ")
    assert "Topic:Secret" in lines[0]
    assert SECRETS["writer"] not in lines[0]


async def test_rpcs_not_served_are_checked_first() -> None:
    recorder = Recorder()
    rpc = servicer(recorder)
    server = grpc.aio.server()
    add_messaging_servicer(server, rpc)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = svc_grpc.MessagingServiceStub(channel)
            refused = await stub.UpdateOffset(
                svc.UpdateOffsetRequest(group=group(), message_queue=queue()), metadata=signed("writer"), timeout=5
            )
            assert refused.status.code == Code.FORBIDDEN
            recall = await stub.RecallMessage(svc.RecallMessageRequest(topic=topic()), metadata=signed("reader"))
            assert recall.status.code == Code.FORBIDDEN
            frames = [
                f
                async for f in stub.PullMessage(
                    svc.PullMessageRequest(group=group(), message_queue=queue()), metadata=signed("writer"), timeout=5
                )
            ]
            assert [f.status.code for f in frames] == [Code.FORBIDDEN]
            assert recorder.calls == []
            # Served (PullMessage, UpdateOffset): an allowed caller reaches the core.
            await stub.UpdateOffset(
                svc.UpdateOffsetRequest(group=group(), message_queue=queue()), metadata=signed("reader"), timeout=5
            )
            frames = [
                f
                async for f in stub.PullMessage(
                    svc.PullMessageRequest(group=group(), message_queue=queue()), metadata=signed("reader"), timeout=5
                )
            ]
            assert frames[0].status.code == Code.MESSAGE_NOT_FOUND
            assert recorder.calls == ["update_offset", "pull"]
    finally:
        await server.stop(0)


class Recording(svc_grpc.MessagingServiceServicer):
    def __init__(self) -> None:
        self.metadata: list[tuple[str, str | bytes]] = []

    async def AckMessage(self, request: Any, context: grpc.aio.ServicerContext) -> svc.AckMessageResponse:
        self.metadata = list(context.invocation_metadata() or ())
        return svc.AckMessageResponse(status=ok())


async def test_a_forwarded_call_carries_the_clients_credentials_alone() -> None:
    """The owner must authenticate a forwarded call as the client: the services' own
    signature (a super user's) that internal channels add with auth_enabled stays off it."""
    from txmq_gateway.ownership import Forwarder, Owner
    from txmq_runtime import calls

    owner = Recording()
    server = grpc.aio.server()
    svc_grpc.add_MessagingServiceServicer_to_server(owner, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    calls.configure_credentials(signing.Credentials("txmq-service", "service-secret-0123456789"))
    forwarder = Forwarder(instance_id="gw-a", timeout_ms=5_000)
    try:
        ack = svc.AckMessageRequest(group=group(), topic=topic())
        answer = await forwarder.unary(
            "AckMessage",
            ack,
            Context(signed("alice")),  # type: ignore[arg-type]
            Owner("gw-b", f"127.0.0.1:{port}", 1),
        )
        assert answer.status.code == Code.OK
    finally:
        calls.configure_credentials(None)
        await forwarder.close()
        await server.stop(0)
    authorizations = [v for k, v in owner.metadata if k == "authorization"]
    assert len(authorizations) == 1 and "Credential=alice," in str(authorizations[0])
    assert ("x-txmq-forwarded", "gw-a") in owner.metadata


def test_with_auth_enabled_the_user_book_wins_over_the_single_key(caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from txmq_gateway.service import authentication
    from txmq_runtime.auth_service import Security

    settings = GatewaySettings(access_key="old-ak", secret_key="old-secret")
    auth, access, how = authentication(SimpleNamespace(settings=settings, security=None))  # type: ignore[arg-type]
    assert access is None and how == "by access_key" and auth.secret_for is not None
    assert auth.secret_for("old-ak") == b"old-secret"
    assert authentication(SimpleNamespace(settings=GatewaySettings(), security=None))[2] == "off"  # type: ignore[arg-type]

    security = Security(prefix="/t", access_key="svc", secret_key="service-secret-0123456789", clock_skew_ms=60_000)
    security.book.reset(list(make_book_items(security)))
    caplog.set_level(logging.WARNING, logger="txmq.gateway.service")
    auth, access, how = authentication(SimpleNamespace(settings=settings, security=security))  # type: ignore[arg-type]
    assert access is not None and "auth_enabled" in how
    assert auth.enabled and auth.secret_for is not None
    assert auth.secret_for("alice") == SECRETS["alice"].encode()
    assert auth.secret_for("off") is None  # disabled
    assert auth.secret_for("old-ak") is None  # the single key is not a user
    assert any("auth_enabled wins" in r.getMessage() for r in caplog.records)
    assert not any("old-secret" in r.getMessage() for r in caplog.records)


def make_book_items(security: Any) -> list[tuple[str, bytes]]:
    items = []
    for name, secret in SECRETS.items():
        user = auth_pb2.User(username=name, disabled=name == "off")
        stored = auth_pb2.StoredUser(user=user, sealed_secret=security.sealer.seal(name, secret))
        items.append((security.keys.user(name), encode(stored)))
    return items
