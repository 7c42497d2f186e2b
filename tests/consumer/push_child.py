"""A PushConsumer in a process of its own, for tests that kill it (SIGKILL).

    python push_child.py ENDPOINT GROUP TOPIC RECORD_FILE CLIENT_ID

Appends one line per event to RECORD_FILE, flushed at once, so a kill loses nothing
written before it: ``assign <queue ids>`` when its queues change, ``start <msg_id>
<queue> <offset> <reconsume_times> <monotonic>`` and ``end <msg_id> <monotonic>``
around each listener call. Runs until killed.
"""

from __future__ import annotations

import sys
import threading
import time

from consumer_settings import FAST  # a sibling module: the script's directory is on sys.path

from txmq import ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer


def main() -> None:
    endpoint, group, topic, record_path, client_id = sys.argv[1:6]
    record = open(record_path, "a", buffering=1)
    lock = threading.Lock()

    def write(line: str) -> None:
        with lock:
            record.write(line + "\n")
            record.flush()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            write(f"start {m.msg_id} {m.queue_id} {m.queue_offset} {m.reconsume_times} {time.monotonic()}")
            time.sleep(0.02)
            write(f"end {m.msg_id} {time.monotonic()}")
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group, endpoint, client_id=client_id, consume_from=ConsumeFromWhere.FIRST_OFFSET, consume_thread_max=2, **FAST
    )
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    shown: list[int] | None = None
    while True:
        now = sorted(q.queue_id for q in consumer.assignment() if q.topic == topic)  # not %RETRY%
        if now != shown:
            write("assign " + " ".join(map(str, now)))
            shown = now
        time.sleep(0.05)


if __name__ == "__main__":
    main()
