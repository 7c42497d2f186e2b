"""Transactions end to end with real processes, faults included (issue 3).

A private cluster under its own etcd prefix: a store (``--flush_mode sync``), two
txcheck replicas (check interval and transaction timeout 500 ms, ``--transaction_check_max
3``) and a pull service. Two producer processes of one group (tx_producer.py) send 3000
transactions with mixed outcomes -- commit, rollback, unknown then commit, unknown then
rollback, never answered -- from a decision table the test writes first, so either
producer answers the other's checks. Mid-way one producer is SIGKILLed (the other
answers its checks) and then the txcheck replica that leads the store is SIGKILLed (the
other takes over). Afterwards a PullConsumer over every queue of the topic sees exactly
the committed transactions, each once; every never-answered one is in
TRANS_CHECK_MAX_TIME_TOPIC; the rolled-back ones are resolved ROLLBACK and invisible.

Every wait is on a condition (a query of the cluster), with a generous limit and a
message saying what did not happen."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aetcd
import grpc
import pytest
from support import ServiceFactory, ServiceProcess
from support.topics import consume_all

from txmq import Admin, PullConsumer
from txmq.protocol import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from txmq.v1 import store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

N = 3000
OUTCOMES = ("commit", "rollback", "unknown_commit", "unknown_rollback", "never")
COMMITTED = {"commit", "unknown_commit"}
ROLLED_BACK = {"rollback", "unknown_rollback"}
GROUP = "PG_E2E"
TXCHECK_FLAGS = (
    "--transaction_check_interval_ms", "500",
    "--transaction_timeout_ms", "500",
    "--transaction_check_max", "3",
    "--leader_ttl_ms", "2000",
    "--registration_ttl_ms", "2000",
)  # fmt: skip
WAIT_S = 120.0


def wait_for(
    what: str, predicate: Callable[[], object], timeout_s: float = WAIT_S, *, detail: Callable[[], str] = lambda: ""
) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}. {detail()}")
        time.sleep(0.2)


class ProducerProc:
    """A tx_producer.py child; a thread collects its stdout."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def sent(self) -> int:
        return max((int(x.split()[1]) for x in list(self.lines) if x.startswith("SENT ")), default=0)

    def has(self, word: str) -> bool:
        if self.proc.poll() is not None and word not in self.lines:
            raise AssertionError(f"producer {self.name} exited with {self.proc.returncode}: {self.lines[-5:]}")
        return word in self.lines

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)  # EOF once the process is gone
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self.log.close()


def leader_of(etcd_endpoint: str, key: str) -> str | None:
    async def get() -> str | None:
        host, port = etcd_endpoint.rsplit(":", 1)
        async with aetcd.Client(host=host, port=int(port)) as client:
            got = await client.get(key.encode())
            return None if got is None else got.value.decode()

    return asyncio.run(get())


def read_topic(stub: store_pb2_grpc.StoreStub, topic: str) -> list:
    """Every message of every queue of ``topic`` (Store.GetMessage, paged)."""
    out = []
    queues = stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=topic), timeout=10).queues
    for q in queues:
        offset = q.min_offset
        while offset < q.max_offset:
            r = stub.GetMessage(
                store_pb2.GetMessageRequest(topic=topic, queue_id=q.queue_id, offset=offset, max_messages=256),
                timeout=10,
            )
            if not r.messages and r.next_begin_offset <= offset:
                break
            out += r.messages
            offset = r.next_begin_offset
    return out


@pytest.mark.timeout(400)
def test_transactions_with_producer_and_leader_killed(service_factory: ServiceFactory, tmp_path: Path) -> None:
    store = service_factory.store("--flush_mode", "sync")
    replicas: dict[str, ServiceProcess] = {
        name: service_factory.start("txcheck", *TXCHECK_FLAGS, "--instance_id", name)
        for name in ("txcheck-a", "txcheck-b")
    }
    pull = service_factory.start("pull")
    topic = f"E2E-{uuid.uuid4().hex[:8]}"
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    leader_key = f"{service_factory.etcd_prefix}/txcheck/leaders/store-0"
    first_leader = wait_for("a check-loop leader", lambda: leader_of(service_factory.etcd_endpoints, leader_key))

    table = {f"e2e-{i}": OUTCOMES[i % len(OUTCOMES)] for i in range(N)}
    table_path = tmp_path / "decisions.json"
    table_path.write_text(json.dumps(table))
    script = str(Path(__file__).with_name("tx_producer.py"))

    def producer(name: str, first: int, last: int, pause_at: int) -> ProducerProc:
        argv = [
            sys.executable,
            script,
            store.address,
            GROUP,
            topic,
            str(table_path),
            str(first),
            str(last),
            str(pause_at),
            "4",
        ]
        return ProducerProc(name, argv, tmp_path / f"producer-{name}.log")

    half = N // 2
    victim = producer("victim", 0, half, pause_at=half * 7 // 10)  # pauses at 70%: killed before
    survivor = producer("survivor", half, N, pause_at=half * 8 // 10)
    try:
        wait_for("both producers ready", lambda: victim.has("READY") and survivor.has("READY"))
        # A producer killed mid-flight: its pending transactions are checked through the other.
        wait_for("the victim to send 50%", lambda: victim.sent() >= half // 2 or victim.has("DONE"))
        victim.proc.kill()
        victim.proc.wait(30)
        # The leading replica killed mid-flight: the other takes the store over.
        wait_for("the survivor to send 40%", lambda: survivor.sent() >= half * 4 // 10 or survivor.has("DONE"))
        leader = leader_of(service_factory.etcd_endpoints, leader_key)
        assert leader in replicas, f"no known leader (got {leader!r}, first {first_leader!r})"
        replicas[leader].kill()
        other = next(n for n in replicas if n != leader)
        survivor.go()
        wait_for(
            f"{other} to lead after {leader} was killed",
            lambda: leader_of(service_factory.etcd_endpoints, leader_key) == other,
        )
        wait_for(
            "the survivor to finish sending", lambda: survivor.has("DONE"), detail=lambda: f"sent {survivor.sent()}"
        )
        assert not [x for x in survivor.lines if x.startswith("ERROR")], survivor.lines

        with grpc.insecure_channel(store.address) as ch:
            stub = store_pb2_grpc.StoreStub(ch)
            # What was stored as a half message (the victim died part-way), by scenario id.
            txid_of: dict[str, str] = {}
            for m in read_topic(stub, TRANS_HALF_TOPIC):
                eid = m.message.properties.get("E2E_ID")
                if eid is not None and m.message.properties.get("REAL_TOPIC") == topic:
                    txid_of.setdefault(eid, m.message.unique_id)
            sent = set(txid_of)
            assert {f"e2e-{i}" for i in range(half, N)} <= sent, "a survivor transaction has no half message"
            assert len([e for e in sent if int(e.split("-")[1]) < half]) >= half // 2
            want_committed = {e for e in sent if table[e] in COMMITTED}
            want_discarded = {e for e in sent if table[e] == "never"}

            def discarded() -> list:
                return [
                    m for m in read_topic(stub, TRANS_CHECK_MAX_TIME_TOPIC)
                    if m.message.properties.get("REAL_TOPIC") == topic
                ]  # fmt: skip

            def discarded_ids() -> set[str]:
                return {m.message.properties.get("E2E_ID") for m in discarded()}

            wait_for(
                "every never-answered transaction in TRANS_CHECK_MAX_TIME_TOPIC",
                lambda: discarded_ids() >= want_discarded,
                detail=lambda: f"missing {len(want_discarded - discarded_ids())} of {len(want_discarded)}",
            )

        with PullConsumer("CG_E2E", pull.address) as consumer:

            def committed_ids() -> set[str]:
                return {m.properties.get("E2E_ID") for m in consume_all(consumer, topic)}

            wait_for(
                "every committed transaction to be consumable",
                lambda: committed_ids() >= want_committed,
                detail=lambda: f"missing {len(want_committed - committed_ids())} of {len(want_committed)}",
            )
            # Every rolled-back transaction resolved as such (so none can still turn up).
            target = replicas[other].address
            with grpc.insecure_channel(target) as tch:
                tx = txcheck_pb2_grpc.TransactionStub(tch)

                def resolution(eid: str) -> int:
                    q = tx.QueryTransaction(
                        txcheck_pb2.QueryTransactionRequest(transaction_id=txid_of[eid]), timeout=10
                    )
                    return q.resolution

                pending = {e for e in sent if table[e] in ROLLED_BACK}

                def all_rolled_back() -> bool:
                    for e in sorted(pending):
                        if resolution(e) != txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK:
                            return False
                        pending.discard(e)
                    return True

                wait_for("every rolled-back transaction to be resolved ROLLBACK", all_rolled_back,
                         detail=lambda: f"{len(pending)} not yet")  # fmt: skip
                never = sorted(want_discarded)[:20]
                assert all(resolution(e) != txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT for e in never)

            consumed = consume_all(consumer, topic)
        uniq = Counter(m.unique_id for m in consumed)
        dupes = [u for u, c in uniq.items() if c > 1]
        assert not dupes, f"{len(dupes)} committed messages delivered more than once: {dupes[:5]}"
        ids = Counter(m.properties.get("E2E_ID") for m in consumed)
        assert set(ids) == want_committed, (
            f"extra {sorted(set(ids) - want_committed)[:10]}, missing {sorted(want_committed - set(ids))[:10]}"
        )
        assert all(c == 1 for c in ids.values())
        assert {m.unique_id for m in consumed} == {txid_of[e] for e in want_committed}
        assert all(m.body == m.properties["E2E_ID"].encode() for m in consumed)
        with grpc.insecure_channel(store.address) as ch:
            final = [
                m
                for m in read_topic(store_pb2_grpc.StoreStub(ch), TRANS_CHECK_MAX_TIME_TOPIC)
                if m.message.properties.get("REAL_TOPIC") == topic
            ]
        assert {m.message.properties.get("E2E_ID") for m in final} == want_discarded
        assert {m.message.unique_id for m in final} == {txid_of[e] for e in want_discarded}
        print(
            f"e2e: {len(sent)} transactions stored ({len(sent) - (N - half)} of the victim's {half}), "
            f"{len(want_committed)} committed, {len(want_discarded)} discarded, leader {leader} killed -> {other}"
        )
    finally:
        victim.close()
        survivor.close()
