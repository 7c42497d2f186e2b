"""The official Apache RocketMQ 5 Python client (rocketmq-python-client, unchanged) against
txmq's gateway. Run in its own process by scripts/demo.py: the client's generated
apache.rocketmq.v2 modules are its own copy.

    python scripts/rocketmq_client_demo.py GATEWAY_HOST:PORT TOPIC GROUP
"""

from __future__ import annotations

import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


class CommitAll(TransactionChecker):
    def check(self, message: Message) -> TransactionResolution:
        print(f"   checker asked about {message.message_id}: COMMIT")
        return TransactionResolution.COMMIT


def message(topic: str, body: str, tag: str, key: str) -> Message:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = tag
    m.keys = key
    m.add_property("source", "rocketmq-python-client")
    return m


def main() -> None:
    endpoint, topic, group = sys.argv[1:4]
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, [topic], checker=CommitAll())
    producer.startup()
    try:
        receipt = producer.send(message(topic, "hello from a RocketMQ client", "greeting", "rmq-1"))
        print(f"   Producer.send -> message_id={receipt.message_id} offset={receipt.offset}")
        for resolution in ("commit", "rollback"):
            transaction = producer.begin_transaction()
            receipt = producer.send(
                message(topic, f"transactional ({resolution})", "tx", f"rmq-{resolution}"), transaction
            )
            (transaction.commit if resolution == "commit" else transaction.rollback)()
            print(f"   transactional send + {resolution} -> message_id={receipt.message_id}")
    finally:
        producer.shutdown()

    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 20
        while len(seen) < 2 and time.monotonic() < deadline:
            for received in consumer.receive(16, 15):
                seen.append(received.body.decode())
                consumer.ack(received)
        print(f"   SimpleConsumer received and acked: {seen} (the rolled-back one never shows)")
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
