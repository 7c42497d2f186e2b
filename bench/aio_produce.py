"""The asyncio producer (``txmq.aio.Producer``) against the threaded one (``txmq.Producer``)
and nats-py's JetStream publish+ack on the same loop (``--nats``, a nats-server with file
storage started here), in one run, on one store (flush_mode async) started here:

    .venv/bin/python -m bench.aio_produce                 # 20000 messages per row
    .venv/bin/python -m bench.aio_produce --messages 2000 --concurrency 16

Rows: single sends and ``--batch-size`` batches, each from ``--concurrency`` threads
(threaded) or tasks (asyncio, nats-py), the rows of a shape alternating,
``--rounds`` times. Figures per row: messages/s (wall clock, noisy on a shared machine),
client and server CPU µs per message (process CPU time: far less sensitive to other load).
"""

from __future__ import annotations

import asyncio
import os
import resource
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from bench import procs
from bench.peers import ClientPath, NatsTarget
from bench.txmq_target import TOPIC, Etcd, TxmqTarget
from txmq import Message, Producer
from txmq import aio as txmq_aio


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(name: str, server_pid: int, messages: int, run: Callable[[], Awaitable[None]]) -> str:
    cpu, server, start = _cpu_s(), procs.proc_cpu_s(server_pid), time.perf_counter()
    await run()
    wall = time.perf_counter() - start
    client_us = (_cpu_s() - cpu) / messages * 1e6
    server_us = (procs.proc_cpu_s(server_pid) - server) / messages * 1e6
    return f"| {name} | {messages / wall:,.0f} | {client_us:.1f} | {server_us:.1f} |"


def _threaded(producer: Producer, messages: int, concurrency: int, batch: int) -> Callable[[], Awaitable[None]]:
    def work(n: int) -> None:
        for _ in range(n):
            if batch == 1:
                producer.send(Message(TOPIC, b"x" * 100))
            else:
                producer.send_batch([Message(TOPIC, b"x" * 100) for _ in range(batch)])

    async def run() -> None:
        requests = messages // batch
        with ThreadPoolExecutor(concurrency) as pool:
            parts = [requests // concurrency + (i < requests % concurrency) for i in range(concurrency)]
            await asyncio.gather(*(asyncio.get_running_loop().run_in_executor(pool, work, n) for n in parts))

    return run


def _nats(target: NatsTarget, messages: int, concurrency: int, batch: int) -> Callable[[], Awaitable[None]]:
    """nats-py on this loop: a task per in-flight request, each publish waited for its
    ack (``NatsTarget.send_one`` / ``send_batch``)."""

    async def work(n: int) -> None:
        for _ in range(n):
            if batch == 1:
                await target.send_one(b"x" * 100)
            else:
                await target.send_batch([b"x" * 100] * batch)

    async def run() -> None:
        requests = messages // batch
        parts = [requests // concurrency + (i < requests % concurrency) for i in range(concurrency)]
        await asyncio.gather(*(work(n) for n in parts))

    return run


def _tasks(producer: txmq_aio.Producer, messages: int, concurrency: int, batch: int) -> Callable[[], Awaitable[None]]:
    async def work(n: int) -> None:
        for _ in range(n):
            if batch == 1:
                await producer.send(Message(TOPIC, b"x" * 100))
            else:
                await producer.send_batch([Message(TOPIC, b"x" * 100) for _ in range(batch)])

    async def run() -> None:
        requests = messages // batch
        parts = [requests // concurrency + (i < requests % concurrency) for i in range(concurrency)]
        await asyncio.gather(*(work(n) for n in parts))

    return run


async def _main(
    messages: int, concurrency: int, batch_size: int, rounds: int, workdir: Path, with_nats: bool
) -> list[str]:
    etcd = Etcd(workdir)
    target = TxmqTarget(workdir, flush_mode="async", etcd=etcd, client="stubs", concurrency=concurrency)
    await target.start()
    nats: NatsTarget | None = None
    if with_nats:
        (workdir / "nats").mkdir()
        nats = NatsTarget(workdir / "nats", path=ClientPath("asyncio"), concurrency=concurrency, batch_size=batch_size)
        await nats.start()
    rows = ["| client | msgs/s | client µs/msg | server µs/msg |", "|---|---|---|---|"]
    try:
        pid = target.server_pids()[0]
        with Producer("bench_producer", target.endpoint, send_timeout=30.0) as threaded:
            async with txmq_aio.Producer("bench_producer", target.endpoint, send_timeout=30.0) as tasks:
                for warm in (_threaded(threaded, 1000, concurrency, 1), _tasks(tasks, 1000, concurrency, 1)):
                    await warm()
                for _ in range(rounds):
                    for batch in (1, batch_size):
                        shape = "single" if batch == 1 else f"batch of {batch}"
                        rows.append(
                            await _measure(
                                f"threads, {shape}", pid, messages, _threaded(threaded, messages, concurrency, batch)
                            )
                        )
                        rows.append(
                            await _measure(
                                f"asyncio, {shape}", pid, messages, _tasks(tasks, messages, concurrency, batch)
                            )
                        )
                        if nats is not None:
                            rows.append(
                                await _measure(
                                    f"nats-py asyncio, {shape}", nats.server_pids()[0], messages,
                                    _nats(nats, messages, concurrency, batch),
                                )
                            )  # fmt: skip
    finally:
        if nats is not None:
            await nats.stop()
        await target.stop()
        etcd.stop()
    return rows


@click.command()
@click.option("--messages", default=20_000, show_default=True, help="messages per row")
@click.option("--concurrency", default=32, show_default=True, help="threads or tasks sending at once")
@click.option("--batch-size", default=32, show_default=True)
@click.option("--rounds", default=2, show_default=True, help="times each row is measured, alternating")
@click.option("--uvloop", "use_uvloop", is_flag=True, help="run on uvloop's event loop")
@click.option("--nats/--no-nats", "with_nats", default=True, show_default=True, help="nats-py rows (a nats-server)")
def main(messages: int, concurrency: int, batch_size: int, rounds: int, use_uvloop: bool, with_nats: bool) -> None:
    factory = None
    if use_uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with tempfile.TemporaryDirectory(prefix="aio-bench-") as tmp, asyncio.Runner(loop_factory=factory) as runner:
        rows = runner.run(_main(messages, concurrency, batch_size, rounds, Path(tmp), with_nats))
    loop = "uvloop" if use_uvloop else "asyncio"
    print(f"{os.cpu_count()} CPUs, {loop} loop; {messages} messages of 100 B per row, concurrency {concurrency}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
