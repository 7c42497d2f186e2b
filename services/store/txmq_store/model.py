"""Value objects of the store core (no gRPC or protobuf types here).

Enum values equal the numbers of the matching proto enums, so the servicer maps them by
value.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from txmq.ids import encode_offset_msg_id

# The protocol's names (properties, sysflag bits): txmq.protocol, re-exported for the store.
from txmq.protocol import (  # noqa: F401
    FIELD_PROPERTIES,
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)


def takes_queue_slot(sys_flag: int) -> bool:
    """Prepared and rolled-back records get no queue offset and no consume-queue unit
    (RocketMQ: only NOT_TYPE and COMMIT_TYPE are dispatched)."""
    t = sys_flag & TRANSACTION_TYPE_MASK
    return t == TRANSACTION_NOT_TYPE or t == TRANSACTION_COMMIT_TYPE


def is_indexed(sys_flag: int) -> bool:
    """RocketMQ indexes every record but rolled-back ones."""
    return sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK_TYPE


class SendStatus(enum.IntEnum):
    OK = 1
    FLUSH_DISK_TIMEOUT = 2
    FLUSH_REPLICA_TIMEOUT = 3


class GetMessageStatus(enum.IntEnum):
    FOUND = 1
    NO_MATCHED_MESSAGE = 2
    MESSAGE_WAS_REMOVING = 3
    OFFSET_FOUND_NULL = 4
    OFFSET_OVERFLOW_BADLY = 5
    OFFSET_OVERFLOW_ONE = 6
    OFFSET_TOO_SMALL = 7
    NO_MATCHED_LOGIC_QUEUE = 8
    NO_MESSAGE_IN_QUEUE = 9


@dataclass(slots=True)
class OutgoingMessage:
    """A message to store. ``sys_flag``, ``reconsume_times``,
    ``prepared_transaction_offset`` and system property names are only honoured for
    system sends (the transaction service); producers cannot set them."""

    topic: str
    body: bytes
    tags: str = ""
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    unique_id: str = ""
    flag: int = 0
    queue_id: int | None = None
    born_timestamp_ms: int = 0
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


@dataclass(slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    transaction_id: str = ""
    # Idempotent sends: an earlier send's result; nothing was stored now.
    duplicate: bool = False
    # A delayed message: when it becomes visible (queue_offset is -1 until then).
    deliver_at_ms: int = 0


@dataclass(slots=True)
class StoredMessage:
    """One decoded commit-log record. ``properties`` holds user and system properties
    except TAGS, KEYS and UNIQ_KEY, which are in their own fields."""

    topic: str
    body: bytes
    tags: str
    keys: tuple[str, ...]
    properties: dict[str, str]
    unique_id: str
    flag: int
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    body_crc: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: str
    born_port: int
    store_timestamp_ms: int
    store_host: str
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int

    @property
    def offset_msg_id(self) -> str:
        return encode_offset_msg_id(self.store_host, self.store_port, self.commit_log_offset)

    def all_properties(self) -> dict[str, str]:
        """Every property as stored, the field-backed ones included (for filters)."""
        return with_field_properties(dict(self.properties), tags=self.tags, keys=self.keys, unique_id=self.unique_id)


def with_field_properties(props: dict[str, str], *, tags: str, keys: tuple[str, ...], unique_id: str) -> dict[str, str]:
    """Add the properties that messages carry as fields (TAGS, KEYS, UNIQ_KEY) to ``props``."""
    if tags:
        props[PROPERTY_TAGS] = tags
    if keys:
        props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
    if unique_id:
        props[PROPERTY_UNIQ_KEY] = unique_id
    return props


# A property predicate evaluated at the commit-log stage (SQL92 filters).
PropertyPredicate = Callable[[Mapping[str, str]], bool]


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    suggest_pulling_from_replica: bool = False
    # A raw read (``get_message(raw=True)``): the records as stored, CRC-checked.
    records: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class QueueOffsets:
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int


@dataclass(slots=True)
class ConsumeOffsetView:
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    min_offset: int
    max_offset: int
    updated_at_ms: int


@dataclass(slots=True)
class StoreStatus:
    store_id: str
    flush_mode: str
    commit_log_min_offset: int
    commit_log_max_offset: int
    commit_log_flushed_offset: int
    dispatched_offset: int
    segment_count: int
    recovered_from_crash: bool
    started_at_ms: int
    settings: dict[str, str]
