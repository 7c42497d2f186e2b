"""ConsumerHeartbeat membership on a manual clock, and the pull settings."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError
from support.clock import ManualClock, settle, until

from txmq.errors import TxmqError
from txmq.protocol import MAX_CLIENT_ID_BYTES, MAX_HEARTBEAT_TOPICS
from txmq.v1 import common_pb2, errors_pb2, pull_pb2
from txmq_pull.membership import ConsumerGroups
from txmq_pull.settings import PullSettings
from txmq_runtime.settings import load_settings


def test_live_members_sorted_and_expired_after_silence() -> None:
    clock = ManualClock()
    groups = ConsumerGroups(clock, expiry_ms=30_000)
    assert groups.heartbeat("G", "c-b", ["T"]) == ["c-b"]
    clock.advance(10_000)
    assert groups.heartbeat("G", "c-a") == ["c-a", "c-b"]
    assert groups.heartbeat("Other", "c-z") == ["c-z"]  # groups are separate
    clock.advance(19_999)
    assert groups.members("G") == ["c-a", "c-b"]
    clock.advance(1)  # c-b silent for 30 s
    assert groups.members("G") == ["c-a"]
    assert groups.heartbeat("G", "c-b") == ["c-a", "c-b"]  # and back
    assert groups.topics("G", "c-b") == ()
    clock.advance(30_000)
    assert groups.members("G") == []
    assert groups.members("Other") == []


def test_a_leaving_consumer_is_forgotten_at_once() -> None:
    clock = ManualClock()
    groups = ConsumerGroups(clock, expiry_ms=30_000)
    groups.heartbeat("G", "c-a", ["T"])
    groups.heartbeat("G", "c-b", ["T"])
    assert groups.heartbeat("G", "c-b", ["T"], leaving=True) == ["c-a"]
    assert groups.topics("G", "c-b") == ()
    assert groups.heartbeat("G", "c-never-seen", leaving=True) == ["c-a"]  # harmless


def test_heartbeat_needs_a_group_and_a_client_id() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=1_000)
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("", "c")
    assert info.value.code == errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("G", "")
    assert info.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT


def test_settings_defaults_and_short_polling_check_interval() -> None:
    s = load_settings(PullSettings, [])
    assert (s.long_polling_enable, s.suspend_timeout_default_ms, s.effective_hold_check_interval_ms) == (
        True,
        15_000,
        5_000,
    )
    assert (s.short_polling_time_ms, s.max_held_requests, s.service_readable, s.property_filter_enable) == (
        1_000,
        10_000,
        True,
        True,
    )
    short = load_settings(PullSettings, ["--long_polling_enable", "false", "--short_polling_time_ms", "700"])
    assert short.effective_hold_check_interval_ms == 700
    assert load_settings(PullSettings, ["--hold_check_interval_ms", "250"]).effective_hold_check_interval_ms == 250
    with pytest.raises(ValidationError):  # frozen
        s.max_held_requests = 1  # type: ignore[misc]


# -- bounds (issue 16) ---------------------------------------------------------------------


def assert_nothing_kept(groups: ConsumerGroups) -> None:
    assert (groups.client_count, groups.group_count) == (0, 0)
    assert groups._groups == {} and not groups._seen  # every internal map


def test_an_expired_consumer_leaves_nothing_behind() -> None:
    clock = ManualClock()
    groups = ConsumerGroups(clock, expiry_ms=30_000)
    for g in range(5):
        for c in range(20):
            groups.heartbeat(f"G{g}", f"client-{c}", [f"T{c}", "Shared"])
    assert (groups.client_count, groups.group_count) == (100, 5)
    clock.advance(10_000)
    groups.heartbeat("G0", "client-0", ["T0"])  # still alive: only it stays
    clock.advance(20_000)
    assert groups.expire() == 99
    assert (groups.client_count, groups.group_count) == (1, 1)
    assert groups.members("G0") == ["client-0"]
    assert groups.topics("G1", "client-1") == ()
    clock.advance(10_000)
    assert groups.members("G0") == []
    assert_nothing_kept(groups)


def test_leaving_removes_the_group_with_its_last_member() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=30_000)
    groups.heartbeat("G", "c-a", ["T"])
    groups.heartbeat("G", "c-a", ["T"], leaving=True)
    assert_nothing_kept(groups)
    groups.heartbeat("G", "c-never-seen", leaving=True)
    assert_nothing_kept(groups)


async def test_consumers_expire_on_time_while_no_call_comes() -> None:
    clock = ManualClock()
    groups = ConsumerGroups(clock, expiry_ms=30_000)
    task = asyncio.create_task(groups.run())
    try:
        await settle()
        assert clock.sleepers == 0  # nobody known: no timer
        groups.heartbeat("G", "c-a", ["T"])
        groups.heartbeat("H", "c-b", ["T"])
        await until(lambda: clock.sleepers == 1)
        clock.advance(15_000)
        groups.heartbeat("G", "c-a", ["T"])  # c-a stays 15 s longer than c-b
        clock.advance(15_000)
        await until(lambda: groups.client_count == 1)
        assert groups.group_count == 1  # H went with c-b, with no call to notice it
        clock.advance(15_000)
        await until(lambda: groups.client_count == 0)
        assert_nothing_kept(groups)
        await until(lambda: clock.sleepers == 0)  # and the loop sleeps without a deadline again
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_client_id_is_bounded_in_utf8_bytes() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=1_000)
    assert groups.heartbeat("G", "c" * MAX_CLIENT_ID_BYTES) == ["c" * MAX_CLIENT_ID_BYTES]
    for too_long in ("c" * (MAX_CLIENT_ID_BYTES + 1), "é" * (MAX_CLIENT_ID_BYTES // 2 + 1), "x" * 1_000_000):
        with pytest.raises(TxmqError) as info:
            groups.heartbeat("G", too_long)
        err = info.value
        assert err.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
        assert str(MAX_CLIENT_ID_BYTES) in err.message and len(err.message) < 200
        assert err.metadata["client_id_bytes"] == str(len(too_long.encode()))
    assert groups.client_count == 1


def test_heartbeat_topics_are_valid_names_and_bounded_in_number() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=1_000)
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("G", "c", ["T"] * (MAX_HEARTBEAT_TOPICS + 1))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
    for bad in ("", "x" * 10_000, "no spaces"):
        with pytest.raises(TxmqError) as info:
            groups.heartbeat("G", "c", ["T", bad])
        assert info.value.code == errors_pb2.CODE_ILLEGAL_TOPIC
    assert groups.client_count == 0  # nothing recorded by a refused heartbeat
    groups.heartbeat("G", "c", [f"T{i}" for i in range(MAX_HEARTBEAT_TOPICS)])
    assert len(groups.topics("G", "c")) == MAX_HEARTBEAT_TOPICS


def _subs(**filters: str) -> list[pull_pb2.Subscription]:
    """topic=expression (TAG), or topic="sql:..." (SQL92)."""
    out = []
    for topic, text in filters.items():
        if text.startswith("sql:"):
            f = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_SQL92, expression=text[4:])
        else:
            f = common_pb2.FilterExpression(type=common_pb2.FILTER_TYPE_TAG, expression=text)
        out.append(pull_pb2.Subscription(topic=topic, filter=f))
    return out


def test_a_different_tag_for_one_topic_is_refused_naming_the_other_member() -> None:
    clock = ManualClock()
    groups = ConsumerGroups(clock, expiry_ms=30_000)
    assert groups.heartbeat("G", "c-a", ["T"], subscriptions=_subs(T="TagA || TagB")) == ["c-a"]
    # the same filter written otherwise is the same subscription
    assert groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T=" TagB||TagA ")) == ["c-a", "c-b"]
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("G", "c-c", ["T"], subscriptions=_subs(T="TagC"))
    err = info.value
    assert err.code == errors_pb2.CODE_SUBSCRIPTION_CONFLICT
    assert err.grpc_status.name == "FAILED_PRECONDITION" and not err.retriable
    assert err.metadata == {"topic": "T", "other_client_id": "c-a"}
    for part in ("'G'", "'c-c'", "'T'", "TAG 'TagC'", "'c-a'", "TAG 'TagA || TagB'"):
        assert part in err.message
    assert groups.members("G") == ["c-a", "c-b"]  # the refused one is not a member
    # SQL92 against TAG is a conflict too
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("G", "c-d", ["T"], subscriptions=_subs(T="sql:a > 1"))
    assert "SQL92 'a > 1'" in info.value.message


def test_a_different_topic_set_is_refused_both_ways() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=30_000)
    groups.heartbeat("G", "c-a", ["T", "U"], subscriptions=_subs(T="*", U="*"))
    with pytest.raises(TxmqError) as info:  # fewer topics
        groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T="*"))
    assert info.value.metadata == {"topic": "U", "other_client_id": "c-a"}
    assert "nothing (the topic is not subscribed)" in info.value.message
    with pytest.raises(TxmqError) as info:  # more topics
        groups.heartbeat("G", "c-b", ["T", "U", "V"], subscriptions=_subs(T="*", U="*", V="*"))
    assert info.value.metadata["topic"] == "V"
    # an empty tag expression is "*"
    assert groups.heartbeat("G", "c-b", ["T", "U"], subscriptions=_subs(T="", U="*")) == ["c-a", "c-b"]


def test_once_the_defining_members_go_the_next_one_defines_the_group() -> None:
    clock = ManualClock()
    groups = ConsumerGroups(clock, expiry_ms=30_000)
    groups.heartbeat("G", "c-a", ["T"], subscriptions=_subs(T="A"))
    clock.advance(10_000)
    groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T="A"))
    with pytest.raises(TxmqError):
        groups.heartbeat("G", "c-new", ["T"], subscriptions=_subs(T="B"))
    groups.heartbeat("G", "c-a", ["T"], leaving=True)
    with pytest.raises(TxmqError) as info:  # c-b still defines it
        groups.heartbeat("G", "c-new", ["T"], subscriptions=_subs(T="B"))
    assert info.value.metadata["other_client_id"] == "c-b"
    clock.advance(30_000)  # c-b expires
    assert groups.heartbeat("G", "c-new", ["T"], subscriptions=_subs(T="B")) == ["c-new"]
    assert groups.subscriptions("G", "c-new") == {"T": ("TAG", "B")}
    with pytest.raises(TxmqError):  # now the old subscription is the odd one
        groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T="A"))


def test_a_live_member_that_changes_its_subscription_is_refused_and_forgotten() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=30_000)
    groups.heartbeat("G", "c-a", ["T"], subscriptions=_subs(T="A"))
    groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T="A"))
    with pytest.raises(TxmqError):
        groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T="B"))
    assert groups.members("G") == ["c-a"]
    assert groups.subscriptions("G", "c-b") is None
    # alone, a member may change what it subscribes
    assert groups.heartbeat("G", "c-a", ["T"], subscriptions=_subs(T="B")) == ["c-a"]


def test_heartbeats_without_subscriptions_are_not_checked() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=30_000)
    groups.heartbeat("G", "c-old", ["T"])
    groups.heartbeat("G", "c-a", ["T"], subscriptions=_subs(T="A"))
    assert groups.heartbeat("G", "c-old2", ["U"]) == ["c-a", "c-old", "c-old2"]
    assert groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T="A")) == ["c-a", "c-b", "c-old", "c-old2"]
    groups.heartbeat("G", "c-a", ["T"], leaving=True)
    groups.heartbeat("G", "c-b", ["T"], leaving=True)
    assert groups.heartbeat("G", "c-c", ["T"], subscriptions=_subs(T="C")) == ["c-c", "c-old", "c-old2"]


def test_conflict_message_truncates_long_expressions() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=30_000)
    groups.heartbeat("G", "c-a", ["T"], subscriptions=_subs(T="x" * 1000))
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("G", "c-b", ["T"], subscriptions=_subs(T="y" * 1000))
    assert "x" * 200 + "…(1000 bytes)" in info.value.message
    assert "x" * 201 not in info.value.message and "y" * 201 not in info.value.message


def test_bad_subscriptions_are_typed_errors() -> None:
    groups = ConsumerGroups(ManualClock(), expiry_ms=30_000)
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("G", "c", ["T"], subscriptions=_subs(T="A") + _subs(T="B"))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
    with pytest.raises(TxmqError) as info:
        groups.heartbeat("G", "c", ["T"], subscriptions=_subs(**{"bad topic!": "A"}))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_TOPIC
    assert groups.members("G") == []
