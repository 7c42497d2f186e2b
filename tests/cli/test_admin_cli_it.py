"""Admin commands as a new user tries them, against the session cluster (auth off)."""

from __future__ import annotations

import json
import time

from support.waiting import unique_name, wait_until

from txmq import Admin
from txmq_pull.settings import PullSettings

from .conftest import Txmq


def test_whoami_with_auth_off_is_anonymous(txmq: Txmq) -> None:
    text = txmq("whoami")
    assert (text.exit_code, text.stdout, text.stderr) == (0, "anonymous (auth is off)\n", "")
    as_json = txmq("whoami", "-o", "json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == {
        "username": "",
        "super_user": False,
        "authenticated_by": "",
        "auth_enabled": False,
    }


def test_dead_letters_of_an_unknown_group_are_a_typed_not_found(txmq: Txmq, admin: Admin) -> None:
    missing = unique_name("cli-dlq-missing")
    for args in (("dlq", "list", missing), ("dlq", "resend", missing, "--all"), ("lag", missing)):
        result = txmq(*args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith("error: [CODE_SUBSCRIPTION_GROUP_NOT_FOUND] "), (args, result.stderr)
    known = unique_name("cli-dlq-known")
    admin.create_subscription_group(known)
    try:
        for args in (("dlq", "list", known), ("dlq", "resend", known, "--all")):
            result = txmq(*args)
            assert (result.exit_code, result.stdout) == (0, f"group {known} has no dead letters\n"), args
    finally:
        admin.delete_subscription_group(known)


def test_pause_and_resume_say_when_they_take_effect(txmq: Txmq, admin: Admin, topic: str) -> None:
    ttl_ms = PullSettings.model_fields["config_cache_ttl_ms"].default
    group = unique_name("cli-pause")
    admin.create_subscription_group(group)
    try:
        paused = txmq("group", "pause", group)
        assert paused.exit_code == 0
        assert paused.stdout.startswith(f"paused group {group}; takes effect within {ttl_ms / 1000:g} s ")
        time.sleep(ttl_ms / 1000 + 0.5)  # what it said: past it, pulls are refused
        fetched = txmq("fetch", topic, "--queue-id", "0", "--group", group)
        assert fetched.exit_code == 1 and fetched.stderr.startswith("error: [CODE_CONSUME_DISABLED] "), fetched.output
        resumed = txmq("group", "resume", group, "-o", "json")
        assert json.loads(resumed.stdout) == {"resumed": group, "takes_effect_within_ms": ttl_ms}
        assert f"resumed group {group}; takes effect within" in txmq("group", "resume", group).stdout
    finally:
        admin.delete_subscription_group(group)


def test_send_delayed_is_not_fetchable_before_its_time(txmq: Txmq, topic: str) -> None:
    def fetched() -> list[str]:
        result = txmq("fetch", topic, "--queue-id", "1", "-o", "json")
        assert result.exit_code == 0, result.output
        return [m["body"] for m in json.loads(result.stdout)["messages"]]

    at = int(time.time() * 1000) + 1_500
    sent = txmq("send", topic, "later", "--queue-id", "1", "--delivery-timestamp-ms", str(at), "-o", "json")
    assert sent.exit_code == 0, sent.output
    assert json.loads(sent.stdout)["deliver_at_ms"] == at
    assert fetched() == []
    assert wait_until(lambda: fetched() == ["later"], what="the delayed message") and time.time() * 1000 >= at

    level = txmq("send", topic, "level", "--queue-id", "2", "--delay-level", "2", "-o", "json")  # 5 s
    assert level.exit_code == 0 and json.loads(level.stdout)["deliver_at_ms"] > 0, level.output
    both = txmq("send", topic, "x", "--delay-level", "1", "--delivery-timestamp-ms", str(at))
    assert both.exit_code == 2 and "at most one of --delay-level and --delivery-timestamp-ms" in both.output


def test_recall_a_delayed_message_by_the_handle_its_send_printed(txmq: Txmq, topic: str) -> None:
    at = int(time.time() * 1000) + 60_000
    sent = txmq("send", topic, "never", "--delivery-timestamp-ms", str(at), "-o", "json")
    assert sent.exit_code == 0, sent.output
    handle = json.loads(sent.stdout)["recall_handle"]
    assert handle.startswith("txr1.")
    recalled = txmq("message", "recall", handle)
    assert recalled.exit_code == 0 and recalled.stdout.split() == ["status", "OK"], recalled.output
    bad = txmq("message", "recall", "txr1.@@")
    assert bad.exit_code == 1 and "CODE_ILLEGAL_ARGUMENT" in bad.output, bad.output
