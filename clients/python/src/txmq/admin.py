"""Administration: topics, subscription groups, messages, offsets, store status
(RocketMQ's MQAdminExt, in Python style)."""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from txmq._client import ClientCore, call
from txmq._convert import (
    consume_offset_from_proto,
    group_config_from_proto,
    group_config_to_proto,
    message_ext_from_proto,
    queue_offsets_from_proto,
    store_status_from_proto,
    topic_config_from_proto,
    topic_config_to_proto,
)
from txmq.access import Policy, User, acl_to_proto
from txmq.errors import BadRequestError, NotFoundError, TxmqError, UnavailableError
from txmq.ids import decode_offset_msg_id, new_unique_id
from txmq.message import MessageExt
from txmq.models import (
    READ_WRITE,
    ConsumeOffset,
    ElectedReplica,
    Endpoint,
    Perm,
    QueueOffsets,
    ReplicaState,
    ServiceKind,
    StoreGroupStatus,
    StoreStatus,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicRoute,
)
from txmq.protocol import (
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_ORIGIN_MESSAGE_ID,
    dlq_topic,
    is_system_property,
    replica_id_of,
)
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import auth_pb2, auth_pb2_grpc, common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq.validation import check_group, check_topic

T = TypeVar("T")
R = TypeVar("R")


#: Dead letters read per GetMessage call (``Admin.list_dead_letters``).
_DLQ_PAGE = 256


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message of a group's dead-letter topic ``%DLQ%<group>`` on one store: the
    topic it came from, its unique id (the original message's), how often it had been
    consumed and when it was dead-lettered (``store_timestamp_ms``)."""

    store_id: str
    origin_topic: str
    msg_id: str
    reconsume_times: int
    store_timestamp_ms: int
    offset_msg_id: str
    message: MessageExt


@dataclass(frozen=True, slots=True)
class ResentDeadLetter:
    """A dead letter sent again to its origin topic, as a new message ``msg_id`` whose
    ORIGIN_MESSAGE_ID property names the dead letter (``dead_letter_id``)."""

    dead_letter_id: str
    msg_id: str
    topic: str
    store_id: str
    queue_id: int
    queue_offset: int


@dataclass(frozen=True, slots=True, order=True)
class _Store:
    store_id: str
    address: str


class Admin:
    """Administers a txmq cluster found through ``endpoint`` (any service, ``host:port``).

    Topics and subscription groups are configured per store node, as in RocketMQ:
    calls that change them apply to every live store unless ``store_id`` names one;
    reads answer from the first store that has the object. Thread-safe. ``tls``: TLS
    (and a client certificate) for every channel (``txmq.TlsConfig``).
    ``credentials``: the user every call is signed as (``txmq.Credentials``).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 5.0,
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.endpoint = endpoint
        self._timeout = timeout
        # Administration wants the current state: routes are looked up on every use
        # (the cache only serves as a fallback when no route server answers).
        self._core = ClientCore(endpoint, route_refresh_interval=0.0, tls=tls, credentials=credentials)

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- cluster -----------------------------------------------------------------------

    def endpoints(self, kind: ServiceKind | None = None) -> list[Endpoint]:
        """Live service instances, optionally of one kind."""
        return self._core.routes.endpoints(kind, timeout=self._timeout)

    def topic_route(self, topic: str) -> TopicRoute:
        """Which stores serve the topic's queues (fresh, not cached)."""
        check_topic(topic)
        return self._core.routes.get(topic, timeout=self._timeout)

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

    # -- topics ------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: Perm = READ_WRITE,
        attributes: dict[str, str] | None = None,
        store_id: str | None = None,
        exist_ok: bool = False,
    ) -> TopicConfig:
        """Create the topic on every store (or on ``store_id``). Queue counts default to
        the store's ``default_topic_queue_nums``. Returns the config as stored. A store
        that has the topic already raises ``CODE_TOPIC_ALREADY_EXISTS``; with
        ``exist_ok`` its topic is left as it is (not compared or changed) and returned."""
        check_topic(name)
        config = TopicConfig(name, read_queue_nums or 0, write_queue_nums or 0, perm, dict(attributes or {}))
        request = store_pb2.CreateTopicRequest(topic=topic_config_to_proto(config))

        def create(store: _Store) -> TopicConfig:
            try:
                return topic_config_from_proto(self._call(store, self._admin_stub(store).CreateTopic, request).topic)
            except TxmqError as err:
                if not (exist_ok and err.code == errors_pb2.CODE_TOPIC_ALREADY_EXISTS):
                    raise
            found = self._call(store, self._admin_stub(store).GetTopic, store_pb2.GetTopicRequest(name=name))
            return topic_config_from_proto(found.topic)

        answers = [create(s) for s in self._stores(store_id)]  # every store, in order
        return answers[0]

    def update_topic(
        self,
        name: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: Perm | None = None,
        attributes: dict[str, str] | None = None,
        store_id: str | None = None,
    ) -> TopicConfig:
        """Change the given fields on every store that has the topic (or on ``store_id``);
        fields left as None keep their value. ``attributes`` replaces the whole map."""
        check_topic(name)
        changes = {
            k: v
            for k, v in (
                ("read_queue_nums", read_queue_nums),
                ("write_queue_nums", write_queue_nums),
                ("perm", perm),
                ("attributes", attributes),
            )
            if v is not None
        }

        def update(store: _Store) -> TopicConfig:
            current = topic_config_from_proto(
                self._call(store, self._admin_stub(store).GetTopic, store_pb2.GetTopicRequest(name=name)).topic
            )
            wanted = topic_config_to_proto(dataclasses.replace(current, **changes))
            answer = self._call(store, self._admin_stub(store).UpdateTopic, store_pb2.UpdateTopicRequest(topic=wanted))
            return topic_config_from_proto(answer.topic)

        return self._on_stores_having(store_id, update)[0]

    def delete_topic(self, name: str, *, store_id: str | None = None) -> None:
        """Delete the topic from every store that has it (or from ``store_id``)."""
        check_topic(name)
        request = store_pb2.DeleteTopicRequest(name=name)
        self._on_stores_having(store_id, lambda s: self._call(s, self._admin_stub(s).DeleteTopic, request))

    def get_topic(self, name: str, *, store_id: str | None = None) -> TopicConfig:
        check_topic(name)
        request = store_pb2.GetTopicRequest(name=name)
        return self._first_store_having(
            store_id, lambda s: topic_config_from_proto(self._call(s, self._admin_stub(s).GetTopic, request).topic)
        )

    def list_topics(self, *, include_system: bool = False, store_id: str | None = None) -> list[TopicConfig]:
        """Topics of every store (or of ``store_id``), by name; a topic on several stores
        is listed once, as its first store has it."""
        request = store_pb2.ListTopicsRequest(include_system=include_system)
        found: dict[str, TopicConfig] = {}
        for store in self._stores(store_id):
            for pb in self._call(store, self._admin_stub(store).ListTopics, request).topics:
                found.setdefault(pb.name, topic_config_from_proto(pb))
        return sorted(found.values(), key=lambda t: t.name)

    # -- subscription groups -------------------------------------------------------------

    def create_subscription_group(
        self,
        name: str,
        *,
        consume_enable: bool = True,
        consume_broadcast_enable: bool = False,
        retry_max_times: int = 16,
        retry_queue_nums: int = 1,
        store_id: str | None = None,
        exist_ok: bool = False,
    ) -> SubscriptionGroupConfig:
        """Create the group on every store (or on ``store_id``). A store that has it
        already raises ``CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS``; with ``exist_ok`` its
        group is left as it is and returned."""
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        config = SubscriptionGroupConfig(
            name, consume_enable, consume_broadcast_enable, retry_max_times, retry_queue_nums
        )
        request = store_pb2.CreateSubscriptionGroupRequest(group=group_config_to_proto(config))

        def create(store: _Store) -> SubscriptionGroupConfig:
            try:
                answer = self._call(store, self._admin_stub(store).CreateSubscriptionGroup, request)
                return group_config_from_proto(answer.group)
            except TxmqError as err:
                if not (exist_ok and err.code == errors_pb2.CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS):
                    raise
            found = self._call(
                store,
                self._admin_stub(store).GetSubscriptionGroup,
                store_pb2.GetSubscriptionGroupRequest(group_name=name),
            )
            return group_config_from_proto(found.group)

        answers = [create(s) for s in self._stores(store_id)]  # every store, in order
        return answers[0]

    def update_subscription_group(
        self,
        name: str,
        *,
        consume_enable: bool | None = None,
        consume_broadcast_enable: bool | None = None,
        retry_max_times: int | None = None,
        retry_queue_nums: int | None = None,
        store_id: str | None = None,
    ) -> SubscriptionGroupConfig:
        """Change the given fields on every store that has the group; None keeps a field."""
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        changes = {
            k: v
            for k, v in (
                ("consume_enable", consume_enable),
                ("consume_broadcast_enable", consume_broadcast_enable),
                ("retry_max_times", retry_max_times),
                ("retry_queue_nums", retry_queue_nums),
            )
            if v is not None
        }

        def update(store: _Store) -> SubscriptionGroupConfig:
            request = store_pb2.GetSubscriptionGroupRequest(group_name=name)
            current = group_config_from_proto(
                self._call(store, self._admin_stub(store).GetSubscriptionGroup, request).group
            )
            wanted = group_config_to_proto(dataclasses.replace(current, **changes))
            answer = self._call(
                store,
                self._admin_stub(store).UpdateSubscriptionGroup,
                store_pb2.UpdateSubscriptionGroupRequest(group=wanted),
            )
            return group_config_from_proto(answer.group)

        return self._on_stores_having(store_id, update)[0]

    def pause_consumer_group(self, name: str, *, store_id: str | None = None) -> SubscriptionGroupConfig:
        """Pause the group: ``consume_enable`` off on every store that has it (or on
        ``store_id``); its pulls are refused with ``CODE_CONSUME_DISABLED`` until
        ``resume_consumer_group``. Offsets and members stay. A group no store has yet
        is created paused on every store (pausing ahead of the first consumer)."""
        try:
            return self.update_subscription_group(name, consume_enable=False, store_id=store_id)
        except NotFoundError as err:
            if err.code != errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND:
                raise
        return self.create_subscription_group(name, consume_enable=False, store_id=store_id, exist_ok=True)

    def resume_consumer_group(self, name: str, *, store_id: str | None = None) -> SubscriptionGroupConfig:
        """Undo ``pause_consumer_group`` on every store that has the group; a group no
        store has raises ``CODE_SUBSCRIPTION_GROUP_NOT_FOUND``."""
        return self.update_subscription_group(name, consume_enable=True, store_id=store_id)

    def consumer_group_paused(self, name: str, *, store_id: str | None = None) -> bool:
        """Whether any store that has the group (or ``store_id``) refuses its pulls."""
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        request = store_pb2.GetSubscriptionGroupRequest(group_name=name)
        configs = self._on_stores_having(
            store_id,
            lambda s: group_config_from_proto(self._call(s, self._admin_stub(s).GetSubscriptionGroup, request).group),
        )
        return any(not c.consume_enable for c in configs)

    def delete_subscription_group(self, name: str, *, store_id: str | None = None) -> None:
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        request = store_pb2.DeleteSubscriptionGroupRequest(group_name=name)
        self._on_stores_having(store_id, lambda s: self._call(s, self._admin_stub(s).DeleteSubscriptionGroup, request))

    def get_subscription_group(self, name: str, *, store_id: str | None = None) -> SubscriptionGroupConfig:
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        request = store_pb2.GetSubscriptionGroupRequest(group_name=name)
        return self._first_store_having(
            store_id,
            lambda s: group_config_from_proto(self._call(s, self._admin_stub(s).GetSubscriptionGroup, request).group),
        )

    def list_subscription_groups(self, *, store_id: str | None = None) -> list[SubscriptionGroupConfig]:
        found: dict[str, SubscriptionGroupConfig] = {}
        for store in self._stores(store_id):
            response = self._call(
                store, self._admin_stub(store).ListSubscriptionGroups, store_pb2.ListSubscriptionGroupsRequest()
            )
            for pb in response.groups:
                found.setdefault(pb.group_name, group_config_from_proto(pb))
        return sorted(found.values(), key=lambda g: g.group_name)

    # -- messages ----------------------------------------------------------------------

    def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message an offsetMsgId names, from the store that the id names."""
        try:
            host, port, _ = decode_offset_msg_id(offset_msg_id)
        except ValueError as exc:
            raise BadRequestError(str(exc), code=errors_pb2.CODE_ILLEGAL_MESSAGE_ID) from exc
        store = self._store_at(host, port)
        request = store_pb2.ViewMessageRequest(offset_msg_id=offset_msg_id)
        return message_ext_from_proto(self._call(store, self._store_stub(store).ViewMessage, request).message)

    def query_messages_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_results: int = 32,
        begin_timestamp_ms: int = 0,
        end_timestamp_ms: int = 0,
    ) -> list[MessageExt]:
        """Messages of ``topic`` with business key ``key`` from every store of the topic,
        oldest first, at most ``max_results``. Timestamps bound the store time; 0: unbounded."""
        check_topic(topic)
        request = store_pb2.QueryMessagesRequest(
            topic=topic,
            key=key,
            max_results=max_results,
            begin_timestamp_ms=begin_timestamp_ms,
            end_timestamp_ms=end_timestamp_ms,
        )
        found = self._query(self._stores_of_topic(topic), request)
        return found[:max_results]

    def query_message_by_unique_id(self, unique_id: str, *, topic: str | None = None) -> MessageExt:
        """The message with client unique id (msgId) ``unique_id``. When several copies
        exist (a half message and its committed copy, or a retried send), the most
        recently stored one."""
        if topic is not None:
            check_topic(topic)
        stores = self._stores_of_topic(topic) if topic is not None else self._stores(None)
        found = self._query(stores, store_pb2.QueryMessagesRequest(topic=topic or "", unique_id=unique_id))
        if not found:
            raise NotFoundError(
                f"no message has unique id {unique_id!r}",
                code=errors_pb2.CODE_MESSAGE_NOT_FOUND,
                metadata={"unique_id": unique_id},
            )
        return found[-1]

    # -- dead letters (docs/consumers.md "Retries and dead letters") -------------------

    def list_dead_letters(
        self, group: str, *, store_id: str | None = None, max_results: int = 1000
    ) -> list[DeadLetter]:
        """The messages of ``%DLQ%<group>`` on every store (or ``store_id``), oldest
        first per store, at most ``max_results`` in all. A store without the topic has
        none; an existing group with no dead letter answers an empty list."""
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if max_results <= 0:
            raise BadRequestError(f"max_results must be > 0, not {max_results}", code=errors_pb2.CODE_ILLEGAL_ARGUMENT)
        topic = dlq_topic(group)
        found: list[DeadLetter] = []
        for store in self._stores(store_id):
            stub = self._store_stub(store)
            try:
                queues = self._call(store, stub.GetQueueOffsets, store_pb2.GetQueueOffsetsRequest(topic=topic)).queues
            except NotFoundError:
                continue  # no dead letter was ever written on this store
            for q in sorted(queues, key=lambda q: q.queue_id):
                offset = q.min_offset
                while offset < q.max_offset and len(found) < max_results:
                    request = store_pb2.GetMessageRequest(
                        topic=topic, queue_id=q.queue_id, offset=offset, max_messages=_DLQ_PAGE
                    )
                    response = self._call(store, stub.GetMessage, request)
                    for view in response.messages:
                        m = message_ext_from_proto(view)
                        found.append(_dead_letter(store.store_id, m))
                    if response.next_begin_offset <= offset:
                        break
                    offset = response.next_begin_offset
        return found[:max_results]

    def resend_dead_letters(
        self, group: str, ids: Sequence[str] | None = None, *, store_id: str | None = None
    ) -> list[ResentDeadLetter]:
        """Send dead letters of ``group`` again to their origin topic, on the store that
        holds them: each as a new message (a fresh unique id) with the body, tags, keys
        and user properties of the dead letter and ORIGIN_MESSAGE_ID = its id. ``ids``:
        only the dead letters with these unique ids (an id none has raises NotFoundError
        MESSAGE_NOT_FOUND, before anything is sent); None: every one. The dead letters
        stay in the dead-letter topic. The store's system send is used (the property is
        reserved): with auth on, a super user's call."""
        letters = self.list_dead_letters(group, store_id=store_id, max_results=1_000_000)
        if ids is not None:
            wanted = set(ids)
            missing = sorted(wanted - {d.msg_id for d in letters})
            if missing:
                raise NotFoundError(
                    f"group {group} has no dead letter {missing[0]!r}",
                    code=errors_pb2.CODE_MESSAGE_NOT_FOUND,
                    metadata={"unique_id": missing[0], "group": group},
                )
            letters = [d for d in letters if d.msg_id in wanted]
        stores = {s.store_id: s for s in self._stores(store_id)}
        resent: list[ResentDeadLetter] = []
        for d in letters:
            store = stores.get(d.store_id)
            if store is None:
                raise NotFoundError(f"store {d.store_id!r} is not live", code=errors_pb2.CODE_STORE_NOT_FOUND)
            request = store_pb2.PutSystemMessagesRequest(messages=[_resend_message(d)])
            (r,) = self._call(store, self._store_stub(store).PutSystemMessages, request).results
            resent.append(
                ResentDeadLetter(d.msg_id, r.msg_id, r.queue.topic, r.queue.store_id, r.queue.queue_id, r.queue_offset)
            )
        return resent

    # -- offsets -----------------------------------------------------------------------

    def queue_offsets(self, topic: str) -> list[QueueOffsets]:
        """Min/max offsets of every queue of the topic, on every store that has it."""
        check_topic(topic)
        result: list[QueueOffsets] = []
        for store in self._stores_of_topic(topic):
            response = self._call(
                store, self._store_stub(store).GetQueueOffsets, store_pb2.GetQueueOffsetsRequest(topic=topic)
            )
            result.extend(queue_offsets_from_proto(topic, store.store_id, q) for q in response.queues)
        return sorted(result, key=lambda o: o.queue)

    def consume_offsets(self, group: str | None = None, topic: str | None = None) -> list[ConsumeOffset]:
        """Committed offsets (with each queue's range, hence lag), optionally of one
        group and/or topic, from every store."""
        request = store_pb2.ListConsumeOffsetsRequest(consumer_group=group or "", topic=topic or "")
        result: list[ConsumeOffset] = []
        for store in self._stores(None):
            response = self._call(store, self._store_stub(store).ListConsumeOffsets, request)
            result.extend(consume_offset_from_proto(store.store_id, o) for o in response.offsets)
        return sorted(result, key=lambda o: (o.group, o.queue))

    # -- users and permissions (clusters with auth_enabled; docs/security.md) -----------

    def create_user(self, username: str, secret_key: str, *, super_user: bool = False) -> User:
        request = auth_pb2.CreateUserRequest(
            user=auth_pb2.User(username=username, secret_key=secret_key, super_user=super_user)
        )
        return User.from_proto(self._auth(lambda s: s.CreateUser, request).user)

    def update_user(
        self,
        username: str,
        *,
        secret_key: str | None = None,
        super_user: bool | None = None,
        disabled: bool | None = None,
    ) -> User:
        """Change what is given; the rest stays (a new secret takes effect at once)."""
        current = self.get_user(username)
        user = auth_pb2.User(
            username=username,
            secret_key=secret_key or "",
            super_user=current.super_user if super_user is None else super_user,
            disabled=current.disabled if disabled is None else disabled,
        )
        return User.from_proto(self._auth(lambda s: s.UpdateUser, auth_pb2.UpdateUserRequest(user=user)).user)

    def delete_user(self, username: str) -> None:
        """Deletes the user and its ACL."""
        self._auth(lambda s: s.DeleteUser, auth_pb2.DeleteUserRequest(username=username))

    def get_user(self, username: str) -> User:
        return User.from_proto(self._auth(lambda s: s.GetUser, auth_pb2.GetUserRequest(username=username)).user)

    def list_users(self) -> list[User]:
        return [User.from_proto(u) for u in self._auth(lambda s: s.ListUsers, auth_pb2.ListUsersRequest()).users]

    def put_acl(self, username: str, policies: Sequence[Policy]) -> list[Policy]:
        """Replace the user's whole ACL."""
        acl = acl_to_proto(username, policies)
        response = self._auth(lambda s: s.PutAcl, auth_pb2.PutAclRequest(acl=acl))
        return [Policy.from_proto(p) for p in response.acl.policies]

    def get_acl(self, username: str) -> list[Policy]:
        response = self._auth(lambda s: s.GetAcl, auth_pb2.GetAclRequest(username=username))
        return [Policy.from_proto(p) for p in response.acl.policies]

    def delete_acl(self, username: str) -> None:
        self._auth(lambda s: s.DeleteAcl, auth_pb2.DeleteAclRequest(username=username))

    def list_acls(self) -> dict[str, list[Policy]]:
        response = self._auth(lambda s: s.ListAcls, auth_pb2.ListAclsRequest())
        return {a.username: [Policy.from_proto(p) for p in a.policies] for a in response.acls}

    def whoami(self) -> dict[str, object]:
        """Who the cluster takes this client for: username, super_user, authenticated_by."""
        r = self._auth(lambda s: s.WhoAmI, auth_pb2.WhoAmIRequest())
        return {
            "username": r.username,
            "super_user": r.super_user,
            "authenticated_by": r.authenticated_by,
            "auth_enabled": r.auth_enabled,
        }

    def _auth(self, method: Callable[[auth_pb2_grpc.AuthStub], Callable[..., R]], request: object) -> R:
        """Any service answers the Auth service (with auth on): asked as routes are."""
        return self._core.routes.ask_any(auth_pb2_grpc.AuthStub, method, request, timeout=self._timeout)

    # -- internals ---------------------------------------------------------------------

    def _call(self, store: _Store, method: Callable[..., R], request: object) -> R:
        """``method`` of ``store``'s stub; its errors name the store (many calls fan out)."""
        try:
            return call(method, request, timeout=self._timeout)
        except TxmqError as err:
            err.metadata.setdefault("store_id", store.store_id)
            raise

    def _admin_stub(self, store: _Store) -> store_pb2_grpc.StoreAdminStub:
        return self._core.stub(store.address, store_pb2_grpc.StoreAdminStub)

    def _store_stub(self, store: _Store) -> store_pb2_grpc.StoreStub:
        return self._core.stub(store.address, store_pb2_grpc.StoreStub)

    def _stores(self, store_id: str | None) -> list[_Store]:
        stores = sorted(_Store(e.instance_id, e.address) for e in self.endpoints(ServiceKind.STORE))
        if store_id is not None:
            stores = [s for s in stores if s.store_id == store_id]
            if not stores:
                raise NotFoundError(
                    f"no live store {store_id!r}",
                    code=errors_pb2.CODE_STORE_NOT_FOUND,
                    metadata={"store_id": store_id},
                )
        if not stores:
            raise UnavailableError("no store is registered", code=errors_pb2.CODE_SERVICE_NOT_READY)
        return stores

    def _stores_of_topic(self, topic: str) -> list[_Store]:
        route = self.topic_route(topic)
        if not route.queues:
            raise NotFoundError(f"topic {topic!r} does not exist", code=errors_pb2.CODE_TOPIC_NOT_FOUND)
        return sorted({_Store(q.store_id, q.store_address) for q in route.queues})

    def _store_at(self, host: str, port: int) -> _Store:
        """The store listening at host:port (as an offsetMsgId encodes it); store
        addresses may be host names, so they are resolved before comparing."""
        want = (ipaddress.ip_address(host), port)
        stores = self._stores(None)
        for store in stores:
            if _resolve(store.address) == want:
                return store
        raise NotFoundError(
            f"no live store at {host}:{port}",
            code=errors_pb2.CODE_STORE_NOT_FOUND,
            metadata={"address": f"{host}:{port}"},
        )

    def _query(self, stores: Sequence[_Store], request: store_pb2.QueryMessagesRequest) -> list[MessageExt]:
        found = [
            message_ext_from_proto(view)
            for store in stores
            for view in self._call(store, self._store_stub(store).QueryMessages, request).messages
        ]
        return sorted(found, key=lambda m: (m.store_timestamp_ms, m.store_id, m.commit_log_offset))

    def _first_store_having(self, store_id: str | None, fn: Callable[[_Store], T]) -> T:
        missing: NotFoundError | None = None
        for store in self._stores(store_id):
            try:
                return fn(store)
            except NotFoundError as err:
                missing = err
        assert missing is not None  # _stores never returns an empty list
        raise missing

    def _on_stores_having(self, store_id: str | None, fn: Callable[[_Store], T]) -> list[T]:
        """``fn`` on each store; stores without the object are skipped, unless none has it."""
        results: list[T] = []
        missing: NotFoundError | None = None
        for store in self._stores(store_id):
            try:
                results.append(fn(store))
            except NotFoundError as err:
                missing = err
        if not results:
            assert missing is not None
            raise missing
        return results


def _dead_letter(store_id: str, m: MessageExt) -> DeadLetter:
    return DeadLetter(
        store_id=store_id,
        origin_topic=m.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, ""),
        msg_id=m.msg_id,
        reconsume_times=m.reconsume_times,
        store_timestamp_ms=m.store_timestamp_ms,
        offset_msg_id=m.offset_msg_id,
        message=m,
    )


def _resend_message(d: DeadLetter) -> store_pb2.SystemMessage:
    if not d.origin_topic:
        raise BadRequestError(
            f"dead letter {d.msg_id} names no origin topic ({PROPERTY_DLQ_ORIGIN_TOPIC})",
            code=errors_pb2.CODE_ILLEGAL_ARGUMENT,
            metadata={"unique_id": d.msg_id},
        )
    m = d.message
    props = {k: v for k, v in m.properties.items() if not is_system_property(k)}
    props[PROPERTY_ORIGIN_MESSAGE_ID] = d.msg_id
    message = common_pb2.Message(
        topic=d.origin_topic,
        body=m.body,
        tags=m.tags or "",
        keys=list(m.keys),
        properties=props,
        unique_id=new_unique_id(),
        flag=m.flag,
        born_timestamp_ms=m.born_timestamp_ms,
    )
    return store_pb2.SystemMessage(message=message)


def _resolve(address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host), int(port)
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)), int(port)
    except (OSError, ValueError):
        return None
