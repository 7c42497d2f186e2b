"""A transactional producer in its own process, for tests that kill it mid-transaction.

    python producer_proc.py <endpoint> <group> <topic>

Sends one transactional message whose local transaction never finishes: it prints
"TXID <id>" and blocks, so the test can kill the process with the half message pending.
"""

from __future__ import annotations

import sys
import threading

from txmq import LocalTransactionState, Message, TransactionListener, TransactionProducer


class Hangs(TransactionListener):
    def execute_local_transaction(self, msg, arg):
        print(f"TXID {msg.unique_id}", flush=True)
        threading.Event().wait()
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg):
        return LocalTransactionState.UNKNOWN


def main() -> None:
    endpoint, group, topic = sys.argv[1:4]
    producer = TransactionProducer(group=group, endpoint=endpoint, listener=Hangs())
    producer.start(wait_channel=10)
    print("READY", flush=True)
    producer.send_message_in_transaction(Message(topic, b"from-the-killed-producer"))


if __name__ == "__main__":
    main()
