"""Producer channels: which live stream reaches which producer group, kept in etcd.

A transactional producer opens ``ProducerChannel`` (a stream it starts, so a producer
behind NAT can still be checked) to any txcheck replica. That replica writes

    <prefix>/txcheck/producers/<group>/<instance_id>/<client_id> -> {"address", "instance_id", "since_ms"}

under its registration lease and deletes it when the stream ends; if the replica dies,
its lease expires and the keys go with it. Every replica mirrors that prefix (watch),
so a check for group G picks a live channel of G round-robin: a local one is written
to its stream at once, one held by another replica is forwarded to it with
``txmq.v1.TransactionPeer/DeliverCheck`` (``DeliverCheckRequest{channel_key, check}``),
which writes it to the stream there (NOT_FOUND when that channel is gone). A channel
that fails is skipped and the next one tried. Checks travel in batches: the check loop
hands over up to ``check_batch_max`` per group at once; a producer whose hello set
``accepts_check_batches`` gets them as one ``ServerCommand.check_batch``, others one
command per check; a DeliverCheck carries the batch (``check`` + ``more_checks``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import grpc

from txmq.v1 import txcheck_pb2, txcheck_pb2_grpc
from txmq.validation import check_client_id
from txmq_runtime.calls import internal_channel
from txmq_runtime.etcd import EtcdMirror

log = logging.getLogger("txmq.txcheck.channels")

_FORWARD_TIMEOUT_S = 3.0
#: Checks queued for one stream at most: beyond it, handing over more waits (a producer
#: that reads slowly slows the check loop down). Bounds memory per channel.
MAX_QUEUED_CHECKS = 10_000


@dataclass(eq=False)
class LocalChannel:
    key: str
    group: str
    client_id: str
    # The producer's hello said it takes ServerCommand.check_batch.
    batches: bool = False
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    queued_checks: int = 0  # checks in ``queue`` (a command may carry many)
    closed: bool = False
    _room: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._room.set()

    async def put(self, checks: list[txcheck_pb2.CheckTransactionState]) -> bool:
        """Queue ``checks`` for the stream (one command when the producer takes
        batches), waiting while ``MAX_QUEUED_CHECKS`` are queued: a producer that
        reads slowly slows the check loop down (its caller bounds the wait). False,
        nothing queued, when the channel is closed."""
        while not self.closed and self.queued_checks and self.queued_checks + len(checks) > MAX_QUEUED_CHECKS:
            self._room.clear()
            await self._room.wait()
        if self.closed:
            return False
        if self.batches and len(checks) > 1:
            commands = [txcheck_pb2.ServerCommand(check_batch=txcheck_pb2.CheckTransactionBatch(checks=checks))]
        else:
            commands = [txcheck_pb2.ServerCommand(check=c) for c in checks]
        for command in commands:
            self.queue.put_nowait(command)
        self.queued_checks += len(checks)
        return True

    def reply(self, command: txcheck_pb2.ServerCommand) -> None:
        """Queue an answer to the producer (not a check: never waits, not counted)."""
        if not self.closed:
            self.queue.put_nowait(command)

    def taken(self, command: txcheck_pb2.ServerCommand) -> None:
        """``command`` left the queue for the stream."""
        kind = command.WhichOneof("command")
        self.queued_checks -= len(command.check_batch.checks) if kind == "check_batch" else kind == "check"
        self._room.set()

    def close(self) -> None:
        self.closed = True
        self._room.set()


@dataclass(frozen=True, slots=True)
class ChannelEntry:
    key: str
    group: str
    instance_id: str
    client_id: str
    address: str


def producers_prefix(etcd_prefix: str) -> str:
    return f"{etcd_prefix}/txcheck/producers/"


class ChannelDirectory:
    """The mirrored ``producers`` prefix: group -> live channels (MirrorSink)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._by_key: dict[str, ChannelEntry] = {}

    def reset(self, items: Iterable[tuple[str, bytes]]) -> None:
        self._by_key.clear()
        for k, v in items:
            self.put(k, v)

    def put(self, key: str, value: bytes) -> None:
        parts = key.removeprefix(self._prefix).split("/")
        if len(parts) != 3:
            return
        try:
            data = json.loads(value)
        except ValueError:
            return
        self._by_key[key] = ChannelEntry(key, parts[0], parts[1], parts[2], data.get("address", ""))

    def delete(self, key: str) -> None:
        self._by_key.pop(key, None)

    def of_group(self, group: str) -> list[ChannelEntry]:
        return sorted((e for e in self._by_key.values() if e.group == group), key=lambda e: e.key)


class ProducerChannels:
    """Local streams of this replica, the etcd directory of all of them, and the check
    dispatch over both (the check loop's ``CheckSender``)."""

    def __init__(self, *, etcd, registration, etcd_prefix: str, instance_id: str, address: str) -> None:
        self._etcd = etcd
        self._registration = registration
        self._prefix = producers_prefix(etcd_prefix)
        self.instance_id = instance_id
        self.address = address
        self.directory = ChannelDirectory(self._prefix)
        self._mirror = EtcdMirror(etcd, prefix=self._prefix, sink=self.directory) if etcd is not None else None
        self.local: dict[str, LocalChannel] = {}
        self._turn: dict[str, itertools.count] = {}
        self._peers: dict[str, grpc.aio.Channel] = {}

    async def start(self) -> None:
        if self._mirror is not None:
            await self._mirror.start(timeout_s=30)

    async def close(self) -> None:
        if self._mirror is not None:
            await self._mirror.close()
        for ch in self._peers.values():
            await ch.close()
        self._peers.clear()

    def key(self, group: str, client_id: str) -> str:
        return f"{self._prefix}{group}/{self.instance_id}/{client_id}"

    async def open(self, group: str, client_id: str, *, batches: bool = False) -> LocalChannel:
        """Register a channel (the group is checked by the caller). A client id over
        MAX_CLIENT_ID_BYTES is refused (CODE_ILLEGAL_ARGUMENT) before anything is kept
        or written; a key etcd refuses is refused the same way (the registration keeps
        every other key: docs/etcd.md)."""
        check_client_id(client_id)
        key = self.key(group, client_id)
        old = self.local.get(key)
        if old is not None:
            old.close()
        ch = self.local[key] = LocalChannel(key, group, client_id, batches)
        value = json.dumps(
            {"address": self.address, "instance_id": self.instance_id, "since_ms": time.time_ns() // 10**6}
        )
        refusals = await self._registration.put(key, value.encode())
        if refusals:
            ch.close()
            if self.local.get(key) is ch:
                del self.local[key]
            raise refusals[0]
        log.info("producer channel open: group %s client %s", group, client_id)
        return ch

    async def close_channel(self, ch: LocalChannel) -> None:
        ch.close()
        if self.local.get(ch.key) is ch:
            del self.local[ch.key]
            # Exactly this key: a prefix would also take client "c1"'s key with "c".
            await self._registration.delete(ch.key)
            log.info("producer channel closed: group %s client %s", ch.group, ch.client_id)

    def has_live_producer(self, group: str) -> bool:
        return bool(self.directory.of_group(group)) or any(c.group == group for c in self.local.values())

    async def deliver_local(self, key: str, checks: list[txcheck_pb2.CheckTransactionState]) -> bool:
        ch = self.local.get(key)
        return ch is not None and await ch.put(checks)

    async def send_checks(self, group: str, checks: list[txcheck_pb2.CheckTransactionState]) -> int:
        """Send ``checks`` to one live channel of ``group`` (round-robin per batch),
        skipping dead ones: the next channel gets the whole batch. Returns how many were
        delivered (0 or all)."""
        if not checks:
            return 0
        entries = self.directory.of_group(group)
        local_only = [
            ChannelEntry(c.key, c.group, self.instance_id, c.client_id, self.address)
            for c in self.local.values()
            if c.group == group and c.key not in {e.key for e in entries}
        ]
        entries += local_only
        if not entries:
            return 0
        start = next(self._turn.setdefault(group, itertools.count()))
        for n in range(len(entries)):
            e = entries[(start + n) % len(entries)]
            if e.instance_id == self.instance_id:
                if await self.deliver_local(e.key, checks):
                    return len(checks)
                continue
            if await self._forward(e, checks):
                return len(checks)
        return 0

    async def _forward(self, e: ChannelEntry, checks: list[txcheck_pb2.CheckTransactionState]) -> bool:
        channel = self._peers.get(e.address)
        if channel is None:
            channel = self._peers[e.address] = internal_channel(e.address)
        request = txcheck_pb2.DeliverCheckRequest(channel_key=e.key, check=checks[0], more_checks=checks[1:])
        try:
            await txcheck_pb2_grpc.TransactionPeerStub(channel).DeliverCheck(request, timeout=_FORWARD_TIMEOUT_S)
            return True
        except grpc.aio.AioRpcError as exc:
            log.info("forwarding %d checks to %s via %s failed: %s", len(checks), e.client_id, e.address, exc.code())
            return False
