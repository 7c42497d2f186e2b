"""The official RocketMQ 5 Python client (PyPI rocketmq-python-client) against txmq's
gateway, each client in a process of its own (tests/gateway/rmq_scenarios/*.py, which
import only the official package and print JSON lines).

One private cluster for the module (etcd of the session, own etcd prefix): store,
txcheck checking fast (every 500 ms, transactions older than 500 ms), pull, and a
gateway accepting invisible durations from 1 s. Every check of what landed in txmq goes
through txmq's own SDK (Admin queries) or txcheck's QueryTransaction, never through the
gateway. Waits poll a condition with a limit; the only deliberate delays are the
consumers' "nothing more arrives" windows and the 1 s a long-polling receive is left
waiting before its message is sent, which are the point of those checks.

What each test proves:

- normal sends (tag, keys, user properties) are stored in txmq with all of them, under
  the client's message id, and a SimpleConsumer gets them back exactly as sent;
- a committed transaction is delivered, a rolled-back one is not (txcheck agrees);
- a half message whose producer died is checked through the client's TransactionChecker
  of a second producer process, and its COMMIT makes the message visible;
- a receive held open (long polling) returns a message sent while it waits; an acked
  message stays gone; an un-acked one comes back after its invisible duration with
  delivery attempt 2;
- with an access key configured, the right secret works and a wrong or missing one is
  refused with UNAUTHORIZED (40100);
- a send repeated with the same message id is stored once and both answers name the
  same offset.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    EtcdServer,
    ServiceProcess,
    free_port,
)
from support.scratch import scoped_dir
from support.scripts import (
    GATEWAY_FAST,
    ClientEnv,
    Run,
    ScriptRunner,
    by_key,
    client_env,
    query_transaction,
    script_args,
    stored_count,
    unique_name,
    wait_for,
)

from txmq.v1 import txcheck_pb2

SCENARIOS = Path(__file__).resolve().parent / "rmq_scenarios"
CODE_OK = 20000  # apache.rocketmq.v2.Code.OK
CODE_UNAUTHORIZED = 40100  # apache.rocketmq.v2.Code.UNAUTHORIZED
ACCESS_KEY, SECRET_KEY = "txmq-ak", "txmq-sk-secret"
SCRIPT_TIMEOUT_S = 60.0
HOLD_S = 1.0  # how long a long-polling receive is left waiting before the send


# -- processes running the official client ---------------------------------------------


class Scenarios(ScriptRunner):
    """Runs the scenario scripts of one test against one gateway; failures are explained
    with every script's output and the gateway's log (tests add more logs)."""

    timeout_s = SCRIPT_TIMEOUT_S

    def __init__(self, env: GatewayEnv) -> None:
        super().__init__([env.cluster.log_dir / "gateway.log"])
        self.env = env
        self.endpoint = env.cluster.gateway_address

    def argv(self, script: str, args: tuple[str, ...], endpoint: str | None) -> list[str]:
        return [sys.executable, str(SCENARIOS / script), "--endpoint", endpoint or self.endpoint, *args]

    def child_env(self) -> dict[str, str]:
        # HOME: the official client writes its log under ~/logs/rocketmq_python/.
        return {**os.environ, "PYTHONUNBUFFERED": "1", "HOME": str(self.env.home)}


# -- fixtures ----------------------------------------------------------------------------


GatewayEnv = ClientEnv


@pytest.fixture(scope="module")
def gateway_env(
    etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayEnv]:
    with client_env(etcd.endpoint, scoped_dir(request, tmp_path_factory, "gateway-cluster")) as env:
        yield env


@pytest.fixture
def scenarios(gateway_env: GatewayEnv) -> Iterator[Scenarios]:
    runner = Scenarios(gateway_env)
    try:
        yield runner
    finally:
        runner.close()


@pytest.fixture
def topic(gateway_env: GatewayEnv) -> str:
    name = unique_name("gw")
    gateway_env.admin.create_topic(name, read_queue_nums=4, write_queue_nums=4)
    return name


# -- txmq-side checks --------------------------------------------------------------------


def received_messages(run: Run, *, drain: bool | None = None) -> list[dict[str, Any]]:
    """Every message of the consumer's ``received`` lines, in order (``drain``: only those
    of the drain phase, or only those before it)."""
    out = []
    for r in run.events("received"):
        if drain is None or r.get("drain") == drain:
            out += r["messages"]
    return out


# -- the scenarios -----------------------------------------------------------------------


def test_normal_messages_stored_in_txmq_and_consumed(scenarios: Scenarios, gateway_env: GatewayEnv, topic: str) -> None:
    """Scenario 1: Producer.send of 3 messages with tag, keys, user properties; txmq's
    store has each once with all of them under the client's message id; a SimpleConsumer
    (subscribed first) receives them back exactly as sent."""
    group = unique_name("GID-normal")
    keys = unique_name("k")
    consumer = scenarios.start(
        "consume.py",
        *script_args(topic, group, until_acked=3, await_seconds=5, invisible_seconds=20, deadline_seconds=40),
    )
    consumer.wait_event("receiving", 30, scenarios.explain)

    sent = scenarios.run(
        "produce.py", "--topic", topic, "--count", "3", "--tag", "TagA", "--key-prefix", keys,
        "--body-prefix", "hello", "--property", "color=blue", "--property", "shape=round",
    )  # fmt: skip
    assert not sent.errors(), scenarios.explain("the producer reported errors")
    receipts = sent.events("sent")
    assert [r["index"] for r in receipts] == [0, 1, 2], scenarios.explain("not every message was sent")
    ids = [r["message_id"] for r in receipts]
    assert len(set(ids)) == 3 and all(ids), scenarios.explain("message ids are not distinct")

    # In txmq's store, through txmq's SDK: each message once, properties intact.
    for r in receipts:
        found = wait_for(
            f"message {r['index']} indexed by key",
            lambda r=r: by_key(gateway_env, topic, f"{keys}-{r['index']}"),
            scenarios.explain,
        )
        assert len(found) == 1, scenarios.explain(f"key {keys}-{r['index']} names {len(found)} messages: {found}")
        m = found[0]
        assert m.body == r["body"].encode(), scenarios.explain(f"body {m.body!r} != {r['body']!r}")
        assert m.tags == "TagA", scenarios.explain(f"tags {m.tags!r}")
        assert set(m.keys) >= {f"{keys}-{r['index']}", f"{keys}-all"}, scenarios.explain(f"keys {m.keys}")
        assert m.unique_id == r["message_id"], scenarios.explain(f"unique_id {m.unique_id} != {r['message_id']}")
        for name, value in {"color": "blue", "shape": "round", "index": str(r["index"])}.items():
            assert m.properties.get(name) == value, scenarios.explain(f"property {name}: {m.properties}")
    assert len(by_key(gateway_env, topic, f"{keys}-all")) == 3, scenarios.explain("shared key does not name 3")
    assert stored_count(gateway_env, topic) == 3, scenarios.explain("the topic does not hold exactly 3 messages")

    done = scenarios.finish(consumer)
    assert not done.errors(), scenarios.explain("the consumer reported errors")
    got = received_messages(done)
    assert sorted(m["message_id"] for m in got) == sorted(ids), scenarios.explain("received ids differ from sent")
    for m in got:
        i = int(m["properties"].get("index", -1))
        assert m["body"] == f"hello-{i}", scenarios.explain(f"received body {m['body']!r}")
        assert m["topic"] == topic and m["tag"] == "TagA", scenarios.explain(f"received topic/tag {m}")
        assert m["keys"] == sorted([f"{keys}-{i}", f"{keys}-all"]), scenarios.explain(f"received keys {m['keys']}")
        # Exactly the user properties: the system ones txmq keeps are not shown to clients.
        assert m["properties"] == {"color": "blue", "shape": "round", "index": str(i)}, scenarios.explain(
            f"received properties {m['properties']}"
        )
        assert m["delivery_attempt"] == 1, scenarios.explain(f"delivery attempt {m['delivery_attempt']}")
        assert m["receipt_handle"], scenarios.explain("no receipt handle")
        assert not m["corrupted"], scenarios.explain("body checksum mismatch")
    assert sorted(r["message_id"] for r in done.events("acked")) == sorted(ids), scenarios.explain("not all acked")


def test_transaction_commit_and_rollback(scenarios: Scenarios, gateway_env: GatewayEnv, topic: str) -> None:
    """Scenario 2: begin_transaction / send(msg, transaction) / commit(), and another
    rollback(): only the committed message reaches the topic and the consumer; txcheck
    records COMMIT and ROLLBACK under the messages' ids."""
    scenarios.logs.append(gateway_env.cluster.log_dir / "txcheck.log")
    group = unique_name("GID-tx")
    keys = unique_name("tk")
    consumer = scenarios.start(
        "consume.py",
        *script_args(
            topic, group, until_acked=1, await_seconds=5, invisible_seconds=20, drain_seconds=2.5, deadline_seconds=40
        ),
    )
    consumer.wait_event("receiving", 30, scenarios.explain)

    tx = scenarios.run(
        "transactional.py", "--topic", topic, "--actions", "commit,rollback", "--key-prefix", keys, "--tag", "TagTx"
    )
    assert not tx.errors(), scenarios.explain("the transactional producer reported errors")
    sent = {r["action"]: r for r in tx.events("sent")}
    assert set(sent) == {"commit", "rollback"}, scenarios.explain("both half messages should be sent")
    assert all(r["transaction_id"] for r in sent.values()), scenarios.explain("a half message without transaction id")
    assert [r["message_id"] for r in tx.events("committed")] == [sent["commit"]["message_id"]], scenarios.explain(
        "commit"
    )
    assert [r["message_id"] for r in tx.events("rolled_back")] == [sent["rollback"]["message_id"]], scenarios.explain(
        "rollback"
    )

    done = scenarios.finish(consumer)
    assert not done.errors(), scenarios.explain("the consumer reported errors")
    got = received_messages(done)
    assert [m["message_id"] for m in got] == [sent["commit"]["message_id"]], scenarios.explain(
        "the consumer must get the committed message only, once"
    )
    assert got[0]["body"] == "tx-0-commit" and got[0]["properties"] == {"action": "commit"}, scenarios.explain(
        f"committed message as received: {got[0]}"
    )
    assert got[0]["tag"] == "TagTx", scenarios.explain(f"tag {got[0]['tag']}")

    # txmq's view: one message on the topic (the committed copy), decisions recorded.
    found = by_key(gateway_env, topic, f"{keys}-all")
    assert [m.unique_id for m in found] == [sent["commit"]["message_id"]], scenarios.explain(f"on the topic: {found}")
    assert stored_count(gateway_env, topic) == 1, scenarios.explain("the topic must hold the committed message only")
    committed = query_transaction(gateway_env, sent["commit"]["message_id"])
    rolled_back = query_transaction(gateway_env, sent["rollback"]["message_id"])
    assert committed.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT, scenarios.explain(str(committed))
    assert rolled_back.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK, scenarios.explain(str(rolled_back))
    assert committed.producer_group == topic, scenarios.explain(f"producer group {committed.producer_group!r}")


def test_orphaned_transaction_recovered_by_checker(scenarios: Scenarios, gateway_env: GatewayEnv, topic: str) -> None:
    """Scenario 3: process 1 sends a half message and dies without commit/rollback;
    process 2, a producer of the topic with a TransactionChecker answering COMMIT, is
    asked about it and its answer makes the message visible."""
    scenarios.logs.append(gateway_env.cluster.log_dir / "txcheck.log")
    keys = unique_name("ok")
    p1 = scenarios.run(
        "transactional.py", "--topic", topic, "--actions", "none", "--key-prefix", keys, "--exit", "crash"
    )
    assert not p1.errors(), scenarios.explain("process 1 reported errors")
    (half,) = p1.events("sent")
    assert p1.events("left_open") and p1.events("exiting"), scenarios.explain("process 1 did not leave it open")
    message_id = half["message_id"]
    assert not by_key(gateway_env, topic, f"{keys}-0"), scenarios.explain("visible before any commit")

    p2 = scenarios.start("checker.py", "--topic", topic, "--answer", "commit", "--max-seconds", "50")
    p2.wait_event("started", 30, scenarios.explain)
    found = wait_for(
        "the recovered message on the topic", lambda: by_key(gateway_env, topic, f"{keys}-0"), scenarios.explain, 40
    )
    done = scenarios.finish(p2, close_stdin=True)

    assert [m.unique_id for m in found] == [message_id], scenarios.explain(f"on the topic: {found}")
    assert found[0].body == b"tx-0-none", scenarios.explain(f"body {found[0].body!r}")
    checks = done.events("check")
    assert checks, scenarios.explain("the checker was never asked")
    first = checks[0]
    assert first["message_id"] == message_id and first["topic"] == topic, scenarios.explain(f"check of {first}")
    assert first["body"] == "tx-0-none" and first["properties"] == {"action": "none"}, scenarios.explain(
        f"check {first}"
    )
    assert first["keys"] == sorted([f"{keys}-0", f"{keys}-all"]), scenarios.explain(f"check keys {first['keys']}")
    assert all(c["message_id"] == message_id for c in checks), scenarios.explain("checks of other messages")

    info = query_transaction(gateway_env, message_id)
    assert info.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT, scenarios.explain(str(info))
    assert "check_sent" in [e.kind for e in info.timeline], scenarios.explain(str(info))
    assert stored_count(gateway_env, topic) == 1, scenarios.explain("the topic must hold one committed copy")


def test_long_polling_receive_then_ack(scenarios: Scenarios, gateway_env: GatewayEnv, topic: str) -> None:
    """Scenario 4a: a receive started before the message exists is held (1 s here) and
    returns it when it arrives (not at its timeout); once acked it does not come back, even after
    its invisible duration (2 s) has passed."""
    group = unique_name("GID-poll")
    await_s = 15
    consumer = scenarios.start(
        "consume.py",
        *script_args(
            topic,
            group,
            until_acked=1,
            await_seconds=await_s,
            invisible_seconds=2,
            drain_seconds=3.5,
            deadline_seconds=45,
        ),
    )
    receiving = consumer.wait_event("receiving", 30, scenarios.explain)
    # Deliberate: the receive must be held at the gateway for a while before anything is
    # sent (a producer process can be up in 0.2 s, too close to tell a held receive from
    # a late one).
    time.sleep(max(0.0, receiving["t_ms"] / 1000 + HOLD_S - time.time()))
    sent = scenarios.run("produce.py", "--topic", topic, "--count", "1", "--key-prefix", unique_name("lp"))
    assert sent.events("sent") and not sent.errors(), scenarios.explain("the producer failed")
    message_id = sent.events("sent")[0]["message_id"]
    done = scenarios.finish(consumer)

    assert not done.errors(), scenarios.explain("the consumer reported errors")
    first = done.events("received")[0]
    stored = gateway_env.admin.query_message_by_unique_id(message_id, topic=topic)
    assert [m["message_id"] for m in first["messages"]] == [message_id], scenarios.explain(
        f"the first receive (held from {first['started_ms']}) should return the message; it returned "
        f"{len(first['messages'])} after {first['ended_ms'] - first['started_ms']} ms"
    )
    # The receive was under way before the message was stored, and returned on arrival.
    assert stored.store_timestamp_ms - first["started_ms"] >= HOLD_S * 1000 - 100, scenarios.explain(
        f"stored at {stored.store_timestamp_ms}, receive started {first['started_ms']}: not a held receive"
    )
    assert first["ended_ms"] - stored.store_timestamp_ms < 2000, scenarios.explain(
        f"returned {first['ended_ms'] - stored.store_timestamp_ms} ms after the message was stored"
    )
    assert first["ended_ms"] - first["started_ms"] < (await_s - 3) * 1000, scenarios.explain(
        f"returned after {first['ended_ms'] - first['started_ms']} ms: at the long-polling timeout, not on arrival"
    )
    assert [r["message_id"] for r in done.events("acked")] == [message_id], scenarios.explain("the ack failed")
    assert done.events("draining"), scenarios.explain("the consumer did not reach its drain phase")
    assert received_messages(done, drain=True) == [], scenarios.explain("an acked message was delivered again")


def test_unacked_message_redelivered_after_invisible_duration(
    scenarios: Scenarios, gateway_env: GatewayEnv, topic: str
) -> None:
    """Scenario 4b: a message received and not acked is delivered again once its
    invisible duration (1 s) is over, with delivery attempt 2 and a new receipt handle;
    acked then, it stays gone."""
    group = unique_name("GID-redeliver")
    consumer = scenarios.start(
        "consume.py",
        *script_args(
            topic, group, until_acked=1, ack_from_attempt=2, await_seconds=5, invisible_seconds=1,
            drain_seconds=2.5, deadline_seconds=45,
        ),
    )  # fmt: skip
    consumer.wait_event("receiving", 30, scenarios.explain)
    sent = scenarios.run("produce.py", "--topic", topic, "--count", "1", "--key-prefix", unique_name("rd"))
    assert sent.events("sent") and not sent.errors(), scenarios.explain("the producer failed")
    message_id = sent.events("sent")[0]["message_id"]
    done = scenarios.finish(consumer)

    assert not done.errors(), scenarios.explain("the consumer reported errors")
    deliveries = [(r["ended_ms"], m) for r in done.events("received") if not r.get("drain") for m in r["messages"]]
    assert [m["message_id"] for _, m in deliveries] == [message_id, message_id], scenarios.explain(
        f"want the message twice (not acked, then redelivered); got {[m['message_id'] for _, m in deliveries]}"
    )
    (t1, d1), (t2, d2) = deliveries
    assert (d1["delivery_attempt"], d2["delivery_attempt"]) == (1, 2), scenarios.explain(
        f"delivery attempts {d1['delivery_attempt']}, {d2['delivery_attempt']}"
    )
    assert d1["receipt_handle"] != d2["receipt_handle"], scenarios.explain("the redelivery reused the receipt handle")
    assert t2 - t1 >= 900, scenarios.explain(f"redelivered {t2 - t1} ms after the first delivery: before 1 s")
    assert [r["message_id"] for r in done.events("not_acked") if not r.get("drain")] == [message_id]
    acked = done.events("acked")
    assert [(r["message_id"], r["delivery_attempt"]) for r in acked] == [(message_id, 2)], scenarios.explain("ack")
    assert received_messages(done, drain=True) == [], scenarios.explain("delivered again after the ack")


def test_authentication(scenarios: Scenarios, gateway_env: GatewayEnv, topic: str, tmp_path: Path) -> None:
    """Scenario 5: a gateway started with --access_key/--secret_key serves a client
    signing with that key (send, receive, ack) and refuses a wrong secret or no key with
    UNAUTHORIZED (40100), both on the raw calls and through the client."""
    secured = ServiceProcess(
        "gateway",
        port=free_port(),
        etcd_endpoints=gateway_env.etcd_endpoint,
        etcd_prefix=gateway_env.etcd_prefix,
        log_path=tmp_path / "gateway-auth.log",
        args=["--access_key", ACCESS_KEY, "--secret_key", SECRET_KEY, *GATEWAY_FAST],
    )
    scenarios.logs.append(secured.process.log_path)
    secured.start()
    try:
        at = secured.address
        right = ("--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY)
        wrong = ("--access-key", ACCESS_KEY, "--secret-key", "not-the-secret")

        ok = {r["op"]: r for r in scenarios.run("raw_route.py", "--topic", topic, *right, endpoint=at).events("answer")}
        assert ok["QueryRoute"].get("code") == CODE_OK, scenarios.explain(f"signed QueryRoute: {ok['QueryRoute']}")
        assert ok["QueryRoute"]["endpoints"] == [at], scenarios.explain(f"route endpoints {ok['QueryRoute']}")
        assert ok["Heartbeat"].get("code") == CODE_OK, scenarios.explain(f"signed Heartbeat: {ok['Heartbeat']}")
        for label, creds in (("wrong secret", wrong), ("no credentials", ())):
            refused = scenarios.run("raw_route.py", "--topic", topic, *creds, endpoint=at).events("answer")
            for answer in refused:
                assert answer.get("code") == CODE_UNAUTHORIZED, scenarios.explain(f"{label}: {answer}")

        # The client with the right key: send, receive, ack.
        group = unique_name("GID-auth")
        consumer = scenarios.start(
            "consume.py",
            *script_args(topic, group, until_acked=1, await_seconds=5, deadline_seconds=40),
            *right,
            endpoint=at,
        )
        consumer.wait_event("receiving", 30, scenarios.explain)
        keys = unique_name("ak")
        good = scenarios.run("produce.py", "--topic", topic, "--key-prefix", keys, *right, endpoint=at)
        assert not good.errors() and len(good.events("sent")) == 1, scenarios.explain("signed send failed")
        message_id = good.events("sent")[0]["message_id"]
        done = scenarios.finish(consumer)
        assert not done.errors(), scenarios.explain("the signed consumer reported errors")
        assert [r["message_id"] for r in done.events("acked")] == [message_id], scenarios.explain("signed receive/ack")

        # The client with a wrong secret: nothing sent, the error says 40100.
        bad_keys = unique_name("bad")
        bad = scenarios.run("produce.py", "--topic", topic, "--key-prefix", bad_keys, *wrong, endpoint=at)
        assert not bad.events("sent"), scenarios.explain("a send with a wrong secret succeeded")
        errors = bad.errors()
        assert errors, scenarios.explain("a wrong secret produced no error")
        assert errors[-1]["code"] == CODE_UNAUTHORIZED, scenarios.explain(f"error of a wrong secret: {errors[-1]}")
        assert by_key(gateway_env, topic, f"{bad_keys}-0") == [], scenarios.explain("stored despite the wrong secret")
    finally:
        secured.stop()


def test_send_deduplicated_by_message_id(scenarios: Scenarios, gateway_env: GatewayEnv, topic: str) -> None:
    """Scenario 6: the same SendMessageRequest (same message_id) twice, as a client retry
    sends it: both answers are OK with the same offset and txmq stores it once; a third
    send under a new message id is a new message."""
    key = unique_name("dd")
    run = scenarios.run("raw_send.py", "--topic", topic, "--key", key, "--repeat", "2", "--also-new-id")
    answers = run.events("answer")
    assert len(answers) == 3, scenarios.explain("want 3 answers")
    for a in answers:
        assert a.get("code") == CODE_OK and len(a["entries"]) == 1, scenarios.explain(f"answer {a}")
        assert a["entries"][0]["code"] == CODE_OK and a["entries"][0]["message_id"] == a["message_id"], (
            scenarios.explain(f"entry {a}")
        )
    first, retry, new = answers
    assert first["message_id"] == retry["message_id"] != new["message_id"]
    assert retry["entries"][0]["offset"] == first["entries"][0]["offset"], scenarios.explain(
        f"the retry answered offset {retry['entries'][0]['offset']}, the first {first['entries'][0]['offset']}"
    )

    found = wait_for("both messages indexed", lambda: len(by_key(gateway_env, topic, key)) >= 2, scenarios.explain)
    stored = by_key(gateway_env, topic, key)
    assert found and sorted(m.unique_id for m in stored) == sorted([first["message_id"], new["message_id"]]), (
        scenarios.explain(f"stored: {[m.unique_id for m in stored]}")
    )
    assert stored_count(gateway_env, topic) == 2, scenarios.explain("the retried send was stored twice")
    assert {m.properties.get("scenario") for m in stored} == {"dedupe"}, scenarios.explain("user property lost")


def test_fifo_messages_are_consumed_in_order_per_message_group(scenarios: Scenarios, topic: str) -> None:
    """FIFO messages (a message group each; 3 groups interleaved): the consumer gets each
    group's messages in send order, and never two of one group in the same receive (the
    next one is held until the earlier one is acked)."""
    group = unique_name("GID-fifo")
    sent = scenarios.run(
        "produce.py", "--topic", topic, "--count", "12", "--message-groups", "3", "--body-prefix", "fifo"
    )
    assert len(sent.events("sent")) == 12, scenarios.explain("the sends failed")
    consumer = scenarios.run(
        "consume.py",
        *script_args(
            topic, group, until_acked=12, max_messages=16, await_seconds=2, invisible_seconds=20, deadline_seconds=40
        ),
    )
    by_group: dict[str, list[int]] = {}
    for receive in consumer.events("received"):
        groups = [m["message_group"] for m in receive["messages"]]
        assert len(groups) == len(set(groups)), scenarios.explain(f"two messages of one group in one receive: {groups}")
        for m in receive["messages"]:
            by_group.setdefault(m["message_group"], []).append(int(m["body"].rsplit("-", 1)[1]))
    assert by_group == {f"g{g}": [i for i in range(12) if i % 3 == g] for g in range(3)}, scenarios.explain(
        str(by_group)
    )


def test_delay_messages_are_delivered_at_their_time(scenarios: Scenarios, gateway_env: GatewayEnv, topic: str) -> None:
    """DELAY messages from the official Producer (delivery_timestamp = send + 3 s): the
    store holds them in its timer (not on the topic), then delivers each once at its time;
    the SimpleConsumer receives them no earlier, with their delivery timestamp."""
    group = unique_name("GID-delay")
    consumer = scenarios.start(
        "consume.py",
        *script_args(topic, group, until_acked=2, await_seconds=5, invisible_seconds=20, deadline_seconds=45),
    )
    consumer.wait_event("receiving", 30, scenarios.explain)
    sent = scenarios.run("produce.py", "--topic", topic, "--count", "2", "--delay-ms", "3000", "--body-prefix", "later")
    assert not sent.errors(), scenarios.explain("the producer reported errors")
    receipts = {r["message_id"]: r for r in sent.events("sent")}
    assert len(receipts) == 2, scenarios.explain("not every message was sent")
    done = scenarios.finish(consumer)
    assert not done.errors(), scenarios.explain("the consumer reported errors")
    received = done.events("received")
    got = [(r["t_ms"], m) for r in received for m in r["messages"]]
    assert sorted(m["message_id"] for _, m in got) == sorted(receipts), scenarios.explain("received ids differ")
    for t_ms, m in got:
        due = receipts[m["message_id"]]["delivery_timestamp_ms"]
        assert m["delivery_timestamp"] == due, scenarios.explain(
            f"delivery timestamp {m['delivery_timestamp']} != {due}"
        )
        assert t_ms >= due, scenarios.explain(f"{m['message_id']} received at {t_ms}, before its time {due}")
        assert m["delivery_attempt"] == 1, scenarios.explain(f"delivery attempt {m['delivery_attempt']}")
    assert stored_count(gateway_env, topic) == 2, scenarios.explain("the topic does not hold each message once")
