"""Value objects for routes, configuration and status (what ``Admin`` returns)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from txmq.errors import NotFoundError
from txmq.message import MessageQueue
from txmq.protocol import MESSAGE_TYPE_PRIORITY
from txmq.v1 import common_pb2, errors_pb2


class Perm(enum.IntFlag):
    """RocketMQ permission bits of a topic's queues on a store."""

    INHERIT = 1
    WRITE = 2
    READ = 4


READ_WRITE = Perm.READ | Perm.WRITE


class ServiceKind(enum.Enum):
    STORE = common_pb2.SERVICE_KIND_STORE
    TXCHECK = common_pb2.SERVICE_KIND_TXCHECK
    PULL = common_pb2.SERVICE_KIND_PULL
    GATEWAY = common_pb2.SERVICE_KIND_GATEWAY
    #: One replica of a replicated store group (instance id ``<store_id>.<replica_id>``).
    STORE_REPLICA = common_pb2.SERVICE_KIND_STORE_REPLICA


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A live service instance; for a store, ``instance_id`` is its store id."""

    kind: ServiceKind
    instance_id: str
    address: str
    started_at_ms: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueData:
    """A topic's queues on one store node."""

    store_id: str
    store_address: str
    read_queue_nums: int
    write_queue_nums: int
    perm: Perm
    #: The topic's ``message.type`` attribute on this store; PRIORITY: a priority topic
    #: (queue N holds priority N; docs/sdk.md "Priority messages").
    message_type: str = ""


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """Where a topic lives (RocketMQ TopicRouteData) and where the other services are."""

    topic: str
    queues: tuple[QueueData, ...]
    store_endpoints: tuple[Endpoint, ...] = ()
    pull_endpoints: tuple[Endpoint, ...] = ()
    txcheck_endpoints: tuple[Endpoint, ...] = ()

    def write_queues(self) -> list[MessageQueue]:
        """Every writable queue, ordered by store id then queue id (RocketMQ's
        topicRouteData2TopicPublishInfo)."""
        return [
            MessageQueue(self.topic, q.store_id, i)
            for q in sorted(self.queues, key=lambda q: q.store_id)
            if q.perm & Perm.WRITE
            for i in range(q.write_queue_nums)
        ]

    def read_queues(self) -> list[MessageQueue]:
        return [
            MessageQueue(self.topic, q.store_id, i)
            for q in sorted(self.queues, key=lambda q: q.store_id)
            if q.perm & Perm.READ
            for i in range(q.read_queue_nums)
        ]

    def is_priority(self, store_id: str) -> bool:
        """Whether the topic is a priority topic on store ``store_id``."""
        return any(q.store_id == store_id and q.message_type == MESSAGE_TYPE_PRIORITY for q in self.queues)

    def store_address(self, store_id: str) -> str:
        for q in self.queues:
            if q.store_id == store_id:
                return q.store_address
        raise NotFoundError(
            f"topic {self.topic!r} has no queues on store {store_id!r}",
            code=errors_pb2.CODE_STORE_NOT_FOUND,
            metadata={"store_id": store_id},
        )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: Perm
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = False
    retry_max_times: int = 16
    retry_queue_nums: int = 1


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """A queue's offset range; ``last_store_timestamp_ms`` is 0 for an empty queue."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int


def consume_lag(*, offset: int, min_offset: int, max_offset: int) -> int:
    """A group's lag on one queue: messages stored past its committed offset (an offset
    below the queue's first stored message counts from there). ``txmq lag``, Admin and the
    pull service's KEDA scaler all count with this."""
    return max(0, max_offset - max(offset, min_offset))


@dataclass(frozen=True, slots=True)
class ConsumeOffset:
    """A group's committed offset on a queue, with the queue's range."""

    group: str
    queue: MessageQueue
    offset: int
    min_offset: int
    max_offset: int
    updated_at_ms: int

    @property
    def lag(self) -> int:
        """Messages stored but not yet consumed by the group."""
        return consume_lag(offset=self.offset, min_offset=self.min_offset, max_offset=self.max_offset)


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica of a store group as it reports itself (docs/replication.md), with
    what its leader knows of it (``lag_bytes``, ``in_sync``; -1 / None when the leader
    did not answer)."""

    replica_id: str
    address: str
    role: str  # leader, follower, candidate; "unreachable" when it did not answer
    epoch: int
    log_end: int
    high_watermark: int
    lag_bytes: int = -1
    in_sync: bool | None = None
    caught_up_ms_ago: int = -1
    #: Its log was found damaged or set aside for a reseed: it does not stand for leader
    #: until it has copied its leader's log again.
    needs_resync: bool = False


@dataclass(frozen=True, slots=True)
class StoreGroupStatus:
    """A replicated store group: its leader, epoch and in-sync set (as the leader says)
    and every replica registered."""

    store_id: str
    leader: str
    epoch: int
    in_sync: tuple[str, ...]
    min_in_sync: int
    replicas: tuple[ReplicaState, ...]


@dataclass(frozen=True, slots=True)
class ElectedReplica:
    """``Admin.elect_store_replica``: the replica picked to lead its group, the only
    in-sync member now (it leads at its next tick, epoch ``epoch + 1``), and where its log
    ends: the group's log from there on."""

    store_id: str
    replica_id: str
    epoch: int
    log_end: int


@dataclass(frozen=True, slots=True)
class StoreStatus:
    store_id: str
    address: str
    flush_mode: str
    commit_log_min_offset: int
    commit_log_max_offset: int
    commit_log_flushed_offset: int
    dispatched_offset: int
    segment_count: int
    recovered_from_crash: bool
    started_at_ms: int
    settings: dict[str, str] = field(default_factory=dict)
