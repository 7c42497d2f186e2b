"""Polyglot proof: the Node.js transactional producer (clients/node/tx_producer.js), built
from protos/ alone, against a private store + txcheck + pull. It looks up the route,
opens a producer channel, commits one half message, leaves a second UNKNOWN and commits
it when the broker's check arrives, and decodes a typed error. This test checks with
the Python SDK / stubs that both messages are visible exactly once on the real topic."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import grpc
import pytest
from support import ServiceFactory

from txmq import Admin
from txmq.v1 import store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "clients" / "node"
PRODUCER = NODE_DIR / "tx_producer.js"
NODE = shutil.which("node")
QUEUES = 4
FAST = ("--transaction_check_interval_ms", "500", "--transaction_timeout_ms", "500")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed (Node.js 18+ runs clients/node)"),
    pytest.mark.skipif(
        not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir(),
        reason="clients/node/node_modules is absent: run scripts/install_node_deps.sh",
    ),
]


def run_producer(*args: str, timeout_s: float = 60.0) -> dict[str, dict]:
    """Run the Node producer; its JSON lines by step (asserting it exited 0)."""
    proc = subprocess.run(
        [NODE, str(PRODUCER), *args],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "NODE_OPTIONS": ""},
    )
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    steps = {}
    for line in proc.stdout.splitlines():
        if line.strip():
            record = json.loads(line)
            steps[record["step"]] = record
    return steps


def visible_ids(store_address: str, topic: str) -> list[str]:
    """Unique ids of every message on the topic's queues (Store.GetMessage)."""
    ids = []
    with grpc.insecure_channel(store_address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        for q in range(QUEUES):
            offset = 0
            while True:
                r = stub.GetMessage(
                    store_pb2.GetMessageRequest(topic=topic, queue_id=q, offset=offset),
                    timeout=5,
                )
                if not r.messages:
                    break
                ids += [m.message.unique_id for m in r.messages]
                offset = r.next_begin_offset
    return ids


@pytest.mark.slow
@pytest.mark.parametrize("answer_via", ["rpc", "stream"])
def test_node_transactional_producer(service_factory: ServiceFactory, answer_via: str) -> None:
    store = service_factory.store()
    txcheck = service_factory.start("txcheck", *FAST)
    pull = service_factory.start("pull")
    topic = f"NodeTx-{uuid.uuid4().hex[:8]}"
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    group = f"PG_NODE_{answer_via}"

    # Bootstrap through the pull service: every service answers Route.
    steps = run_producer(
        "--endpoint", pull.address, "--topic", topic, "--group", group, "--answer-via", answer_via
    )  # fmt: skip

    assert steps["route"]["store_address"] == store.address
    assert steps["route"]["txcheck_address"] == txcheck.address
    assert steps["channel"]["producer_group"] == group
    txids = steps["done"]["transaction_ids"]
    first, second = txids
    for txid in txids:
        assert len(txid) == 32 and txid == txid.upper() and int(txid, 16) >= 0
    assert steps["send"]["unique_id"] == steps["send"]["transaction_id"] == first
    assert steps["send"]["status"] == "SEND_STATUS_OK"
    assert steps["commit"]["committed_topic"] == topic
    assert steps["send_unknown"]["transaction_id"] == second
    assert steps["check"]["transaction_id"] == second
    # A check names the half record it put back at the tail of the half queue (RocketMQ
    # putBackHalfMsgQueue): later offsets than the send's, and the producer must echo them.
    assert int(steps["check"]["commit_log_offset"]) > int(steps["send_unknown"]["commit_log_offset"])
    assert int(steps["check"]["tran_state_table_offset"]) > int(steps["send_unknown"]["queue_offset"])
    assert steps["check_commit"]["via"] == answer_via
    error = steps["error"]
    assert error["code"] == "CODE_TOPIC_NOT_FOUND" and error["grpc_status"] == "NOT_FOUND", error
    assert error["message"] and error["retriable"] is False

    # Both visible exactly once on the real topic (the stream answer is one-way: wait
    # for it), and still once after more check rounds have passed.
    deadline = time.monotonic() + 30
    while sorted(visible_ids(store.address, topic)) != sorted(txids):
        assert time.monotonic() < deadline, f"visible: {visible_ids(store.address, topic)}, want {txids}"
        time.sleep(0.1)
    time.sleep(1.5)  # three check intervals
    assert sorted(visible_ids(store.address, topic)) == sorted(txids)

    with grpc.insecure_channel(txcheck.address) as ch:
        stub = txcheck_pb2_grpc.TransactionStub(ch)
        for txid in txids:
            info = stub.QueryTransaction(txcheck_pb2.QueryTransactionRequest(transaction_id=txid), timeout=5)
            assert info.resolution == txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT
            assert info.producer_group == group
            assert info.committed.message.topic == topic
            kinds = [e.kind for e in info.timeline]
            assert "committed" in kinds, info.timeline
            if txid == second:
                assert "check_sent" in kinds, info.timeline
