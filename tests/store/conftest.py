"""Fixtures for the store tests: small files, an injectable clock, a counting fsync, a
store opened in a temp dir, and the store served over a real grpc.aio server on a
loopback port."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from support.clock import ManualClock

from txmq.v1 import store_pb2_grpc
from txmq_store.message_store import MessageStore
from txmq_store.model import OutgoingMessage
from txmq_store.servicer import add_store_servicers
from txmq_store.settings import StoreSettings

ADDRESS = "127.0.0.1:10911"
SMALL = dict(
    commitlog_segment_bytes=64 * 1024,
    consume_queue_units_per_file=64,
    index_slots_per_file=64,
    index_entries_per_file=256,
    # Long periods: tests trigger checkpoints and flushes themselves.
    flush_interval_ms=3_600_000,
    flush_consume_queue_interval_ms=3_600_000,
    consume_offset_persist_interval_ms=3_600_000,
    clean_files_interval_ms=3_600_000,
)


#: The store's wall clock in these tests starts here (2023-11-14 22:13:20 UTC).
T0_MS = 1_700_000_000_000
#: The ``clock`` fixture's type (the suite's one manual clock; the store takes it as its
#: wall clock: ``clock()`` is the time it stamps).
FakeClock = ManualClock


class CountingFsync:
    """A real fdatasync that counts calls and can be held closed (``gate``)."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        self.gate.wait(timeout=30)
        self.calls += 1
        os.fdatasync(fd)


@dataclass
class StoreFactory:
    base: Path
    clock: FakeClock
    opened: list[MessageStore] = field(default_factory=list)

    def settings(self, name: str = "store", **overrides: object) -> StoreSettings:
        return StoreSettings(data_dir=str(self.base / name), **{**SMALL, **overrides})  # type: ignore[arg-type]

    async def open(
        self, name: str = "store", *, fsync: Callable[[int], None] = os.fdatasync, **overrides: object
    ) -> MessageStore:
        store = await MessageStore.open(
            self.settings(name, **overrides), advertised_address=ADDRESS, clock=self.clock, fsync=fsync
        )
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(wall_ms=T0_MS)


@pytest.fixture
async def stores(tmp_path: Path, clock: FakeClock) -> AsyncIterator[StoreFactory]:
    factory = StoreFactory(tmp_path, clock)
    try:
        yield factory
    finally:
        await factory.close_all()


@pytest.fixture
async def store(stores: StoreFactory) -> MessageStore:
    s = await stores.open()
    s.create_topic("TopicA", read_queue_nums=4, write_queue_nums=4)
    return s


def msg(body: bytes = b"body", *, topic: str = "TopicA", **kw: object) -> OutgoingMessage:
    return OutgoingMessage(topic=topic, body=body, **kw)  # type: ignore[arg-type]


@dataclass
class GrpcStore:
    store: MessageStore
    channel: grpc.aio.Channel
    stub: store_pb2_grpc.StoreStub
    admin: store_pb2_grpc.StoreAdminStub
    service_names: list[str]


@contextlib.asynccontextmanager
async def grpc_server_for(store: MessageStore) -> AsyncIterator[GrpcStore]:
    """``store`` served by a real grpc.aio server on a loopback port, and a client."""
    server = grpc.aio.server()
    names = add_store_servicers(server, store)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield GrpcStore(
            store, channel, store_pb2_grpc.StoreStub(channel), store_pb2_grpc.StoreAdminStub(channel), names
        )
    finally:
        await channel.close()
        await server.stop(None)


@pytest.fixture
async def grpc_store(store: MessageStore) -> AsyncIterator[GrpcStore]:
    async with grpc_server_for(store) as served:
        yield served
