"""A replicated store group in a running store process (docs/replication.md): the
group's state in etcd (one key, changed only by compare-and-swap), leadership under
the fenced lease, the leader's side of Follow (shipping its log) and the follower's.

Keys, under the etcd prefix::

    store-groups/<store_id>/state    StoreGroupState (proto JSON); CAS on its mod revision
    store-groups/<store_id>/leader   replica id, under the leader's FencedLease
    services/store/<store_id>        the leader's Endpoint (route look-ups), and
    stores/<store_id>/topics/*       its topics: both under the leader's lease, written
                                     only while the leader key is still ours
"""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf import json_format

from txmq.errors import TxmqError, error
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.calls import internal_channel
from txmq_runtime.clock import SYSTEM_CLOCK, Clock
from txmq_runtime.etcd import RETRYABLE
from txmq_runtime.grpc_errors import rpc
from txmq_runtime.lease import FencedLease, Holding, LeaseLapsed
from txmq_runtime.registry import EtcdKeys, encode

from .codec import read_size_and_magic
from .message_store import MessageStore
from .replica import Replica
from .replication import (
    CONFIG,
    FENCES,
    OFFSETS,
    FollowerView,
    Leadership,
    config_document,
    divergence,
    not_leader,
    ship_span,
)
from .settings import StoreSettings

log = logging.getLogger("txmq.store.group")

#: A leader sends a heartbeat (the high watermark) at least this often.
HEARTBEAT_S = 0.5
#: A reseeding replica sets its log aside in <data_dir>/reseeded-<UTC time>.
RESEEDED = "reseeded-"


def group_prefix(keys: EtcdKeys, store_id: str) -> str:
    return f"{keys.prefix}/store-groups/{store_id}/"


def state_key(keys: EtcdKeys, store_id: str) -> str:
    return group_prefix(keys, store_id) + "state"


def leader_key(keys: EtcdKeys, store_id: str) -> str:
    return group_prefix(keys, store_id) + "leader"


def decode_state(value: bytes) -> store_pb2.StoreGroupState:
    return json_format.Parse(value, store_pb2.StoreGroupState(), ignore_unknown_fields=True)


def replica_of(store: MessageStore) -> Replica:
    """The replica of a store in a group (what runs here runs only for those)."""
    if store.replica is None:
        raise ValueError(f"store {store.store_id} is not a replica of a store group")
    return store.replica


def _epochs(entries: list[tuple[int, int]]) -> list[store_pb2.EpochEntry]:
    return [store_pb2.EpochEntry(epoch=e, start_offset=s) for e, s in entries]


# -- the leader's side -----------------------------------------------------------------


class _ShippedState:
    """The state a Follow stream ships beside the log (topic and group tables, fences,
    consume offsets): each when it changed since it was last shipped, all of it at
    first."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._sent = {OFFSETS: -1, CONFIG: -1, FENCES: -1}  # state versions this stream has shipped

    def add(self, shipment: store_pb2.Shipment) -> bool:
        """Put the state that changed since it was last shipped into ``shipment``, and
        the versions shipped; whether anything was put."""
        store, sent = self._store, self._sent
        added = False
        if store.admin.config_version != sent[CONFIG]:
            sent[CONFIG] = store.admin.config_version
            shipment.topics_json, shipment.subscription_groups_json = store.admin.config_documents()
            added = True
        fences = store.transactions.fences
        if fences.version != sent[FENCES]:
            sent[FENCES], shipment.fences_json = fences.version, config_document(fences.document())
            added = True
        if store.admin.offsets.version != sent[OFFSETS]:
            sent[OFFSETS], shipment.consume_offsets_json = store.admin.offsets_document()
            added = True
        shipment.config_version, shipment.fences_version = sent[CONFIG], sent[FENCES]
        shipment.consume_offsets_version = sent[OFFSETS]
        return added


class ReplicationServicer(store_pb2_grpc.StoreReplicationServicer):
    def __init__(self, store: MessageStore, settings: StoreSettings, group: StoreGroup | None = None) -> None:
        self._store = store
        self._settings = settings
        self.group = group

    @rpc
    async def Follow(
        self, request_iterator: AsyncIterator[store_pb2.FollowerReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.Shipment]:
        reports = request_iterator.__aiter__()
        try:
            first = await reports.__anext__()
        except StopAsyncIteration:
            return
        replica, leadership = self._admit(first)
        cut, position = self._where_to_start(replica, first)
        view = leadership.attach(first.replica_id)
        view.in_flight.clear()
        leadership.reported(view, cut)
        log.info(
            "replica %s follows from offset %d (reported %d%s)", first.replica_id, position, first.log_end,
            f", cut to {cut}" if cut < first.log_end else "",
        )  # fmt: skip
        reader = asyncio.create_task(self._read_reports(reports, leadership, view))
        state = _ShippedState(self._store)
        try:
            opening = store_pb2.Shipment(
                epoch=leadership.epoch, truncate_to=cut, epochs=_epochs(replica.epochs.entries),
                high_watermark=leadership.high_watermark,
            )  # fmt: skip
            state.add(opening)
            yield opening
            async with aclosing(self._ship(replica, leadership, view, reader, state, position)) as shipments:
                async for shipment in shipments:
                    yield shipment
        finally:
            reader.cancel()
            leadership.detach(view)

    def _admit(self, first: store_pb2.FollowerReport) -> tuple[Replica, Leadership]:
        """This replica and its leadership, when it leads and ``first`` (a follower's
        first report) names a follower of its group that it may serve."""
        store, replica = self._store, self._store.replica
        leadership = replica.leadership if replica is not None else None
        if replica is None or leadership is None:
            raise not_leader(*(replica.leader_hint if replica is not None else ("", "")))
        if first.store_id != store.store_id or not first.replica_id or first.replica_id == replica.replica_id:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"a follower of store group {store.store_id} needs its store id and its own replica id",
            )
        if first.segment_bytes != store.commitlog.segment_bytes:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"segment size {first.segment_bytes} differs from the leader's {store.commitlog.segment_bytes}",
            )
        if first.epoch > leadership.epoch:
            raise error(errors_pb2.CODE_FENCED, f"epoch {leadership.epoch} is stale: the follower knows {first.epoch}")
        return replica, leadership

    def _where_to_start(self, replica: Replica, first: store_pb2.FollowerReport) -> tuple[int, int]:
        """(where the follower cuts its log, where shipping starts): where the two logs
        diverge, or the leader's oldest segment for an empty follower.
        CODE_REPLICA_BEHIND_LOG_START when retention deleted what it would copy next."""
        commitlog = self._store.commitlog
        cut = divergence(
            replica.epochs.entries,
            commitlog.write_offset,
            [(e.epoch, e.start_offset) for e in first.epochs],
            first.log_end,
        )
        position = cut
        if cut < commitlog.min_offset:
            if cut > 0:
                start = commitlog.min_offset
                raise error(
                    errors_pb2.CODE_REPLICA_BEHIND_LOG_START,
                    f"the follower's log ends at {cut}, before the leader's oldest segment ({start}): retention "
                    "deleted what it would copy next; it copies the log again from there",
                    log_start=str(start),
                    log_end=str(cut),
                )
            position = commitlog.min_offset
        return cut, position

    async def _ship(
        self, replica: Replica, leadership: Leadership, view: FollowerView, reader: asyncio.Task[None],
        state: _ShippedState, position: int,
    ) -> AsyncGenerator[store_pb2.Shipment, None]:  # fmt: skip
        """The shipments after the first: new log bytes, changed state, and a heartbeat
        (the high watermark) at least every HEARTBEAT_S; ends when the follower does."""
        commitlog = self._store.commitlog
        sent_hw, sent_at = leadership.high_watermark, time.monotonic()
        max_bytes = self._settings.replica_shipment_max_bytes
        while True:
            if replica.leadership is not leadership or leadership.ended:
                raise not_leader(*replica.leader_hint)
            if reader.done():
                reader.result()  # the follower's failure, if any
                return
            shipment = store_pb2.Shipment(epoch=leadership.epoch)
            state_added = state.add(shipment)
            now = time.monotonic()
            end = commitlog.write_offset
            data = self._read(position, end, max_bytes) if position < end else b""
            if data:
                shipment.offset, shipment.data = position, data
                position += len(data)
                leadership.shipped(view, position, end)
            elif position >= end and (sent_hw != leadership.high_watermark or now - sent_at >= HEARTBEAT_S):
                leadership.shipped(view, position, end)  # a heartbeat: it holds all there is
            elif not state_added:
                await leadership.wait_for_change(HEARTBEAT_S)
                continue
            shipment.high_watermark = sent_hw = leadership.high_watermark
            sent_at = now
            yield shipment

    def _read(self, position: int, end: int, max_bytes: int) -> bytes:
        """Whole records from ``position``, within its segment, at most ``max_bytes``
        unless one record (or the segment's closing blank marker) is larger."""
        commitlog = self._store.commitlog
        segment_end = commitlog.roll_next_file(position)
        want = min(segment_end, end) - position
        data = commitlog.read(position, min(want, max_bytes)) or b""
        n = ship_span(data, position, segment_end)
        if n == 0 and len(data) >= 8:
            # One record (or the blank marker) larger than max_bytes: ship it whole.
            size, _ = read_size_and_magic(data)
            whole = segment_end - position if size >= want else size
            data = commitlog.read(position, whole) or b""
            n = ship_span(data, position, segment_end)
        return data[:n]

    @staticmethod
    async def _read_reports(
        reports: AsyncIterator[store_pb2.FollowerReport], leadership: Leadership, view: FollowerView
    ) -> None:
        async for report in reports:
            leadership.reported(
                view,
                report.log_end,
                {OFFSETS: report.consume_offsets_version, CONFIG: report.config_version, FENCES: report.fences_version},
            )

    @rpc
    async def GetReplicaStatus(
        self, request: store_pb2.GetReplicaStatusRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ReplicaStatus:
        return replica_status(self._store, self.group)

    @rpc
    async def ElectReplica(
        self, request: store_pb2.ElectReplicaRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ElectReplicaResponse:
        store, replica, group = self._store, self._store.replica, self.group
        if replica is None or group is None or request.store_id != store.store_id:
            raise error(
                errors_pb2.CODE_STORE_NOT_FOUND,
                f"this store is not a replica of store group {request.store_id!r}",
                store_id=request.store_id,
            )
        if request.replica_id != replica.replica_id:
            raise error(
                errors_pb2.CODE_REPLICA_NOT_FOUND,
                f"this is replica {replica.replica_id} of store group {store.store_id}, not {request.replica_id!r}",
                store_id=request.store_id,
                replica_id=request.replica_id,
            )
        if not request.force:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                "electing a replica needs force: what other replicas hold beyond its log may be lost",
            )
        state = await group.elect_self()
        return store_pb2.ElectReplicaResponse(state=state, log_end=store.commitlog.write_offset)


def replica_status(store: MessageStore, group: StoreGroup | None) -> store_pb2.ReplicaStatus:
    replica = store.replica
    if replica is None:
        return store_pb2.ReplicaStatus()
    leadership = replica.leadership
    role = "leader" if leadership is not None else ("follower" if group and group.following else "candidate")
    state = group.state if group is not None else None
    status = store_pb2.ReplicaStatus(
        store_id=store.store_id,
        replica_id=replica.replica_id,
        role=role,
        epoch=leadership.epoch if leadership else (state.epoch if state else 0),
        log_end=store.commitlog.write_offset,
        high_watermark=replica.high_watermark,
        leader=state.leader if state else "",
        in_sync=sorted(leadership.in_sync) if leadership else (list(state.in_sync) if state else []),
        min_in_sync=store.settings.min_in_sync,
        epochs=_epochs(replica.epochs.entries),
        needs_resync=replica.needs_resync,
    )
    if leadership is not None:
        now = leadership.clock.now_ms()
        end = store.commitlog.write_offset
        for rid, view in sorted(leadership.followers.items()):
            status.followers.append(
                store_pb2.ReplicaProgress(
                    replica_id=rid,
                    log_end=view.log_end,
                    lag_bytes=max(0, end - view.log_end),
                    in_sync=rid in leadership.in_sync,
                    caught_up_ms_ago=max(0, now - view.caught_up_at_ms),
                    connected=view.connected,
                )
            )
    return status


# -- the follower's side ---------------------------------------------------------------


class Follower:
    """Copies the leader's log while this replica follows it: one Follow stream,
    re-opened after a failure until ``stop``."""

    def __init__(
        self,
        store: MessageStore,
        *,
        leader: str,
        address: str,
        epoch: int,
        on_behind: Callable[[str, TxmqError], bool] | None = None,
    ) -> None:
        self._store = store
        self.leader = leader
        self.address = address
        self.epoch = epoch
        #: Called when the leader answers CODE_REPLICA_BEHIND_LOG_START: whether this
        #: replica reseeded (then it copies again at once).
        self._on_behind = on_behind
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"follow-{self.leader}")

    async def stop(self) -> None:
        """Stop copying; returns once the stream is closed. A new leader calls this before
        it takes writes, so it must not hang: the task is cancelled again every 0.5 s until
        it ends (a cancellation swallowed inside grpc's stream, while the old leader was
        cut off and its connection hung, left a take-over waiting forever), and the loop
        does not start another stream once stopping."""
        self._stopping = True
        task = self._task
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)

    async def _run(self) -> None:
        async with internal_channel(self.address) as channel:
            stub = store_pb2_grpc.StoreReplicationStub(channel)
            while not self._stopping:
                try:
                    await self._follow(stub)
                except asyncio.CancelledError:
                    raise
                except grpc.aio.AioRpcError as exc:
                    err = TxmqError.from_rpc_error(exc)
                    if err.code == errors_pb2.CODE_REPLICA_BEHIND_LOG_START and self._on_behind is not None:
                        if self._on_behind(self.leader, err):
                            continue  # copy from the leader's oldest segment now
                    else:
                        log.info("following %s at %s: %s", self.leader, self.address, err)
                except TxmqError as exc:
                    log.warning("following %s at %s stopped: %s", self.leader, self.address, exc)
                except Exception:
                    log.exception("following %s at %s failed", self.leader, self.address)
                await asyncio.sleep(0.2)

    async def _follow(self, stub: store_pb2_grpc.StoreReplicationStub) -> None:
        store, replica = self._store, replica_of(self._store)
        first = store_pb2.FollowerReport(
            store_id=store.store_id, replica_id=replica.replica_id, epoch=self.epoch, log_end=replica.local_log_end,
            epochs=_epochs(replica.epochs.entries), segment_bytes=store.commitlog.segment_bytes,
        )  # fmt: skip
        stream = _FollowStream(store, replica, self.epoch)
        call = stub.Follow(stream.reports(first))
        try:
            async for shipment in call:
                stream.take(shipment)
        finally:
            await stream.end()
            call.cancel()


class _FollowStream:
    """One Follow stream on the follower's side: the reports it sends up, the epochs and
    state versions its leader shipped, and under sync flush the fsync that covers what
    was copied."""

    def __init__(self, store: MessageStore, replica: Replica, epoch: int) -> None:
        self._store = store
        self._replica = replica
        self._epoch = epoch
        self._queue: asyncio.Queue[store_pb2.FollowerReport | None] = asyncio.Queue()  # None: the end
        self._leader_epochs: list[tuple[int, int]] = []
        self._offsets_version = self._config_version = self._fences_version = 0
        self._sync = store.settings.flush_mode == "sync"
        self._flushing: asyncio.Task[None] | None = None

    async def reports(self, first: store_pb2.FollowerReport) -> AsyncIterator[store_pb2.FollowerReport]:
        yield first
        while (report := await self._queue.get()) is not None:
            yield report

    def _report(self) -> None:
        self._queue.put_nowait(
            store_pb2.FollowerReport(
                epoch=self._epoch,
                log_end=self._replica.local_log_end,
                consume_offsets_version=self._offsets_version,
                config_version=self._config_version,
                fences_version=self._fences_version,
            )
        )

    async def _flush(self) -> None:
        # Group commit on the follower: shipments go on being appended while an
        # fsync runs; each fsync covers all of them and is reported once done.
        replica = self._replica
        while replica.local_log_end < self._store.commitlog.write_offset:
            end = await replica.flush_copied()
            replica.epochs.adopt(self._leader_epochs, end)
            self._report()

    def take(self, shipment: store_pb2.Shipment) -> None:
        """Apply one shipment: a cut and the leader's epochs, its configuration, the log
        bytes, the high watermark; then report (under sync flush the fsync covering the
        data reports it)."""
        store, replica = self._store, self._replica
        epochs = replica.epochs
        if shipment.epoch < self._epoch:
            raise error(errors_pb2.CODE_FENCED, f"the leader's epoch {shipment.epoch} is older than {self._epoch}")
        if self._flushing is not None and self._flushing.done():
            self._flushing.result()  # a failed fsync ends the stream
            self._flushing = None
        if shipment.epochs:
            self._leader_epochs = [(e.epoch, e.start_offset) for e in shipment.epochs]
            replica.cut_log(shipment.truncate_to)
            epochs.adopt(self._leader_epochs, store.commitlog.write_offset)
        store.adopt_configs(  # what was not sent is empty and left as it is
            topics=shipment.topics_json,
            groups=shipment.subscription_groups_json,
            offsets=shipment.consume_offsets_json,
            fences=shipment.fences_json,
        )
        if shipment.consume_offsets_json:
            self._offsets_version = shipment.consume_offsets_version
        if shipment.topics_json:
            self._config_version = shipment.config_version
        if shipment.fences_json:
            self._fences_version = shipment.fences_version
        if shipment.data:
            end = replica.copy_shipment(shipment.offset, shipment.data)
            if self._sync:
                if self._flushing is None:
                    self._flushing = asyncio.create_task(self._flush())
            else:
                epochs.adopt(self._leader_epochs, end)
        replica.set_follower_high_watermark(shipment.high_watermark)
        if not (self._sync and shipment.data):
            self._report()

    async def end(self) -> None:
        if self._flushing is not None:
            # Let a running fsync finish (it is not cancelled midway: the log may be
            # cut or copied into next, and what it covers becomes durable).
            await asyncio.gather(self._flushing, return_exceptions=True)
        self._queue.put_nowait(None)  # the request stream ends (grpc's task for it with it)


# -- etcd: the group's state and leadership --------------------------------------------


def may_campaign(
    me: str,
    state: store_pb2.StoreGroupState | None,
    live: set[str],
    *,
    needs_resync: bool,
    unclean: bool,
) -> bool:
    """Whether replica ``me`` may stand for leader: in a group with no in-sync set yet,
    any replica whose log is whole; otherwise a member of the in-sync set whose log is
    whole — or, with unclean election on, anyone once no member of the in-sync set is
    registered (``live``: the replica ids registered in etcd)."""
    if state is None or not state.in_sync:
        return not needs_resync
    if me in state.in_sync and not needs_resync:
        return True
    return unclean and not set(state.in_sync) & live


def replica_ready(
    me: str,
    state: store_pb2.StoreGroupState | None,
    *,
    leading: bool,
    takes_writes: bool,
    needs_resync: bool,
    state_age_ms: int | None,
    max_state_age_ms: int,
) -> bool:
    """Whether replica ``me`` counts as an in-sync copy of its group: what it reports on
    the readiness health service (``txmq.protocol.READY_HEALTH_SERVICE``), which
    Kubernetes' readiness probe, and so a PodDisruptionBudget and a rolling update, go
    by. The leader once it takes writes (it holds what it took over); a follower that
    the group's state in etcd, read no longer than ``max_state_age_ms`` ago
    (``state_age_ms``; None: never read), lists in the in-sync set and that does not
    wait for a resync. A replica the state names as leader but that does not lead (a
    deposed leader, before the next one takes over) is not ready."""
    if leading:
        return takes_writes
    if needs_resync or state is None or state_age_ms is None or state_age_ms > max_state_age_ms:
        return False
    return me in state.in_sync and state.leader != me


class LeaderKeys:
    """The keys a group's leader keeps in etcd for route look-ups (its Endpoint as the
    store, its topics), written only while the leader key is still ours (compare on its
    epoch), under a lease of their own (``ttl_ms``) that the leader refreshes while it
    leads. They outlive a leader that dies by that TTL, so a route never disappears in a
    failover: it names the old address (clients get "unreachable" or NOT_LEADER and wait
    with backoff) until the new leader writes the same keys under its own lease, which
    then own them. Offers ``replace`` like ``Registration``, so the TopicPublisher writes
    through it."""

    def __init__(self, etcd, *, leader_key: str, ttl_ms: int) -> None:
        self._etcd = etcd
        self._leader_key = leader_key
        self._ttl_s = max(1, math.ceil(ttl_ms / 1000))
        self._values: dict[str, bytes] = {}
        self._holding: Holding | None = None
        self._lease_id: int | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def activate(self, holding: Holding) -> None:
        self.deactivate()
        try:
            lease = await self._etcd.lease(self._ttl_s)
        except RETRYABLE as exc:
            log.warning("could not grant the leader keys' lease (publishing on the next change): %s", exc)
            return
        self._holding, self._lease_id = holding, lease.id
        self._refresh = asyncio.create_task(self._keep_alive(lease.id), name="leader-keys")
        await self._write(list(self._values), [])

    @property
    def active(self) -> bool:
        return self._holding is not None and self._lease_id is not None

    def deactivate(self) -> None:
        """Stop refreshing (the keys stay until a new leader takes them over, or the TTL)."""
        self._holding = self._lease_id = None
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None

    async def _keep_alive(self, lease_id: int) -> None:
        while True:
            await asyncio.sleep(self._ttl_s / 3)
            try:
                await self._etcd.refresh_lease(lease_id)
            except RETRYABLE as exc:
                log.info("refreshing the leader keys' lease failed: %s", exc)

    async def put(self, key: str, value: bytes) -> None:
        self._values[key] = value
        await self._write([key], [])

    async def replace(self, values: dict[str, bytes], *, prefix: str) -> None:
        stale = [k for k in self._values if k.startswith(prefix) and k not in values]
        for k in stale:
            del self._values[k]
        changed = [k for k, v in values.items() if self._values.get(k) != v]
        self._values.update(values)
        await self._write(changed, stale)

    async def _write(self, changed: list[str], stale: list[str]) -> None:
        holding, lease_id = self._holding, self._lease_id
        if holding is None or lease_id is None or not (changed or stale):
            return
        tx = self._etcd.transactions
        ops = [tx.delete(k.encode()) for k in stale]
        ops += [tx.put(k.encode(), self._values[k], lease=lease_id) for k in changed]
        async with self._lock:
            try:
                won, _ = await self._etcd.transaction(
                    compare=[tx.mod(self._leader_key.encode()) == holding.epoch], success=ops, failure=[]
                )
            except RETRYABLE as exc:
                log.warning("could not publish the leader's %d key(s): %s", len(ops), exc)
                return
        if not won:
            log.warning("not publishing the leader's keys: the leader key is no longer ours")


@dataclass(slots=True)
class _Read:
    state: store_pb2.StoreGroupState | None
    revision: int  # the state key's mod revision (0: absent)


class StoreGroup:
    """Runs this replica's part in its group: reads the state every ``replica_tick_ms``,
    campaigns when the leader is gone and it is in sync, follows the leader otherwise,
    and as leader keeps the in-sync set in etcd current."""

    def __init__(
        self,
        store: MessageStore,
        *,
        etcd,
        keys: EtcdKeys,
        settings: StoreSettings,
        address: str,
        published: LeaderKeys,
        live_replicas: Callable[[], set[str]] = set,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._store = store
        self._replica = replica_of(store)
        self._etcd = etcd
        self._keys = keys
        self._settings = settings
        self._address = address
        self.published = published
        self._live_replicas = live_replicas  # replica ids registered in etcd now
        self._clock = clock
        self._state_key = state_key(keys, store.store_id)
        self._leader_key = leader_key(keys, store.store_id)
        self._lease = self._new_lease()
        self.state: store_pb2.StoreGroupState | None = None
        self._read_at_ms: int | None = None  # when (clock) ``state`` was read
        self._follower: Follower | None = None
        self._task: asyncio.Task[None] | None = None
        self._holding: Holding | None = None
        self._on_ready: Callable[[bool], None] | None = None
        self._ready: bool | None = None  # as last reported
        #: Logs set aside by a reseed (``reseeded-*`` in the data dir): deleted once in sync.
        self._set_aside = sorted(Path(settings.data_dir).glob(f"{RESEEDED}*"))
        self._cleanup: asyncio.Task[None] | None = None
        self._reseed_refused = False
        self._reseed_failed = False

    def _new_lease(self) -> FencedLease:
        return FencedLease(
            self._etcd, name=f"store group {self._store.store_id}", ttl_ms=self._settings.replica_lease_ms,
            on_lost=self._lost, clock=self._clock,
        )  # fmt: skip

    @property
    def following(self) -> str:
        return self._follower.leader if self._follower is not None else ""

    async def start(self) -> None:
        self._lease.start()
        self._task = asyncio.create_task(self._run(), name="store-group")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._cleanup is not None:
            await asyncio.gather(self._cleanup, return_exceptions=True)
        await self._stop_following()
        self._replica.end_leadership("the store is stopping")
        await self._lease.close()

    async def _run(self) -> None:
        tick = self._settings.replica_tick_ms / 1000
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except (*RETRYABLE, LeaseLapsed) as exc:
                log.info("store group %s: %s", self._store.store_id, exc)
            except Exception:
                log.exception("store group %s step failed", self._store.store_id)
            self._report_ready()
            await asyncio.sleep(tick)

    async def _read(self) -> _Read:
        got = await self._etcd.get(self._state_key.encode())
        if got is None:
            return _Read(None, 0)
        return _Read(decode_state(got.value), got.mod_revision)

    # -- readiness ---------------------------------------------------------------------

    def watch_ready(self, on_ready: Callable[[bool], None]) -> None:
        """Call ``on_ready`` with this replica's readiness (``replica_ready``) now and
        whenever it changes (checked every ``replica_tick_ms``)."""
        self._on_ready, self._ready = on_ready, None
        self._report_ready()

    @property
    def ready(self) -> bool:
        replica = self._replica
        age = None if self._read_at_ms is None else self._clock.now_ms() - self._read_at_ms
        return replica_ready(
            replica.replica_id,
            self.state,
            leading=replica.leadership is not None,
            takes_writes=replica.takes_writes,
            needs_resync=replica.needs_resync,
            state_age_ms=age,
            max_state_age_ms=self._settings.replica_lease_ms,
        )

    def _report_ready(self) -> None:
        ready = self.ready
        if ready != self._ready:
            self._ready = ready
            log.info(
                "store group %s: replica %s is %s", self._store.store_id, self._replica.replica_id,
                "in sync: ready" if ready else "not in sync: not ready",
            )  # fmt: skip
            if self._on_ready is not None:
                self._on_ready(ready)
        if ready and self._set_aside and (self._cleanup is None or self._cleanup.done()):
            # In sync again: the log a reseed set aside is no longer anyone's only copy.
            aside, self._set_aside = self._set_aside, []
            self._cleanup = asyncio.create_task(self._delete_set_aside(aside), name="reseed-cleanup")

    async def _delete_set_aside(self, paths: list[Path]) -> None:
        for path in paths:
            await asyncio.to_thread(shutil.rmtree, path, True)
            log.info("store group %s: deleted %s (the log set aside by a reseed)", self._store.store_id, path)

    # -- reseeding ---------------------------------------------------------------------

    def _reseed(self, leader: str, err: TxmqError) -> bool:
        """The leader says this replica's log ends before its oldest segment
        (CODE_REPLICA_BEHIND_LOG_START): set the log aside and copy the leader's again
        from there — only while etcd shows that leader holding the group's log without
        this replica (it leads and is in the in-sync set, and this replica is not), so
        this replica is not the last in-sync copy of anything. Whether it reseeded."""
        store = self._store
        me, state = self._replica.replica_id, self.state
        if state is None or state.leader != leader or leader not in state.in_sync or me in state.in_sync:
            if not self._reseed_refused:
                self._reseed_refused = True
                log.error(
                    "store group %s: replica %s cannot continue from its leader %s (%s) and does not reseed: etcd "
                    "does not show %s holding the group's log without it (leader %s, in sync %s)",
                    store.store_id, me, leader, err, leader, state.leader if state else "-",
                    ",".join(state.in_sync) if state else "-",
                )  # fmt: skip
            return False
        self._reseed_refused = False
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = Path(self._settings.data_dir) / f"{RESEEDED}{stamp}"
        n = 1
        while aside.exists():
            n += 1
            aside = Path(self._settings.data_dir) / f"{RESEEDED}{stamp}-{n}"
        log.warning(
            "store group %s: replica %s reseeds: its log ends at %s, before the oldest segment of its leader %s "
            "(offset %s; retention deleted what it would copy next); its log is set aside in %s (deleted once it "
            "is in sync again) and copied again from the leader's oldest segment",
            store.store_id, me, err.metadata.get("log_end", "?"), leader, err.metadata.get("log_start", "?"), aside,
        )  # fmt: skip
        try:
            self._replica.reseed(aside)
        except OSError as exc:  # e.g. no hard links on this file system, or the disk full
            if not self._reseed_failed:
                log.error(
                    "store group %s: replica %s could not set its log aside in %s (%s); nothing was cut, it stays "
                    "out of the in-sync set and tries again (said once)",
                    store.store_id, me, aside, exc.strerror or exc,
                )  # fmt: skip
            self._reseed_failed = True
            return False
        self._reseed_failed = False
        self._set_aside.append(aside)
        return True

    # -- an operator's pick --------------------------------------------------------------

    async def elect_self(self) -> store_pb2.StoreGroupState:
        """ElectReplica: make this replica the group's only in-sync member with no
        leader (compare-and-swap on the state, only while no one holds the leader key)
        and stop waiting for a resync, so it campaigns at its next tick. What the other
        replicas hold beyond its log is cut from them when they follow it."""
        store = self._store
        me = self._replica.replica_id
        tx = self._etcd.transactions
        leader_key_ = self._leader_key.encode()
        try:
            read = await self._read()
            holder = await self._etcd.get(leader_key_)
        except RETRYABLE as exc:
            raise error(errors_pb2.CODE_UNAVAILABLE, f"etcd: {exc}") from None
        if holder is not None:
            leader = holder.value.decode(errors="replace")
            raise error(
                errors_pb2.CODE_GROUP_HAS_LEADER,
                f"replica {leader} leads store group {store.store_id}: a leader is picked only for a group that "
                "cannot elect one",
                leader=leader,
            )
        old = read.state
        new = store_pb2.StoreGroupState()
        if old is not None:
            new.CopyFrom(old)
        new.leader = new.leader_address = ""
        del new.in_sync[:]
        new.in_sync.append(me)
        new.min_in_sync = self._settings.min_in_sync
        new.changed_at_ms = int(time.time() * 1000)
        k = self._state_key.encode()
        compare = [tx.version(leader_key_) == 0]
        compare.append(tx.version(k) == 0 if read.revision == 0 else tx.mod(k) == read.revision)
        try:
            won, _ = await self._etcd.transaction(compare=compare, success=[tx.put(k, encode(new))], failure=[])
        except RETRYABLE as exc:
            raise error(errors_pb2.CODE_UNAVAILABLE, f"etcd: {exc}") from None
        if not won:
            raise error(
                errors_pb2.CODE_CONFLICT,
                f"store group {store.store_id} changed meanwhile (a leader or a new state): nothing was written",
            )
        log.error(
            "store group %s: replica %s was picked to lead by an operator (ElectReplica) from its log end %d; "
            "it was %s, the in-sync set was %s: records acknowledged beyond its log end are lost",
            store.store_id, me, store.commitlog.write_offset,
            "waiting for a resync" if self._replica.needs_resync else "whole",
            ",".join(old.in_sync) if old is not None and old.in_sync else "-",
        )  # fmt: skip
        self.state = new
        self._replica.needs_resync = False
        return new

    async def _step(self) -> None:
        replica = self._replica
        read = await self._read()
        state = self.state = read.state
        self._read_at_ms = self._clock.now_ms()
        me = replica.replica_id
        if replica.leadership is not None:
            if (
                state is None
                or state.leader != me
                or state.epoch != replica.leadership.epoch
                or self._lease.holds(self._leader_key) is None
            ):
                await self._step_down("etcd names another leader or the lease lapsed")
                return
            if not self.published.active and self._holding is not None:
                await self.published.activate(self._holding)  # etcd refused it at the take-over
            await self._keep_in_sync(state, read.revision)
            return
        if state is not None and state.leader and state.leader != me:
            replica.leader_hint = (state.leader, state.leader_address)
        eligible = may_campaign(
            me,
            state,
            self._live_replicas(),
            needs_resync=replica.needs_resync,
            unclean=self._settings.unclean_leader_election,
        )
        if eligible and self._lease.valid():
            campaign = await self._lease.campaign(self._leader_key, me.encode())
            if campaign.holding is not None:
                await self._take_over(state, read.revision, campaign.holding)
                return
        if state is not None and state.leader and state.leader != me:
            await self._follow(state)

    async def _take_over(self, state: store_pb2.StoreGroupState | None, revision: int, holding: Holding) -> None:
        store = self._store
        me = self._replica.replica_id
        old_in_sync = set(state.in_sync) if state is not None else set()
        if state is not None and state.leader:
            old_in_sync.discard(state.leader)
        if state is not None and state.in_sync and me not in state.in_sync:
            # Unclean: nobody who held every acknowledged record is left to lead.
            log.error(
                "store group %s: replica %s leads although it was not in sync (unclean_leader_election): records "
                "acknowledged by %s may be lost",
                store.store_id, me, ",".join(sorted(state.in_sync)),
            )  # fmt: skip
            old_in_sync = set()
        in_sync = frozenset(old_in_sync | {me})
        new = store_pb2.StoreGroupState(
            epoch=(state.epoch if state is not None else 0) + 1,
            leader=me,
            leader_address=self._address,
            in_sync=sorted(in_sync),
            epoch_start_offset=store.commitlog.write_offset,
            min_in_sync=self._settings.min_in_sync,
            changed_at_ms=int(time.time() * 1000),
        )
        if not await self._cas(revision, new):
            await self._lease.release(self._leader_key)
            return
        await self._stop_following()
        self.state = new
        self._holding = holding
        leadership = self._replica.become_leader(
            epoch=new.epoch, in_sync=in_sync, min_in_sync=self._settings.min_in_sync, clock=self._clock
        )
        leadership.lease_valid = lambda: self._lease.holds(self._leader_key) is not None
        await self.published.activate(holding)

    async def _cas(self, revision: int, new: store_pb2.StoreGroupState) -> bool:
        tx = self._etcd.transactions
        k = self._state_key.encode()
        compare = [tx.version(k) == 0] if revision == 0 else [tx.mod(k) == revision]
        won, _ = await self._etcd.transaction(compare=compare, success=[tx.put(k, encode(new))], failure=[])
        return bool(won)

    async def _keep_in_sync(self, state: store_pb2.StoreGroupState, revision: int) -> None:
        leadership = self._replica.leadership
        assert leadership is not None
        wanted = leadership.wanted_in_sync(lag_max_ms=self._settings.replica_lag_max_ms)
        if wanted == leadership.in_sync:
            return
        new = store_pb2.StoreGroupState()
        new.CopyFrom(state)
        del new.in_sync[:]
        new.in_sync.extend(sorted(wanted))
        new.changed_at_ms = int(time.time() * 1000)
        leadership.pending_in_sync = wanted  # acknowledgements count against both sets meanwhile
        try:
            won = await self._cas(revision, new)
        finally:
            if leadership.pending_in_sync == wanted:
                leadership.pending_in_sync = None
        if won:
            log.info(
                "store group %s: in sync now %s (was %s)",
                self._store.store_id, ",".join(sorted(wanted)), ",".join(sorted(leadership.in_sync)),
            )  # fmt: skip
            self.state = new
            leadership.set_in_sync(wanted)

    async def _follow(self, state: store_pb2.StoreGroupState) -> None:
        f = self._follower
        if f is not None and f.leader == state.leader and f.address == state.leader_address:
            f.epoch = max(f.epoch, state.epoch)
            return
        await self._stop_following()
        log.info(
            "store group %s: replica %s follows %s at %s (epoch %d)",
            self._store.store_id, self._replica.replica_id, state.leader, state.leader_address, state.epoch,
        )  # fmt: skip
        self._follower = Follower(
            self._store, leader=state.leader, address=state.leader_address, epoch=state.epoch,
            on_behind=self._reseed,
        )  # fmt: skip
        self._follower.start()

    async def _stop_following(self) -> None:
        f, self._follower = self._follower, None
        if f is not None:
            await f.stop()

    async def _step_down(self, reason: str) -> None:
        """Stop leading; revoke the leadership's lease (the leader key goes: others may
        campaign at once) and campaign later under a new one. The route keys stay until
        the next leader writes them (``LeaderKeys``)."""
        self._replica.end_leadership(reason)
        self._holding = None
        self.published.deactivate()
        old, self._lease = self._lease, self._new_lease()
        await old.close()
        self._lease.start()

    def _lost(self, holding: Holding, reason: str) -> None:
        if holding.key == self._leader_key:
            self.published.deactivate()
            self._replica.end_leadership(f"leadership lost: {reason}")


def replica_endpoint(store: MessageStore, settings: StoreSettings, address: str) -> common_pb2.Endpoint:
    return common_pb2.Endpoint(
        kind=common_pb2.SERVICE_KIND_STORE,
        instance_id=store.store_id,
        address=address,
        started_at_ms=int(time.time() * 1000),
        labels={"replica": settings.replica_id},
    )


__all__ = ["Follower", "ReplicationServicer", "StoreGroup", "replica_endpoint", "replica_ready"]
