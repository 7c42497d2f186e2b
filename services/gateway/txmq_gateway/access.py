"""Who may make which ``apache.rocketmq.v2`` call: txmq's users and ACLs applied to the
RocketMQ 5 protocol (docs/gateway.md "Users and permissions").

With ``auth_enabled`` the gateway authenticates every v2 call against the cluster's user
book (``txmq_gateway.auth.Authenticator`` over ``UserBook.secret_for``), then checks what
``ACCESS`` lists for the method with the same ``Guard`` and rules as txmq's own services
(docs/security.md): deny by default, a Deny wins, super users pass, system topics are for
super users only. The mapping follows RocketMQ ACL 2.0 (the proxy's
``AuthorizationContextBuilder``): a topic's publishers need Pub on it, its consumers Sub on
the topic and on their group; a route look-up needs either, since the client may not know
yet which it will do.

A refused call is answered the v2 way: ``Status{code: FORBIDDEN}`` naming user, action and
resource, before anything is done; denials are counted and logged as txmq's interceptor
does (``txmq_runtime.auth.audit_denial``).

``ACCESS`` must name every method of the service (a test holds it to the descriptor): a
method missing from it is refused for everyone but super users.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from txmq.errors import TxmqError
from txmq.v1 import auth_pb2
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import SERVICE_NAME, Code, pb
from txmq_runtime.auth import Guard, Principal, UserBook, audit_denial, describe_resource, peer_ip
from txmq_runtime.grpc_errors import OncePer

R = auth_pb2.ResourceType
A = auth_pb2.Action
TOPIC, GROUP = R.RESOURCE_TYPE_TOPIC, R.RESOURCE_TYPE_GROUP
PUB, SUB = A.ACTION_PUB, A.ACTION_SUB


@dataclass(frozen=True, slots=True)
class Need:
    """One permission a call needs: one of ``actions`` (any suffices) on the resource of
    type ``resource`` named by ``field`` of the request, a dotted path (a repeated field on
    the way: every element is checked).

    ``optional``: checked only when every message on the path is set and the name is not
    empty (for what a request may or may not carry, e.g. the kinds of a TelemetryCommand).
    Otherwise an unset name is checked as the empty name, which only ``Topic:*`` /
    ``Group:*`` / ``*`` rules match. ``when``: checked only for requests it holds for.
    ``condition`` says when the need applies, for the docs."""

    resource: int
    actions: tuple[int, ...]
    field: str
    optional: bool = False
    when: Callable[[Any], bool] | None = None
    condition: str = ""

    def applies(self, request: Message) -> bool:
        return self.when is None or self.when(request)

    def names(self, request: Message) -> list[str]:
        """The resource names this need checks in ``request``."""
        values: list[Any] = [request]
        for part in self.field.split("."):
            found: list[Any] = []
            for value in values:
                fd = value.DESCRIPTOR.fields_by_name[part]
                if fd.is_repeated:
                    found.extend(getattr(value, part))
                elif self.optional and fd.message_type is not None and not value.HasField(part):
                    continue
                else:
                    found.append(getattr(value, part))
            values = found
        names = [str(v) for v in values]
        return [n for n in names if n] if self.optional else names

    def describe(self) -> str:
        """``Pub on Topic:`messages.topic.name` `` (for the docs)."""
        actions = " or ".join(action_word(a) for a in self.actions)
        where = f"{resource_word(self.resource)}:`{self.field}`"
        text = f"{actions} on {where}"
        if self.condition:
            return f"{text} ({self.condition})"
        return f"{text} (if set)" if self.optional else text


def action_word(action: int) -> str:
    return A.Name(action).removeprefix("ACTION_").capitalize()


def resource_word(rtype: int) -> str:
    return R.Name(rtype).removeprefix("RESOURCE_TYPE_").capitalize()


def _not_a_producer(request: Any) -> bool:
    return bool(request.client_type != pb.PRODUCER)


def _consumer_needs(topic_field: str) -> tuple[Need, ...]:
    return (Need(TOPIC, (SUB,), topic_field), Need(GROUP, (SUB,), "group.name"))


#: v2 method -> what a caller needs besides being an authenticated user. For Telemetry:
#: what each command the client sends on the stream needs (opening it needs a user only).
ACCESS: Mapping[str, tuple[Need, ...]] = {
    "QueryRoute": (Need(TOPIC, (PUB, SUB), "topic.name"),),
    "Heartbeat": (
        Need(
            GROUP,
            (SUB,),
            "group.name",
            optional=True,
            when=_not_a_producer,
            condition="when it names a group, unless it is a producer's",
        ),
    ),
    "SendMessage": (Need(TOPIC, (PUB,), "messages.topic.name"),),
    "QueryAssignment": _consumer_needs("topic.name"),
    "ReceiveMessage": _consumer_needs("message_queue.topic.name"),
    "AckMessage": _consumer_needs("topic.name"),
    "ForwardMessageToDeadLetterQueue": _consumer_needs("topic.name"),
    "ChangeInvisibleDuration": _consumer_needs("topic.name"),
    "PullMessage": _consumer_needs("message_queue.topic.name"),
    "UpdateOffset": _consumer_needs("message_queue.topic.name"),
    "GetOffset": _consumer_needs("message_queue.topic.name"),
    "QueryOffset": (Need(TOPIC, (SUB,), "message_queue.topic.name"),),
    # v2 names no producer group: the gateway's half messages are of group = topic, and the
    # store refuses a decision for a half message of another group (TRANSACTION_MISMATCH).
    "EndTransaction": (Need(TOPIC, (PUB,), "topic.name"),),
    "Telemetry": (
        # A producer's settings: its stream then carries the transaction checks (with the
        # half messages) of these topics.
        Need(TOPIC, (PUB,), "settings.publishing.topics.name", optional=True, condition="each topic a producer names"),
        Need(GROUP, (SUB,), "settings.subscription.group.name", optional=True, condition="a consumer's group"),
        Need(
            TOPIC,
            (SUB,),
            "settings.subscription.subscriptions.topic.name",
            optional=True,
            condition="each topic a consumer subscribes to",
        ),
        # Answers to checks come as EndTransaction calls; one sent up the stream is ignored
        # today, and checked all the same.
        Need(
            TOPIC,
            (PUB,),
            "recover_orphaned_transaction_command.message.topic.name",
            optional=True,
            condition="a check answered on the stream: ignored today",
        ),
    ),
    "NotifyClientTermination": (),
    "RecallMessage": (Need(TOPIC, (PUB,), "topic.name"),),
    "SyncLiteSubscription": _consumer_needs("topic.name"),
}


def describe_access(table: Mapping[str, Sequence[Need]] = ACCESS) -> list[str]:
    """One markdown table row per method: what it needs (docs/gateway.md holds them)."""
    rows = []
    for method, needs in table.items():
        what = "; ".join(n.describe() for n in needs) or "a user"
        if method == "Telemetry":
            what = f"a user to open the stream; then per command: {what}"
        rows.append(f"| {method} | {what} |")
    return rows


def forbidden(principal: Principal, need: Need, name: str, refusals: Sequence[TxmqError]) -> GatewayError:
    """FORBIDDEN naming user, action(s) and resource, and why (the Guard's reasons)."""
    resource = describe_resource(need.resource, name)
    if len(refusals) == 1:
        return GatewayError(Code.FORBIDDEN, refusals[0].message)
    reasons: list[str] = []
    for err in refusals:
        reason = err.message.rsplit(": ", 1)[-1]
        if reason not in reasons:
            reasons.append(reason)
    actions = " or ".join(action_word(a) for a in need.actions)
    return GatewayError(
        Code.FORBIDDEN, f"user {principal.username} may not {actions} on {resource}: {'; '.join(reasons)}"
    )


class Authorizer:
    """``ACCESS`` applied with a Guard over the cluster's user book."""

    def __init__(self, book: UserBook, guard: Guard, *, table: Mapping[str, Sequence[Need]] = ACCESS) -> None:
        self.book = book
        self.guard = guard
        self.table = table
        self._audit_now = OncePer()

    def principal(self, access_key: str, peer: str) -> Principal:
        """The user an authenticated access key names (the book has it: it signed)."""
        known = self.book.users.get(access_key)
        return Principal(access_key, bool(known and known.user.super_user), "signature", peer_ip(peer))

    def check(self, method: str, principal: Principal, request: Message) -> None:
        """GatewayError(FORBIDDEN) unless ``principal`` may make ``request`` (of v2 method
        ``method``; for Telemetry: one command sent on the stream)."""
        if principal.super_user:
            return
        needs = self.table.get(method)
        if needs is None:
            raise GatewayError(Code.FORBIDDEN, f"{method} has no access rule; refused (docs/gateway.md)")
        for need in needs:
            if not need.applies(request):
                continue
            for name in need.names(request):
                self._check_one(principal, need, name)

    def _check_one(self, principal: Principal, need: Need, name: str) -> None:
        refusals: list[TxmqError] = []
        for action in need.actions:
            try:
                self.guard.check(principal, need.resource, name, action)
                return
            except TxmqError as err:
                refusals.append(err)
        raise forbidden(principal, need, name, refusals)

    def denied(self, method: str, who: str | None, peer: str, err: GatewayError) -> None:
        """Count and (rate-limited) log a refused call, as txmq's own interceptor does."""
        reason = "access_denied" if err.code == Code.FORBIDDEN else "unauthenticated"
        audit_denial(self._audit_now, f"/{SERVICE_NAME}/{method}", who or "-", peer, reason, str(err))
