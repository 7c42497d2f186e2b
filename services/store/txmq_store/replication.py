"""A replicated store group's data path (docs/replication.md): the epoch history, where
two logs diverge, what the leader knows of its followers (the high watermark, the
in-sync set), and checking the bytes a follower copies.

Who leads, and the in-sync set, are decided in etcd (``group.py``); this module holds no
etcd code and takes an injectable clock, so its rules are unit-tested without sleeping.

The safety argument in short (the full one: docs/replication.md):

- A send is acknowledged only when every member of the in-sync set (and, while a change
  of the set is pending in etcd, every member of the new set too) holds its bytes, and
  the set has at least ``min_in_sync`` members.
- A new leader comes only from the in-sync set, so it holds every acknowledged record.
- Nothing beyond the high watermark (the lowest log end over that set) is dispatched:
  consume queues, the index, arrivals and reads never show a record that a failover
  could take away.
- A rejoining replica cuts its log where its epoch history and the leader's diverge
  (never merely at the high watermark, KIP-101); what it cuts was never dispatched.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from txmq.errors import error
from txmq.records import BLANK_MAGIC
from txmq.v1 import errors_pb2
from txmq_runtime.clock import SYSTEM_CLOCK, Clock

from .codec import BLANK_SIZE, HeldRecord, read_size_and_magic, walk_records
from .fileio import read_json, write_json_atomically

log = logging.getLogger("txmq.store.replication")

Epoch = tuple[int, int]  # (epoch, start offset)
#: The kinds of state shipped beside the log whose changes are answered once replicated.
OFFSETS = "offsets"
CONFIG = "config"
FENCES = "fences"


class EpochHistory:
    """``(epoch, start offset)`` of every leadership this replica's log holds records
    of, oldest first, in ``<data_dir>/replication/epochs.json`` (rewritten atomically).
    A log with records but no history (a store that ran alone before) is epoch 0 from
    its start."""

    def __init__(self, path: Path, entries: list[Epoch]) -> None:
        self.path = path
        self.entries = entries

    @classmethod
    def load(cls, path: Path) -> EpochHistory:
        data = read_json(path) or {}
        return cls(path, [(int(e), int(s)) for e, s in data.get("epochs", [])])

    @property
    def latest(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def replace(self, entries: Iterable[Epoch]) -> None:
        new = list(entries)
        if new != self.entries:
            self.entries = new
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomically(self.path, {"epochs": [list(e) for e in new]})

    def begin(self, epoch: int, start: int) -> None:
        """A leadership of ``epoch`` starts writing at ``start`` (this replica leads)."""
        if self.entries and epoch <= self.latest:
            raise ValueError(f"epoch {epoch} is not after {self.latest}")
        kept = [(e, s) for e, s in self.entries if s < start]
        if not kept and start > 0:
            kept = [(0, 0)]  # records from before the group's first epoch: epoch 0
        self.replace([*kept, (epoch, start)])

    def cut(self, end: int) -> None:
        """The log was cut at ``end``: forget epochs that began at or after it."""
        self.replace([(e, s) for e, s in self.entries if s < end])

    def adopt(self, leader: Sequence[Epoch], end: int) -> None:
        """After copying a leader's log up to ``end``: this log is the leader's below
        ``end``, so its history is the leader's epochs that began below it."""
        self.replace([(e, s) for e, s in leader if s < end] or self.entries[:1])


def divergence(leader: Sequence[Epoch], leader_end: int, follower: Sequence[Epoch], follower_end: int) -> int:
    """Where a follower must cut its log so that what it keeps is the leader's log.

    For the follower's epochs, newest first: an epoch the leader also has ends, in the
    leader's log, where the leader's next epoch begins (or at the leader's end); the
    follower keeps up to the lower of that and its own end. An epoch the leader does
    not have (a leadership whose records never reached the leader) is cut entirely,
    and the epoch before it is looked at. The leader's log was the only one written
    in each of its epochs, so up to that point the bytes are the same."""
    leader = list(leader) or [(0, 0)]
    mine = list(follower) or [(0, 0)]
    leader_epochs = {e for e, _ in leader}
    end = follower_end
    for epoch, start in reversed(mine):
        if epoch in leader_epochs:
            epoch_end = next((s for e, s in leader if e > epoch), leader_end)
            return max(0, min(end, epoch_end))
        end = min(end, start)
    return 0


def ship_span(data: bytes, offset: int, segment_end: int) -> int:
    """How many leading bytes of ``data`` (read at ``offset``, not past its segment)
    are whole records: a shipment never ends inside a record. A blank marker closing
    the segment is whole only with every byte up to the segment's end."""
    at = 0
    n = len(data)
    while at + BLANK_SIZE <= n:
        size, magic = read_size_and_magic(data, at)
        if magic == BLANK_MAGIC and offset + at + size == segment_end:
            return n if at + size <= n else at
        if size <= 0 or at + size > n:
            break
        at += size
    return at


def check_copied(data: bytes, offset: int, segment_end: int) -> list[HeldRecord]:
    """The records of a shipment, each CRC-checked and claiming its own offset; a blank
    marker may close the segment. One pass in the native codec, which also reads what
    dispatching each record needs. Raises CorruptRecord (nothing is written then)."""
    return walk_records(data, offset, segment_end)


@dataclass(slots=True)
class FollowerView:
    """What the leader knows of one follower."""

    replica_id: str
    log_end: int = 0
    #: When (clock ms) the leader last sent it a shipment that reached the leader's log
    #: end and that it has since reported holding (Kafka's lastCaughtUpTime).
    caught_up_at_ms: int = 0
    connected: bool = False
    streams: int = 0
    #: The leader's state versions this follower has taken: the consume-offset table
    #: (OFFSETS), the topic / subscription-group tables (CONFIG), the fences (FENCES).
    versions: dict[str, int] = field(default_factory=dict)
    #: Shipments not yet reported held: (where it ends, the leader's end then, sent at).
    in_flight: collections.deque[tuple[int, int, int]] = field(default_factory=collections.deque)

    def shipped(self, reach: int, leader_end: int, now_ms: int) -> None:
        self.in_flight.append((reach, leader_end, now_ms))

    def reported(self, log_end: int) -> None:
        self.log_end = log_end
        in_flight = self.in_flight
        while in_flight and in_flight[0][0] <= log_end:
            _, leader_end, sent_ms = in_flight.popleft()
            if leader_end <= log_end:
                self.caught_up_at_ms = max(self.caught_up_at_ms, sent_ms)


def not_leader(leader: str = "", address: str = "") -> Exception:
    metadata = {k: v for k, v in (("leader", leader), ("leader_address", address)) if v}
    who = f" (leader: {leader} at {address})" if leader else ""
    return error(errors_pb2.CODE_NOT_LEADER, f"this replica does not lead its store group{who}", **metadata)


@dataclass(slots=True)
class Leadership:
    """One term as leader: the epoch, the in-sync set, the followers' progress and the
    high watermark. Runs on the store's event loop.

    ``local_end`` is the leader's own durable log end (fsynced under sync flush,
    written under async). ``high_watermark`` = the lowest end over the in-sync set and
    a pending set; it only grows within a term."""

    replica_id: str
    epoch: int
    epoch_start: int
    in_sync: frozenset[str]
    min_in_sync: int
    local_end: int
    clock: Clock = SYSTEM_CLOCK
    started_at_ms: int = 0
    pending_in_sync: frozenset[str] | None = None
    followers: dict[str, FollowerView] = field(default_factory=dict)
    high_watermark: int = 0
    ended: bool = False
    #: Called whenever the high watermark grows (the store dispatches).
    on_advance: Callable[[], None] | None = None
    #: Whether the leadership's lease still vouches for it (checked before every write).
    lease_valid: Callable[[], bool] | None = None
    _waiters: collections.deque[tuple[int, asyncio.Future[None]]] = field(default_factory=collections.deque)
    _state_waiters: list[tuple[str, int, asyncio.Future[None]]] = field(default_factory=list)
    _changed: asyncio.Future[None] | None = None

    def __post_init__(self) -> None:
        self.started_at_ms = self.clock.now_ms()
        self.high_watermark = min(self.epoch_start, self.local_end)

    # -- the high watermark ----------------------------------------------------------

    def counted(self) -> frozenset[str]:
        """Whose log ends bound the high watermark: the in-sync set, and while a change
        of it is pending in etcd the new set too (RocketMQ #5663)."""
        if self.pending_in_sync is None:
            return self.in_sync
        return self.in_sync | self.pending_in_sync

    def end_of(self, replica_id: str) -> int:
        if replica_id == self.replica_id:
            return self.local_end
        view = self.followers.get(replica_id)
        return view.log_end if view is not None else 0

    def enough_in_sync(self) -> bool:
        return len(self.in_sync) >= self.min_in_sync and (
            self.pending_in_sync is None or len(self.pending_in_sync) >= self.min_in_sync
        )

    def recompute(self) -> int:
        """Raise the high watermark to the lowest end of the counted replicas; resolve
        the sends it now covers (while enough replicas are in sync). Returns it."""
        hw = min(self.end_of(r) for r in self.counted())
        if hw > self.high_watermark:
            self.high_watermark = hw
            self.poke()
            if self.on_advance is not None:
                self.on_advance()
        if self.enough_in_sync():
            waiters = self._waiters
            while waiters and waiters[0][0] <= self.high_watermark:
                fut = waiters.popleft()[1]
                if not fut.done():
                    fut.set_result(None)
        return self.high_watermark

    def state_held(self, kind: str) -> int:
        """The version of state ``kind`` (OFFSETS, CONFIG) every counted follower took."""
        held = [
            self.followers[r].versions.get(kind, 0) if r in self.followers else 0
            for r in self.counted()
            if r != self.replica_id
        ]
        return min(held) if held else 2**62

    def _resolve_state(self) -> None:
        if not self._state_waiters or not self.enough_in_sync():
            return
        held = {kind: self.state_held(kind) for kind in (OFFSETS, CONFIG, FENCES)}
        keep = []
        for kind, version, fut in self._state_waiters:
            if version <= held[kind]:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((kind, version, fut))
        self._state_waiters = keep

    def wait_state_replicated(self, kind: str, version: int) -> asyncio.Future[None]:
        """A future resolved once every in-sync follower took ``version`` of ``kind``."""
        fut = asyncio.get_running_loop().create_future()
        if self.ended:
            fut.set_exception(not_leader())
            return fut
        self._state_waiters.append((kind, version, fut))
        self._resolve_state()
        self.poke()
        return fut

    def wait_replicated(self, end: int) -> asyncio.Future[None]:
        """A future resolved once the in-sync replicas hold ``[0, end)``."""
        fut = asyncio.get_running_loop().create_future()
        if self.ended:
            fut.set_exception(not_leader())
            return fut
        self._waiters.append((end, fut))
        self.recompute()
        return fut

    def local_durable(self, end: int) -> int:
        if end > self.local_end:
            self.local_end = end
            self.poke()
        return self.recompute()

    # -- followers -------------------------------------------------------------------

    def attach(self, replica_id: str) -> FollowerView:
        view = self.followers.get(replica_id)
        if view is None:
            view = self.followers[replica_id] = FollowerView(replica_id, caught_up_at_ms=self.started_at_ms)
        view.connected = True
        view.streams += 1
        return view

    def detach(self, view: FollowerView) -> None:
        view.streams -= 1
        view.connected = view.streams > 0

    def reported(self, view: FollowerView, log_end: int, versions: dict[str, int] | None = None) -> None:
        view.reported(log_end)
        for kind, version in (versions or {}).items():
            view.versions[kind] = max(view.versions.get(kind, 0), version)
        self.recompute()
        self._resolve_state()

    def shipped(self, view: FollowerView, reach: int, leader_end: int) -> None:
        view.shipped(reach, leader_end, self.clock.now_ms())

    def writes_open(self) -> bool:
        """Writes are taken once the records this leader inherited (up to its epoch's
        start) are held by the in-sync set, and while enough replicas are in sync."""
        return not self.ended and self.high_watermark >= self.epoch_start

    def check_writable(self) -> None:
        if self.lease_valid is not None and not self.lease_valid():
            raise not_leader()  # lapsed (e.g. right after a pause): the loss is being handled
        if self.ended:
            raise not_leader()
        if not self.enough_in_sync():
            raise error(
                errors_pb2.CODE_NOT_ENOUGH_REPLICAS,
                f"{len(self.in_sync)} replica(s) in sync, the group needs {self.min_in_sync}",
                in_sync=",".join(sorted(self.in_sync)),
            )
        if self.high_watermark < self.epoch_start:
            raise error(
                errors_pb2.CODE_SERVICE_NOT_READY,
                "the new leader is waiting for its followers to hold the records it took over",
            )

    # -- the in-sync set ---------------------------------------------------------------

    def wanted_in_sync(self, *, lag_max_ms: int) -> frozenset[str]:
        """The in-sync set this leader asks etcd for: followers that have not held
        everything shipped to them for ``lag_max_ms`` leave; followers holding the high
        watermark and this epoch's start join."""
        now = self.clock.now_ms()
        keep = {self.replica_id}
        for rid in self.in_sync - {self.replica_id}:
            view = self.followers.get(rid)
            since = view.caught_up_at_ms if view is not None else self.started_at_ms
            if now - since <= lag_max_ms:
                keep.add(rid)
        for rid, view in self.followers.items():
            if (
                rid not in keep
                and view.connected
                and view.log_end >= self.high_watermark
                and view.log_end >= self.epoch_start
                and now - view.caught_up_at_ms <= lag_max_ms
            ):
                keep.add(rid)
        return frozenset(keep)

    def set_in_sync(self, members: frozenset[str]) -> None:
        self.in_sync = members
        self.pending_in_sync = None
        self.recompute()
        self._resolve_state()

    def end(self) -> None:
        """The term is over: every waiting send fails (it may or may not survive)."""
        self.ended = True
        self.poke()
        while self._waiters:
            fut = self._waiters.popleft()[1]
            if not fut.done():
                fut.set_exception(not_leader())
        for _, _, fut in self._state_waiters:
            if not fut.done():
                fut.set_exception(not_leader())
        self._state_waiters = []

    # -- shipping ----------------------------------------------------------------------

    def poke(self) -> None:
        """Something to ship (an append) or to tell (the high watermark): wakes every
        shipper waiting in ``wait_for_change``."""
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    async def wait_for_change(self, timeout_s: float) -> None:
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._changed), timeout_s)
        except TimeoutError:
            pass


def config_document(table_document: object) -> bytes:
    return json.dumps(table_document, sort_keys=True, separators=(",", ":")).encode()
