"""One side of ``bench.gateway``, run in its own process (the official client brings its
own copy of the apache.rocketmq.v2 modules):

    python -m bench.gateway_client rocketmq|txmq send|transaction ENDPOINT TOPIC COUNT SIZE THREADS

Sends COUNT messages of SIZE bytes, one per call (synchronous sends, THREADS at a time),
and prints one JSON line: {"sent": n, "seconds": s, "cpu_s": c}.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def rocketmq_sender(endpoint: str, topic: str, mode: str):  # type: ignore[no-untyped-def]
    from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker, TransactionResolution

    class Commit(TransactionChecker):
        def check(self, message):  # type: ignore[no-untyped-def]
            return TransactionResolution.COMMIT

    producer = Producer(ClientConfiguration(endpoint, Credentials()), [topic], checker=Commit())
    producer.startup()

    def send(body: bytes) -> None:
        m = Message()
        m.topic = topic
        m.body = body
        if mode == "transaction":
            transaction = producer.begin_transaction()
            producer.send(m, transaction)
            transaction.commit()
        else:
            producer.send(m)

    return send, producer.shutdown


def txmq_sender(endpoint: str, topic: str, mode: str):  # type: ignore[no-untyped-def]
    from txmq import LocalTransactionState, Message, Producer, TransactionListener, TransactionProducer

    class Commit(TransactionListener):
        def execute_local_transaction(self, msg, arg):  # type: ignore[no-untyped-def]
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg):  # type: ignore[no-untyped-def]
            return LocalTransactionState.COMMIT

    if mode == "transaction":
        producer = TransactionProducer(group=topic, endpoint=endpoint, listener=Commit())
        producer.start()
        return (lambda body: producer.send_message_in_transaction(Message(topic, body))), producer.shutdown
    plain = Producer(group="bench-gateway", endpoint=endpoint)
    plain.start()
    return (lambda body: plain.send(Message(topic, body))), plain.shutdown


def main() -> None:
    client, mode, endpoint, topic, count, size, threads = sys.argv[1:8]
    n, threads_n = int(count), int(threads)
    make = rocketmq_sender if client == "rocketmq" else txmq_sender
    send, stop = make(endpoint, topic, mode)
    body = b"x" * int(size)
    for _ in range(20):  # warm-up: routes, channels
        send(body)
    cpu0, t0 = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(threads_n) as pool:
        list(pool.map(lambda _: send(body), range(n)))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    stop()
    print(json.dumps({"sent": n, "seconds": seconds, "cpu_s": cpu}), flush=True)


if __name__ == "__main__":
    main()
