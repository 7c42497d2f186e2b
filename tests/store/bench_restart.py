"""Restart time of a store with a 1 GiB commit log (docs/store.md, "Restart time").

    .venv/bin/python tests/store/bench_restart.py build DIR     # ~1 GiB log, checkpoint 20 MiB behind
    .venv/bin/python tests/store/bench_restart.py measure DIR   # crash restart, then clean restart

``build`` leaves a crash image: the commit log stays in place and what recovery
rewrites (abort marker, checkpoint, index, consume queues, configs) is saved aside and
restored before each ``measure``, so every run recovers the same crash.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path

from txmq_store.message_store import MessageStore
from txmq_store.model import OutgoingMessage
from txmq_store.settings import StoreSettings


async def build(d: Path):
    store = await MessageStore.open(
        StoreSettings(data_dir=str(d / "live"), flush_consume_queue_interval_ms=3_600_000),
        advertised_address="127.0.0.1:1",
    )
    store.create_topic("T", read_queue_nums=8, write_queue_nums=8)
    body = b"x" * 900
    target = 1 << 30
    checkpointed = False
    while store.commitlog.write_offset < target:
        await store.send([OutgoingMessage(topic="T", body=body, keys=("k",)) for _ in range(500)])
        if not checkpointed and store.commitlog.write_offset > target - (20 << 20):
            await store.flush()
            checkpointed = True
    await asyncio.to_thread(store.commitlog.flush, store.commitlog.write_offset)
    # crash image: everything but the commit log copied aside, restored before each start
    (d / "saved").mkdir()
    for name in ("abort", "checkpoint", "index", "consumequeue", "config"):
        src = d / "live" / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, d / "saved" / name)
    print("built", store.commitlog.write_offset, flush=True)
    os._exit(0)  # no close: the abort marker stays, as after kill -9


async def measure(d: Path):
    live = d / "live"
    for name in ("abort", "checkpoint", "index", "consumequeue", "config"):
        dst = live / name
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink(missing_ok=True)
        src = d / "saved" / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    os.sync()
    t = time.perf_counter()
    store = await MessageStore.open(StoreSettings(data_dir=str(live)), advertised_address="127.0.0.1:1")
    dt = time.perf_counter() - t
    print(f"crash restart: {dt:.2f}s (log {store.commitlog.write_offset} bytes)", flush=True)
    await store.close()
    t = time.perf_counter()
    store = await MessageStore.open(StoreSettings(data_dir=str(live)), advertised_address="127.0.0.1:1")
    print(f"clean restart: {time.perf_counter() - t:.2f}s", flush=True)
    await store.close()


if sys.argv[1] == "build":
    asyncio.run(build(Path(sys.argv[2])))
else:
    asyncio.run(measure(Path(sys.argv[2])))
