"""txmq._store_ends.StoreEnds: ENDs of concurrent threads to one store share
EndTransactions calls (a group commit), each caller gets its own item's result, and a
caller that gives up before its END was sent takes it back."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from support.waiting import wait_until

from txmq._store_ends import StoreEnds
from txmq.errors import TxmqError, UpstreamTimeoutError
from txmq.v1 import errors_pb2, store_pb2


class Rpc(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "store down"

    def trailing_metadata(self) -> tuple:
        return ()


class FakeStub:
    """EndTransactions that holds each call until ``release`` is set; answers every item
    with its own transaction id (as ``committed.message.unique_id``)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = False
        self.lock = threading.Lock()

    def EndTransactions(self, request: store_pb2.EndTransactionsRequest, timeout: float):
        with self.lock:
            self.batches.append([d.transaction_id for d in request.decisions])
        self.entered.set()
        self.release.wait(10)
        if self.fail:
            raise Rpc()
        resp = store_pb2.DecideTransactionsResponse()
        for d in request.decisions:
            r = resp.results.add(decision=store_pb2.DECISION_COMMIT, first=True)
            r.committed.message.unique_id = d.transaction_id
        return resp


def decision(txid: str) -> store_pb2.ProducerDecision:
    return store_pb2.ProducerDecision(transaction_id=txid, producer_group="G", decision=store_pb2.DECISION_COMMIT)


def test_ends_arriving_during_a_call_share_the_next_one() -> None:
    stub = FakeStub()
    ends = StoreEnds(stub)  # type: ignore[arg-type]
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(ends.end, decision("t0"), 10)
        assert stub.entered.wait(10)
        rest = [pool.submit(ends.end, decision(f"t{i}"), 10) for i in range(1, 8)]
        wait_until(lambda: len(ends._queue) == 7, timeout_s=10, what="the seven ENDs queued behind the call")
        stub.release.set()
        results = [f.result(10) for f in [first, *rest]]
    assert [r.committed.message.unique_id for r in results] == [f"t{i}" for i in range(8)]
    assert stub.batches[0] == ["t0"] and sorted(stub.batches[1]) == [f"t{i}" for i in range(1, 8)]
    assert ends.calls == 2 and not ends._busy and ends._queue == []


def test_a_failed_call_fails_its_items_and_the_lead_moves_on() -> None:
    stub = FakeStub()
    stub.fail = True
    stub.release.set()
    ends = StoreEnds(stub)  # type: ignore[arg-type]
    with pytest.raises(TxmqError) as failed:
        ends.end(decision("t0"), 5)
    assert failed.value.retriable and failed.value.code == errors_pb2.CODE_UNAVAILABLE
    stub.fail = False
    assert ends.end(decision("t1"), 5).committed.message.unique_id == "t1"


def test_a_waiter_that_gives_up_before_its_end_is_sent_takes_it_back() -> None:
    stub = FakeStub()
    ends = StoreEnds(stub)  # type: ignore[arg-type]
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(ends.end, decision("t0"), 10)
        assert stub.entered.wait(10)
        with pytest.raises(UpstreamTimeoutError, match="not sent"):
            ends.end(decision("t1"), 0.05)
        stub.release.set()
        first.result(10)
    assert stub.batches == [["t0"]] and not ends._busy
