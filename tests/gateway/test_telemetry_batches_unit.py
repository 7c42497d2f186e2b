"""Check batches on the gateway's producer channels (txmq_gateway.telemetry), against
the fake txcheck of test_telemetry_unit (a real in-process gRPC server): a
``check_batch`` reaches the official client as one RecoverOrphanedTransaction per check,
the client's answers (EndTransaction, SOURCE_SERVER_CHECK, one by one) reach txcheck as
answers to checks, and checks a session has no room for are dropped with one warning
per batch."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import pytest

from txmq.v1 import txcheck_pb2, txcheck_pb2_grpc
from txmq_gateway import telemetry
from txmq_gateway.backend import Backend
from txmq_gateway.producer import ProducerCore
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.telemetry import ClientHub
from txmq_gateway.v2 import pb, svc

from .test_telemetry_unit import GUARD_S, Env, FakeCluster, FakeTxcheck, half_message_check, producer_settings, stream

TOPIC = "tx-batch"


class AnsweringTxcheck(FakeTxcheck):
    """The fake txcheck that also takes unary END_TRANSACTIONs (what the gateway sends
    for a client's EndTransaction)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[txcheck_pb2.EndTransactionRequest] = []

    async def EndTransaction(self, request, context):
        self.ends.append(request)
        return txcheck_pb2.EndTransactionResponse()


@pytest.fixture
async def benv() -> AsyncIterator[Env]:
    txcheck = AnsweringTxcheck()
    server = grpc.aio.server()
    txcheck_pb2_grpc.add_TransactionServicer_to_server(txcheck, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{port}"
    cluster = FakeCluster()
    cluster.txcheck.append(address)
    backend = Backend(cluster, timeout_ms=5_000)
    try:
        yield Env(txcheck, cluster, backend, address, GatewaySettings())
    finally:
        await backend.close()
        await server.stop(None)


@pytest.fixture
async def bhub(benv: Env) -> AsyncIterator[ClientHub]:
    h = ClientHub(benv.backend, benv.settings)
    try:
        yield h
    finally:
        await h.close()


class _OnDrop(logging.Handler):
    """Sets ``event`` when the gateway logs a dropped check (on the event loop's thread)."""

    def __init__(self, event: asyncio.Event) -> None:
        super().__init__(logging.WARNING)
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if "dropped" in record.getMessage():
            self.event.set()


def _checks(n: int) -> list[txcheck_pb2.CheckTransactionState]:
    checks = []
    for i in range(n):
        c = half_message_check(TOPIC)
        c.transaction_id = c.message.message.unique_id = f"7F0000010001ABCDEF0123{i:06d}"
        c.commit_log_offset = 8192 + i
        c.tran_state_table_offset = 300 + i
        c.store_id = f"store-{i % 3}"
        checks.append(c)
    return checks


def _batch(checks: list[txcheck_pb2.CheckTransactionState]) -> txcheck_pb2.ServerCommand:
    return txcheck_pb2.ServerCommand(check_batch=txcheck_pb2.CheckTransactionBatch(checks=checks))


async def test_a_check_batch_of_50_is_answered_check_by_check(benv: Env, bhub: ClientHub) -> None:
    """50 checks in one ServerCommand: 50 RecoverOrphanedTransaction commands, each
    answered by the client with its own EndTransaction (SOURCE_SERVER_CHECK), each of
    which reaches txcheck as an answer to a check with the half's store and offsets."""
    txcheck = benv.txcheck
    assert isinstance(txcheck, AnsweringTxcheck)
    producer = ProducerCore(benv.backend, benv.settings, handles=bhub.handles)  # the cluster's one key
    checks = _checks(50)
    async with stream(bhub, "client-b50") as s:
        await s.ask(producer_settings(TOPIC))
        channel = await txcheck.next_channel()
        assert channel.hello.accepts_check_batches and channel.hello.producer_group == TOPIC
        channel.outgoing.put_nowait(_batch(checks))
        got = [(await s.recv()).recover_orphaned_transaction_command for _ in range(50)]
        assert [g.message.system_properties.message_id for g in got] == [c.transaction_id for c in checks]
        for i, g in enumerate(got):  # as the official client answers: one call per check
            await producer.end_transaction(
                svc.EndTransactionRequest(
                    topic=pb.Resource(name=TOPIC),
                    message_id=g.message.system_properties.message_id,
                    transaction_id=g.transaction_id,
                    resolution=pb.COMMIT if i % 2 == 0 else pb.ROLLBACK,
                    source=pb.SOURCE_SERVER_CHECK,
                )
            )
    assert len(txcheck.ends) == 50
    for i, (c, end) in enumerate(zip(checks, txcheck.ends, strict=True)):
        assert end.transaction_id == c.transaction_id and end.producer_group == TOPIC
        assert end.from_transaction_check
        assert (end.commit_log_offset, end.tran_state_table_offset, end.store_id) == (
            8192 + i,
            300 + i,
            f"store-{i % 3}",
        )
        want = txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT if i % 2 == 0 else txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK
        assert end.resolution == want


async def test_checks_without_room_are_dropped_with_one_warning_per_batch(
    benv: Env,
    bhub: ClientHub,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    """A client that reads nothing while a batch arrives: the session queues up to
    MAX_PENDING_COMMANDS, drops the rest (the check loop asks again) and says so once
    for the batch, with how many; what it queued is delivered, nothing of the rest."""
    monkeypatch.setattr(telemetry, "MAX_PENDING_COMMANDS", 5)
    caplog.set_level(logging.WARNING, logger=telemetry.log.name)
    dropped = asyncio.Event()
    handler = _OnDrop(dropped)
    telemetry.log.addHandler(handler)
    request.addfinalizer(lambda: telemetry.log.removeHandler(handler))
    checks = _checks(50)
    async with stream(bhub, "client-full") as s:
        await s.ask(producer_settings(TOPIC))
        channel = await benv.txcheck.next_channel()
        channel.outgoing.put_nowait(_batch(checks))

        await asyncio.wait_for(dropped.wait(), GUARD_S)
        drops = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
        assert len(drops) == 1, drops
        assert "45 of 50 check(s)" in drops[0] and checks[5].transaction_id in drops[0]

        got = [(await s.recv()).recover_orphaned_transaction_command for _ in range(5)]
        handles = [bhub.handles.decode(g.transaction_id) for g in got]
        assert [h.transaction_id for h in handles] == [c.transaction_id for c in checks[:5]]
        # With room again, the next check is the next command: the dropped ones are gone.
        channel.check(checks[7])
        nxt = (await s.recv()).recover_orphaned_transaction_command
        assert bhub.handles.decode(nxt.transaction_id).transaction_id == checks[7].transaction_id
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1
