"""The main job: a local txmq cluster on embedded defaults, then an end-to-end demo.

Run through scripts/demo.sh (which does the setup first). Starts etcd, store, txcheck,
pull and the RocketMQ gateway as separate processes under ./data/demo, uses the Python SDK
against them (and the official RocketMQ 5 client against the gateway), prints
what happens, and stops the cluster. `--keep-running` leaves it up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    ExpressionType,
    LocalTransactionState,
    Message,
    NotFoundError,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionListener,
    TransactionProducer,
    TxmqError,
)
from txmq.ids import encode_offset_msg_id
from txmq_cli.cluster import LocalCluster

# The demo shortens the check loop (RocketMQ's defaults: every 30 s, 6 s immunity) so an
# unanswered transaction is checked within seconds.
TXCHECK_ARGS = ["--transaction-check-interval-ms", "1000", "--transaction-timeout-ms", "1000"]


class OrderService(TransactionListener):
    """A local 'database' of orders: the local transaction of each half message."""

    def __init__(self) -> None:
        self.orders: dict[str, str] = {}  # transaction id -> what the database holds

    def execute_local_transaction(self, msg: Message, arg: str) -> LocalTransactionState:
        if arg == "pay":
            self.orders[msg.unique_id] = "paid"
            return LocalTransactionState.COMMIT
        if arg == "cancel":
            self.orders[msg.unique_id] = "cancelled"
            return LocalTransactionState.ROLLBACK
        # The outcome is not known yet (say, the payment provider is slow): UNKNOWN.
        # The broker will ask check_local_transaction later; by then it has paid.
        self.orders[msg.unique_id] = "paid"
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg) -> LocalTransactionState:
        state = self.orders.get(msg.unique_id)
        print(f"   (check) broker asks about {msg.unique_id}: database says {state!r}")
        return {"paid": LocalTransactionState.COMMIT, "cancelled": LocalTransactionState.ROLLBACK}.get(
            state, LocalTransactionState.UNKNOWN
        )


def banner(text: str) -> None:
    print(f"\n== {text}")


def demo(bootstrap: str, gateway: str) -> None:
    with Admin(bootstrap) as admin:
        banner("create topic DemoOrders (4 queues)")
        topic = admin.create_topic("DemoOrders", read_queue_nums=4, write_queue_nums=4)
        print(f"   {topic}")

        with Producer(group="demo-producer", endpoint=bootstrap) as producer:
            banner("send one message with tag and key")
            first = producer.send(
                Message(
                    "DemoOrders",
                    b'{"order": 1, "amount": 42}',
                    tags="created",
                    keys=("order-1",),
                    properties={"region": "eu"},
                )
            )
            print(
                f"   {first.status.name} msg_id={first.msg_id} offset_msg_id={first.offset_msg_id}"
                f" queue={first.message_queue} queue_offset={first.queue_offset}"
            )

            banner("send a batch of 1000 messages")
            t0 = time.perf_counter()
            results = producer.send_batch(
                [
                    Message("DemoOrders", f"order {i}".encode() * 10, tags="batch", keys=(f"order-b{i}",))
                    for i in range(1000)
                ]
            )
            dt = time.perf_counter() - t0
            print(
                f"   {len(results)} acknowledged in {dt * 1000:.1f} ms; all OK: "
                f"{all(r.status.name == 'OK' for r in results)}"
            )

        banner("view the first message by its offsetMsgId")
        view = admin.view_message(first.offset_msg_id)
        print(
            f"   topic={view.topic} tags={view.tags} keys={view.keys} body={view.body!r} properties={view.properties}"
        )

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
            for bad in (
                Message("NoSuchTopic", b"x"),
                Message("bad topic!", b"x"),
                Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"),
            ):
                try:
                    producer.send(bad)
                    print(f"   UNEXPECTED: {bad.topic!r} accepted")
                except TxmqError as err:
                    print(f"   {bad.topic!r}: {type(err).__name__} {err}")
        host, port = admin.store_status()[0].address.rsplit(":", 1)
        try:
            admin.view_message(encode_offset_msg_id(host, int(port), 1 << 40))
        except NotFoundError as err:
            print(f"   view of a missing message: {err}")

        transactions(bootstrap, admin)
        long_polling(bootstrap, admin)
        push_consumers(bootstrap, admin)
        delays_retries_and_resends(bootstrap, admin)
        rocketmq_client(gateway, admin)

        status = admin.store_status()[0]
        banner(
            f"store {status.store_id}: commit log {status.commit_log_min_offset}.."
            f"{status.commit_log_max_offset}, flush mode {status.flush_mode}"
        )


def transactions(bootstrap: str, admin: Admin) -> None:
    banner("transactional messages: commit, rollback, and an UNKNOWN resolved by a check")
    admin.create_topic("DemoPayments", read_queue_nums=2, write_queue_nums=2)
    listener = OrderService()
    with TransactionProducer(group="demo-payments", endpoint=bootstrap, listener=listener) as producer:
        results = {
            arg: producer.send_message_in_transaction(Message("DemoPayments", f"order {arg}".encode()), arg)
            for arg in ("pay", "cancel", "slow")
        }
        for arg, r in results.items():
            print(f"   {arg:6} -> local state {r.local_transaction_state.name:8} transaction {r.transaction_id}")
        slow = results["slow"].transaction_id
        deadline = time.monotonic() + 60
        while (info := producer.query_transaction(slow)).resolution is not LocalTransactionState.COMMIT:
            if time.monotonic() > deadline:
                raise SystemExit(f"transaction {slow} was not resolved by a check in 60 s: {info}")
            time.sleep(0.2)
        print(f"   timeline of {slow}:")
        for at_ms, kind, detail in info.timeline:
            print(
                f"     {time.strftime('%H:%M:%S', time.localtime(at_ms / 1000))}.{at_ms % 1000:03d} {kind:15} {detail}"
            )
        for arg, r in results.items():
            # The newest copy with this id: the committed one on DemoPayments, or else
            # the (invisible) half message on the system topic.
            copy = admin.query_message_by_unique_id(r.transaction_id, topic="DemoPayments")
            if copy.topic == "DemoPayments":
                print(f"   {arg:6}: visible on DemoPayments queue {copy.queue_id} offset {copy.queue_offset}")
            else:
                print(f"   {arg:6}: not visible to consumers (only the half message on {copy.topic})")


def long_polling(bootstrap: str, admin: Admin) -> None:
    banner("long polling: a tag-filtered and an SQL92-filtered consumer, both already waiting")
    admin.create_topic("DemoEvents", read_queue_nums=1, write_queue_nums=1)
    with (
        PullConsumer("demo-pollers", bootstrap, suspend_timeout=20.0) as consumer,
        Producer(group="demo-producer", endpoint=bootstrap) as producer,
    ):
        (mq,) = consumer.fetch_message_queues("DemoEvents")
        waiters = {
            "tag 'shipped'": ("shipped", ExpressionType.TAG),
            "sql \"region = 'eu' AND amount > 100\"": ("region = 'eu' AND amount > 100", ExpressionType.SQL92),
        }
        answers: dict[str, tuple[float, object]] = {}

        def wait(name: str, expression: str, kind: ExpressionType) -> None:
            result = consumer.pull(mq, expression, 0, 32, expression_type=kind)
            answers[name] = (time.perf_counter(), result)

        threads = [threading.Thread(target=wait, args=(n, e, k)) for n, (e, k) in waiters.items()]
        for t in threads:
            t.start()
        time.sleep(0.5)  # both are held by the pull service now
        print("   send: tag 'created', region 'us', amount 500  (matches neither)")
        producer.send(
            Message("DemoEvents", b"order 7 created", tags="created", properties={"region": "us", "amount": "500"})
        )
        time.sleep(0.5)
        print(f"   after 0.5 s, answered so far: {sorted(answers) or 'none'}")
        sent = time.perf_counter()
        print("   send: tag 'shipped', region 'eu', amount 250  (matches both)")
        producer.send(
            Message("DemoEvents", b"order 8 shipped", tags="shipped", properties={"region": "eu", "amount": "250"})
        )
        for t in threads:
            t.join(30)
        for name, (at, result) in sorted(answers.items()):
            print(
                f"   {name}: {result.status.name} {[m.body for m in result.messages]}"
                f" {1000 * (at - sent):.1f} ms after the matching send; next offset {result.next_begin_offset}"
            )


def push_consumers(bootstrap: str, admin: Admin) -> None:
    banner("push consumers: group demo-billing drains DemoOrders; demo-audit's consumer goes away half way")
    consumed: dict[str, int] = {"demo-billing": 0, "demo-audit": 0}
    lock = threading.Lock()
    audit_half_way = threading.Event()

    def listener_of(group: str, limit: int | None):
        def listener(messages) -> ConsumeStatus:
            with lock:
                consumed[group] += len(messages)
                if limit is not None and consumed[group] >= limit:
                    audit_half_way.set()
            return ConsumeStatus.CONSUME_SUCCESS

        return listener

    consumers = {}
    for group, limit in (("demo-billing", None), ("demo-audit", 300)):
        c = PushConsumer(group, bootstrap, commit_interval=0.5, consume_from=ConsumeFromWhere.FIRST_OFFSET)
        c.subscribe("DemoOrders", "*")
        c.register_message_listener(listener_of(group, limit))
        c.start()
        consumers[group] = c
    audit_half_way.wait(30)
    # demo-audit's only consumer stops (a crash, a deploy that never came back): what it
    # consumed is committed, and its offsets stay there while its messages wait. Sending
    # them back for retry instead would move the offsets (and fill %RETRY%demo-audit).
    consumers["demo-audit"].shutdown()
    print(f"   demo-audit's consumer stopped after {consumed['demo-audit']} messages")
    deadline = time.monotonic() + 30
    while consumed["demo-billing"] < 1001 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(6)  # export snapshots (every second) while demo-audit's offsets stay put: past the stall window
    consumers["demo-billing"].shutdown()
    print(f"   consumed: {consumed}")
    for group in consumed:
        lag = sum(o.max_offset - o.offset for o in admin.consume_offsets(group, "DemoOrders"))
        print(f"   {group}: total lag {lag}")


def delays_retries_and_resends(bootstrap: str, admin: Admin) -> None:
    """Issue 17: a delayed message, a send retried with the same unique id, and a message
    that keeps failing: retried through the store's timer, then dead-lettered."""
    admin.create_topic("DemoReminders", read_queue_nums=1, write_queue_nums=1)
    seen: list[tuple[str, int, float]] = []  # (body, reconsume times, when)
    lock = threading.Lock()

    def listener(messages) -> ConsumeStatus:
        with lock:
            seen.extend((m.body.decode(), m.reconsume_times, time.time()) for m in messages)
        return ConsumeStatus.RECONSUME_LATER if messages[0].body == b"poison" else ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "demo-reminders", bootstrap, consume_from=ConsumeFromWhere.FIRST_OFFSET, max_reconsume_times=1
    )
    consumer.subscribe("DemoReminders", "*")
    consumer.register_message_listener(listener)
    consumer.start()
    with Producer(group="demo-producer", endpoint=bootstrap) as producer:
        banner("a delayed message: due in 3 s (the store's timer holds it until then)")
        sent_at = time.time()
        due_ms = int(sent_at * 1000) + 3000
        later = producer.send(Message("DemoReminders", b"call the customer", delivery_timestamp_ms=due_ms))
        print(f"   sent; deliver_at_ms={later.deliver_at_ms} queue={later.message_queue}")
        print(f"   queue_offset={later.queue_offset} (it gets one when it is delivered)")

        banner("the same message sent twice (a retry after a lost answer): stored once")
        once = Message("DemoReminders", b"invoice 7", keys=("invoice-7",))
        first, again = producer.send(once), producer.send(once)
        print(f"   first duplicate={first.duplicate}, again duplicate={again.duplicate}, same offset: "
              f"{first.commit_log_offset == again.commit_log_offset}; "
              f"stored copies: {len(admin.query_messages_by_key('DemoReminders', 'invoice-7'))}")  # fmt: skip

        banner("a message that keeps failing: retried by the store (levels of 1 s, 2 s), then dead-lettered")
        producer.send(Message("DemoReminders", b"poison"))
    deadline = time.monotonic() + 40
    letters = []
    while time.monotonic() < deadline:
        time.sleep(0.5)
        letters = admin.list_dead_letters("demo-reminders")
        with lock:
            reminded = any(body == "call the customer" for body, _, _ in seen)
        if letters and reminded:
            break
    consumer.shutdown()
    for body, times, at in seen:
        print(f"   +{at - sent_at:5.1f} s  {body!r} (reconsume times {times})")
    for letter in letters:
        failed = letter.reconsume_times
        print(f"   dead letter {letter.msg_id} from {letter.origin_topic}, after {failed} failed deliveries")


def rocketmq_client(gateway: str, admin: Admin) -> None:
    banner(f"the official RocketMQ 5 Python client, unchanged, through the gateway at {gateway}")
    admin.create_topic("DemoRocketMQ", read_queue_nums=4, write_queue_nums=4)
    script = Path(__file__).with_name("rocketmq_client_demo.py")
    # Its own process: the client brings its own copy of the apache.rocketmq.v2 modules.
    done = subprocess.run([sys.executable, str(script), gateway, "DemoRocketMQ", "demo-rocketmq-group"], timeout=120)
    if done.returncode != 0:
        print(f"   the RocketMQ client demo failed (exit {done.returncode})")


def report(data_dir: Path) -> None:
    banner("offline analytics on Spark (local mode) over the store's export")
    try:
        from txmq_analytics import run_report
    except ImportError:
        print("   skipped: the analytics extra (pyspark) is not installed")
        return
    run_report(data_dir / "store" / "export", data_dir / "analytics", rate_window_s=5, stall_window_s=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default="data/demo", help="where the cluster keeps its data")
    parser.add_argument("--keep-data", action="store_true", help="do not wipe --data-dir first")
    parser.add_argument("--keep-running", action="store_true", help="stay up until Ctrl-C")
    args = parser.parse_args()
    data_dir = Path(args.data_dir)
    if data_dir.exists() and not args.keep_data:
        shutil.rmtree(data_dir)
    # The store exports offset snapshots and transaction events every second (analytics).
    # Short delay levels, so the demo's retries go through the timer in seconds.
    store_args = ["--export-interval-ms", "1000", "--message-delay-levels", "1s 1s 2s 2s 2s 2s 2s 2s"]
    with LocalCluster(data_dir=data_dir, txcheck_args=TXCHECK_ARGS, store_args=store_args) as cluster:
        print(f"txmq cluster up; bootstrap address {cluster.bootstrap}; logs in {cluster.log_dir}")
        demo(cluster.bootstrap, cluster.gateway_address)
        if args.keep_running:
            print("\ncluster is running; Ctrl-C stops it")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    print("\ncluster stopped cleanly")
    report(data_dir)


if __name__ == "__main__":
    main()
