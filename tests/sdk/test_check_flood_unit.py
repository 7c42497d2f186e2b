"""A transactional producer's channel when txcheck sends checks faster than the listener
answers them, and when it mixes single checks with batches: against an in-process gRPC
server standing in for txcheck's ProducerChannel (real sockets, the real SDK stream
code).

The SDK does not drop checks beyond its check slots: its reader stops reading, so what
a flood can make the producer hold is bounded by the slots (``check_threads +
check_queue_size`` checks) plus the stream's HTTP/2 flow-control window (a few MB),
however much the server has to send; the check loop is slowed down instead (txcheck's
per-stream queue fills, docs/transactions.md)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest

from txmq import LocalTransactionState, TransactionListener, TransactionProducer
from txmq._channel import ProducerChannel
from txmq.v1 import common_pb2, txcheck_pb2, txcheck_pb2_grpc

GUARD_S = 30.0  # a hang guard, not a timing claim
BODY = b"x" * 8192
TOTAL = 4000  # 32 MiB of bodies: far more than a flow-control window
PER_BATCH = 50
WINDOW_BOUND = 12 * 1024 * 1024  # grpc's BDP probing grows a window to ~4-5 MiB here


def _check(i: int, body: bytes = b"b") -> txcheck_pb2.CheckTransactionState:
    return txcheck_pb2.CheckTransactionState(
        message=common_pb2.MessageView(message=common_pb2.Message(topic="T", body=body, unique_id=f"tx{i}")),
        transaction_id=f"tx{i}",
        commit_log_offset=5000 + i,
        tran_state_table_offset=i,
        store_id="store-3",
    )


class ScriptedTxcheck(txcheck_pb2_grpc.TransactionServicer):
    """Sends the commands ``script`` yields after the hello, counting the checks it
    handed to gRPC; collects the answers coming back."""

    def __init__(self, script: Iterator[txcheck_pb2.ServerCommand]) -> None:
        self.script = script
        self.sent = 0
        self.hello: txcheck_pb2.ProducerHello | None = None
        self.commands: list[txcheck_pb2.ProducerCommand] = []
        self.answers: list[txcheck_pb2.EndTransactionRequest] = []
        self.lock = threading.Lock()
        self.answered = threading.Condition(self.lock)
        self.finish = threading.Event()

    def ProducerChannel(self, request_iterator, context):
        self.hello = next(request_iterator).hello
        context.send_initial_metadata((("txmq-channel", "open"),))
        threading.Thread(target=self._read, args=(request_iterator,), daemon=True).start()
        for command in self.script:
            yield command
            with self.lock:
                self.sent += 1 if command.HasField("check") else len(command.check_batch.checks)
            if self.finish.is_set():
                return
        self.finish.wait(GUARD_S)

    def _read(self, request_iterator) -> None:
        try:
            for cmd in request_iterator:
                reqs = [cmd.end_transaction] if cmd.HasField("end_transaction") else cmd.end_transactions.requests
                with self.answered:
                    self.commands.append(cmd)
                    self.answers.extend(reqs)
                    self.answered.notify_all()
        except grpc.RpcError:  # the stream ended (the test closes the producer)
            pass

    def wait_answers(self, n: int) -> bool:
        with self.answered:
            return self.answered.wait_for(lambda: len(self.answers) >= n, GUARD_S)


@dataclass
class _Endpoint:
    address: str


class _Core:
    """What ProducerChannel uses of a ClientCore: txcheck endpoints and stubs."""

    def __init__(self, address: str) -> None:
        self.routes = self
        self.address = address
        self.channels: list[grpc.Channel] = []

    def endpoints(self, kind, *, timeout):
        return [_Endpoint(self.address)]

    def stub(self, address, stub_type):
        ch = grpc.insecure_channel(address)
        self.channels.append(ch)
        return stub_type(ch)


class GatedListener(TransactionListener):
    """Answers checks once ``gate`` is open: COMMIT for even ids, ROLLBACK for odd."""

    def __init__(self, *, open_: bool = True) -> None:
        self.gate = threading.Event()
        if open_:
            self.gate.set()
        self.started = 0
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg):
        with self.lock:
            self.started += 1
        self.gate.wait(GUARD_S)
        even = int(msg.unique_id[2:]) % 2 == 0
        return LocalTransactionState.COMMIT if even else LocalTransactionState.ROLLBACK


@pytest.fixture
def serve():
    made: list[tuple[grpc.Server, ScriptedTxcheck]] = []

    def start(script: Iterator[txcheck_pb2.ServerCommand]) -> tuple[ScriptedTxcheck, str]:
        svc = ScriptedTxcheck(script)
        server = grpc.server(futures.ThreadPoolExecutor(4))
        txcheck_pb2_grpc.add_TransactionServicer_to_server(svc, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        made.append((server, svc))
        return svc, f"127.0.0.1:{port}"

    yield start
    for server, svc in made:
        svc.finish.set()
        server.stop(None)


@pytest.fixture
def producer():
    made: list[tuple[TransactionProducer, _Core]] = []

    def start(address: str, listener: TransactionListener, **kw) -> TransactionProducer:
        """A TransactionProducer whose check channel goes to ``address`` (no cluster)."""
        p = TransactionProducer("PG_FLOOD", "127.0.0.1:1", listener=listener, **kw)
        core = _Core(address)
        p._executor = futures.ThreadPoolExecutor(kw.get("check_threads", 1))
        p._channel = ProducerChannel(core, group="PG_FLOOD", client_id="c1", on_checks=p._on_checks)  # type: ignore[arg-type]
        p._channel.start()
        made.append((p, core))
        return p

    yield start
    for p, core in made:
        if isinstance(p.listener, GatedListener):
            p.listener.gate.set()
        assert p._channel is not None and p._executor is not None
        p._channel.stop()
        p._executor.shutdown(wait=True)
        for ch in core.channels:
            ch.close()


def _flood() -> Iterator[txcheck_pb2.ServerCommand]:
    for start in range(0, TOTAL, PER_BATCH):
        checks = [_check(i, BODY) for i in range(start, start + PER_BATCH)]
        yield txcheck_pb2.ServerCommand(check_batch=txcheck_pb2.CheckTransactionBatch(checks=checks))


def test_a_flood_of_checks_is_held_back_not_buffered(serve, producer) -> None:
    """The listener answers nothing while the server has 32 MiB of checks to send: the
    producer holds its slots' worth in the executor, its reader waits, and the server
    gets no further than a flow-control window; once the listener answers, every check
    sent is answered and the rest follows."""
    svc, address = serve(_flood())
    listener = GatedListener(open_=False)
    p = producer(address, listener, check_threads=2, check_queue_size=10)
    channel, executor = p._channel, p._executor
    assert channel is not None and executor is not None
    guard = threading.Event()
    polls = 0
    while not (channel.reader_waiting and listener.started == 2) and polls < GUARD_S / 0.05:
        guard.wait(0.05)  # a liveness poll on other threads' progress
        polls += 1
    assert channel.reader_waiting and listener.started == 2
    # Let the server push whatever the transport takes (it stops moving once the window
    # is full); nothing more reaches the executor meanwhile.
    last, stable = -1, 0
    while stable < 10 and polls < GUARD_S / 0.05:
        with svc.lock:
            now = svc.sent
        stable = stable + 1 if now == last else 0
        last = now
        guard.wait(0.05)
        polls += 1
        assert executor._work_queue.qsize() <= 10 and listener.started == 2  # the slots, no more
    assert 12 <= last < TOTAL and last * len(BODY) < WINDOW_BOUND, f"the server sent {last} checks"
    assert svc.answers == []

    listener.gate.set()
    assert svc.wait_answers(TOTAL), f"{len(svc.answers)} answers of {TOTAL}"
    assert svc.sent == TOTAL
    assert sorted(int(a.transaction_id[2:]) for a in svc.answers) == list(range(TOTAL))  # each once
    assert len(svc.commands) < TOTAL  # answers went up in batches
    a = next(a for a in svc.answers if a.transaction_id == "tx7")
    assert a.resolution == LocalTransactionState.ROLLBACK.value and a.from_transaction_check
    assert (a.commit_log_offset, a.tran_state_table_offset, a.store_id) == (5007, 7, "store-3")


def test_single_checks_and_batches_on_one_stream(serve, producer) -> None:
    """A replica sends single checks (``check``) and batches on the same stream: all are
    run alike and answered with what the listener said, from-check, offsets copied."""

    def script() -> Iterator[txcheck_pb2.ServerCommand]:
        yield txcheck_pb2.ServerCommand(check=_check(0))
        yield txcheck_pb2.ServerCommand(check_batch=txcheck_pb2.CheckTransactionBatch(checks=[_check(1), _check(2)]))
        yield txcheck_pb2.ServerCommand(check=_check(3))
        yield txcheck_pb2.ServerCommand(check_batch=txcheck_pb2.CheckTransactionBatch(checks=[]))  # nothing to run
        yield txcheck_pb2.ServerCommand(check_batch=txcheck_pb2.CheckTransactionBatch(checks=[_check(4)]))

    svc, address = serve(script())
    producer(address, GatedListener(), check_threads=3)
    assert svc.wait_answers(5), f"{len(svc.answers)} answers"
    assert svc.hello is not None and svc.hello.accepts_check_batches
    by_id = {a.transaction_id: a for a in svc.answers}
    assert sorted(by_id) == [f"tx{i}" for i in range(5)] and len(svc.answers) == 5
    for i in range(5):
        a = by_id[f"tx{i}"]
        want = LocalTransactionState.COMMIT if i % 2 == 0 else LocalTransactionState.ROLLBACK
        assert a.resolution == want.value and a.from_transaction_check and a.producer_group == "PG_FLOOD"
        assert (a.commit_log_offset, a.tran_state_table_offset, a.store_id) == (5000 + i, i, "store-3")
