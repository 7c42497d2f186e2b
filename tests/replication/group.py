"""A replicated store group of real store processes for the tests, and a workload that
remembers what was acknowledged (the checker's input)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support import ServiceFactory, ServiceProcess
from support.proxy import PartitionProxy
from support.waiting import wait_until

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc

GROUP = "grp"
TOPIC = "ReplTopic"
QUEUES = 4
CONSUMER = "repl-consumer"
TX_GROUP = "repl-tx-producer"
#: What a send may meet while leadership moves: nothing else is expected.
_EXPECTED = (
    errors_pb2.CODE_NOT_LEADER,
    errors_pb2.CODE_NOT_ENOUGH_REPLICAS,
    errors_pb2.CODE_SERVICE_NOT_READY,
    errors_pb2.CODE_UPSTREAM_TIMEOUT,
)


class StoreGroupProcesses:
    """``n`` replicas of one store group (sync flush), each with its own data dir."""

    def __init__(
        self, factory: ServiceFactory, tmp_path, *, n: int = 3, min_in_sync: int = 2, extra=(), partitionable=False
    ) -> None:
        self.replicas: dict[str, ServiceProcess] = {}
        self.data_dirs = {f"r{i}": tmp_path / f"replica-r{i}" for i in range(n)}
        #: With ``partitionable``: per replica, the proxy its followers reach it through
        #: (its advertised address) and the proxy it reaches etcd through.
        self.inbound: dict[str, PartitionProxy] = {}
        self.to_etcd: dict[str, PartitionProxy] = {}
        etcd_port = int(factory.etcd_endpoints.rsplit(":", 1)[1])
        for i in range(n):
            rid = f"r{i}"
            proxies: list[str] = []
            if partitionable:
                self.inbound[rid] = PartitionProxy()
                self.to_etcd[rid] = PartitionProxy(etcd_port)
                proxies = [
                    "--advertised_address", self.inbound[rid].address,
                    "--etcd_endpoints", self.to_etcd[rid].address,
                ]  # fmt: skip
            self.replicas[rid] = factory.start(
                "store",
                "--data_dir", str(tmp_path / f"replica-{rid}"),
                "--store_id", GROUP,
                "--replica_id", rid,
                "--flush_mode", "sync",
                "--min_in_sync", str(min_in_sync),
                "--replica_lease_ms", "2000",
                "--replica_lag_max_ms", "2000",
                "--replica_tick_ms", "100",
                "--commitlog_segment_bytes", str(1 << 20),
                "--disk_min_free_bytes", "0",
                *proxies,
                *extra,
            )  # fmt: skip
            if partitionable:
                self.inbound[rid].upstream_port = self.replicas[rid].bound_port or 0
        self._channels: dict[str, grpc.Channel] = {}
        self.workloads: list[Workload] = []

    def channel(self, rid: str) -> grpc.Channel:
        address = self.replicas[rid].address
        key = f"{rid}@{address}"
        if key not in self._channels:
            self._channels[key] = grpc.insecure_channel(address)
        return self._channels[key]

    def status(self, rid: str) -> store_pb2.ReplicaStatus | None:
        if not self.replicas[rid].process.running():
            return None
        try:
            return store_pb2_grpc.StoreReplicationStub(self.channel(rid)).GetReplicaStatus(
                store_pb2.GetReplicaStatusRequest(), timeout=2
            )
        except grpc.RpcError:
            return None

    def leader(self, *, timeout_s: float = 30.0, writable: bool = True) -> str:
        """The replica that leads (and, with ``writable``, takes writes)."""

        def find() -> str | None:
            for rid in self.replicas:
                st = self.status(rid)
                if st is not None and st.role == "leader":
                    if not writable or self.admin_ok(rid):
                        return rid
            return None

        return wait_until(find, timeout_s=timeout_s, what="a writable leader")

    def admin_ok(self, rid: str) -> bool:
        """Whether ``rid`` takes writes: the test topic is created there (or exists)."""
        try:
            store_pb2_grpc.StoreAdminStub(self.channel(rid)).CreateTopic(
                store_pb2.CreateTopicRequest(
                    topic=common_pb2.TopicConfig(name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
                ),
                timeout=5,
            )
            return True
        except grpc.RpcError as err:
            return TxmqError.from_rpc_error(err).code == errors_pb2.CODE_TOPIC_ALREADY_EXISTS

    def isolate(self, rid: str) -> None:
        """Cut ``rid`` off from etcd and from its followers (not from its clients)."""
        self.inbound[rid].cut()
        self.to_etcd[rid].cut()

    def heal(self, rid: str) -> None:
        self.inbound[rid].heal()
        self.to_etcd[rid].heal()

    def close(self) -> None:
        for work in self.workloads:
            work.stop.set()
        for proxy in [*self.inbound.values(), *self.to_etcd.values()]:
            proxy.close()
        for channel in self._channels.values():
            channel.close()

    def in_sync(self, rid: str) -> list[str]:
        st = self.status(rid)
        return list(st.in_sync) if st else []

    def store_status(self, rid: str) -> store_pb2.GetStoreStatusResponse:
        return store_pb2_grpc.StoreAdminStub(self.channel(rid)).GetStoreStatus(
            store_pb2.GetStoreStatusRequest(), timeout=5
        )

    def health(self, rid: str, service: str) -> int:
        """The health status ``rid`` reports for ``service`` (grpc.health.v1 Check)."""
        return (
            health_pb2_grpc.HealthStub(self.channel(rid))
            .Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            .status
        )


def damage_log(data_dir: Path, round_no: int) -> str:
    """Flip a byte in the middle of the replica's log (even rounds) or cut its newest
    segment file to half (odd rounds)."""
    segments = sorted(p for p in (data_dir / "commitlog").iterdir() if p.name.isdigit())
    if round_no % 2 == 0:
        seg = segments[0]
        with open(seg, "r+b") as f:
            size = len(f.read().rstrip(b"\0"))
            at = size // 2
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0xFF]))
        return f"flipped byte {at} of {seg.name}"
    seg = segments[-1]
    used = len(seg.read_bytes().rstrip(b"\0"))
    os.truncate(seg, used // 2)
    return f"cut {seg.name} from {used} to {used // 2} bytes"


@dataclass(slots=True)
class Acked:
    body: bytes
    queue_id: int
    queue_offset: int


@dataclass
class Workload:
    """Sends batches of unique bodies to whoever leads; keeps what was acknowledged OK.
    A batch that fails (or times out) is not retried with the same bodies: any second
    copy of an acknowledged body is a duplicate the store made."""

    group: StoreGroupProcesses
    batch: int = 8
    acked: list[Acked] = field(default_factory=list)
    #: The highest consume offset whose commit was acknowledged (queue 0 of CONSUMER).
    committed: int = -1
    #: Every ``transaction_every``-th batch is a transaction of two half messages,
    #: committed and rolled back by turns through DecideTransactions.
    transaction_every: int = 4
    #: Bodies of transactions whose rollback was acknowledged: never to be seen.
    rolled_back: list[bytes] = field(default_factory=list)
    transactions: int = 0
    failures: int = 0
    unexpected: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.group.workloads.append(self)
        self.thread = threading.Thread(target=self._run, name="repl-workload", daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=60)

    def acked_count(self) -> int:
        return len(self.acked)

    def _run(self) -> None:
        try:
            self._send_until_stopped()
        except ValueError:  # "Cannot invoke RPC on closed channel": the test is over
            if not self.stop.is_set():
                self.unexpected.append("the workload's channels were closed under it")

    def _send_until_stopped(self) -> None:
        target = None
        n = 0
        while not self.stop.is_set():
            if target is None:
                target = self._find_leader()
                if target is None:
                    time.sleep(0.05)
                    continue
            n += 1
            if n % self.transaction_every == 0:
                target = self._transaction(target, n)
                continue
            bodies = [f"{uuid.uuid4().hex}-{n}-{i}".encode() for i in range(self.batch)]
            request = store_pb2.SendBatchRequest(
                messages=[common_pb2.Message(topic=TOPIC, body=b, tags="t") for b in bodies]
            )
            try:
                response = store_pb2_grpc.StoreStub(self.group.channel(target)).SendBatch(request, timeout=10)
            except grpc.RpcError as err:
                self.failures += 1
                self._note(err)
                target = None
                continue
            for body, result in zip(bodies, response.results, strict=True):
                if result.status == store_pb2.SEND_STATUS_OK:
                    self.acked.append(Acked(body, result.queue.queue_id, result.queue_offset))
                else:
                    self.failures += 1
            try:  # a consume offset that only grows: after any failover it must not be lower
                store_pb2_grpc.StoreStub(self.group.channel(target)).CommitConsumeOffset(
                    store_pb2.CommitConsumeOffsetRequest(consumer_group=CONSUMER, topic=TOPIC, queue_id=0, offset=n),
                    timeout=10,
                )
                self.committed = n
            except grpc.RpcError:
                self.failures += 1
                target = None

    def _transaction(self, target: str, n: int) -> str | None:
        """Two half messages, then commit (odd turns) or roll back (even turns). A
        committed copy acknowledged OK joins ``acked``; an acknowledged rollback's bodies
        join ``rolled_back``. Returns the target to use next (None: look again)."""
        stub = store_pb2_grpc.StoreStub(self.group.channel(target))
        bodies = [f"tx-{uuid.uuid4().hex}-{n}-{i}".encode() for i in range(2)]
        commit = (n // self.transaction_every) % 2 == 1
        try:
            halves = stub.SendBatch(
                store_pb2.SendBatchRequest(
                    messages=[common_pb2.Message(topic=TOPIC, body=b, tags="tx") for b in bodies],
                    producer_group=TX_GROUP,
                    transaction_prepared=True,
                ),
                timeout=10,
            )
            if any(r.status != store_pb2.SEND_STATUS_OK for r in halves.results):
                self.failures += 1
                return target
            decisions = [
                store_pb2.TransactionDecision(
                    commit_log_offset=r.commit_log_offset,
                    tran_state_table_offset=r.queue_offset,
                    transaction_id=r.transaction_id,
                    producer_group=TX_GROUP,
                    decision=store_pb2.DECISION_COMMIT if commit else store_pb2.DECISION_ROLLBACK,
                )
                for r in halves.results
            ]
            decided = stub.DecideTransactions(
                store_pb2.DecideTransactionsRequest(decisions=decisions, transaction_timeout_ms=600_000), timeout=10
            )
        except grpc.RpcError as err:
            self.failures += 1
            self._note(err)
            return None
        self.transactions += 1
        for body, result in zip(bodies, decided.results, strict=True):
            if result.HasField("error") or result.status != store_pb2.SEND_STATUS_OK:
                self.failures += 1
                continue
            if result.decision == store_pb2.DECISION_COMMIT:
                view = result.committed
                self.acked.append(Acked(body, view.message.queue_id, view.queue_offset))
            else:
                self.rolled_back.append(body)
        return target

    def _note(self, err: grpc.RpcError) -> None:
        """Keep a refusal no leader change explains (transport failures are expected)."""
        refusal = TxmqError.from_rpc_error(err)
        if not refusal.transport and refusal.code not in _EXPECTED:
            self.unexpected.append(str(refusal))

    def _find_leader(self) -> str | None:
        for rid, proc in self.group.replicas.items():
            if not proc.process.running():
                continue
            st = self.group.status(rid)
            if st is not None and st.role == "leader":
                return rid
        return None


def committed_offset(group: StoreGroupProcesses, rid: str) -> int:
    resp = store_pb2_grpc.StoreStub(group.channel(rid)).QueryConsumeOffset(
        store_pb2.QueryConsumeOffsetRequest(consumer_group=CONSUMER, topic=TOPIC, queue_id=0), timeout=5
    )
    return resp.offset if resp.found else -1


def read_all(group: StoreGroupProcesses, rid: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every message of the topic on replica ``rid``: queue id -> [(queue offset, body)]."""
    stub = store_pb2_grpc.StoreStub(group.channel(rid))
    out: dict[int, list[tuple[int, bytes]]] = {}
    for qid in range(QUEUES):
        offset = 0
        rows = out.setdefault(qid, [])
        while True:
            resp = stub.GetMessage(
                store_pb2.GetMessageRequest(topic=TOPIC, queue_id=qid, offset=offset, max_messages=256), timeout=10
            )
            if not resp.messages:
                break
            for m in resp.messages:
                rows.append((m.queue_offset, m.message.body))
            offset = resp.next_begin_offset
    return out


def check(
    acked: list[Acked], stored: dict[int, list[tuple[int, bytes]]], rolled_back: list[bytes] = ()
) -> dict[str, int]:
    """The checker: every acknowledged body readable exactly once, at the queue offset
    its acknowledgement named; queue offsets contiguous (none reused, none skipped); no
    body of a rolled-back transaction visible."""
    where: dict[bytes, list[tuple[int, int]]] = {}
    for qid, rows in stored.items():
        offsets = [o for o, _ in rows]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True, (
            f"queue {qid}: offsets not contiguous"
        )
        for o, body in rows:
            where.setdefault(body, []).append((qid, o))
    lost = [a for a in acked if a.body not in where]
    duplicated = [a for a in acked if len(where.get(a.body, ())) > 1]
    moved = [a for a in acked if a.body in where and (a.queue_id, a.queue_offset) not in where[a.body]]
    verdict = {"acked": len(acked), "lost": len(lost), "duplicated": len(duplicated), "moved": len(moved)}
    if rolled_back:
        verdict["rolled_back_visible"] = sum(1 for b in rolled_back if b in where)
    return verdict
