"""Helpers of the transaction tests that run real processes: flags, waiting for an
outcome (never for a time), a scripted listener, and reads of what is visible."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable

import aetcd
import grpc
from support import ServiceProcess
from support.waiting import WAIT_S as WAIT_S  # re-exported for the tests
from support.waiting import wait_until

from txmq import Admin, LocalTransactionState, TransactionListener
from txmq.v1 import store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

FAST = (
    "--transaction_check_interval_ms", "200",
    "--transaction_timeout_ms", "300",
    "--leader_ttl_ms", "1000",
    "--registration_ttl_ms", "1000",
)  # fmt: skip


def wait_for(what: str, predicate: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    return wait_until(predicate, timeout_s=timeout_s, what=what)


class Listener(TransactionListener):
    def __init__(self, execute: LocalTransactionState, checks: list[LocalTransactionState] | None = None) -> None:
        self.execute = execute
        self.answers = list(checks or [])
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg, arg):
        if arg == "raise":
            raise RuntimeError("local transaction failed")
        return self.execute

    def check_local_transaction(self, msg):
        with self.lock:
            self.checked.append(msg.unique_id)
            return self.answers.pop(0) if self.answers else LocalTransactionState.UNKNOWN


def visible(store_address: str, topic: str) -> list[bytes]:
    with grpc.insecure_channel(store_address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        out = []
        for q in range(4):
            r = stub.GetMessage(store_pb2.GetMessageRequest(topic=topic, queue_id=q, offset=0), timeout=5)
            out += [m.message.body for m in r.messages]
        return out


def query(address: str, txid: str) -> txcheck_pb2.QueryTransactionResponse:
    with grpc.insecure_channel(address) as ch:
        return txcheck_pb2_grpc.TransactionStub(ch).QueryTransaction(
            txcheck_pb2.QueryTransactionRequest(transaction_id=txid), timeout=5
        )


def end(address: str, request: txcheck_pb2.EndTransactionRequest, *, timeout: float = 10.0) -> None:
    """One raw EndTransaction to one replica (no SDK retry)."""
    with grpc.insecure_channel(address) as ch:
        txcheck_pb2_grpc.TransactionStub(ch).EndTransaction(request, timeout=timeout)


def new_topic(store: ServiceProcess) -> str:
    topic = f"Tx-{uuid.uuid4().hex[:8]}"
    with Admin(store.address) as admin:
        admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    return topic


def leader_of(etcd_endpoint: str, key: str) -> str | None:
    async def get() -> str | None:
        host, port = etcd_endpoint.rsplit(":", 1)
        async with aetcd.Client(host=host, port=int(port)) as client:
            got = await client.get(key.encode())
            return None if got is None else got.value.decode()

    return asyncio.run(get())
