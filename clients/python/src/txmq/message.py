"""Messages and send results (RocketMQ's Message, MessageExt, MessageQueue, SendResult)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field

from txmq.protocol import DELAY_PROPERTIES, PROPERTY_DELAY_LEVEL, PROPERTY_PRIORITY, PROPERTY_TIMER_DELIVER_MS
from txmq.recall import RecallHandle
from txmq.v1 import store_pb2


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one store node."""

    topic: str
    store_id: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.store_id}#{self.queue_id}"


@dataclass(slots=True)
class Message:
    """A message to send.

    ``keys`` are business keys the store indexes (``Admin.query_messages_by_key``); a
    single string is one key. ``unique_id`` (RocketMQ msgId / UNIQ_KEY) is filled in by
    the producer before the first attempt unless set, so retries carry the same id.
    ``queue_id`` pins the queue; the producer then picks only among stores that have it.

    Delayed messages (docs/store.md, "Delayed messages"): ``delivery_timestamp_ms``
    (ms since the epoch, store clock) or ``delay_level`` (1-based index into the store's
    ``message_delay_levels``, RocketMQ's levels by default) sets the matching property
    (TIMER_DELIVER_MS / DELAY); a relative delay is the property TIMER_DELAY_MS or
    TIMER_DELAY_SEC in ``properties``. At most one per message; a time within 1 s of the
    store's receipt is delivered at once. Transactional messages cannot be delayed.

    ``priority`` (RocketMQ 5.4's priority messages; docs/sdk.md "Priority messages"): a
    non-negative int, higher first, for a priority topic only (the property
    TXMQ_PRIORITY; the store refuses one above the topic's write queue count - 1). Not
    together with a delay. A received message (``MessageExt``) has the priority it was
    sent with, retries included; None when it had none.
    """

    topic: str
    body: bytes
    _: KW_ONLY
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    unique_id: str | None = None
    flag: int = 0
    queue_id: int | None = None
    delivery_timestamp_ms: int | None = None
    delay_level: int | None = None
    priority: int | None = None

    def __post_init__(self) -> None:
        # Exact-type fast paths first: this runs once per message sent.
        if type(self.body) is not bytes:
            if isinstance(self.body, (bytearray, memoryview)):
                self.body = bytes(self.body)
            elif not isinstance(self.body, bytes):
                raise TypeError(f"message body must be bytes, not {type(self.body).__name__}")
        keys: str | Iterable[str] = self.keys
        if type(keys) is not tuple:
            self.keys = (keys,) if isinstance(keys, str) else tuple(keys)
        # A copy: the caller's dict must not change the message after validation.
        props = self.properties
        self.properties = dict(props) if props else {}
        if self.delivery_timestamp_ms is not None or self.delay_level is not None:
            self._set_delay()
        if self.priority is not None:
            self._set_priority()
        elif props and PROPERTY_PRIORITY in props:  # a stored message's
            raw = props[PROPERTY_PRIORITY]
            self.priority = int(raw) if raw.isascii() and raw.isdigit() else None

    def _set_priority(self) -> None:
        value = self.priority
        if type(value) is not int or value < 0:
            raise ValueError(f"priority must be a non-negative int, not {value!r}")
        if self.is_delayed:
            raise ValueError("a message cannot have both a priority and a delay")
        self.properties[PROPERTY_PRIORITY] = str(value)

    def _set_delay(self) -> None:
        for name, value in (
            (PROPERTY_TIMER_DELIVER_MS, self.delivery_timestamp_ms),
            (PROPERTY_DELAY_LEVEL, self.delay_level),
        ):
            if value is None:
                continue
            if type(value) is not int or value < 0:
                raise ValueError(f"{name} must be a non-negative int, not {value!r}")
            self.properties[name] = str(value)

    @property
    def is_delayed(self) -> bool:
        """Whether the message carries a delay property (the store decides whether it
        is really delayed: a time within 1 s is not)."""
        return bool(self.properties) and not DELAY_PROPERTIES.isdisjoint(self.properties)


@dataclass(slots=True, kw_only=True)
class MessageExt(Message):
    """A stored message as the store returns it (RocketMQ MessageExt).

    ``properties`` holds the user properties plus system ones (e.g. REAL_TOPIC of a half
    message). Timestamps are milliseconds since the epoch.
    """

    offset_msg_id: str
    queue_offset: int
    commit_log_offset: int
    store_size_bytes: int
    body_crc: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: str
    store_timestamp_ms: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    store_id: str

    @property
    def msg_id(self) -> str:
        """The client unique id (RocketMQ msgId); kept by the committed copy of a
        transactional message."""
        return self.unique_id or ""


class SendStatus(enum.Enum):
    OK = store_pb2.SEND_STATUS_OK
    # Sync flush: written, but the fsync did not finish in time. The message is stored;
    # it may be lost if the store crashes before its next flush.
    FLUSH_DISK_TIMEOUT = store_pb2.SEND_STATUS_FLUSH_DISK_TIMEOUT
    # Replicated store group: written on the leader, not yet held by every in-sync
    # replica in time (RocketMQ FLUSH_SLAVE_TIMEOUT). It may still become visible.
    FLUSH_REPLICA_TIMEOUT = store_pb2.SEND_STATUS_FLUSH_REPLICA_TIMEOUT


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    commit_log_offset: int
    # For a half (prepared) message: its transaction id (= msg_id).
    transaction_id: str | None = None
    # The store had accepted this message (same topic and unique id) within its
    # idempotence window: this is that first send's result; nothing was stored again.
    duplicate: bool = False
    # For a delayed message: when it becomes visible (ms since the epoch, store clock);
    # ``message_queue`` is where it will appear and ``queue_offset`` is -1 until then.
    deliver_at_ms: int = 0

    @property
    def recall_handle(self) -> str:
        """For a delayed message, what ``Producer.recall`` takes to cancel it before it
        is delivered (``txmq.recall``); empty for any other message."""
        mq = self.message_queue
        return RecallHandle.of_send(mq.topic, mq.store_id, self.commit_log_offset, self.msg_id, self.deliver_at_ms)
