"""``Admin``'s cluster calls: the stores' status, replicated store groups and picking
the leader of one (docs/replication.md)."""

from __future__ import annotations

from txmq._admin_base import AdminBase
from txmq._client import call
from txmq._convert import store_status_from_proto
from txmq.errors import NotFoundError, TxmqError
from txmq.models import ElectedReplica, Endpoint, ReplicaState, ServiceKind, StoreGroupStatus, StoreStatus
from txmq.protocol import replica_id_of
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc


class ClusterAdmin(AdminBase):
    def store_status(self, *, store_id: str | None = None) -> list[StoreStatus]:
        return [
            store_status_from_proto(
                s.address, self._call(s, self._admin_stub(s).GetStoreStatus, store_pb2.GetStoreStatusRequest())
            )
            for s in self._stores(store_id)
        ]

    def store_group_status(self, *, store_id: str | None = None) -> list[StoreGroupStatus]:
        """Every replicated store group (or one): each registered replica asked for its
        state, its leader for its followers' lag. A replica that does not answer is
        listed as ``unreachable``."""
        groups: dict[str, list[Endpoint]] = {}
        for e in self.endpoints(ServiceKind.STORE_REPLICA):
            group, _, _ = e.instance_id.rpartition(".")
            if store_id is None or group == store_id:
                groups.setdefault(group, []).append(e)
        if store_id is not None and not groups:
            raise NotFoundError(
                f"no live replica of store group {store_id!r}",
                code=errors_pb2.CODE_STORE_NOT_FOUND,
                metadata={"store_id": store_id},
            )
        return [self._group_status(group, members) for group, members in sorted(groups.items())]

    def elect_store_replica(self, store_id: str, replica_id: str, *, force: bool) -> ElectedReplica:
        """Pick the leader of a store group that cannot elect one (every replica needs a
        resync, or every in-sync replica is gone; docs/replication.md "Picking a
        leader"): the replica, which must be registered, makes itself the group's only
        in-sync member and leads at its next tick. What the other replicas hold beyond
        its log is cut from them: acknowledged records may be lost, which ``force``
        (required, True) accepts. Refused with ``CODE_GROUP_HAS_LEADER`` while a leader
        holds the group; ``CODE_STORE_NOT_FOUND`` / ``CODE_REPLICA_NOT_FOUND`` when no
        such group or replica is registered."""
        members = [
            (rid, e)
            for e in self.endpoints(ServiceKind.STORE_REPLICA)
            if (rid := replica_id_of(e.instance_id, store_id)) is not None
        ]
        if not members:
            raise NotFoundError(
                f"no live replica of store group {store_id!r}",
                code=errors_pb2.CODE_STORE_NOT_FOUND,
                metadata={"store_id": store_id},
            )
        address = next((e.address for rid, e in members if rid == replica_id), None)
        if address is None:
            raise NotFoundError(
                f"store group {store_id!r} has no live replica {replica_id!r} "
                f"(registered: {', '.join(sorted(rid for rid, _ in members))})",
                code=errors_pb2.CODE_REPLICA_NOT_FOUND,
                metadata={"store_id": store_id, "replica_id": replica_id},
            )
        stub = self._core.stub(address, store_pb2_grpc.StoreReplicationStub)
        request = store_pb2.ElectReplicaRequest(store_id=store_id, replica_id=replica_id, force=force)
        response = call(stub.ElectReplica, request, timeout=self._timeout)
        return ElectedReplica(store_id, replica_id, response.state.epoch, response.log_end)

    def _group_status(self, group: str, members: list[Endpoint]) -> StoreGroupStatus:
        answers: dict[str, tuple[Endpoint, store_pb2.ReplicaStatus | None]] = {}
        for e in sorted(members, key=lambda e: e.instance_id):
            stub = self._core.stub(e.address, store_pb2_grpc.StoreReplicationStub)
            try:
                st = call(stub.GetReplicaStatus, store_pb2.GetReplicaStatusRequest(), timeout=self._timeout)
            except TxmqError:
                st = None
            answers[replica_id_of(e.instance_id, group) or e.instance_id] = (e, st)
        leader = next((st for _, st in answers.values() if st is not None and st.role == "leader"), None)
        progress = {p.replica_id: p for p in leader.followers} if leader is not None else {}
        replicas = []
        for rid, (e, st) in answers.items():
            p = progress.get(rid)
            replicas.append(
                ReplicaState(
                    replica_id=rid,
                    address=e.address,
                    role=st.role if st is not None else "unreachable",
                    epoch=st.epoch if st is not None else 0,
                    log_end=st.log_end if st is not None else -1,
                    high_watermark=st.high_watermark if st is not None else -1,
                    lag_bytes=0 if st is leader and st is not None else (p.lag_bytes if p else -1),
                    in_sync=(rid in leader.in_sync) if leader is not None else None,
                    caught_up_ms_ago=0 if st is leader and st is not None else (p.caught_up_ms_ago if p else -1),
                    needs_resync=st.needs_resync if st is not None else False,
                )
            )
        # Without a leader, the in-sync set as the group's state in etcd has it (any
        # replica that answered read it).
        told = leader or next((st for _, st in answers.values() if st is not None), None)
        return StoreGroupStatus(
            store_id=group,
            leader=leader.replica_id if leader is not None else "",
            epoch=leader.epoch if leader is not None else max((r.epoch for r in replicas), default=0),
            in_sync=tuple(told.in_sync) if told is not None else (),
            min_in_sync=leader.min_in_sync if leader is not None else 0,
            replicas=tuple(replicas),
        )
