"""ConsumerHeartbeat membership on a manual clock, and the pull settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
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
