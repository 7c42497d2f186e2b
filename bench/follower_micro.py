"""What a follower of a replicated store group spends per copied record, in-process
(docs/replication.md, "Costs"): a leader store appends batches, its log is cut into
shipments as ``Follow`` cuts it, and a follower store checks and appends them
(``copy_shipment``) and then dispatches them (its high watermark passes them). Reported
per record: CPU time of the thread doing it (what a loaded machine disturbs least) and
wall time.

    .venv/bin/python -m bench.follower_micro [--batches 200] [--body-bytes 1024] [--profile]
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

import click

from txmq_store.message_store import MessageStore
from txmq_store.model import OutgoingMessage
from txmq_store.replication import ship_span
from txmq_store.settings import StoreSettings


async def run(batches: int, body_bytes: int, profile: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        async def open_replica(name: str) -> MessageStore:
            settings = StoreSettings(data_dir=str(root / name), replica_id=name, disk_min_free_bytes=0)
            return await MessageStore.open(settings, advertised_address="127.0.0.1:1")

        leader, follower = await open_replica("a"), await open_replica("b")
        try:
            leader.replica.become_leader(epoch=1, in_sync=frozenset("a"), min_in_sync=1)
            leader.create_topic("T", read_queue_nums=8, write_queue_nums=8)
            follower.adopt_configs(topics=leader.admin.config_documents()[0])
            body = b"x" * body_bytes
            for _ in range(batches):
                leader.sender.append_records([OutgoingMessage(topic="T", body=body, keys=("k",)) for _ in range(64)])
            end = leader.commitlog.write_offset
            shipments, pos = [], 0
            while pos < end:
                segment_end = leader.commitlog.roll_next_file(pos)
                data = leader.commitlog.read(pos, min(segment_end, end, pos + (1 << 20)) - pos) or b""
                n = ship_span(data, pos, segment_end)
                shipments.append((pos, data[:n]))
                pos += n
            records = batches * 64
            profiler = cProfile.Profile()
            if profile:
                profiler.enable()
            t0, c0 = time.perf_counter(), time.thread_time()
            for offset, data in shipments:
                follower.replica.copy_shipment(offset, data)
            t1, c1 = time.perf_counter(), time.thread_time()
            follower.replica.set_follower_high_watermark(end)
            t2, c2 = time.perf_counter(), time.thread_time()
            if profile:
                profiler.disable()
            us = 1e6 / records
            print(
                f"{records} records of {body_bytes} B in {len(shipments)} shipments: "
                f"copy {us * (c1 - c0):.1f} us/record CPU ({us * (t1 - t0):.1f} wall), "
                f"dispatch {us * (c2 - c1):.1f} us/record CPU ({us * (t2 - t1):.1f} wall)"
            )
            if profile:
                pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        finally:
            await leader.close()
            await follower.close()


@click.command()
@click.option("--batches", default=200, show_default=True, help="Batches of 64 records.")
@click.option("--body-bytes", default=1024, show_default=True)
@click.option("--profile", is_flag=True, help="cProfile the follower's part (slows it down).")
def main(batches: int, body_bytes: int, profile: bool) -> None:
    asyncio.run(run(batches, body_bytes, profile))


if __name__ == "__main__":
    main()
