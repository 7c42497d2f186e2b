"""Fixtures for the transaction tests: a real store (in process, served over a real
grpc.aio server) sharing a manual clock with the check loop, so time is driven by hand.
The clock's wall time starts at the real time: the store compares record times with
its files' mtimes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from support.clock import ManualClock

from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc, txcheck_pb2
from txmq_store.message_store import MessageStore
from txmq_store.servicer import add_store_servicers
from txmq_store.settings import StoreSettings
from txmq_txcheck.checkloop import CheckLoop, CheckSettings
from txmq_txcheck.ledger import Ledger
from txmq_txcheck.store_client import StoreClient

SMALL = dict(
    commitlog_segment_bytes=256 * 1024,
    consume_queue_units_per_file=256,
    index_slots_per_file=256,
    index_entries_per_file=1024,
    flush_interval_ms=3_600_000,
    flush_consume_queue_interval_ms=3_600_000,
    consume_offset_persist_interval_ms=3_600_000,
    clean_files_interval_ms=3_600_000,
)
GROUP = "PG_TX"
TOPIC = "TxTopic"


class FakeSender:
    """Stands in for the producer channels: records checks; ``live`` says whether a
    producer of a group is connected."""

    def __init__(self) -> None:
        self.live: set[str] = {GROUP}
        self.checks: list[txcheck_pb2.CheckTransactionState] = []
        self.batches: list[int] = []  # checks per send_checks call

    def has_live_producer(self, group: str) -> bool:
        return group in self.live

    async def send_checks(self, group: str, checks: list[txcheck_pb2.CheckTransactionState]) -> int:
        self.checks.extend(checks)
        self.batches.append(len(checks))
        return len(checks)


@dataclass
class Env:
    store: MessageStore
    client: StoreClient
    stub: store_pb2_grpc.StoreStub
    clock: ManualClock
    ledger: Ledger
    sender: FakeSender
    loop: CheckLoop
    sent: list[store_pb2.SendResult] = field(default_factory=list)

    async def half(self, body: bytes = b"order", *, props: dict[str, str] | None = None, group: str = GROUP):
        r = await self.stub.SendMessage(
            store_pb2.SendMessageRequest(
                message=common_pb2.Message(
                    topic=TOPIC, body=body, properties=props or {}, born_timestamp_ms=self.clock()
                ),
                producer_group=group,
                transaction_prepared=True,
            )
        )
        self.sent.append(r.result)
        return r.result

    def end_request(self, r: store_pb2.SendResult, resolution: int, *, from_check: bool = False, group: str = GROUP):
        return txcheck_pb2.EndTransactionRequest(
            producer_group=group,
            transaction_id=r.transaction_id,
            commit_log_offset=r.commit_log_offset,
            tran_state_table_offset=r.queue_offset,
            resolution=resolution,
            from_transaction_check=from_check,
        )

    async def real_messages(self, queue_id: int | None = None) -> list[common_pb2.MessageView]:
        out = []
        for q in range(4) if queue_id is None else [queue_id]:
            r = await self.stub.GetMessage(store_pb2.GetMessageRequest(topic=TOPIC, queue_id=q, offset=0))
            out += r.messages
        return out

    async def topic_messages(self, topic: str) -> list[common_pb2.MessageView]:
        r = await self.stub.GetMessage(
            store_pb2.GetMessageRequest(topic=topic, queue_id=0, offset=0, max_messages=1000)
        )
        return list(r.messages)

    def new_loop(self, client: StoreClient | None = None, *, epoch: int = 0, **settings: int) -> CheckLoop:
        c = client or self.client
        return CheckLoop(
            c,
            self.ledger
            if client is None
            else Ledger(c, clock=self.clock, transaction_timeout_ms=6000, timeline=self.ledger.timeline),
            self.sender,
            clock=self.clock,
            settings=CheckSettings(**settings),
            store_id="store-0",
            epoch=epoch,
        )


async def open_env(path: Path, **overrides: object) -> tuple[Env, grpc.aio.Server, grpc.aio.Channel]:
    clock = ManualClock(wall_ms=time.time_ns() // 1_000_000)
    settings = StoreSettings(data_dir=str(path / "store"), **{**SMALL, **overrides})  # type: ignore[arg-type]
    store = await MessageStore.open(settings, advertised_address="127.0.0.1:10911", clock=clock)
    store.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    server = grpc.aio.server()
    add_store_servicers(server, store)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    client = StoreClient(channel, store_id=store.store_id, address=f"127.0.0.1:{port}")
    ledger = Ledger(client, clock=clock, transaction_timeout_ms=6000)
    sender = FakeSender()
    loop = CheckLoop(client, ledger, sender, clock=clock, store_id=store.store_id)
    return Env(store, client, store_pb2_grpc.StoreStub(channel), clock, ledger, sender, loop), server, channel


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e, server, channel = await open_env(tmp_path)
    try:
        yield e
    finally:
        await channel.close()
        await server.stop(None)
        await e.store.close()
