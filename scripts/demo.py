"""The main job: a local txmq cluster on embedded defaults, then an end-to-end demo.

Run through scripts/demo.sh (which does the setup first). Starts etcd, store, txcheck and
pull as separate processes under ./data/demo, uses the Python SDK against them, prints
what happens, and stops the cluster. `--keep-running` leaves it up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from txmq import Admin, Message, NotFoundError, Producer, TxmqError
from txmq_cli.cluster import LocalCluster


def banner(text: str) -> None:
    print(f"\n== {text}")


def demo(bootstrap: str) -> None:
    with Admin(bootstrap) as admin:
        banner("create topic DemoOrders (4 queues)")
        topic = admin.create_topic("DemoOrders", read_queue_nums=4, write_queue_nums=4)
        print(f"   {topic}")

        with Producer(group="demo-producer", endpoint=bootstrap) as producer:
            banner("send one message with tag and key")
            first = producer.send(
                Message("DemoOrders", b'{"order": 1, "amount": 42}', tags="created", keys=("order-1",),
                        properties={"region": "eu"})
            )
            print(f"   {first.status.name} msg_id={first.msg_id} offset_msg_id={first.offset_msg_id}"
                  f" queue={first.message_queue} queue_offset={first.queue_offset}")

            banner("send a batch of 1000 messages")
            t0 = time.perf_counter()
            results = producer.send_batch(
                [Message("DemoOrders", f"order {i}".encode() * 10, tags="batch", keys=(f"order-b{i}",))
                 for i in range(1000)]
            )
            dt = time.perf_counter() - t0
            print(f"   {len(results)} acknowledged in {dt * 1000:.1f} ms; all OK: "
                  f"{all(r.status.name == 'OK' for r in results)}")

        banner("view the first message by its offsetMsgId")
        view = admin.view_message(first.offset_msg_id)
        print(f"   topic={view.topic} tags={view.tags} keys={view.keys} body={view.body!r}"
              f" properties={view.properties}")

        banner("query by key and by unique id")
        by_key = admin.query_messages_by_key("DemoOrders", "order-b500")
        print(f"   key order-b500 -> {[m.body[:20] for m in by_key]}")
        by_id = admin.query_message_by_unique_id(first.msg_id, topic="DemoOrders")
        print(f"   unique id {first.msg_id} -> queue offset {by_id.queue_offset}")

        banner("queue offsets")
        for q in admin.queue_offsets("DemoOrders"):
            print(f"   queue {q.queue.queue_id}: min={q.min_offset} max={q.max_offset}")

        banner("bad input gets a typed error and stores nothing")
        with Producer(group="demo-producer", endpoint=bootstrap) as producer:
            for bad in (Message("NoSuchTopic", b"x"), Message("bad topic!", b"x"),
                        Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x")):
                try:
                    producer.send(bad)
                    print(f"   UNEXPECTED: {bad.topic!r} accepted")
                except TxmqError as err:
                    print(f"   {bad.topic!r}: {type(err).__name__} {err}")
        try:
            admin.view_message("00" * 16)
        except NotFoundError as err:
            print(f"   view of a missing message: {err}")

        status = admin.store_status()[0]
        banner(f"store {status.store_id}: commit log {status.commit_log_min_offset}.."
               f"{status.commit_log_max_offset}, flush mode {status.flush_mode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="data/demo", help="where the cluster keeps its data")
    parser.add_argument("--keep-data", action="store_true", help="do not wipe --data-dir first")
    parser.add_argument("--keep-running", action="store_true", help="stay up until Ctrl-C")
    args = parser.parse_args()
    data_dir = Path(args.data_dir)
    if data_dir.exists() and not args.keep_data:
        shutil.rmtree(data_dir)
    with LocalCluster(data_dir=data_dir) as cluster:
        print(f"txmq cluster up; bootstrap address {cluster.bootstrap}; logs in {cluster.log_dir}")
        demo(cluster.bootstrap)
        if args.keep_running:
            print("\ncluster is running; Ctrl-C stops it")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    print("\ncluster stopped cleanly")


if __name__ == "__main__":
    main()
