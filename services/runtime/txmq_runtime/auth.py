"""Who is calling, and may they (docs/security.md).

With ``auth_enabled`` every service's server runs ``Authorize`` right after
``RejectUnparseable``: it learns the caller (a signed request — ``txmq.signing``, the scheme
RocketMQ 5's clients use — or, under mutual TLS, the client certificate's common name), then
checks the method's ``(txmq.v1.access)`` option (protos/txmq/v1/auth.proto) against the
caller's ACL. Deny by default; a Deny rule wins over any Allow; super users pass. Checks
that need what only the handler knows (the topic inside a record, of a message read) are
made there with ``require``.

Users and ACLs live in etcd under ``<prefix>/auth/``; every service mirrors them
(``UserBook``), so a check costs no etcd round trip. Secrets are sealed there (AES-GCM
under a key derived from the cluster's service secret, ``auth_secret_key``): an etcd
backup alone does not give them away.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hmac
import ipaddress
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import FileDescriptor, MethodDescriptor
from google.protobuf.message import Message
from prometheus_client import Counter

from txmq import signing
from txmq.errors import TxmqError, error
from txmq.keda import externalscaler_pb2
from txmq.protocol import RETRY_GROUP_TOPIC_PREFIX as RETRY_PREFIX
from txmq.protocol import is_system_topic
from txmq.v1 import auth_pb2, errors_pb2, pull_pb2, route_pb2, store_pb2, txcheck_pb2
from txmq_runtime.clock import Clock, SystemClock
from txmq_runtime.grpc_errors import OncePer, abort, screened
from txmq_runtime.secrets import Keyring

log = logging.getLogger("txmq.auth")
#: One line per administrative call and (rate-limited) per denied call.
audit = logging.getLogger("txmq.audit")

R = auth_pb2.ResourceType
A = auth_pb2.Action
ALLOW = auth_pb2.Policy.DECISION_ALLOW
DENY = auth_pb2.Policy.DECISION_DENY

USERNAME_MAX_CHARS = 64
SECRET_MIN_CHARS = 8
SECRET_MAX_CHARS = 128
POLICIES_MAX = 256
RESOURCE_MAX_CHARS = 300
SOURCE_IPS_MAX = 32
_USERNAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")

DENIED = Counter("txmq_auth_denied", "Calls refused by authentication or authorisation.", ["method", "reason"])
_AUDIT_DENIED_EVERY_S = 60.0

#: Services that check their callers themselves (the gateway's apache.rocketmq.v2: its
#: own signature on every call, mapped to the same users and rules).
SELF_AUTHENTICATING = frozenset({"apache.rocketmq.v2.MessagingService"})
#: Services anyone may call (probes; the protos are public anyway).
PUBLIC_SERVICES = frozenset(
    {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"}
)
_FILES: tuple[FileDescriptor, ...] = (
    store_pb2.DESCRIPTOR,
    pull_pb2.DESCRIPTOR,
    txcheck_pb2.DESCRIPTOR,
    route_pb2.DESCRIPTOR,
    auth_pb2.DESCRIPTOR,
)
#: Services txmq serves whose contract is someone else's, so no ``(txmq.v1.access)``
#: option can be written into it: KEDA's external scaler (its proto must stay KEDA's).
#: The access declared here holds for every method of the service; the handler checks
#: the resources named inside the request.
FOREIGN_ACCESS: Mapping[str, auth_pb2.Access] = {
    "externalscaler.ExternalScaler": auth_pb2.Access(
        scope=auth_pb2.ACCESS_SCOPE_USER,
        handler_checks="Get on Topic `scalerMetadata.topic` and Group `scalerMetadata.consumerGroup` "
        "(as ListConsumeOffsets)",
    ),
}
_FOREIGN_FILES: tuple[FileDescriptor, ...] = (externalscaler_pb2.DESCRIPTOR,)


# -- the access table ----------------------------------------------------------------


def txmq_methods() -> Iterator[MethodDescriptor]:
    """Every RPC of every service txmq serves: the txmq.v1 services, then the foreign
    ones (``FOREIGN_ACCESS``)."""
    for file in (*_FILES, *_FOREIGN_FILES):
        for service in file.services_by_name.values():
            yield from service.methods


def access_of(method: MethodDescriptor) -> auth_pb2.Access | None:
    foreign = FOREIGN_ACCESS.get(method.containing_service.full_name)
    if foreign is not None:
        return foreign
    options = method.GetOptions()
    return options.Extensions[auth_pb2.access] if options.HasExtension(auth_pb2.access) else None


def access_table() -> dict[str, auth_pb2.Access]:
    """``/txmq.v1.Store/SendMessage`` -> its Access; a method without one is left out
    (and refused: tests/runtime/test_access_table.py keeps the table complete)."""
    table = {}
    for m in txmq_methods():
        access = access_of(m)
        if access is not None:
            table[f"/{m.containing_service.full_name}/{m.name}"] = access
    return table


def names_at(request: Message, path: str, *, when_set: bool = False) -> list[str] | None:
    """The resource names at a dotted field path of ``request`` (every element of a
    repeated field). None: the check does not apply (a message on the path not set, or,
    with ``when_set``, nothing set at the end)."""
    values: list[Any] = [request]
    for part in path.split("."):
        nxt: list[Any] = []
        for value in values:
            fd = value.DESCRIPTOR.fields_by_name[part]
            if fd.is_repeated:
                nxt.extend(getattr(value, part))
            elif fd.message_type is not None and not value.HasField(part):
                continue
            else:
                nxt.append(getattr(value, part))
        values = nxt
    if not values:
        return None  # a message on the path not set, or an empty repeated field
    if isinstance(values[0], Message):
        return []  # a set message (a fence): the check applies, to the cluster
    names = [str(v) for v in values]
    if when_set:
        names = [n for n in names if n]
        return names or None
    return names


# -- policies ------------------------------------------------------------------------

_TYPE_BY_WORD = {"cluster": R.RESOURCE_TYPE_CLUSTER, "topic": R.RESOURCE_TYPE_TOPIC, "group": R.RESOURCE_TYPE_GROUP}
_WORD_BY_TYPE: dict[int, str] = {int(v): k.capitalize() for k, v in _TYPE_BY_WORD.items()}


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """A compiled Policy."""

    text: str
    type: int | None  # None: every resource ("*")
    name: str
    prefix: bool  # the name is a prefix ("" + prefix: any name)
    actions: frozenset[int]
    allow: bool
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    def matches(self, rtype: int, name: str, action: int, source: str | None) -> bool:
        if self.type is not None and self.type != rtype:
            return False
        if rtype != R.RESOURCE_TYPE_CLUSTER:
            if self.prefix:
                if self.name and not (name and name.startswith(self.name)):
                    return False
            elif name != self.name:
                return False
        if A.ACTION_ALL not in self.actions and action not in self.actions:
            return False
        if self.networks:
            if source is None:
                return False
            try:
                address = ipaddress.ip_address(source)
            except ValueError:
                return False
            if not any(address in net for net in self.networks):
                return False
        return True


def parse_resource(text: str) -> tuple[int | None, str, bool]:
    """``*`` | ``Cluster`` | ``Topic:name`` | ``Topic:prefix*`` | ``Topic:*`` (Group alike)."""
    if text == "*":
        return None, "", True
    word, sep, name = text.partition(":")
    rtype = _TYPE_BY_WORD.get(word.lower())
    if rtype is None:
        raise ValueError(f"resource {text[:80]!r} must be '*', 'Cluster', 'Topic:<name>' or 'Group:<name>'")
    if rtype == R.RESOURCE_TYPE_CLUSTER:
        if name not in ("", "*"):
            raise ValueError("the cluster resource takes no name ('Cluster')")
        return rtype, "", True
    if not sep or not name:
        raise ValueError(f"resource {text[:80]!r} needs a name: '{word}:<name>', '{word}:<prefix>*' or '{word}:*'")
    if name.endswith("*"):
        name = name[:-1]
        if "*" in name:
            raise ValueError(f"resource {text[:80]!r}: '*' only at the end")
        return rtype, name, True
    if "*" in name:
        raise ValueError(f"resource {text[:80]!r}: '*' only at the end")
    return rtype, name, False


def compile_policy(policy: auth_pb2.Policy) -> Rule:
    rtype, name, prefix = parse_resource(policy.resource)
    if policy.decision not in (ALLOW, DENY):
        raise ValueError(f"policy on {policy.resource[:80]!r}: the decision must be Allow or Deny")
    actions = frozenset(policy.actions)
    if not actions or A.ACTION_UNSPECIFIED in actions:
        raise ValueError(f"policy on {policy.resource[:80]!r}: name at least one action")
    networks = []
    for text in policy.source_ips:
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"policy on {policy.resource[:80]!r}: {text[:60]!r} is not an address or network"
            ) from None
    return Rule(policy.resource, rtype, name, prefix, actions, policy.decision == ALLOW, tuple(networks))


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    rule: str  # the deciding rule's resource, or "" (no rule: denied by default)


class CompiledAcl:
    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)

    @classmethod
    def of(cls, acl: auth_pb2.Acl) -> CompiledAcl:
        return cls([compile_policy(p) for p in acl.policies])

    def decide(self, rtype: int, name: str, action: int, source: str | None) -> Verdict:
        """Deny wins; no matching rule: denied."""
        allowed_by = None
        for rule in self.rules:
            if rule.matches(rtype, name, action, source):
                if not rule.allow:
                    return Verdict(False, rule.text)
                allowed_by = allowed_by or rule.text
        return Verdict(allowed_by is not None, allowed_by or "")


def validate_user(user: auth_pb2.User, *, secret_required: bool) -> None:
    name = user.username
    if not name or len(name) > USERNAME_MAX_CHARS or not set(name) <= _USERNAME_CHARS:
        raise error(
            errors_pb2.CODE_ILLEGAL_ARGUMENT,
            f"username must be 1..{USERNAME_MAX_CHARS} characters of [A-Za-z0-9_.-] (got {len(name)} characters)",
        )
    if user.produce_bytes_per_second < 0 or user.fetch_bytes_per_second < 0:
        raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "a byte-rate quota is 0 (none) or more bytes a second")
    secret = user.secret_key
    if secret or secret_required:
        if not SECRET_MIN_CHARS <= len(secret) <= SECRET_MAX_CHARS:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"secret key must be {SECRET_MIN_CHARS}..{SECRET_MAX_CHARS} characters (got {len(secret)})",
            )


def validate_acl(acl: auth_pb2.Acl) -> CompiledAcl:
    validate_user(auth_pb2.User(username=acl.username), secret_required=False)
    if len(acl.policies) > POLICIES_MAX:
        raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"at most {POLICIES_MAX} policies per user")
    for p in acl.policies:
        if len(p.resource) > RESOURCE_MAX_CHARS or len(p.source_ips) > SOURCE_IPS_MAX:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"a policy's resource has at most {RESOURCE_MAX_CHARS} characters "
                f"and {SOURCE_IPS_MAX} source addresses",
            )
    try:
        return CompiledAcl.of(acl)
    except ValueError as exc:
        raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, str(exc)) from None


# -- sealed secrets --------------------------------------------------------------------


class Sealer:
    """Users' secrets sealed with a ``Keyring`` under its own label; the username is the
    associated data, so a sealed secret cannot be moved to another user."""

    def __init__(self, service_secret: str, accepted: Sequence[str] = ()) -> None:
        self._ring = Keyring(b"txmq user secrets v1", service_secret, accepted)

    def seal(self, username: str, secret: str) -> bytes:
        return self._ring.seal(secret.encode(), username.encode())

    def open(self, username: str, sealed: bytes) -> str | None:
        """The secret, or None when no key of the ring sealed it (or it was tampered with)."""
        opened = self._ring.open(sealed, username.encode())
        if opened is None:
            return None
        try:
            return opened.decode()
        except UnicodeDecodeError:
            return None


# -- the user book (a MirrorSink of <prefix>/auth/) -----------------------------------


class AuthKeys:
    def __init__(self, prefix: str) -> None:
        self.root = f"{prefix}/auth/"
        self.users = self.root + "users/"
        self.acls = self.root + "acls/"

    def user(self, username: str) -> str:
        return self.users + username

    def acl(self, username: str) -> str:
        return self.acls + username


@dataclasses.dataclass(frozen=True, slots=True)
class KnownUser:
    user: auth_pb2.User  # secret_key empty
    secret: str | None  # None: could not be unsealed (another cluster's key)


class UserBook:
    """Users and compiled ACLs, as etcd has them (kept by an EtcdMirror)."""

    def __init__(self, keys: AuthKeys, sealer: Sealer) -> None:
        self._keys = keys
        self._sealer = sealer
        self.users: dict[str, KnownUser] = {}
        self.acls: dict[str, CompiledAcl] = {}
        self.raw_acls: dict[str, auth_pb2.Acl] = {}
        #: Changes with every change of users or ACLs (what a Guard's cached decisions follow).
        self.version = 0

    def reset(self, items: Iterable[tuple[str, bytes]]) -> None:
        self.version += 1
        self.users.clear()
        self.acls.clear()
        self.raw_acls.clear()
        for key, value in items:
            self.put(key, value)

    def put(self, key: str, value: bytes) -> None:
        self.version += 1
        try:
            if key.startswith(self._keys.users):
                stored = json_format.Parse(value, auth_pb2.StoredUser(), ignore_unknown_fields=True)
                name = stored.user.username
                secret = self._sealer.open(name, stored.sealed_secret)
                if secret is None:
                    log.warning("user %s: its secret is not sealed with this service's auth_secret_key", name[:64])
                self.users[name] = KnownUser(stored.user, secret)
            elif key.startswith(self._keys.acls):
                acl = json_format.Parse(value, auth_pb2.Acl(), ignore_unknown_fields=True)
                self.acls[acl.username] = CompiledAcl.of(acl)
                self.raw_acls[acl.username] = acl
        except (json_format.ParseError, ValueError) as exc:
            log.warning("ignoring etcd key %s: %s", key[:200], exc)

    def delete(self, key: str) -> None:
        self.version += 1
        if key.startswith(self._keys.users):
            self.users.pop(key.removeprefix(self._keys.users), None)
        elif key.startswith(self._keys.acls):
            name = key.removeprefix(self._keys.acls)
            self.acls.pop(name, None)
            self.raw_acls.pop(name, None)

    def secret_for(self, access_key: str) -> str | None:
        known = self.users.get(access_key)
        if known is None or known.user.disabled:
            return None
        return known.secret


# -- callers -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    username: str
    super_user: bool
    via: str  # "signature" | "certificate"
    source: str | None  # the peer's IP address


def peer_ip(peer: str) -> str | None:
    """``ipv4:10.0.0.1:5000`` / ``ipv6:[::1]:5000`` -> the address; None otherwise (unix sockets)."""
    if peer.startswith("ipv4:"):
        return peer[5:].rpartition(":")[0]
    if peer.startswith("ipv6:"):
        return peer[5:].rpartition(":")[0].strip("[]")
    return None


def _text(value: str | bytes) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise error(errors_pb2.CODE_UNAUTHENTICATED, "a credential header is not UTF-8 text") from None
    return value


class Authenticator:
    """Turns a call's metadata (and TLS peer) into a Principal."""

    def __init__(
        self,
        book: UserBook,
        *,
        clock_skew_ms: int,
        clock: Clock | None = None,
        own_identity: tuple[str, Sequence[str]] | None = None,
    ) -> None:
        self._book = book
        self._skew_s = clock_skew_ms / 1000
        self._clock = clock or SystemClock()
        # The services' identity and the keys this process takes for it: during a key roll
        # its peers sign with the old or the new key while the book holds only one of them.
        self._own_access_key, self._own_secrets = own_identity or ("", ())

    def authenticate(
        self, metadata: Sequence[tuple[str, str | bytes]] | None, auth_context: Mapping[str, Sequence[bytes]], peer: str
    ) -> Principal:
        header = date = None
        for key, value in metadata or ():
            if key == signing.AUTHORIZATION_HEADER:
                header = _text(value)
            elif key == signing.DATE_HEADER:
                date = _text(value)
        source = peer_ip(peer)
        if header is not None:
            name = self.verify_signature(header, date)
            return self._principal(name, "signature", source)
        common_names = auth_context.get("x509_common_name") or ()
        if common_names:
            name = common_names[0].decode(errors="replace")
            if self._disabled(name):
                raise error(
                    errors_pb2.CODE_INVALID_CREDENTIALS, f"client certificate {name[:64]!r} names no enabled user"
                )
            return self._principal(name, "certificate", source)
        raise error(
            errors_pb2.CODE_UNAUTHENTICATED,
            "authentication is required: sign the call (access key + secret key) or present a client certificate",
        )

    def _disabled(self, name: str) -> bool:
        known = self._book.users.get(name)
        return known is None or known.user.disabled

    def _principal(self, name: str, via: str, source: str | None) -> Principal:
        known = self._book.users[name]
        return Principal(name, known.user.super_user, via, source)

    def verify_signature(self, header: str, date: str | None) -> str:
        """The access key of a valid signature; UNAUTHENTICATED / INVALID_CREDENTIALS /
        REQUEST_EXPIRED otherwise."""
        if len(header) > signing.MAX_AUTHORIZATION_CHARS:
            raise error(errors_pb2.CODE_UNAUTHENTICATED, "the authorization header is too long")
        fields = signing.parse_authorization(header)
        if fields.get("algorithm") != signing.ALGORITHM:
            raise error(
                errors_pb2.CODE_UNAUTHENTICATED, f"unsupported authorization algorithm; expected {signing.ALGORITHM}"
            )
        signed = [h.strip().lower() for h in fields.get("SignedHeaders", "").split(";") if h.strip()]
        if signed != [signing.DATE_HEADER]:
            raise error(errors_pb2.CODE_UNAUTHENTICATED, f"SignedHeaders must be {signing.DATE_HEADER}")
        if not date:
            raise error(errors_pb2.CODE_UNAUTHENTICATED, f"the {signing.DATE_HEADER} header is required")
        try:
            signed_at = signing.parse_date(date)
        except ValueError:
            raise error(
                errors_pb2.CODE_REQUEST_EXPIRED, f"{signing.DATE_HEADER} must look like 20261126T114822Z (UTC)"
            ) from None
        now = self._clock.wall_ms() / 1000
        if abs(now - signed_at) > self._skew_s:
            raise error(
                errors_pb2.CODE_REQUEST_EXPIRED,
                f"the request was signed at {date}, more than {self._skew_s:g} s from this service's clock "
                "(auth_clock_skew_ms)",
            )
        access_key = fields.get("Credential", "")
        secret = self._book.secret_for(access_key)
        candidates = [secret or "\0"]
        if secret is not None and access_key == self._own_access_key:
            candidates += [s for s in self._own_secrets if s != secret]
        given = fields.get("Signature", "").lower()
        matched = [hmac.compare_digest(signing.sign(s, date), given) for s in candidates]
        if secret is None or not any(matched):
            raise error(errors_pb2.CODE_INVALID_CREDENTIALS, "unknown access key or a signature that does not match")
        return access_key


# -- the check -----------------------------------------------------------------------


#: Decisions a Guard remembers (a producer sends to a handful of topics many times a
#: second); forgotten all at once when full and whenever the book changes.
DECISIONS_CACHED = 4096


class Guard:
    """Decides whether a principal may do an action on a resource (the ACLs of a book)."""

    def __init__(self, book: UserBook) -> None:
        self.book = book
        self._decided: dict[tuple[str, str | None, int, str, int], str | None] = {}
        self._version = -1

    def check(self, principal: Principal, rtype: int, name: str, action: int) -> None:
        if principal.super_user:
            return
        if self._version != self.book.version:  # users or ACLs changed: decide afresh
            self._decided.clear()
            self._version = self.book.version
        key = (principal.username, principal.source, rtype, name, action)
        try:
            why = self._decided[key]
        except KeyError:
            why = self._decide(principal, rtype, name, action)
            if len(self._decided) >= DECISIONS_CACHED:
                self._decided.clear()
            self._decided[key] = why
        if why is not None:
            raise _denied(principal, rtype, name, action, why)

    def _decide(self, principal: Principal, rtype: int, name: str, action: int) -> str | None:
        """None: allowed; else why not."""
        if rtype == R.RESOURCE_TYPE_TOPIC and name and is_system_topic(name):
            return "system topics are for super users only"
        acl = self.book.acls.get(principal.username)
        verdict = acl.decide(rtype, name, action, principal.source) if acl else Verdict(False, "")
        if verdict.allowed:
            return None
        retry = not verdict.rule and action == A.ACTION_SUB and rtype == R.RESOURCE_TYPE_TOPIC
        if acl is not None and retry and name.startswith(RETRY_PREFIX):
            # A group's retry topic is consumed as the group (RocketMQ 5 checks it so);
            # a rule that names the topic itself decides first.
            group = name[len(RETRY_PREFIX) :]
            if group and acl.decide(R.RESOURCE_TYPE_GROUP, group, action, principal.source).allowed:
                return None
        return f"denied by {verdict.rule!r}" if verdict.rule else "no rule allows it"


def describe_resource(rtype: int, name: str) -> str:
    word = _WORD_BY_TYPE.get(rtype, "?")
    return word if rtype == R.RESOURCE_TYPE_CLUSTER else f"{word}:{name[:200] or '*'}"


def _denied(principal: Principal, rtype: int, name: str, action: int, why: str) -> TxmqError:
    resource = describe_resource(rtype, name)
    action_word = A.Name(action).removeprefix("ACTION_").capitalize()
    return error(
        errors_pb2.CODE_ACCESS_DENIED,
        f"user {principal.username} may not {action_word} on {resource}: {why}",
        user=principal.username,
        resource=resource,
        action=action_word,
    )


@dataclasses.dataclass(slots=True)
class _Caller:
    principal: Principal
    guard: Guard


_CALLER: contextvars.ContextVar[_Caller | None] = contextvars.ContextVar("txmq_caller", default=None)


def current_principal() -> Principal | None:
    """The caller of the RPC being served; None when auth is off."""
    caller = _CALLER.get()
    return caller.principal if caller else None


def current_caller() -> tuple[Principal, UserBook] | None:
    """The caller of the RPC being served and the user book that knows it (where its
    quotas are: txmq_runtime.quotas); None when auth is off."""
    caller = _CALLER.get()
    return (caller.principal, caller.guard.book) if caller else None


def require(rtype: int, name: str, action: int) -> None:
    """A check only the handler can make (the topic inside a record, of a message read):
    raises ACCESS_DENIED. Does nothing when auth is off."""
    caller = _CALLER.get()
    if caller is not None:
        caller.guard.check(caller.principal, rtype, name, action)


def permits(rtype: int, name: str, action: int) -> bool:
    """Whether the caller may (True when auth is off): for filtering what a query finds."""
    try:
        require(rtype, name, action)
    except TxmqError:
        return False
    return True


def publish_check() -> Callable[[str], None] | None:
    """For a handler that finds topics in what it was sent (records): a check raising
    ACCESS_DENIED unless the caller may publish to a topic; None when nothing needs checking
    (auth off, or a super user)."""
    caller = _CALLER.get()
    if caller is None or caller.principal.super_user:
        return None
    guard, principal = caller.guard, caller.principal
    return lambda topic: guard.check(principal, R.RESOURCE_TYPE_TOPIC, topic, A.ACTION_PUB)


def on_behalf_of(username: str, source: str) -> Callable[[str], None] | None:
    """For a super user's call made on another user's behalf (txcheck passing on who ended
    a transaction): a check raising ACCESS_DENIED unless ``username`` may publish to a
    topic. None when there is nothing to check (auth off, no user named)."""
    caller = _CALLER.get()
    if caller is None or not username:
        return None
    guard = caller.guard

    def check(topic: str) -> None:  # per item: one user's refusal fails only its decisions
        known = guard.book.users.get(username)
        if known is None or known.user.disabled:
            raise error(errors_pb2.CODE_INVALID_CREDENTIALS, f"user {username[:64]!r} is unknown or disabled")
        principal = Principal(username, known.user.super_user, "on behalf", source or None)
        guard.check(principal, R.RESOURCE_TYPE_TOPIC, topic, A.ACTION_PUB)

    return check


def acting_user() -> tuple[str, str]:
    """(username, source address) of the caller when it is a user other than a super user
    — what a service passes on when it acts for it; ("", "") otherwise."""
    caller = _CALLER.get()
    if caller is None or caller.principal.super_user:
        return "", ""
    return caller.principal.username, caller.principal.source or ""


_ADMIN_ACTIONS = frozenset({A.ACTION_CREATE, A.ACTION_UPDATE, A.ACTION_DELETE})
_AUTH_WRITES = frozenset({"CreateUser", "UpdateUser", "DeleteUser", "PutAcl", "DeleteAcl"})


def is_administrative(method: str, access: auth_pb2.Access | None) -> bool:
    """Audited even when allowed: user/ACL changes and Create/Update/Delete of resources."""
    service, _, name = method.lstrip("/").partition("/")
    if service == "txmq.v1.Auth":
        return name in _AUTH_WRITES
    return access is not None and any(c.action in _ADMIN_ACTIONS for c in access.checks)


def audit_denial(log_now: OncePer, method: str, who: str, peer: str, reason: str, message: str) -> None:
    """A refused call: counted in ``txmq_auth_denied_total{method,reason}`` and logged to
    ``txmq.audit`` as a WARNING at most once a minute per method and user (``log_now``,
    kept by the caller). Also used by the gateway for v2 calls."""
    DENIED.labels(method, reason).inc()
    if log_now((method, who)):
        audit.warning(
            "denied %s user=%s peer=%s: %s (more denials of this user and method within a minute are only counted)",
            method, who, peer, message[:300],
        )  # fmt: skip


class Authorize(grpc.aio.ServerInterceptor):
    """Every call authenticated and checked against its method's access option."""

    def __init__(
        self, authenticator: Authenticator, guard: Guard, *, table: Mapping[str, auth_pb2.Access] | None = None
    ):
        self._authenticator = authenticator
        self._guard = guard
        self._table = dict(access_table() if table is None else table)
        self._handlers: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self._audit_now = OncePer(_AUDIT_DENIED_EVERY_S)

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        service = method.lstrip("/").partition("/")[0]
        if handler is None or service in PUBLIC_SERVICES or service in SELF_AUTHENTICATING:
            return handler
        cached = self._handlers.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        access = self._table.get(method)
        wrapped = self._wrap(handler, method, access)
        self._handlers[method] = (handler, wrapped)
        return wrapped

    # -- per call

    def _admit(
        self, context: grpc.aio.ServicerContext, method: str, access: auth_pb2.Access | None
    ) -> Principal | None:
        if access is None:
            raise error(errors_pb2.CODE_FORBIDDEN, f"{method} has no access rule; refused (docs/security.md)")
        if access.scope == auth_pb2.ACCESS_SCOPE_ANYONE:
            try:
                return self._authenticator.authenticate(
                    context.invocation_metadata(), context.auth_context(), context.peer()
                )
            except TxmqError:
                return None
        principal = self._authenticator.authenticate(
            context.invocation_metadata(), context.auth_context(), context.peer()
        )
        if access.scope == auth_pb2.ACCESS_SCOPE_SUPER_USER and not principal.super_user:
            raise error(
                errors_pb2.CODE_ACCESS_DENIED,
                f"{method} is for super users only (user {principal.username})",
                user=principal.username,
            )
        return principal

    def _check_request(
        self, principal: Principal | None, method: str, access: auth_pb2.Access | None, request: Any
    ) -> None:
        if principal is None or access is None or principal.super_user:
            return
        for check in access.checks:
            if check.field:
                names = names_at(request, check.field, when_set=check.when_set)
                if names is None:
                    continue
                for name in names or [""]:
                    self._guard.check(principal, check.type, name, check.action)
            else:
                self._guard.check(principal, check.type, "", check.action)

    def _audit(self, method: str, principal: Principal | None, admin: bool, err: TxmqError | None, peer: str) -> None:
        who = principal.username if principal else "-"
        if err is None:
            if admin:
                audit.info("allowed %s user=%s peer=%s", method, who, peer)
            return
        reason = errors_pb2.Code.Name(err.code).removeprefix("CODE_").lower()
        audit_denial(self._audit_now, method, who, peer, reason, str(err))

    def _wrap(
        self, handler: grpc.RpcMethodHandler, method: str, access: auth_pb2.Access | None
    ) -> grpc.RpcMethodHandler:
        admin = is_administrative(method, access)

        async def screen_call(context: grpc.aio.ServicerContext) -> Principal | None:
            try:
                principal = self._admit(context, method, access)
            except TxmqError as err:
                self._audit(method, None, False, err, context.peer())
                await abort(context, err)
                raise
            if principal is not None:
                _CALLER.set(_Caller(principal, self._guard))
            return principal

        def screen_request(
            request: Any, context: grpc.aio.ServicerContext, principal: Principal | None
        ) -> TxmqError | None:
            try:
                self._check_request(principal, method, access, request)
            except TxmqError as err:
                self._audit(method, principal, False, err, context.peer())
                return err
            self._audit(method, principal, admin, None, context.peer())  # administrative calls are unary
            return None

        checks = bool(access is not None and access.checks)

        def screens_requests(principal: Principal | None) -> bool:
            # A super user's stream (the services' own: replication, arrivals, internal
            # sends) needs no look at each request.
            return checks and principal is not None and not principal.super_user

        return screened(
            handler, screen_call=screen_call, screen_request=screen_request, screens_requests=screens_requests
        )
