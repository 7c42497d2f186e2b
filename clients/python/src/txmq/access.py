"""Users and permissions as the SDK shows them (``Admin.create_user``, ``Admin.put_acl``;
the CLI's ``txmq user`` / ``txmq acl``). The model is RocketMQ ACL 2.0's: a policy allows or
denies actions on resources — ``Cluster``, ``Topic:<name>``, ``Group:<name>``, a name ending
in ``*`` for a prefix, ``Topic:*`` / ``Group:*`` / ``*`` for any — optionally only from some
source addresses. Deny wins; nothing allowed is denied. docs/security.md has the table of
what each call needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from txmq.errors import BadRequestError
from txmq.v1 import auth_pb2, errors_pb2

#: Action names as RocketMQ spells them.
ACTIONS: dict[str, int] = {
    "Pub": auth_pb2.ACTION_PUB,
    "Sub": auth_pb2.ACTION_SUB,
    "Create": auth_pb2.ACTION_CREATE,
    "Update": auth_pb2.ACTION_UPDATE,
    "Delete": auth_pb2.ACTION_DELETE,
    "Get": auth_pb2.ACTION_GET,
    "List": auth_pb2.ACTION_LIST,
    "All": auth_pb2.ACTION_ALL,
}
_ACTION_NAMES = {v: k for k, v in ACTIONS.items()}


@dataclass(frozen=True, slots=True)
class User:
    username: str
    super_user: bool = False
    disabled: bool = False
    created_at_ms: int = 0
    #: Byte-rate quotas per service process (docs/security.md "Quotas"); 0: none.
    produce_bytes_per_second: int = 0
    fetch_bytes_per_second: int = 0

    @classmethod
    def from_proto(cls, u: auth_pb2.User) -> User:
        return cls(
            u.username, u.super_user, u.disabled, u.created_at_ms, u.produce_bytes_per_second, u.fetch_bytes_per_second
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """``Policy("Topic:orders*", ("Pub", "Sub"))``; ``allow=False`` denies."""

    resource: str
    actions: tuple[str, ...]
    allow: bool = True
    source_ips: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        unknown = [a for a in self.actions if _action(a) is None]
        if not self.actions or unknown:
            raise BadRequestError(
                f"policy on {self.resource!r}: actions must be some of {', '.join(ACTIONS)} (got {list(self.actions)})",
                code=errors_pb2.CODE_ILLEGAL_ARGUMENT,
            )

    def to_proto(self) -> auth_pb2.Policy:
        return auth_pb2.Policy(
            resource=self.resource,
            actions=[_action(a) for a in self.actions],  # type: ignore[misc]
            decision=auth_pb2.Policy.DECISION_ALLOW if self.allow else auth_pb2.Policy.DECISION_DENY,
            source_ips=list(self.source_ips),
        )

    @classmethod
    def from_proto(cls, p: auth_pb2.Policy) -> Policy:
        return cls(
            p.resource,
            tuple(_ACTION_NAMES.get(a, str(a)) for a in p.actions),
            p.decision == auth_pb2.Policy.DECISION_ALLOW,
            tuple(p.source_ips),
        )

    def __str__(self) -> str:
        where = f" from {','.join(self.source_ips)}" if self.source_ips else ""
        return f"{'Allow' if self.allow else 'Deny'} {self.resource} {','.join(self.actions)}{where}"


def _action(name: str) -> int | None:
    for key, value in ACTIONS.items():
        if key.lower() == name.lower():
            return value
    return None


def acl_to_proto(username: str, policies: Sequence[Policy]) -> auth_pb2.Acl:
    return auth_pb2.Acl(username=username, policies=[p.to_proto() for p in policies])
