"""`txmq fetch`, `txmq tail` and `txmq lag` through click's CliRunner, on the session
cluster."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

from click.testing import CliRunner

from txmq import Admin, Message, Producer, PullConsumer
from txmq_cli.main import cli

from .conftest import Topics, unique


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_pull_with_tag_and_sql_filters(bootstrap: str, new_topic: Topics, producer: Producer) -> None:
    topic = new_topic()
    for i, (tag, region) in enumerate([("A", "eu"), ("B", "us"), ("A", "us")]):
        producer.send(Message(topic, f"m{i}".encode(), tags=tag, properties={"region": region}, queue_id=1))
    code, out, _ = _run("fetch", topic, "--queue-id", "1", "--offset", "0", "--endpoint", bootstrap, "-o", "json")
    assert code == 0
    answer = json.loads(out)
    assert answer["status"] == "FOUND"
    assert [m["body"] for m in answer["messages"]] == ["m0", "m1", "m2"]
    assert answer["next_begin_offset"] == 3 and answer["queue"]["queue_id"] == 1

    code, out, _ = _run(
        "fetch", topic, "--queue-id", "1", "--tag-expr", "A", "--max", "1", "--endpoint", bootstrap, "-o", "json"
    )
    assert code == 0
    assert [m["body"] for m in json.loads(out)["messages"]] == ["m0"]

    code, out, _ = _run("fetch", topic, "--queue-id", "1", "--sql", "region = 'us'", "--endpoint", bootstrap)
    assert code == 0
    assert "status FOUND" in out and "m1" in out and "m2" in out and "m0" not in out

    code, out, _ = _run("fetch", topic, "--queue-id", "1", "--offset", "3", "--endpoint", bootstrap)
    assert code == 0 and "status NO_NEW_MSG" in out

    code, _, err = _run("fetch", topic, "--queue-id", "1", "--sql", "region =", "--endpoint", bootstrap)
    assert code == 1 and "CODE_ILLEGAL_FILTER_EXPRESSION" in err
    code, _, err = _run("fetch", topic, "--queue-id", "9", "--endpoint", bootstrap)
    assert code == 2 and "no readable queue 9" in err
    code, _, err = _run("fetch", topic, "--queue-id", "1", "--tag-expr", "A", "--sql", "a = 1", "--endpoint", bootstrap)
    assert code == 2


def test_tail_prints_messages_as_they_arrive(bootstrap: str, new_topic: Topics, producer: Producer) -> None:
    topic = new_topic()
    producer.send(Message(topic, b"before", tags="keep"))

    def send_more() -> None:
        producer.send(Message(topic, b"skip-me", tags="drop"))
        producer.send(Message(topic, b"live-1", tags="keep"))
        producer.send(Message(topic, b"live-2", tags="keep"))

    # From the beginning, so the test does not depend on when the sends land.
    sender = threading.Timer(0.3, send_more)
    sender.start()
    try:
        code, out, _ = _run(
            "tail",
            topic,
            "--tag-expr",
            "keep",
            "--from-beginning",
            "--count",
            "3",
            "--endpoint",
            bootstrap,
            "-o",
            "json",
        )
    finally:
        sender.join()
    assert code == 0
    bodies = sorted(json.loads(line)["body"] for line in out.splitlines())
    assert bodies == ["before", "live-1", "live-2"]

    code, out, _ = _run(
        "tail", topic, "--sql", "TAGS = 'drop'", "--from-beginning", "--count", "1", "--endpoint", bootstrap
    )
    assert code == 0
    assert "skip-me" in out and "tags=drop" in out


def test_lag_shows_committed_offsets_against_max(bootstrap: str, new_topic: Topics, producer: Producer) -> None:
    topic = new_topic(queues=2)
    group = unique("lag-group")
    for i in range(5):
        producer.send(Message(topic, f"m{i}".encode(), queue_id=i % 2))  # 3 on queue 0, 2 on queue 1
    with PullConsumer(group, bootstrap) as consumer:
        q0, q1 = consumer.fetch_message_queues(topic)
        consumer.commit_offset(q0, 1)
        consumer.commit_offset(q1, 2)
    code, out, _ = _run("lag", group, "--topic", topic, "--endpoint", bootstrap, "-o", "json")
    assert code == 0
    rows = {r["queue"]["queue_id"]: r for r in json.loads(out)}
    assert (rows[0]["offset"], rows[0]["max_offset"], rows[0]["lag"]) == (1, 3, 2)
    assert (rows[1]["offset"], rows[1]["lag"]) == (2, 0)
    code, out, _ = _run("lag", group, "--endpoint", bootstrap)
    assert code == 0 and "total lag 2" in out and topic in out
    nobody = unique("nobody")
    code, out, err = _run("lag", nobody, "--endpoint", bootstrap)
    assert code == 1 and out == ""
    assert err == (
        f"error: [CODE_SUBSCRIPTION_GROUP_NOT_FOUND] subscription group '{nobody}' does not exist"
        " (`txmq group list` shows the groups)\n"
    )
    code, _, err = _run("offsets", topic, "--group", nobody, "--endpoint", bootstrap)
    assert code == 1 and "does not exist" in err
    with Admin(bootstrap) as admin:
        admin.create_subscription_group(nobody)
        try:
            code, out, _ = _run("lag", nobody, "--endpoint", bootstrap)
            assert code == 0 and out == f"group {nobody} exists but has committed no offsets yet\n"
            code, out, _ = _run("offsets", topic, "--group", nobody, "--endpoint", bootstrap)
            assert code == 0 and out == f"group {nobody} exists but has committed no offsets on topic {topic} yet\n"
        finally:
            admin.delete_subscription_group(nobody)


def test_tail_and_fetch_end_with_one_line_on_errors_a_retry_cannot_fix(bootstrap: str, new_topic: Topics) -> None:
    topic = new_topic(queues=2)
    for args in (
        ["tail", topic, "--sql", "region = "],
        ["fetch", topic, "--queue-id", "0", "--sql", "region = "],
    ):
        code, out, err = _run(*args, "--endpoint", bootstrap)
        assert (
            code == 1
            and out == ""
            and err.startswith("error: [CODE_ILLEGAL_FILTER_EXPRESSION] ")
            and err.count("\n") == 1
        )
    missing = unique("missing")
    for args in (["tail", missing], ["fetch", missing, "--queue-id", "0"]):
        code, out, err = _run(*args, "--endpoint", bootstrap)
        assert code == 1 and err.startswith("error: [CODE_TOPIC_NOT_FOUND] ") and err.count("\n") == 1, err
    group = unique("tail-group")
    with Admin(bootstrap) as admin:
        admin.create_subscription_group(group, consume_enable=False)
        try:
            code, _, err = _run("fetch", topic, "--queue-id", "0", "--group", group, "--endpoint", bootstrap)
            assert code == 1 and err.startswith("error: [CODE_CONSUME_DISABLED] ")
        finally:
            admin.delete_subscription_group(group)


def test_tail_ends_when_its_group_loses_permission(bootstrap: str, new_topic: Topics) -> None:
    """A non-retriable error after the start ends `tail` with exit code 1, not a loop of warnings."""
    topic = new_topic(queues=2)
    group = unique("tail-group")
    with Admin(bootstrap) as admin:
        admin.create_subscription_group(group)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "txmq_cli.main", "tail", topic, "--group", group, "--endpoint", bootstrap],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert proc.stderr is not None
                assert proc.stderr.readline().startswith("tailing")  # the pulls are held now
                admin.update_subscription_group(group, consume_enable=False)
                assert proc.wait(timeout=60) == 1
                rest = proc.stderr.read()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stdout.close()  # type: ignore[union-attr]
                proc.stderr.close()
        finally:
            admin.delete_subscription_group(group)
    assert rest.startswith("error: [CODE_CONSUME_DISABLED] ") and rest.count("\n") == 1, rest


def test_tail_stops_on_ctrl_c(bootstrap: str, new_topic: Topics, producer: Producer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic = new_topic()
    producer.send(Message(topic, b"hello", tags="t"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "txmq_cli.main", "tail", topic, "--from-beginning", "--endpoint", bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it arrived; the pulls are held now
        assert "hello" in line and "tags=t" in line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
