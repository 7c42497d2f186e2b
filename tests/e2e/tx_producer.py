"""A transactional producer process of the end-to-end scenario (tests/e2e).

    python tx_producer.py <endpoint> <group> <topic> <table.json> <first> <last> <pause_at> <threads>

Sends the transactions ``first`` .. ``last - 1`` of the decision table (``threads`` in
flight). Each message carries its scenario id in the user property ``E2E_ID`` and as its
body. The local transaction answers from the table (commit -> COMMIT, rollback ->
ROLLBACK, anything else -> UNKNOWN); a check answers the final decision from the same
table (the test wrote it before any producer started), so any producer of the group can
answer for any other. After ``pause_at`` transactions have been sent the rest wait for
a line "go" on stdin. Prints "READY", "SENT <n>" as it goes, "DONE" at the end, then
keeps answering checks until SIGTERM.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading

from txmq import (
    LocalTransactionState,
    Message,
    TransactionListener,
    TransactionProducer,
)

EXECUTE = {"commit": LocalTransactionState.COMMIT, "rollback": LocalTransactionState.ROLLBACK}
CHECK = {
    "commit": LocalTransactionState.COMMIT,
    "unknown_commit": LocalTransactionState.COMMIT,
    "rollback": LocalTransactionState.ROLLBACK,
    "unknown_rollback": LocalTransactionState.ROLLBACK,
}


class TableListener(TransactionListener):
    def __init__(self, table: dict[str, str]) -> None:
        self.table = table

    def execute_local_transaction(self, msg, arg):
        return EXECUTE.get(self.table[arg], LocalTransactionState.UNKNOWN)

    def check_local_transaction(self, msg):
        outcome = self.table.get(msg.properties.get("E2E_ID", ""), "")
        return CHECK.get(outcome, LocalTransactionState.UNKNOWN)


def main() -> None:
    endpoint, group, topic, table_path = sys.argv[1:5]
    first, last, pause_at, threads = (int(x) for x in sys.argv[5:9])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with open(table_path) as f:
        table: dict[str, str] = json.load(f)
    ids = sorted((k for k in table if first <= int(k.split("-")[1]) < last), key=lambda k: int(k.split("-")[1]))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    producer = TransactionProducer(
        group=group, endpoint=endpoint, listener=TableListener(table),
        check_threads=4, end_transaction_timeout=60.0, send_timeout=60.0,
    )  # fmt: skip
    producer.start(wait_channel=30)
    print("READY", flush=True)

    go = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
                return

    threading.Thread(target=read_stdin, daemon=True).start()
    lock = threading.Lock()
    state = {"next": 0, "sent": 0}

    def worker() -> None:
        while True:
            with lock:
                i = state["next"]
                if i >= len(ids):
                    return
                state["next"] = i + 1
            if i >= pause_at:
                go.wait()
            eid = ids[i]
            try:
                producer.send_message_in_transaction(Message(topic, eid.encode(), properties={"E2E_ID": eid}), arg=eid)
            except Exception as exc:  # noqa: BLE001 - reported; the test decides
                print(f"ERROR {eid} {type(exc).__name__}: {exc}", flush=True)
            with lock:
                state["sent"] += 1
                n = state["sent"]
            if n % 10 == 0 or n == len(ids):
                print(f"SENT {n}", flush=True)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    print("DONE", flush=True)
    stop.wait()
    producer.shutdown()


if __name__ == "__main__":
    main()
