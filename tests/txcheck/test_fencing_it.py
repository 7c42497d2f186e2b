"""The check loop's fence, with real processes and real signals: the leading txcheck
replica is paused (SIGSTOP) mid-work past its lease, the other replica takes over and
works, then the paused one is resumed (SIGCONT). Nothing it sends after its successor's
first write lands.

Two tests. In the first, the paused leader's own lease check stops it as it resumes
(defence in depth: it never gets to write). The second makes the write the fence exists
for: a put-back the old leader sent just before its pause is held by a delaying network
(tests/support/proxy.py) and reaches the store only after the new leader wrote -- the
store refuses it (CODE_FENCED, counted in txmq_store_fenced_writes_total).

Who wrote a record is read from the record itself: the store stamps every record with
the address its writer connected from (born host), and each replica has its own
connection to the store."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import grpc
from support import ServiceFactory
from support.processes import free_port
from support.proxy import DelayingProxy

from txmq import LocalTransactionState, TransactionProducer
from txmq.protocol import TRANS_CHECK_GROUP, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc

from .helpers import FAST, Listener, leader_of, new_topic, wait_for

GROUP = "PG_FENCE"
PENDING = 3000
# Rounds that never end: many pending halves, few per store call, a short interval.
LOOP = ("--check_batch_max", "8", "--transaction_check_max", "1000")


def _leader_key(factory: ServiceFactory) -> str:
    return f"{factory.etcd_prefix}/txcheck/leaders/store-0"


def _records(stub: store_pb2_grpc.StoreStub, topic: str) -> list[common_pb2.MessageView]:
    out: list[common_pb2.MessageView] = []
    offset = 0
    while True:
        r = stub.GetMessage(
            store_pb2.GetMessageRequest(topic=topic, queue_id=0, offset=offset, max_messages=32), timeout=10
        )
        if not r.messages:
            return out
        out += r.messages
        offset = r.next_begin_offset


def _send_halves(stub: store_pb2_grpc.StoreStub, topic: str, n: int) -> str:
    """``n`` half messages, never ended; the address they were sent from (born host)."""
    resp = stub.SendBatch(
        store_pb2.SendBatchRequest(
            messages=[common_pb2.Message(topic=topic, body=b"pending %d" % i) for i in range(n)],
            producer_group=GROUP,
            transaction_prepared=True,
        ),
        timeout=30,
    )
    first = resp.results[0].commit_log_offset
    return stub.ViewMessage(store_pb2.ViewMessageRequest(commit_log_offset=first), timeout=10).message.born_host


def _progress(stub: store_pb2_grpc.StoreStub) -> int:
    r = stub.QueryConsumeOffset(
        store_pb2.QueryConsumeOffsetRequest(consumer_group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=0),
        timeout=10,
    )
    return r.offset if r.found else 0


def _log(process) -> str:  # type: ignore[no-untyped-def]
    return process.process.log_path.read_text(errors="replace")


def test_a_leader_paused_past_its_lease_lands_nothing(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    a = service_factory.start("txcheck", *FAST, *LOOP, "--instance_id", "txcheck-a")
    wait_for(
        "a to lead", lambda: leader_of(service_factory.etcd_endpoints, _leader_key(service_factory)) == "txcheck-a"
    )
    b = service_factory.start("txcheck", *FAST, *LOOP, "--instance_id", "txcheck-b")
    topic = new_topic(store)
    with grpc.insecure_channel(store.address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        producer_host = _send_halves(stub, topic, PENDING)
        # A live producer that never decides: every round puts every half back.
        with TransactionProducer(
            group=GROUP,
            endpoint=store.address,
            listener=Listener(LocalTransactionState.UNKNOWN),
            check_queue_size=100_000,
        ) as p:
            p.start(wait_channel=10)
            wait_for("a's put-backs", lambda: len(_records(stub, TRANS_HALF_TOPIC)) > PENDING + 200)
            a_hosts = {m.born_host for m in _records(stub, TRANS_HALF_TOPIC)} - {producer_host}
            assert len(a_hosts) == 1, a_hosts  # a's one connection to the store

            os.kill(a.process.pid, signal.SIGSTOP)
            try:
                wait_for(
                    "b to take over",
                    lambda: leader_of(service_factory.etcd_endpoints, _leader_key(service_factory)) == "txcheck-b",
                )
                wait_for(
                    "b's put-backs",
                    lambda: any(m.born_host not in a_hosts | {producer_host} for m in _records(stub, TRANS_HALF_TOPIC)),
                )
                progress_before = _progress(stub)
            finally:
                os.kill(a.process.pid, signal.SIGCONT)
            wait_for("a to see it no longer leads", lambda: "fenced" in _log(a) or "stopped the check loop" in _log(a))
            time.sleep(0)  # nothing to wait for: the assertions read what the store holds
            records = _records(stub, TRANS_HALF_TOPIC) + _records(stub, TRANS_CHECK_MAX_TIME_TOPIC)
    b_first = min(m.commit_log_offset for m in records if m.born_host not in a_hosts | {producer_host})
    late = [m for m in records if m.born_host in a_hosts and m.commit_log_offset > b_first]
    assert late == [], f"{len(late)} records from the paused leader landed after its successor's first write"
    with grpc.insecure_channel(store.address) as ch:
        assert _progress(store_pb2_grpc.StoreStub(ch)) >= progress_before  # never went back
    log_a = _log(a)
    assert "Traceback" not in log_a and "Traceback" not in _log(b)
    if "fenced" in log_a:  # it did send something after resuming: refused, and it said so once
        assert log_a.count("fenced:") == 1


def _fenced_writes(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("txmq_store_fenced_writes_total "):
                return float(line.split()[1])
    return 0.0


def _held_write(proxy: DelayingProxy) -> bool:
    """Whether what the proxy holds is a put-back (RequeueHalves): the check loop's other
    calls (GetMessage, Query/CommitConsumeOffset) name the check group or the half topic."""
    held = proxy.held()
    return bool(held) and TRANS_CHECK_GROUP.encode() not in held and TRANS_HALF_TOPIC.encode() not in held


def test_a_put_back_delayed_past_a_leadership_move_is_refused(service_factory: ServiceFactory) -> None:
    proxy = DelayingProxy()
    metrics_port = free_port()
    store = service_factory.store("--advertised_address", proxy.address, "--metrics_port", str(metrics_port))
    proxy.upstream_port = store.bound_port  # clients found through etcd dial the proxy
    try:
        a = service_factory.start("txcheck", *FAST, "--check_batch_max", "1", "--instance_id", "txcheck-a")
        key = _leader_key(service_factory)
        wait_for("a to lead", lambda: leader_of(service_factory.etcd_endpoints, key) == "txcheck-a")
        b = service_factory.start("txcheck", *FAST, "--check_batch_max", "1", "--instance_id", "txcheck-b")
        topic = new_topic(store)
        with grpc.insecure_channel(f"127.0.0.1:{store.bound_port}") as ch:
            stub = store_pb2_grpc.StoreStub(ch)
            hosts = {_send_halves(stub, topic, 300)}
            with TransactionProducer(
                group=GROUP,
                endpoint=f"127.0.0.1:{store.bound_port}",
                listener=Listener(LocalTransactionState.UNKNOWN),
                check_queue_size=100_000,
            ) as p:
                p.start(wait_channel=10)
                wait_for("a's put-backs", lambda: len(_records(stub, TRANS_HALF_TOPIC)) > 320)
                a_hosts = {m.born_host for m in _records(stub, TRANS_HALF_TOPIC)} - hosts
                # Hold a's traffic to the store until what it sent last is a put-back.
                for _ in range(50):
                    proxy.hold()
                    wait_for("a's next call", lambda: proxy.held(), timeout_s=10)
                    time.sleep(0.1)  # the whole call (headers and message), nothing to wait on
                    if _held_write(proxy):
                        break
                    proxy.release()
                assert _held_write(proxy), "a never sent a put-back while held"
                os.kill(a.process.pid, signal.SIGSTOP)
                try:
                    wait_for("b to take over", lambda: leader_of(service_factory.etcd_endpoints, key) == "txcheck-b")
                    wait_for(
                        "b's put-backs",
                        lambda: any(m.born_host not in a_hosts | hosts for m in _records(stub, TRANS_HALF_TOPIC)),
                    )
                    progress_before = _progress(stub)
                    fenced_before = _fenced_writes(metrics_port)
                    proxy.release()  # a's put-back reaches the store now, after b's writes
                    wait_for("the store to refuse it", lambda: _fenced_writes(metrics_port) > fenced_before)
                finally:
                    os.kill(a.process.pid, signal.SIGCONT)
                wait_for("a to stop", lambda: "fenced" in _log(a) or "stopped the check loop" in _log(a))
                records = _records(stub, TRANS_HALF_TOPIC) + _records(stub, TRANS_CHECK_MAX_TIME_TOPIC)
                b_first = min(m.commit_log_offset for m in records if m.born_host not in a_hosts | hosts)
                late = [m for m in records if m.born_host in a_hosts and m.commit_log_offset > b_first]
                assert late == [], f"{len(late)} records from the paused leader landed after its successor's"
                assert _progress(stub) >= progress_before
        assert "Traceback" not in _log(a) and "Traceback" not in _log(b)
    finally:
        proxy.close()
