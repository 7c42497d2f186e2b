"""What a user does against the deployed chart, with the SDK, run inside the client
network namespace by the deployment test (``python -m tests.deploy.scenarios CMD ...``).
Each command prints one JSON line with what it saw and exits non-zero when that is not
what a user should see.

- ``send-receive``: N messages sent, every one received back by a pull consumer.
- ``transactions``: one transaction committed, one rolled back; only the first is delivered.
- ``keep-producing``: sends one message at a time until SIGTERM, writing each
  acknowledged body to a file (the failover test's record of what was acknowledged).
- ``keep-transacting``: likewise with transactions (committed by the listener, or by its
  check when an END was lost), for a txcheck restart.
- ``drain``: reads the whole topic and checks that every body of one or more files of
  acknowledged bodies is there exactly once.
- ``keep-consuming``: pulls every queue of a topic until SIGTERM, writing each body it
  receives to a file (a pull service restart under it).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from txmq import Message, Producer, PullConsumer
from txmq._consumer_types import PullStatus
from txmq.errors import TxmqError
from txmq.transaction import LocalTransactionState, TransactionListener, TransactionProducer

stopping = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stopping.set())


def report(ok: bool, **fields: object) -> None:
    print(json.dumps({"ok": ok, **fields}), flush=True)
    if not ok:
        sys.exit(1)


def read_topic(bootstrap: str, topic: str, group: str, *, want: set[bytes], timeout_s: float) -> list[bytes]:
    """Every message of the topic from offset 0, until every body in ``want`` was read
    and every queue is read to its end, or the time is up; then the group's offsets are
    committed, as a consumer does (its progress is what the analytics report shows)."""
    bodies: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    with PullConsumer(group, bootstrap, suspend_timeout=1.0, timeout=10.0) as consumer:
        queues = consumer.fetch_message_queues(topic)
        offsets = {mq: 0 for mq in queues}
        at_end: set[object] = set()
        while time.monotonic() < deadline and not (want <= set(bodies) and len(at_end) == len(queues)):
            for mq in queues:
                try:
                    result = consumer.pull(mq, "*", offsets[mq], 64)
                except TxmqError as exc:
                    print(f"pull {mq}: {exc}", file=sys.stderr)
                    time.sleep(0.5)
                    continue
                if result.status == PullStatus.FOUND:
                    bodies.extend(m.body for m in result.messages)
                offsets[mq] = result.next_begin_offset
                if offsets[mq] >= result.max_offset:
                    at_end.add(mq)
                else:
                    at_end.discard(mq)
        for mq, offset in offsets.items():
            consumer.commit_offset(mq, offset)
    return bodies


def send_receive(args: argparse.Namespace) -> None:
    bodies = [f"{args.tag}-{i}-{uuid.uuid4().hex}".encode() for i in range(args.count)]
    with Producer(group=f"{args.group}-producer", endpoint=args.bootstrap) as producer:
        results = [producer.send(Message(args.topic, body, tags=args.tag)) for body in bodies]
    mine = set(bodies)
    got = Counter(b for b in read_topic(args.bootstrap, args.topic, args.group, want=mine, timeout_s=60) if b in mine)
    missing = [b.decode() for b in bodies if got[b] == 0]
    report(not missing and all(r.status.name == "OK" for r in results), sent=len(bodies), received=sum(got.values()),
           missing=missing[:5], stores=sorted({r.message_queue.store_id for r in results}))  # fmt: skip


class Decides(TransactionListener):
    """Commits bodies that start with "commit", rolls back the others; the check says the same."""

    def decide(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT if msg.body.startswith(b"commit") else LocalTransactionState.ROLLBACK

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return self.decide(msg)

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return self.decide(msg)


def transactions(args: argparse.Namespace) -> None:
    commit, rollback = f"commit-{uuid.uuid4().hex}".encode(), f"rollback-{uuid.uuid4().hex}".encode()
    with TransactionProducer(f"{args.group}-tx", args.bootstrap, listener=Decides()) as producer:
        states = [producer.send_message_in_transaction(Message(args.topic, body)).local_transaction_state.name
                  for body in (commit, rollback)]  # fmt: skip
        seen = read_topic(args.bootstrap, args.topic, args.group, want={commit}, timeout_s=30)
        time.sleep(1.0)  # a rolled-back message that would wrongly show up has had its chance
        seen += read_topic(args.bootstrap, args.topic, f"{args.group}-again", want={commit}, timeout_s=10)
    report(commit in seen and rollback not in seen, states=states, commit_seen=seen.count(commit),
           rollback_seen=seen.count(rollback))  # fmt: skip


def _keep_sending(args: argparse.Namespace, prefix: str, send: Callable[[Message], object]) -> None:
    """Send one message at a time until SIGTERM; each body ``send`` returned for goes to
    the ``--acked`` file, a failure to stderr (and the loop goes on)."""
    acked_count = errors = 0
    with Path(args.acked).open("a", buffering=1) as acked:
        while not stopping.is_set():
            body = f"{prefix}-{acked_count}-{uuid.uuid4().hex}"
            try:
                send(Message(args.topic, body.encode(), tags=args.tag))
            except TxmqError as exc:
                errors += 1
                print(f"{body}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                time.sleep(0.2)
                continue
            acked.write(body + "\n")
            acked_count += 1
            time.sleep(args.interval_s)
    report(True, acked=acked_count, errors=errors)


def keep_producing(args: argparse.Namespace) -> None:
    with Producer(group=f"{args.group}-producer", endpoint=args.bootstrap, send_timeout=args.send_timeout) as producer:
        _keep_sending(args, args.tag, producer.send)


def keep_transacting(args: argparse.Namespace) -> None:
    # A returned transaction's half is stored: committed now, or by the check if the END was lost.
    with TransactionProducer(f"{args.group}-tx", args.bootstrap, listener=Decides(),
                             end_transaction_timeout=args.send_timeout) as producer:  # fmt: skip
        _keep_sending(args, f"commit-{args.tag}", producer.send_message_in_transaction)


def drain(args: argparse.Namespace) -> None:
    expected = [line for f in args.acked for line in Path(f).read_text().splitlines() if line]
    want = {e.encode() for e in expected}
    read = read_topic(args.bootstrap, args.topic, args.group, want=want, timeout_s=args.timeout_s)
    got = Counter(b.decode() for b in read if b in want)
    missing = [e for e in expected if got[e] == 0]
    duplicated = [e for e in expected if got[e] > 1]
    report(not missing and (args.allow_duplicates or not duplicated), acked=len(expected), read=sum(got.values()),
           missing=len(missing), duplicated=len(duplicated), first_missing=missing[:5])  # fmt: skip


def keep_consuming(args: argparse.Namespace) -> None:
    received = errors = 0
    with PullConsumer(args.group, args.bootstrap, suspend_timeout=1.0, timeout=5.0) as consumer, \
            Path(args.out).open("a", buffering=1) as out:  # fmt: skip
        queues = consumer.fetch_message_queues(args.topic)
        offsets = {mq: 0 for mq in queues}
        while not stopping.is_set():
            for mq in queues:
                try:
                    result = consumer.pull(mq, "*", offsets[mq], 64)
                except TxmqError as exc:
                    errors += 1
                    print(f"pull {mq}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                    time.sleep(0.5)
                    continue
                for m in result.messages:
                    out.write(m.body.decode() + "\n")
                    received += 1
                offsets[mq] = result.next_begin_offset
    report(True, received=received, errors=errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "send-receive": send_receive,
        "transactions": transactions,
        "keep-producing": keep_producing,
        "keep-transacting": keep_transacting,
        "drain": drain,
        "keep-consuming": keep_consuming,
    }
    for name, fn in commands.items():
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--group", required=True)
        p.add_argument("--tag", default="deploy")
        p.add_argument("--count", type=int, default=100)
        p.add_argument("--acked", nargs="*" if name == "drain" else None)
        p.add_argument("--out")
        p.add_argument("--interval-s", type=float, default=0.02)
        p.add_argument("--send-timeout", type=float, default=30.0)
        p.add_argument("--timeout-s", type=float, default=120.0)
        p.add_argument("--allow-duplicates", action="store_true")
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
