"""A group's retry topic %RETRY%<group> is consumed as the group (RocketMQ 5): Sub on
Group:<group> allows Sub on Topic:%RETRY%<group> when no rule names that topic; a rule
that does decides; nothing else is widened (Pub, other groups, %DLQ%)."""

from __future__ import annotations

import pytest

from txmq.errors import TxmqError
from txmq.v1 import auth_pb2
from txmq_runtime.auth import AuthKeys, Guard, Principal, Sealer, UserBook
from txmq_runtime.registry import encode

A = auth_pb2.Action
R = auth_pb2.ResourceType
ALLOW = auth_pb2.Policy.DECISION_ALLOW
DENY = auth_pb2.Policy.DECISION_DENY


def _guard(*policies: auth_pb2.Policy) -> Guard:
    keys = AuthKeys("/t")
    book = UserBook(keys, Sealer("service-secret-0123456789"))
    book.put(keys.acl("u"), encode(auth_pb2.Acl(username="u", policies=list(policies))))
    return Guard(book)


def _policy(resource: str, *actions: int, decision: int = ALLOW) -> auth_pb2.Policy:
    return auth_pb2.Policy(resource=resource, actions=list(actions), decision=decision)


USER = Principal("u", False, "signature", None)


def _allowed(guard: Guard, rtype: int, name: str, action: int) -> bool:
    try:
        guard.check(USER, rtype, name, action)
    except TxmqError:
        return False
    return True


def test_sub_on_the_group_allows_its_retry_topic() -> None:
    guard = _guard(_policy("Group:billing", A.ACTION_SUB), _policy("Topic:orders", A.ACTION_SUB))
    assert _allowed(guard, R.RESOURCE_TYPE_TOPIC, "%RETRY%billing", A.ACTION_SUB)
    assert not _allowed(guard, R.RESOURCE_TYPE_TOPIC, "%RETRY%other", A.ACTION_SUB)
    assert not _allowed(guard, R.RESOURCE_TYPE_TOPIC, "%RETRY%billing", A.ACTION_PUB)
    assert not _allowed(guard, R.RESOURCE_TYPE_TOPIC, "%DLQ%billing", A.ACTION_SUB)


def test_a_rule_naming_the_retry_topic_decides() -> None:
    guard = _guard(_policy("Group:billing", A.ACTION_SUB), _policy("Topic:%RETRY%billing", A.ACTION_SUB, decision=DENY))
    assert not _allowed(guard, R.RESOURCE_TYPE_TOPIC, "%RETRY%billing", A.ACTION_SUB)


@pytest.mark.parametrize("group_rule", ["Group:bill*", "Group:*"])
def test_group_patterns_count(group_rule: str) -> None:
    guard = _guard(_policy(group_rule, A.ACTION_SUB))
    assert _allowed(guard, R.RESOURCE_TYPE_TOPIC, "%RETRY%billing", A.ACTION_SUB)
