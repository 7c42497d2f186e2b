"""Gateway benchmark: ``python -m bench.gateway [--messages N] [--rounds R]``.

What the RocketMQ 5 gateway costs. The official RocketMQ Python client
(rocketmq-python-client, through the gateway) against the txmq SDK (straight to the
store / txcheck), same local cluster, same topic, same run: synchronous single sends of
``--size`` bytes with ``--threads`` in flight, normal and transactional (send + commit).
Each side runs in its own process (bench/gateway_client.py). Prints msg/s per side, the
ratio gateway / SDK and the client CPU per message, and writes
bench/results/gateway-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.procs import free_port, proc_cpu_s
from txmq import Admin
from txmq_cli.cluster import LocalCluster

RESULTS = Path(__file__).with_name("results")


def run_side(
    client: str, mode: str, endpoint: str, topic: str, args: argparse.Namespace, servers: dict[str, int]
) -> dict[str, float]:
    cpu0 = {name: proc_cpu_s(pid) for name, pid in servers.items()}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gateway_client",
            client,
            mode,
            endpoint,
            topic,
            str(args.messages),
            str(args.size),
            str(args.threads),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{client} {mode} failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Server CPU includes the client's warm-up sends (20 of --messages).
    sent = result["sent"] + 20
    row = {"msg_s": result["sent"] / result["seconds"], "client_cpu_us_per_msg": result["cpu_s"] / result["sent"] * 1e6}
    for name, pid in servers.items():
        row[f"{name}_cpu_us_per_msg"] = (proc_cpu_s(pid) - cpu0[name]) / sent * 1e6
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="txmq-bench-gw-") as tmp:
        ports = {
            k: free_port()
            for k in ("store_port", "pull_port", "txcheck_port", "gateway_port", "etcd_client_port", "etcd_peer_port")
        }
        with LocalCluster(data_dir=tmp, **ports) as cluster:  # type: ignore[arg-type]
            with Admin(cluster.bootstrap) as admin:
                admin.create_topic("BenchGateway", read_queue_nums=8, write_queue_nums=8)
            servers = {name: service.process.pid for name, service in cluster.services.items()}
            for round_no in range(args.rounds):
                for mode in ("send", "transaction"):
                    for client, endpoint in (("txmq", cluster.bootstrap), ("rocketmq", cluster.gateway_address)):
                        result = run_side(client, mode, endpoint, "BenchGateway", args, servers)
                        rows.setdefault(f"{client}:{mode}", []).append(result)
                        cpu = "  ".join(
                            f"{k.removesuffix('_cpu_us_per_msg')} {v:4.0f}" for k, v in result.items() if k != "msg_s"
                        )
                        print(
                            f"round {round_no + 1} {client:8} {mode:11} {result['msg_s']:6.0f} msg/s"
                            f"   CPU µs/msg: {cpu}",
                            flush=True,
                        )
    summary = {}
    print(
        f"\nmedian of {args.rounds} rounds, {args.messages} messages of {args.size} B,"
        f" {args.threads} threads, one per call"
    )
    for mode in ("send", "transaction"):
        native = statistics.median(r["msg_s"] for r in rows[f"txmq:{mode}"])
        gateway = statistics.median(r["msg_s"] for r in rows[f"rocketmq:{mode}"])
        summary[mode] = {
            "txmq_sdk_msg_s": native,
            "rocketmq_client_via_gateway_msg_s": gateway,
            "ratio": gateway / native,
        }
        print(
            f"  {mode:11} txmq SDK {native:7.0f} msg/s   RocketMQ client via gateway {gateway:7.0f} msg/s"
            f"   ratio {gateway / native:.2f}x"
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"gateway-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "rounds": rows, "summary": summary}, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
