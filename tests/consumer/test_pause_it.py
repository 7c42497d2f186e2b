"""Pausing and resuming a consumer group (Admin.pause_consumer_group / txmq group
pause) with a PushConsumer running, on the session cluster's real processes."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from click.testing import CliRunner

from txmq import Admin, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from txmq.errors import NotFoundError
from txmq.v1 import errors_pb2
from txmq_cli.main import cli

from .conftest import Topics, assigned, unique, wait_until
from .consumer_settings import FAST


def test_admin_pause_and_resume(admin: Admin) -> None:
    group = unique("pause-admin")
    admin.create_subscription_group(group)
    try:
        assert admin.consumer_group_paused(group) is False
        assert admin.pause_consumer_group(group).consume_enable is False
        assert admin.consumer_group_paused(group) is True
        assert admin.resume_consumer_group(group).consume_enable is True
        assert admin.consumer_group_paused(group) is False
    finally:
        admin.delete_subscription_group(group)
    # A group nobody has yet is created paused; resuming one raises NOT_FOUND.
    ahead = unique("pause-ahead")
    try:
        assert admin.pause_consumer_group(ahead).consume_enable is False
        assert admin.get_subscription_group(ahead).consume_enable is False
    finally:
        admin.delete_subscription_group(ahead)
    with pytest.raises(NotFoundError) as info:
        admin.resume_consumer_group(unique("pause-missing"))
    assert info.value.code == errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND


def test_cli_group_pause_and_resume(bootstrap: str, admin: Admin) -> None:
    group = unique("pause-cli")
    admin.create_subscription_group(group)
    runner = CliRunner()

    def txmq(*args: str) -> str:
        result = runner.invoke(cli, [*args, "--endpoint", bootstrap])
        assert result.exit_code == 0, result.output
        return result.stdout

    try:
        assert f"paused group {group}" in txmq("group", "pause", group)
        assert admin.consumer_group_paused(group)
        listed = [line.split() for line in txmq("group", "list").splitlines()]
        header, row = listed[0], next(r for r in listed if r[0] == group)
        assert row[header.index("PAUSED")] == "True" and row[header.index("CONSUME")] == "False"
        assert '"resumed"' in txmq("group", "resume", group, "-o", "json")
        assert not admin.consumer_group_paused(group)
    finally:
        admin.delete_subscription_group(group)
    missing = runner.invoke(cli, ["group", "resume", unique("pause-none"), "--endpoint", bootstrap])
    assert missing.exit_code == 1 and missing.stderr.startswith("error: [CODE_SUBSCRIPTION_GROUP_NOT_FOUND] ")


def test_a_paused_push_consumer_waits_and_resumes(
    bootstrap: str, admin: Admin, new_topic: Topics, producer: Producer, caplog: pytest.LogCaptureFixture
) -> None:
    topic = new_topic(queues=2)
    group = unique("pause-push")
    admin.create_subscription_group(group)
    consumed: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            consumed.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group,
        bootstrap,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        pause_on_consume_disabled=True,
        **{**FAST, "suspend_timeout": 1.0},  # type: ignore[arg-type]
    )
    consumer.register_message_listener(listener)
    consumer.subscribe(topic)
    try:
        with caplog.at_level(logging.INFO, logger="txmq"):
            consumer.start()
            for i in range(4):
                producer.send(Message(topic, f"before-{i}".encode(), queue_id=i % 2))
            wait_until(lambda: len(consumed) == 4, what="the messages before the pause consumed")

            admin.pause_consumer_group(group)
            # Every queue's pull has been refused once: from now on none is served.
            wait_until(
                lambda: (
                    len(assigned(consumer, topic)) == 2
                    and all(pq.paused_polls > 0 for pq in list(consumer._queues.values()))
                ),
                what="every queue paused",
                timeout_s=30,
            )
            assert consumer.paused and consumer.wait(timeout=0.01) is False and consumer.error is None
            for i in range(6):
                producer.send(Message(topic, f"during-{i}".encode(), queue_id=i % 2))
            time.sleep(4)  # a few refused polls (every <= 3 s), nothing delivered
            with lock:
                assert sorted(consumed) == sorted(f"before-{i}".encode() for i in range(4))
            assert len(assigned(consumer, topic)) == 2

            admin.resume_consumer_group(group)
            wait_until(lambda: len(consumed) >= 10, what="the backlog delivered after the resume", timeout_s=30)
            time.sleep(0.5)
        with lock:
            got = sorted(set(consumed))
        expected = sorted([f"before-{i}".encode() for i in range(4)] + [f"during-{i}".encode() for i in range(6)])
        assert got == expected  # nothing lost (at-least-once: a duplicate would be allowed)
        # Every queue's pull served again, the group's %RETRY% queue's too (its own backoff).
        wait_until(lambda: not consumer.paused, what="the pause over on every queue")
        assert consumer.error is None
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        messages = [r.getMessage() for r in lines]
        assert len(messages) == 2, messages  # no error storm: one line each way
        assert "is paused" in messages[0] and "resumed" in messages[1], messages
    finally:
        consumer.shutdown()
        admin.delete_subscription_group(group)


def test_a_push_consumer_starts_on_a_group_paused_ahead(
    bootstrap: str, admin: Admin, new_topic: Topics, producer: Producer
) -> None:
    topic = new_topic(queues=1)
    group = unique("pause-ahead-push")
    admin.pause_consumer_group(group)  # no store has it yet: created paused
    consumed: list[bytes] = []
    consumer = PushConsumer(
        group,
        bootstrap,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        pause_on_consume_disabled=True,
        **{**FAST, "suspend_timeout": 1.0},  # type: ignore[arg-type]
    )

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        consumed.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_message_listener(listener)
    consumer.subscribe(topic)
    try:
        consumer.start()  # does not raise ForbiddenError
        assert consumer.paused
        producer.send(Message(topic, b"held"))
        wait_until(lambda: len(assigned(consumer, topic)) == 1, what="the queue taken while paused")
        time.sleep(2)
        assert consumed == [] and consumer.paused and consumer.error is None
        admin.resume_consumer_group(group)
        wait_until(lambda: consumed == [b"held"], what="the message delivered after the resume", timeout_s=30)
        wait_until(lambda: not consumer.paused, what="the pause over on every queue (%RETRY% too)")
    finally:
        consumer.shutdown()
        admin.delete_subscription_group(group)
