"""Transaction benchmark (issue 13): ``python -m bench.transactions [--quick]``.

(a) throughput of transactional sends (half + a no-op local transaction + commit, the SDK
    TransactionProducer) as a ratio to normal sends (SDK Producer.send) with the same
    batching (one message per call) and the same threads in flight, same run, same store;
    also the store calls per committed transaction (the store's own RPC counters,
    ``rocketmq_rpc_latency_count``, before and after the transactional phase);
(b) time for the check loop to resolve ``--pending`` half messages (sent with
    Store.SendBatch transaction_prepared, never ended) whose producer answers COMMIT, until
    every committed copy is stored;
(c) time for the check loop to pass over ``--resolved`` already-resolved half messages
    (committed by the store's DecideTransactions before the check loop looked) without
    sending a check: until the check-loop progress (CID_SYS_RMQ_TRANS on the half queue)
    reaches the end;
(d) the backlog under a producer that never answers: ``--backlog`` pending transactions,
    a live producer channel whose listener blocks for ever, ``--transaction_check_max 3``:
    per round, the half queue's end, TRANS_CHECK_MAX_TIME_TOPIC's end and the RSS of the
    txcheck and store processes, until every transaction is discarded and the half queue
    stops growing.

Real processes: etcd, a store (``--flush-mode``, default async), a txcheck; each part has
its own store and etcd prefix. The check-loop parts run txcheck with a 2 s interval and
a 1 s transaction timeout, so what is measured is the loop, not the waiting. Prints a
table and writes bench/results/transactions-*.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from bench import procs
from bench.txmq_target import GRPC_OPTIONS, wait_serving
from txmq import (
    LocalTransactionState,
    Message,
    Producer,
    TransactionListener,
    TransactionProducer,
)
from txmq.ids import new_unique_id
from txmq.protocol import TRANS_CHECK_GROUP, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc

TOPIC = "BenchTx"
BATCH = 128
GROUP = "bench_tx"


class Node:
    """A store and a txcheck under one etcd prefix."""

    def __init__(self, root: procs.TempRoot, name: str, etcd_port: int, flush_mode: str) -> None:
        self.workdir = root.sub(name)
        self.prefix = f"/bench-{name}-{os.getpid()}"
        self.etcd_port = etcd_port
        self.metrics_port = procs.free_port()
        self.store = procs.start_store(
            self.workdir,
            flush_mode=flush_mode,
            etcd_port=etcd_port,
            extra_args=["--etcd_prefix", self.prefix, "--metrics_port", str(self.metrics_port)],
        )
        self.txcheck: procs.Child | None = None
        self.n_txcheck = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.store.port}"

    async def ready(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as ch:
            await wait_serving(ch, self.store, timeout_s=60)
            await store_pb2_grpc.StoreAdminStub(ch).CreateTopic(
                store_pb2.CreateTopicRequest(
                    topic=common_pb2.TopicConfig(name=TOPIC, read_queue_nums=4, write_queue_nums=4)
                ),
                timeout=10,
            )

    async def start_txcheck(self, *flags: str) -> float:
        """(Re)start the txcheck with ``flags``; returns once SERVING."""
        if self.txcheck is not None:
            self.txcheck.stop()
        port = procs.free_port()
        self.n_txcheck += 1
        argv = [
            str(procs.VENV_PY), "-m", "txmq_txcheck", "--host", "127.0.0.1", "--port", str(port),
            "--etcd_endpoints", f"127.0.0.1:{self.etcd_port}", "--etcd_prefix", self.prefix, *flags,
        ]  # fmt: skip
        self.txcheck = procs.Child(f"txcheck-{self.n_txcheck}", argv, self.workdir, port).start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            await wait_serving(ch, self.txcheck, timeout_s=60)
        return time.monotonic()

    def stop(self) -> None:
        for c in (self.txcheck, self.store):
            if c is not None:
                c.stop()

    def store_calls(self) -> int:
        """Calls the store has served on its Store service so far (its RPC counters)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("rocketmq_rpc_latency_count{") and 'service="Store"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return int(total)


def rss_mb(child: procs.Child | None) -> float:
    if child is None or child.proc is None:
        return 0.0
    try:
        for line in Path(f"/proc/{child.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Noop(TransactionListener):
    def __init__(self) -> None:
        self.checks = 0
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg):
        with self.lock:
            self.checks += 1
        return LocalTransactionState.COMMIT


def timed_sends(fn, threads: int, seconds: float) -> tuple[int, float]:
    """``fn()`` in ``threads`` threads for ``seconds``; (calls, elapsed)."""
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def run(i: int) -> None:
        while time.monotonic() < stop:
            fn()
            counts[i] += 1

    t0 = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, range(threads)))
    return sum(counts), time.monotonic() - t0


def part_a(node: Node, threads: int, seconds: float, rounds: int, body: bytes) -> dict:
    out: dict = {"threads": threads, "seconds_per_round": seconds, "rounds": []}
    listener = Noop()
    with (
        Producer(group="bench_plain", endpoint=node.address, send_timeout=30.0) as plain,
        TransactionProducer(
            group=GROUP, endpoint=node.address, listener=listener, end_transaction_timeout=30.0, send_timeout=30.0
        ) as tx,
    ):
        tx.start(wait_channel=10)
        plain.send(Message(TOPIC, body))  # warm-up: routes, channels
        tx.send_message_in_transaction(Message(TOPIC, body))

        def one_plain() -> None:
            plain.send(Message(TOPIC, body))

        def one_tx() -> None:
            r = tx.send_message_in_transaction(Message(TOPIC, body))
            if r.local_transaction_state is not LocalTransactionState.COMMIT:
                raise RuntimeError(f"transaction state {r.local_transaction_state}")

        for rnd in range(rounds):  # alternate, so drift hits both alike
            n_p, t_p = timed_sends(one_plain, threads, seconds)
            calls_before = node.store_calls()
            n_t, t_t = timed_sends(one_tx, threads, seconds)
            calls = node.store_calls() - calls_before
            row = {"normal_per_s": n_p / t_p, "tx_per_s": n_t / t_t, "ratio": (n_t / t_t) / (n_p / t_p),
                   "store_calls_per_tx": calls / n_t}  # fmt: skip
            out["rounds"].append(row)
            print(f"  (a) round {rnd + 1}: normal {row['normal_per_s']:.0f}/s, transactional "
                  f"{row['tx_per_s']:.0f}/s, ratio {row['ratio']:.2f}", flush=True)  # fmt: skip
    out["ratio"] = max(r["ratio"] for r in out["rounds"])
    out["ratio_median"] = sorted(r["ratio"] for r in out["rounds"])[len(out["rounds"]) // 2]
    out["checks_answered"] = listener.checks
    out["store_calls_per_tx"] = max(r["store_calls_per_tx"] for r in out["rounds"])
    return out


async def send_halves(address: str, n: int, body: bytes, *, in_flight: int, commit: bool) -> float:
    """``n`` half messages through Store.SendBatch(transaction_prepared), batches of
    ``BATCH``, ``in_flight`` batches at once; with ``commit`` each batch is then
    committed by the store's DecideTransactions (one call per batch). Returns the
    elapsed seconds. Set-up only: not what a part measures."""
    async with grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        left = iter(range(0, n, BATCH))

        async def worker() -> None:
            for first in left:
                now_ms = int(time.time() * 1000)
                msgs = [
                    common_pb2.Message(topic=TOPIC, body=body, unique_id=new_unique_id(), born_timestamp_ms=now_ms,
                                       queue_id=i % 4)
                    for i in range(first, min(n, first + BATCH))
                ]  # fmt: skip
                results = (await stub.SendBatch(
                    store_pb2.SendBatchRequest(messages=msgs, producer_group=GROUP, transaction_prepared=True),
                    timeout=60,
                )).results  # fmt: skip
                if any(r.status != store_pb2.SEND_STATUS_OK for r in results):
                    raise RuntimeError("a half send was not OK")
                if commit:
                    decided = await stub.DecideTransactions(
                        store_pb2.DecideTransactionsRequest(
                            decisions=[
                                store_pb2.TransactionDecision(
                                    commit_log_offset=r.commit_log_offset, tran_state_table_offset=r.queue_offset,
                                    transaction_id=r.transaction_id, producer_group=GROUP,
                                    decision=store_pb2.DECISION_COMMIT,
                                )
                                for r in results
                            ]
                        ),
                        timeout=60,
                    )  # fmt: skip
                    if any(d.HasField("error") for d in decided.results):
                        raise RuntimeError("a commit was refused")

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return time.monotonic() - t0


async def real_count(stub: store_pb2_grpc.StoreStub) -> int:
    r = await stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=TOPIC), timeout=10)
    return sum(q.max_offset - q.min_offset for q in r.queues)


async def wait_until(what: str, cond, timeout_s: float, poll_s: float = 0.1) -> float:
    deadline = time.monotonic() + timeout_s
    while not await cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached after {timeout_s:.0f}s")
        await asyncio.sleep(poll_s)
    return time.monotonic()


CHECK_FLAGS = ("--transaction_timeout_ms", "1000", "--transaction_check_interval_ms", "2000",
               "--max_process_time_per_queue_ms", "600000")  # fmt: skip


async def part_b(node: Node, n: int, body: bytes, in_flight: int, timeout_s: float) -> dict:
    send_s = await send_halves(node.address, n, body, in_flight=in_flight, commit=False)
    print(f"  (b) {n} half messages sent in {send_s:.1f}s ({n / send_s:.0f}/s)", flush=True)
    await node.start_txcheck(*CHECK_FLAGS)
    listener = Noop()
    producer = TransactionProducer(group=GROUP, endpoint=node.address, listener=listener,
                                   check_threads=4, check_queue_size=n + 1000)  # fmt: skip
    try:
        producer.start(wait_channel=10)
        if not producer.channel_open:
            raise RuntimeError("the producer channel did not open")
        t0 = time.monotonic()
        cpu0 = (node.store.cpu_s(), node.txcheck.cpu_s() if node.txcheck else 0.0, procs.proc_cpu_s(os.getpid()))
        async with grpc.aio.insecure_channel(node.address) as ch:
            stub = store_pb2_grpc.StoreStub(ch)

            async def all_committed() -> bool:
                return await real_count(stub) >= n

            t1 = await wait_until("all pending transactions committed", all_committed, timeout_s)
            cpu1 = (node.store.cpu_s(), node.txcheck.cpu_s() if node.txcheck else 0.0, procs.proc_cpu_s(os.getpid()))
            stored = await real_count(stub)
    finally:
        producer.shutdown()
    return {"pending": n, "send_s": send_s, "resolve_s": t1 - t0, "checks_answered": listener.checks,
            "committed_copies": stored, "check_interval_ms": 2000,
            "store_cpu_us_per_tx": (cpu1[0] - cpu0[0]) * 1e6 / n,
            "txcheck_cpu_us_per_tx": (cpu1[1] - cpu0[1]) * 1e6 / n,
            "producer_cpu_us_per_tx": (cpu1[2] - cpu0[2]) * 1e6 / n}  # fmt: skip


async def part_c(node: Node, n: int, body: bytes, in_flight: int, timeout_s: float) -> dict:
    # Halves committed by the store before any check loop runs.
    setup_s = await send_halves(node.address, n, body, in_flight=in_flight, commit=True)
    print(f"  (c) {n} transactions sent and committed in {setup_s:.1f}s ({n / setup_s:.0f}/s)", flush=True)
    async with grpc.aio.insecure_channel(node.address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        half_end = (
            (await stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=TRANS_HALF_TOPIC), timeout=10))
            .queues[0]
            .max_offset
        )

        async def progress() -> int:
            r = await stub.QueryConsumeOffset(
                store_pb2.QueryConsumeOffsetRequest(
                    consumer_group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=0
                ),
                timeout=10,
            )
            return r.offset if r.found else 0

        before = await progress()
        await node.start_txcheck(*CHECK_FLAGS)  # now every half is old enough to be looked at
        listener = Noop()
        producer = TransactionProducer(group=GROUP, endpoint=node.address, listener=listener)
        try:
            producer.start(wait_channel=10)
            t0 = time.monotonic()

            async def passed() -> bool:
                return await progress() >= half_end

            t1 = await wait_until("the check loop passing every resolved half", passed, timeout_s, poll_s=0.2)
        finally:
            producer.shutdown()
        committed = await real_count(stub)
    return {"resolved": n, "setup_s": setup_s, "half_queue_end": half_end, "progress_before": before,
            "pass_s": t1 - t0, "checks_sent": listener.checks, "committed_copies": committed,
            "check_interval_ms": 2000}  # fmt: skip


class NeverAnswers(TransactionListener):
    """A producer that takes checks and never answers them (blocks until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.checks = 0

    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg):
        self.checks += 1
        self.release.wait()
        return LocalTransactionState.UNKNOWN


async def part_d(node: Node, n: int, body: bytes, in_flight: int, timeout_s: float) -> dict:
    send_s = await send_halves(node.address, n, body, in_flight=in_flight, commit=False)
    print(f"  (d) {n} half messages sent in {send_s:.1f}s", flush=True)
    await node.start_txcheck(*CHECK_FLAGS, "--transaction_check_max", "3")
    listener = NeverAnswers()
    producer = TransactionProducer(group=GROUP, endpoint=node.address, listener=listener)
    samples: list[dict] = []
    try:
        producer.start(wait_channel=10)
        async with grpc.aio.insecure_channel(node.address) as ch:
            stub = store_pb2_grpc.StoreStub(ch)

            async def end_of(topic: str) -> int:
                try:
                    r = await stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=topic), timeout=10)
                except grpc.aio.AioRpcError:
                    return 0
                return r.queues[0].max_offset if r.queues else 0

            t0 = time.monotonic()
            deadline = t0 + timeout_s
            while time.monotonic() < deadline:
                sample = {
                    "t_s": round(time.monotonic() - t0, 1),
                    "half_queue_end": await end_of(TRANS_HALF_TOPIC),
                    "discarded": await end_of(TRANS_CHECK_MAX_TIME_TOPIC),
                    "txcheck_rss_mb": round(rss_mb(node.txcheck), 1),
                    "store_rss_mb": round(rss_mb(node.store), 1),
                }
                samples.append(sample)
                print(f"  (d) {sample}", flush=True)
                if (
                    sample["discarded"] >= n
                    and len(samples) > 3
                    and samples[-3]["half_queue_end"] == sample["half_queue_end"]
                ):
                    break  # all discarded and nothing grows any more
                await asyncio.sleep(2.0)
    finally:
        listener.release.set()
        producer.shutdown()
    last = samples[-1]
    return {"backlog": n, "samples": samples, "half_queue_end": last["half_queue_end"],
            "discarded": last["discarded"], "checks_taken": listener.checks,
            "txcheck_rss_mb_max": max(x["txcheck_rss_mb"] for x in samples),
            "store_rss_mb_max": max(x["store_rss_mb"] for x in samples), "check_max": 3,
            "settled_s": last["t_s"]}  # fmt: skip


async def main_async(args: argparse.Namespace) -> dict:
    root = procs.TempRoot(keep=args.keep)
    etcd = procs.start_etcd(root.sub("etcd"))
    body = b"x" * args.body_bytes
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "cpus": os.cpu_count(),
                     "flush_mode": args.flush_mode, "args": vars(args)}  # fmt: skip
    nodes: list[Node] = []
    try:
        if "a" in args.parts:
            node = Node(root, "a", etcd.port, args.flush_mode)
            nodes.append(node)
            await node.ready()
            await node.start_txcheck("--transaction_timeout_ms", "3600000")
            results["a"] = await asyncio.to_thread(part_a, node, args.threads, args.seconds, args.rounds, body)
            node.stop()
        if "b" in args.parts:
            node = Node(root, "b", etcd.port, args.flush_mode)
            nodes.append(node)
            await node.ready()
            results["b"] = await part_b(node, args.pending, body, args.in_flight, args.timeout)
            print(f"  (b) resolved {args.pending} in {results['b']['resolve_s']:.1f}s", flush=True)
            node.stop()
        if "c" in args.parts:
            node = Node(root, "c", etcd.port, args.flush_mode)
            nodes.append(node)
            await node.ready()
            results["c"] = await part_c(node, args.resolved, body, args.in_flight, args.timeout)
            print(f"  (c) passed {args.resolved} in {results['c']['pass_s']:.1f}s, "
                  f"{results['c']['checks_sent']} checks", flush=True)  # fmt: skip
            node.stop()
        if "d" in args.parts:
            node = Node(root, "d", etcd.port, args.flush_mode)
            nodes.append(node)
            await node.ready()
            results["d"] = await part_d(node, args.backlog, body, args.in_flight, args.timeout)
            node.stop()
    finally:
        for node in nodes:
            node.stop()
        etcd.stop()
        root.close()
    return results


def report(r: dict, args: argparse.Namespace) -> str:
    lines = [f"transactions benchmark {r['date']}, {r['cpus']} CPUs, store flush {r['flush_mode']}"]
    if "a" in r:
        a = r["a"]
        best = max(a["rounds"], key=lambda x: x["ratio"])
        lines.append(f"(a) {a['threads']} threads, {a['seconds_per_round']:.0f}s x {len(a['rounds'])} rounds: "
                     f"normal {best['normal_per_s']:.0f}/s, transactional {best['tx_per_s']:.0f}/s, "
                     f"ratio best {a['ratio']:.2f} median {a['ratio_median']:.2f} (target >= 0.33: "
                     f"{'met' if a['ratio'] >= 1 / 3 else 'NOT met'}); store calls per committed transaction "
                     f"{a['store_calls_per_tx']:.2f} (target <= 2)")  # fmt: skip
    if "b" in r:
        b = r["b"]
        lines.append(f"(b) {b['pending']} pending -> committed by checks in {b['resolve_s']:.1f}s "
                     f"(incl. <= {b['check_interval_ms'] / 1000:.0f}s until the first round; "
                     f"{b['checks_answered']} checks answered; target <= 30s for 100000: "
                     f"{'met' if b['resolve_s'] * 100_000 / b['pending'] <= 30 else 'NOT met'}"
                     f"{'' if b['pending'] == 100_000 else ', scaled linearly'}); CPU per resolved "
                     f"transaction: store {b['store_cpu_us_per_tx']:.0f} µs, txcheck "
                     f"{b['txcheck_cpu_us_per_tx']:.0f} µs, producer (this process) "
                     f"{b['producer_cpu_us_per_tx']:.0f} µs")  # fmt: skip
    if "c" in r:
        c = r["c"]
        lines.append(f"(c) {c['resolved']} resolved passed in {c['pass_s']:.1f}s "
                     f"(incl. <= {c['check_interval_ms'] / 1000:.0f}s until the first round), "
                     f"{c['checks_sent']} checks sent"
                     f"{'' if c['resolved'] == 1_000_000 else ' (scaled down from 1000000)'}")  # fmt: skip
    if "d" in r:
        d = r["d"]
        lines.append(f"(d) {d['backlog']} never answered, check max {d['check_max']}: settled after "
                     f"{d['settled_s']:.0f}s with half queue end {d['half_queue_end']} "
                     f"({d['half_queue_end'] / d['backlog']:.1f} records per transaction), "
                     f"{d['discarded']} discarded, producer took {d['checks_taken']} checks; "
                     f"max RSS txcheck {d['txcheck_rss_mb_max']:.0f} MB, "
                     f"store {d['store_rss_mb_max']:.0f} MB")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="small counts: 2 x 3s rounds, 10000 pending, 20000 resolved, 5000 backlog"
    )
    p.add_argument("--parts", default="abcd", help="which parts to run (default abcd)")
    p.add_argument("--threads", type=int, default=8, help="(a) sender threads (default 8)")
    p.add_argument("--seconds", type=float, default=10.0, help="(a) seconds per measurement (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="(a) alternating rounds (default 3)")
    p.add_argument("--pending", type=int, default=100_000, help="(b) pending transactions (default 100000)")
    p.add_argument("--resolved", type=int, default=1_000_000, help="(c) resolved transactions (default 1000000)")
    p.add_argument("--in-flight", type=int, default=4, help="(b, c, d) set-up batches in flight (default 4)")
    p.add_argument("--backlog", type=int, default=20_000, help="(d) transactions never answered (default 20000)")
    p.add_argument("--body-bytes", type=int, default=128)
    p.add_argument("--flush-mode", default="async", choices=["async", "sync"])
    p.add_argument("--timeout", type=float, default=1800.0, help="limit of each wait in (b) and (c), seconds")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = p.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.pending, args.resolved, args.backlog = 3.0, 2, 10_000, 20_000, 5_000
    results = asyncio.run(main_async(args))
    text = report(results, args)
    print(text)
    out = procs.ROOT / "bench" / "results" / f"transactions-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({**results, "report": text}, indent=2, default=str))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
