"""The official Apache RocketMQ 5 Node.js client (npm ``rocketmq-client-nodejs``, pinned in
clients/node/package.json) against txmq's gateway, unchanged. Each client runs in a
process of its own (clients/node/rocketmq/*.js, which use only the official package and
print JSON lines).

One private cluster for the module (etcd of the session, own etcd prefix): store,
txcheck checking fast (every 500 ms, transactions older than 500 ms), pull, and a
gateway accepting invisible durations from 1 s. Every check of what landed in txmq goes
through txmq's own SDK (Admin) or txcheck's QueryTransaction, never through the gateway.

What each test proves:

- Producer.send with tag, keys and user properties: each message is stored in txmq once,
  with all of them, under the client's message id; a SimpleConsumer (started first)
  receives them as sent and acks them;
- transactions: a committed one is delivered, a rolled-back one is not, and one left
  open is checked through the client's TransactionChecker (over Telemetry) and its
  COMMIT delivers it; txcheck records each decision;
- received messages pass the client's body-digest check, and a PushConsumer's listener
  gets them. (The gateway once labelled the digest CRC32 in upper-case hex, which this
  client compares with a decimal string: it flagged every message ``corrupted`` and its
  PushConsumer discarded them all. The gateway now sends MD5, as RocketMQ's proxy does.)

The client dials plaintext: TLS is on only with ``sslEnabled: true`` (the scripts pass
``false`` explicitly). The client writes part of its log (the consume service's) to
``$HOME/logs/rocketmq/``; HOME is a temp dir here and that log is shown on failure.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import EtcdServer
from support.scratch import scoped_dir
from support.scripts import (
    ClientEnv,
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

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "clients" / "node"
SCRIPTS = NODE_DIR / "rocketmq"
PACKAGE = NODE_DIR / "node_modules" / "rocketmq-client-nodejs"
NODE = shutil.which("node")
SCRIPT_TIMEOUT_S = 45.0

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NODE is None, reason="node is not installed (Node.js 18+ runs clients/node)"),
    pytest.mark.skipif(
        not (PACKAGE / "package.json").is_file(),
        reason="clients/node/node_modules/rocketmq-client-nodejs is absent: run scripts/install_node_deps.sh",
    ),
]


NodeEnv = ClientEnv


class Scripts(ScriptRunner):
    """Runs the Node scripts of one test against the gateway; failures are explained with
    every script's output, the gateway's (and txcheck's) log and the client's own log."""

    timeout_s = SCRIPT_TIMEOUT_S
    cwd = NODE_DIR

    def __init__(self, env: NodeEnv) -> None:
        super().__init__(
            [
                env.cluster.log_dir / "gateway.log",
                env.cluster.log_dir / "txcheck.log",
                env.home / "logs" / "rocketmq" / "rocketmq_client_nodejs.log",
            ]
        )
        self.env = env

    def argv(self, script: str, args: tuple[str, ...], endpoint: str | None) -> list[str]:
        assert NODE is not None
        return [NODE, str(SCRIPTS / script), "--endpoint", endpoint or self.env.cluster.gateway_address, *args]

    def child_env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.env.home), "NODE_OPTIONS": ""}


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_env(
    etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeEnv]:
    with client_env(etcd.endpoint, scoped_dir(request, tmp_path_factory, "rmq-node-cluster")) as env:
        yield env


@pytest.fixture
def scripts(node_env: NodeEnv) -> Iterator[Scripts]:
    runner = Scripts(node_env)
    try:
        yield runner
    finally:
        runner.close()


@pytest.fixture
def topic(node_env: NodeEnv) -> str:
    name = unique_name("node")
    node_env.admin.create_topic(name, read_queue_nums=4, write_queue_nums=4)
    return name


# -- txmq-side checks --------------------------------------------------------------------


# -- the scenarios -----------------------------------------------------------------------


def test_package_is_apaches_5x_client() -> None:
    """The pinned package is the one published from apache/rocketmq-clients (nodejs/)."""
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["rocketmq-client-nodejs"]
    installed = json.loads((PACKAGE / "package.json").read_text())
    assert installed["version"] == pinned, f"installed {installed['version']}, package.json pins {pinned}"
    assert "apache/rocketmq-clients" in installed["repository"]["url"]
    assert installed["repository"].get("directory") == "nodejs"
    assert (PACKAGE / "proto" / "apache" / "rocketmq" / "v2" / "service.proto").is_file()


def test_normal_messages_stored_in_txmq_and_consumed(scripts: Scripts, node_env: NodeEnv, topic: str) -> None:
    """Producer.send of 3 messages with tag, keys and user properties: txmq's store holds
    each once with all of them under the client's message id; a SimpleConsumer
    (subscribed first) receives them as sent and acks them."""
    group = unique_name("GID-node")
    keys = unique_name("k")
    consumer = scripts.start(
        "consumer.js", *script_args(topic, group, until_acked=3, await_ms=3000, invisible_ms=20000, deadline_s=30)
    )
    consumer.wait_event("receiving", 30, scripts.explain)

    sent = scripts.run(
        "producer.js", "--topic", topic, "--count", "3", "--tag", "TagA", "--key-prefix", keys,
        "--body-prefix", "hello", "--property", "color=blue", "--property", "shape=round",
    )  # fmt: skip
    assert not sent.errors(), scripts.explain("the producer reported errors")
    receipts = sent.events("sent")
    assert [r["index"] for r in receipts] == [0, 1, 2], scripts.explain("not every message was sent")
    ids = [r["message_id"] for r in receipts]
    assert len(set(ids)) == 3 and all(ids), scripts.explain("message ids are not distinct")

    # In txmq's store, through txmq's SDK: each message once, with tag, keys, properties.
    for r in receipts:
        key = f"{keys}-{r['index']}"
        found = wait_for(
            f"message {r['index']} indexed by key", lambda key=key: by_key(node_env, topic, key), scripts.explain
        )
        assert len(found) == 1, scripts.explain(f"key {key} names {len(found)} messages: {found}")
        m = found[0]
        assert m.unique_id == r["message_id"], scripts.explain(f"unique_id {m.unique_id} != {r['message_id']}")
        assert m.body == r["body"].encode(), scripts.explain(f"body {m.body!r} != {r['body']!r}")
        assert m.tags == "TagA", scripts.explain(f"tags {m.tags!r}")
        assert set(m.keys) >= {key, f"{keys}-all"}, scripts.explain(f"keys {m.keys}")
        for name, value in {"color": "blue", "shape": "round", "index": str(r["index"])}.items():
            assert m.properties.get(name) == value, scripts.explain(f"property {name}: {m.properties}")
    assert len(by_key(node_env, topic, f"{keys}-all")) == 3, scripts.explain("the shared key does not name 3")
    assert stored_count(node_env, topic) == 3, scripts.explain("the topic does not hold exactly 3 messages")

    done = scripts.finish(consumer)
    assert not done.errors(), scripts.explain("the consumer reported errors")
    got = done.received()
    assert sorted(m["message_id"] for m in got) == sorted(ids), scripts.explain("received ids differ from sent")
    for m in got:
        i = int(m["properties"].get("index", -1))
        assert m["body"] == f"hello-{i}", scripts.explain(f"received body {m['body']!r}")
        assert m["topic"] == topic and m["tag"] == "TagA", scripts.explain(f"received topic/tag {m}")
        assert m["keys"] == sorted([f"{keys}-{i}", f"{keys}-all"]), scripts.explain(f"received keys {m['keys']}")
        assert m["properties"] == {"color": "blue", "shape": "round", "index": str(i)}, scripts.explain(
            f"received properties {m['properties']}"
        )
        assert m["delivery_attempt"] == 1, scripts.explain(f"delivery attempt {m['delivery_attempt']}")
        assert m["receipt_handle"], scripts.explain("no receipt handle")
    assert sorted(r["message_id"] for r in done.events("acked")) == sorted(ids), scripts.explain("not all acked")


def test_transactions_commit_rollback_and_check(scripts: Scripts, node_env: NodeEnv, topic: str) -> None:
    """beginTransaction / send(message, transaction) then commit(), rollback(), and a third
    left open that the broker checks through the client's TransactionChecker (answered
    COMMIT): the committed and the checked message reach the topic and the consumer, the
    rolled-back one never does; txcheck records COMMIT / ROLLBACK / COMMIT."""
    group = unique_name("GID-node-tx")
    keys = unique_name("tk")
    consumer = scripts.start(
        "consumer.js",
        *script_args(topic, group, until_acked=2, await_ms=2000, invisible_ms=20000, deadline_s=30, drain_s=2),
    )
    consumer.wait_event("receiving", 30, scripts.explain)

    tx = scripts.run(
        "transactional.js", "--topic", topic, "--actions", "commit,rollback,check", "--key-prefix", keys,
        "--tag", "TagTx", "--check-wait-s", "20",
    )  # fmt: skip
    assert not tx.errors(), scripts.explain("the transactional producer reported errors")
    sent = {r["action"]: r for r in tx.events("sent")}
    assert set(sent) == {"commit", "rollback", "check"}, scripts.explain("all three half messages should be sent")
    assert all(r["transaction_id"] for r in sent.values()), scripts.explain("a half message without transaction id")
    assert [r["message_id"] for r in tx.events("committed")] == [sent["commit"]["message_id"]], scripts.explain(
        "commit"
    )
    assert [r["message_id"] for r in tx.events("rolled_back")] == [sent["rollback"]["message_id"]], scripts.explain(
        "rollback"
    )
    checks = tx.events("check")
    assert checks and {c["message"]["message_id"] for c in checks} == {sent["check"]["message_id"]}, scripts.explain(
        f"want checks of the open transaction only; got {checks}"
    )
    checked = checks[0]["message"]
    assert checked["topic"] == topic and checked["tag"] == "TagTx", scripts.explain(f"checked message {checked}")
    assert checked["body"] == "tx-2-check" and checked["properties"] == {"action": "check"}, scripts.explain(
        f"checked message {checked}"
    )
    assert [e["ok"] for e in tx.events("check_ended")] == [True], scripts.explain("the checked transaction did not end")

    done = scripts.finish(consumer)
    assert not done.errors(), scripts.explain("the consumer reported errors")
    got = done.received()
    want = sorted([sent["commit"]["message_id"], sent["check"]["message_id"]])
    assert sorted(m["message_id"] for m in got) == want, scripts.explain(
        "the consumer must get the committed and the checked message, once each"
    )
    for m in got:
        action = m["properties"].get("action")
        assert action in ("commit", "check") and m["tag"] == "TagTx", scripts.explain(f"received {m}")
        assert m["body"] == f"tx-{0 if action == 'commit' else 2}-{action}", scripts.explain(f"received {m}")
    assert not [r for r in done.events("received") if r.get("drain")], scripts.explain("delivered more after the acks")

    # txmq's view: two messages on the topic, the decisions recorded under the message ids.
    found = by_key(node_env, topic, f"{keys}-all")
    assert sorted(m.unique_id for m in found) == want, scripts.explain(f"on the topic: {found}")
    assert stored_count(node_env, topic) == 2, scripts.explain("the topic must hold the committed messages only")
    resolutions = {
        action: query_transaction(node_env, sent[action]["message_id"]).resolution
        for action in ("commit", "rollback", "check")
    }
    assert resolutions == {
        "commit": txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT,
        "rollback": txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK,
        "check": txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT,
    }, scripts.explain(f"txcheck resolutions {resolutions}")
    info = query_transaction(node_env, sent["check"]["message_id"])
    assert "check_sent" in [e.kind for e in info.timeline], scripts.explain(str(info))
    assert info.producer_group == topic, scripts.explain(f"producer group {info.producer_group!r}")


def test_simple_consumer_body_digest_accepted(scripts: Scripts, topic: str) -> None:
    """A received message passes the client's body-digest check (MessageView.corrupted)."""
    keys = unique_name("dg")
    sent = scripts.run("producer.js", "--topic", topic, "--key-prefix", keys, "--body-prefix", "digest")
    assert len(sent.events("sent")) == 1, scripts.explain("the send failed")
    done = scripts.run(
        "consumer.js", *script_args(topic, unique_name("GID-dg"), until_acked=1, await_ms=2000, deadline_s=20)
    )
    assert not done.errors(), scripts.explain("the consumer reported errors")
    got = done.received()
    assert [m["message_id"] for m in got] == [sent.events("sent")[0]["message_id"]], scripts.explain("receive")
    assert got[0]["body"] == "digest-0", scripts.explain(f"received {got[0]}")
    assert not got[0]["corrupted"], scripts.explain(f"the client flagged {got[0]} corrupted")


def test_push_consumer_consumes(scripts: Scripts, topic: str) -> None:
    """A PushConsumer's listener gets the messages sent (none discarded as corrupted)."""
    keys = unique_name("pc")
    sent = scripts.run("producer.js", "--topic", topic, "--count", "2", "--key-prefix", keys, "--body-prefix", "push")
    ids = sorted(r["message_id"] for r in sent.events("sent"))
    assert len(ids) == 2, scripts.explain("the sends failed")
    done = scripts.run(
        "push_consumer.js",
        *script_args(topic, unique_name("GID-push"), until_consumed=2, deadline_s=15, shutdown_wait_s=2),
    )
    assert not done.errors(), scripts.explain("the push consumer reported errors")
    consumed = sorted({r["message"]["message_id"] for r in done.events("consumed")})
    discarded = sorted({r["message_id"] for r in done.events("discarded")})
    assert not discarded, scripts.explain(f"discarded by the client: {discarded}")
    assert consumed == ids, scripts.explain(f"consumed {consumed}, sent {ids}")
