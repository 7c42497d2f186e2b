"""Timer benchmark (issue 17): ``python -m bench.timers [--count 100000]``.

``--count`` delayed messages, all with the same TIMER_DELIVER_MS = T (the same second),
sent to one store process (etcd + ``txmq_store``, ``--flush-mode``, default async) with
Store.SendBatch (``--batch`` messages per call, ``--in-flight`` calls at once); T is
``--lead-s`` after the start, far enough ahead for every send to finish (checked). Then
the delivered copies are read back from the target topic and each one's lag is its
store time (when it was appended, hence dispatched and visible: async flush) minus T.
Reports the send time, p50 / p99 / max lag, when the last copy became visible (its store
time - T) and when the client first saw them all (its poll, same host clock), and the
store's RSS with the timers pending. Target: every timer delivered within 1 s of T.

There is no peer here: neither Redis Streams nor NATS JetStream (bench/peers.py) has
delayed delivery on the server (JetStream's per-message TTL / scheduling and Redis'
sorted-set recipes are client-side designs, not a feature to measure like for like).
Writes bench/results/timers-*.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import grpc

from bench import procs
from bench.txmq_target import GRPC_OPTIONS, wait_serving
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc

TOPIC = "BenchTimers"
QUEUES = 4


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def send_all(
    stub: store_pb2_grpc.StoreStub, count: int, batch: int, in_flight: int, at_ms: int, body: bytes
) -> int:
    """Sends ``count`` messages due at ``at_ms``; returns how many the store answered as
    delayed (queue offset -1, deliver_at_ms = at_ms)."""
    next_start = 0
    delayed = 0

    async def worker() -> None:
        nonlocal next_start, delayed
        while next_start < count:
            start = next_start
            n = min(batch, count - start)
            next_start += n
            request = store_pb2.SendBatchRequest(
                messages=[
                    common_pb2.Message(topic=TOPIC, body=body, properties={"TIMER_DELIVER_MS": str(at_ms)})
                    for _ in range(n)
                ]
            )
            response = await stub.SendBatch(request, timeout=120)
            delayed += sum(1 for r in response.results if r.queue_offset == -1 and r.deliver_at_ms == at_ms)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return delayed


async def visible(stub: store_pb2_grpc.StoreStub) -> int:
    response = await stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=TOPIC), timeout=10)
    return sum(q.max_offset for q in response.queues)


async def store_times(stub: store_pb2_grpc.StoreStub) -> list[tuple[str, int]]:
    """(unique id, store time) of every delivered copy."""
    out: list[tuple[str, int]] = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            response = await stub.GetMessage(
                store_pb2.GetMessageRequest(topic=TOPIC, queue_id=queue_id, offset=offset, max_messages=256),
                timeout=30,
            )
            if response.status != store_pb2.GET_MESSAGE_STATUS_FOUND:
                break
            out.extend((v.message.unique_id, v.store_timestamp_ms) for v in response.messages)
            offset = response.next_begin_offset
    return out


def pct(sorted_values: list[int], p: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


async def main_async(args: argparse.Namespace) -> dict:
    root = procs.TempRoot(keep=args.keep)
    etcd = procs.start_etcd(root.sub("etcd"))
    store = None
    try:
        workdir = root.sub("store")
        store = procs.start_store(
            workdir, flush_mode=args.flush_mode, etcd_port=etcd.port,
            extra_args=["--etcd_prefix", f"/bench-timers-{os.getpid()}"],
        )  # fmt: skip
        async with grpc.aio.insecure_channel(f"127.0.0.1:{store.port}", options=GRPC_OPTIONS) as ch:
            await wait_serving(ch, store, timeout_s=60)
            await store_pb2_grpc.StoreAdminStub(ch).CreateTopic(
                store_pb2.CreateTopicRequest(
                    topic=common_pb2.TopicConfig(name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
                ),
                timeout=10,
            )
            stub = store_pb2_grpc.StoreStub(ch)
            started = time.time()
            at_ms = (int(started) + int(args.lead_s)) * 1000  # a whole second
            delayed = await send_all(stub, args.count, args.batch, args.in_flight, at_ms, b"x" * args.body_bytes)
            sent_s = time.time() - started
            if delayed != args.count:
                raise RuntimeError(f"only {delayed} of {args.count} answered as delayed")
            if time.time() * 1000 >= at_ms:
                raise RuntimeError(f"the sends took {sent_s:.1f}s, past T: use a larger --lead-s")
            early = await visible(stub)
            pending_rss = rss_mb(store.pid)
            all_seen_s = None
            while time.time() * 1000 < at_ms + args.timeout_s * 1000:
                n = await visible(stub)
                if n >= args.count:
                    all_seen_s = time.time() - at_ms / 1000
                    break
                await asyncio.sleep(0.01)
            copies = await store_times(stub)
        times = sorted(t for _, t in copies)
        lags = [t - at_ms for t in times]
        return {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "cpus": os.cpu_count(),
            "args": vars(args),
            "count": args.count,
            "send_s": sent_s,
            "sends_per_s": args.count / sent_s,
            "visible_before_t": early,
            "delivered": len(times),
            "distinct": len({uid for uid, _ in copies}),
            "lag_ms_min": lags[0] if lags else None,
            "lag_ms_p50": pct(lags, 0.50) if lags else None,
            "lag_ms_p99": pct(lags, 0.99) if lags else None,
            "lag_ms_max": lags[-1] if lags else None,
            "client_saw_all_after_s": all_seen_s,
            "store_rss_mb_pending": pending_rss,
        }
    finally:
        if store is not None:
            store.stop()
        etcd.stop()
        root.close()


def report(r: dict) -> str:
    ok = r["delivered"] == r["distinct"] == r["count"] and r["lag_ms_max"] is not None and r["lag_ms_max"] <= 1000
    return (
        f"timers benchmark {r['date']}, {r['cpus']} CPUs, store flush {r['args']['flush_mode']}\n"
        f"sent {r['count']} delayed messages (one delivery second T) in {r['send_s']:.1f}s "
        f"({r['sends_per_s']:.0f}/s); visible before T: {r['visible_before_t']}; store RSS with them pending "
        f"{r['store_rss_mb_pending']:.0f} MB\n"
        f"delivered {r['delivered']} ({r['distinct']} distinct unique ids): lag (store time - T) "
        f"min {r['lag_ms_min']} ms, p50 {r['lag_ms_p50']} ms, "
        f"p99 {r['lag_ms_p99']} ms, max {r['lag_ms_max']} ms (the last one visible at T + {r['lag_ms_max']} ms); "
        f"client saw all at T + {r['client_saw_all_after_s'] or float('nan'):.2f}s; "
        f"target all within 1 s of T: {'met' if ok else 'NOT met'}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=100_000, help="delayed messages, all due at T (default 100000)")
    p.add_argument("--lead-s", type=float, default=45.0, help="T is this long after the start (default 45)")
    p.add_argument("--batch", type=int, default=1000, help="messages per SendBatch (default 1000)")
    p.add_argument("--in-flight", type=int, default=4, help="SendBatch calls in flight (default 4)")
    p.add_argument("--body-bytes", type=int, default=128)
    p.add_argument("--flush-mode", default="async", choices=["async", "sync"])
    p.add_argument("--timeout-s", type=float, default=120.0, help="how long after T to wait for all (default 120)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = p.parse_args()
    results = asyncio.run(main_async(args))
    text = report(results)
    print(text)
    out = procs.ROOT / "bench" / "results" / f"timers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({**results, "report": text}, indent=2, default=str))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
