"""The admin commands through click's CliRunner, against the real session cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from txmq_cli.main import cli


@pytest.fixture
def txmq(bootstrap: str):  # type: ignore[no-untyped-def]
    """Runs ``txmq <args> --endpoint <cluster>``; -o json output comes back parsed."""
    runner = CliRunner()

    def run(*args: str, ok: bool = True, stdin: bytes | None = None) -> Any:
        result: Result = runner.invoke(cli, [*args, "--endpoint", bootstrap], input=stdin)
        assert (result.exit_code == 0) is ok, result.output
        if ok and "-o" in args:
            return json.loads(result.stdout)
        return result

    return run


def test_topic_commands(txmq, unique_name, wait_route) -> None:  # type: ignore[no-untyped-def]
    name = unique_name("cli")
    created = txmq(
        "topic", "create", name, "--read-queues", "2", "--write-queues", "2", "--attr", "a=b=c", "-o", "json"
    )
    assert created == {"name": name, "read_queue_nums": 2, "write_queue_nums": 2, "perm": 6, "attributes": {"a": "b=c"}}
    assert txmq("topic", "update", name, "--perm", "4", "-o", "json")["perm"] == 4
    wait_route(name, lambda route: route.queues[0].perm == 4)

    got = txmq("topic", "get", name, "-o", "json")
    assert got["config"]["perm"] == 4 and got["queues"][0]["write_queue_nums"] == 2
    text = txmq("topic", "get", name).stdout
    assert name in text and "4 (r--)" in text

    again = txmq("topic", "create", name, ok=False)
    assert again.exit_code == 1 and again.stderr.startswith("error: [CODE_TOPIC_ALREADY_EXISTS] ")
    assert txmq("topic", "create", name, "--exist-ok", "--read-queues", "5", "-o", "json")["read_queue_nums"] == 2
    assert txmq("topic", "create", name, "--exist_ok", "-o", "json")["name"] == name  # the old spelling still works

    assert name in [t["name"] for t in txmq("topic", "list", "-o", "json")]
    assert name in txmq("topic", "list").stdout

    assert "deleted topic" in txmq("topic", "delete", name).stdout
    missing = txmq("topic", "get", name, ok=False)
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: [CODE_TOPIC_NOT_FOUND] ")


def test_group_commands(txmq, unique_name) -> None:  # type: ignore[no-untyped-def]
    name = unique_name("cli-group")
    created = txmq("group", "create", name, "--retry-max-times", "3", "--consume-disable", "-o", "json")
    assert (created["group_name"], created["retry_max_times"], created["consume_enable"]) == (name, 3, False)
    assert txmq("group", "get", name, "-o", "json") == created
    assert txmq("group", "create", name, ok=False).stderr.startswith("error: [CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS] ")
    assert txmq("group", "create", name, "--exist-ok", "-o", "json") == created
    assert name in [g["group_name"] for g in txmq("group", "list", "-o", "json")]
    assert name in txmq("group", "list").stdout
    txmq("group", "delete", name)
    assert txmq("group", "get", name, ok=False).stderr.startswith("error: [CODE_SUBSCRIPTION_GROUP_NOT_FOUND] ")


def test_send_view_query_and_offsets(txmq, topic: str) -> None:  # type: ignore[no-untyped-def]
    sent = txmq(
        "send",
        topic,
        "héllo",
        "--tag",
        "TagA",
        "--key",
        "k1",
        "--key",
        "k2",
        "--property",
        "p=v",
        "--queue-id",
        "1",
        "-o",
        "json",
    )
    assert sent["status"] == "OK" and sent["message_queue"]["queue_id"] == 1

    viewed = txmq("message", "view", sent["offset_msg_id"], "-o", "json")
    assert (viewed["body"], viewed["tags"], viewed["keys"], viewed["msg_id"]) == (
        "héllo",
        "TagA",
        ["k1", "k2"],
        sent["msg_id"],
    )
    assert viewed["properties"]["p"] == "v"
    assert "héllo" in txmq("message", "view", sent["offset_msg_id"]).stdout

    by_key = txmq("message", "query", "--topic", topic, "--key", "k2", "-o", "json")
    assert [m["offset_msg_id"] for m in by_key] == [sent["offset_msg_id"]]
    by_id = txmq("message", "query", "--unique-id", sent["msg_id"], "-o", "json")
    assert [m["msg_id"] for m in by_id] == [sent["msg_id"]]
    assert sent["offset_msg_id"] in txmq("message", "query", "--topic", topic, "--key", "k1").stdout

    from_stdin = txmq("send", topic, "-", "--queue-id", "1", "-o", "json", stdin=b"\xff\x00binary")
    assert txmq("message", "view", from_stdin["offset_msg_id"], "-o", "json")["body"] == {"base64": "/wBiaW5hcnk="}

    queues = txmq("offsets", topic, "-o", "json")
    assert [(q["queue"]["queue_id"], q["max_offset"]) for q in queues] == [(0, 0), (1, 2), (2, 0), (3, 0)]
    table = txmq("offsets", topic).stdout.splitlines()
    assert table[0].split() == ["STORE", "QUEUE", "MIN", "MAX", "LAST_STORED"] and len(table) == 5


def test_cli_errors(txmq) -> None:  # type: ignore[no-untyped-def]
    bad = txmq("send", "RMQ_SYS_TRANS_HALF_TOPIC", "x", ok=False)
    assert (bad.exit_code, bad.stderr) == (
        1,
        "error: [CODE_SYSTEM_TOPIC] sending to system topic 'RMQ_SYS_TRANS_HALF_TOPIC' is forbidden\n",
    )
    assert txmq("message", "view", "zz", ok=False).stderr.startswith("error: [CODE_ILLEGAL_MESSAGE_ID] ")
    assert txmq("send", "t", "x", "--property", "novalue", ok=False).exit_code == 2
