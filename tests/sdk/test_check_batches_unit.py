"""Checks and answers in batches on the transactional producer's channel, against an
in-process gRPC server standing in for txcheck's ProducerChannel (real sockets, the
real SDK stream code): a check batch is answered in full, answers queued together go
up as one command, and a producer whose check queue is full stops reading (the stream
backs up) instead of dropping checks."""

from __future__ import annotations

import queue
import threading
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest

from txmq import LocalTransactionState, TransactionListener, TransactionProducer
from txmq._channel import MAX_ANSWER_BATCH, ProducerChannel, coalesce
from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, txcheck_pb2, txcheck_pb2_grpc

WAIT_S = 30


def _check(i: int) -> txcheck_pb2.CheckTransactionState:
    return txcheck_pb2.CheckTransactionState(
        message=common_pb2.MessageView(message=common_pb2.Message(topic="T", body=b"b", unique_id=f"tx{i}")),
        transaction_id=f"tx{i}",
        commit_log_offset=1000 + i,
        tran_state_table_offset=i,
        store_id="store-7",
    )


class FakeTxcheck(txcheck_pb2_grpc.TransactionServicer):
    """Sends one check batch after the hello; collects what comes back."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.hello: txcheck_pb2.ProducerHello | None = None
        self.commands: list[txcheck_pb2.ProducerCommand] = []
        self.answers: list[txcheck_pb2.EndTransactionRequest] = []
        self.done = threading.Event()

    def ProducerChannel(self, request_iterator, context):  # type: ignore[no-untyped-def]
        first = next(request_iterator)
        self.hello = first.hello
        context.send_initial_metadata((("txmq-channel", "open"),))

        def read() -> None:
            try:
                self._read(request_iterator)
            except grpc.RpcError:  # the stream ended (the test closes the producer)
                pass

        threading.Thread(target=read, daemon=True).start()
        yield txcheck_pb2.ServerCommand(
            check_batch=txcheck_pb2.CheckTransactionBatch(checks=[_check(i) for i in range(self.n)])
        )
        self.done.wait(WAIT_S)

    def _read(self, request_iterator) -> None:  # type: ignore[no-untyped-def]
        for cmd in request_iterator:
            self.commands.append(cmd)
            kind = cmd.WhichOneof("command")
            if kind == "end_transaction":
                self.answers.append(cmd.end_transaction)
            elif kind == "end_transactions":
                self.answers.extend(cmd.end_transactions.requests)
            if len(self.answers) >= self.n:
                self.done.set()


@dataclass
class _Endpoint:
    address: str


class _Core:
    def __init__(self, address: str) -> None:
        self.routes = self
        self.address = address
        self.channels: list[grpc.Channel] = []

    def endpoints(self, kind, *, timeout):  # type: ignore[no-untyped-def]
        return [_Endpoint(self.address)]

    def stub(self, address, stub_type):  # type: ignore[no-untyped-def]
        ch = grpc.insecure_channel(address)
        self.channels.append(ch)
        return stub_type(ch)


class GatedListener(TransactionListener):
    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.started = 0
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg, arg):  # type: ignore[no-untyped-def]
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg):  # type: ignore[no-untyped-def]
        with self.lock:
            self.started += 1
        self.gate.wait(WAIT_S)
        return (
            LocalTransactionState.COMMIT
            if msg.unique_id.endswith(("0", "2", "4", "6", "8"))
            else (LocalTransactionState.ROLLBACK)
        )


def _serve(servers: list, svc):  # type: ignore[no-untyped-def]
    server = grpc.server(futures.ThreadPoolExecutor(4))
    txcheck_pb2_grpc.add_TransactionServicer_to_server(svc, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servers.append(server)
    return svc, f"127.0.0.1:{port}"


@pytest.fixture
def fake():  # type: ignore[no-untyped-def]
    servers: list = []
    yield lambda n: _serve(servers, FakeTxcheck(n))
    for s in servers:
        s.stop(None)


@pytest.fixture
def fake_end():  # type: ignore[no-untyped-def]
    servers: list = []
    yield lambda refuse: _serve(servers, EndingTxcheck(refuse))
    for s in servers:
        s.stop(None)


def _producer(address: str, listener: TransactionListener, **kw) -> tuple[TransactionProducer, _Core]:  # type: ignore[no-untyped-def]
    """A TransactionProducer whose check channel goes to ``address`` (no cluster)."""
    p = TransactionProducer("PG_BATCH", "127.0.0.1:1", listener=listener, **kw)
    core = _Core(address)
    p._executor = futures.ThreadPoolExecutor(kw.get("check_threads", 1))
    p._channel = ProducerChannel(core, group="PG_BATCH", client_id="c1", on_checks=p._on_checks)  # type: ignore[arg-type]
    p._channel.start()
    return p, core


def _close(p: TransactionProducer, core: _Core) -> None:
    assert p._channel is not None and p._executor is not None
    p._channel.stop()
    p._executor.shutdown(wait=True)
    for ch in core.channels:
        ch.close()


def test_a_check_batch_is_answered_in_full(fake) -> None:  # type: ignore[no-untyped-def]
    svc, address = fake(50)
    listener = GatedListener()
    p, core = _producer(address, listener, check_threads=4)
    try:
        assert svc.done.wait(WAIT_S), f"{len(svc.answers)} answers"
    finally:
        _close(p, core)
    assert svc.hello is not None and svc.hello.accepts_check_batches and svc.hello.producer_group == "PG_BATCH"
    by_id = {a.transaction_id: a for a in svc.answers}
    assert sorted(by_id) == sorted(f"tx{i}" for i in range(50)) and len(svc.answers) == 50
    for i in range(50):
        a = by_id[f"tx{i}"]
        assert a.from_transaction_check and a.store_id == "store-7" and a.producer_group == "PG_BATCH"
        assert a.commit_log_offset == 1000 + i and a.tran_state_table_offset == i
        want = LocalTransactionState.COMMIT if i % 2 == 0 else LocalTransactionState.ROLLBACK
        assert a.resolution == want.value
    assert len(svc.commands) <= 50


def test_queued_answers_go_up_as_one_command() -> None:
    """What the stream's request iterator yields when answers were queued meanwhile."""
    channel = ProducerChannel(None, group="g", client_id="c", on_checks=lambda checks: None)  # type: ignore[arg-type]
    out: queue.Queue = queue.Queue()
    answers = [
        txcheck_pb2.ProducerCommand(end_transaction=txcheck_pb2.EndTransactionRequest(transaction_id=f"t{i}"))
        for i in range(MAX_ANSWER_BATCH + 3)
    ]
    for a in answers:
        out.put(a)
    gen = channel._requests(out)
    assert next(gen).hello.accepts_check_batches
    first, second = next(gen), next(gen)
    assert [r.transaction_id for r in first.end_transactions.requests] == [f"t{i}" for i in range(MAX_ANSWER_BATCH)]
    assert [r.transaction_id for r in second.end_transactions.requests] == [f"t{i}" for i in range(256, 259)]
    single = coalesce([answers[0]])
    assert single.WhichOneof("command") == "end_transaction"


def test_a_full_check_queue_backs_the_stream_up_instead_of_dropping(fake) -> None:  # type: ignore[no-untyped-def]
    svc, address = fake(10)
    listener = GatedListener()
    listener.gate.clear()
    p, core = _producer(address, listener, check_threads=1, check_queue_size=2)
    try:
        # One check runs (blocked), two wait for the thread; the reader waits for room.
        deadline = threading.Event()
        for _ in range(100):
            if listener.started == 1:
                break
            deadline.wait(0.05)
        assert listener.started == 1 and svc.answers == []
        listener.gate.set()
        assert svc.done.wait(WAIT_S), f"{len(svc.answers)} answers"
    finally:
        _close(p, core)
    assert sorted(a.transaction_id for a in svc.answers) == sorted(f"tx{i}" for i in range(10))


class EndingTxcheck(txcheck_pb2_grpc.TransactionServicer):
    """Answers ENDs sent up the channel (it says so in its initial metadata); refuses
    the transaction ids named in ``refuse`` with the given detail; counts unary ENDs."""

    def __init__(self, refuse: dict[str, errors_pb2.ErrorDetail]) -> None:
        self.refuse = refuse
        self.stream_ends: list[txcheck_pb2.EndTransactionRequest] = []
        self.unary_ends: list[txcheck_pb2.EndTransactionRequest] = []
        self.out: queue.Queue = queue.Queue()

    def EndTransaction(self, request, context):  # type: ignore[no-untyped-def]
        self.unary_ends.append(request)
        return txcheck_pb2.EndTransactionResponse()

    def ProducerChannel(self, request_iterator, context):  # type: ignore[no-untyped-def]
        next(request_iterator)
        context.send_initial_metadata((("txmq-channel", "open"), ("txmq-end-results", "1")))

        def read() -> None:
            try:
                for cmd in request_iterator:
                    reqs = [cmd.end_transaction] if cmd.HasField("end_transaction") else cmd.end_transactions.requests
                    for r in reqs:
                        self.stream_ends.append(r)
                        result = txcheck_pb2.EndTransactionResult(request_id=r.request_id)
                        if r.transaction_id in self.refuse:
                            result.error.CopyFrom(self.refuse[r.transaction_id])
                        self.out.put(txcheck_pb2.ServerCommand(end_result=result))
            except grpc.RpcError:
                pass
            self.out.put(None)

        threading.Thread(target=read, daemon=True).start()
        while (item := self.out.get()) is not None:
            yield item


def test_ends_go_up_the_channel_and_fall_back_to_unary(fake_end) -> None:  # type: ignore[no-untyped-def]
    refused = errors_pb2.ErrorDetail(code=errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED, message="rolled back")
    busy = errors_pb2.ErrorDetail(code=errors_pb2.CODE_UNAVAILABLE, message="busy", retriable=True)
    svc, address = fake_end({"t-refused": refused, "t-busy": busy})
    p, core = _producer(address, GatedListener())
    p._started_core = lambda: core  # type: ignore[method-assign]  # unary calls: the same fake
    p._txcheck_addresses = lambda timeout: iter([address])  # type: ignore[method-assign]
    try:
        assert p._channel is not None and p._channel.connected.wait(WAIT_S)

        def request(txid: str) -> txcheck_pb2.EndTransactionRequest:
            return txcheck_pb2.EndTransactionRequest(producer_group="PG_BATCH", transaction_id=txid, resolution=1)

        p._call_end(request("t-ok"))  # answered on the stream: no unary call
        assert [e.transaction_id for e in svc.stream_ends] == ["t-ok"] and svc.unary_ends == []
        assert svc.stream_ends[0].request_id > 0
        with pytest.raises(TxmqError) as info:  # a refusal is raised as the RPC's would be
            p._call_end(request("t-refused"))
        assert info.value.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED and svc.unary_ends == []
        p._call_end(request("t-busy"))  # retriable: tried again as a unary call
        assert [e.transaction_id for e in svc.unary_ends] == ["t-busy"]
    finally:
        _close(p, core)
