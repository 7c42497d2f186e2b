"""RocketMQ's protocol vocabulary as txmq speaks it: the one definition of each name.

The store, the transaction service, the pull service, the gateway and the SDK import
these instead of spelling them out (RocketMQ keeps the same in ``MessageConst``,
``MessageSysFlag``, ``PermName``, ``TopicValidator`` and ``TransactionalMessageUtil``).
txmq's own additions are prefixed ``TXMQ_``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from txmq.v1 import store_pb2, txcheck_pb2

# -- message properties (RocketMQ MessageConst names) ------------------------------------

PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
#: A half message's real topic and queue (the store moves the message to the half topic).
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
#: Set by a producer: how long its transaction is immune from checks.
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: On a half message put back by the check loop: the queue offset of the first copy.
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
#: A FIFO message's group (RocketMQ 5 carries it as the sharding key).
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
#: txmq: how often a check waited because no producer of the group was connected.
PROPERTY_CHECK_WAITS = "TXMQ_CHECK_WAITS"
#: txmq: on op messages, the entries (see the op-entry codec below).
PROPERTY_OP_DECISIONS = "TXMQ_OP_DECISIONS"
#: txmq: on a discarded transaction's copy, why it was discarded.
PROPERTY_DISCARD_REASON = "TXMQ_DISCARD_REASON"
#: txmq: on a dead letter, the topic it came from.
PROPERTY_DLQ_ORIGIN_TOPIC = "TXMQ_DLQ_ORIGIN_TOPIC"
#: On a retry copy (%RETRY%<group>): the topic the message was first consumed from; the
#: consumer gives the message back this topic.
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
#: On a retry or dead-letter copy, and on a message re-sent from a dead-letter topic: the
#: unique id of the message it copies.
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
#: txmq: on a retry or dead-letter copy, ``<group>@<commit-log offset>`` of the record the
#: group sent back (the store answers a repeated send-back of that record with this copy).
PROPERTY_SENDBACK_OF = "TXMQ_SENDBACK_OF"
#: txmq: on a message re-sent from a dead-letter topic, ``<group>@<commit-log offset>`` of
#: the dead letter (the store answers a repeated resend of it with this message).
PROPERTY_RESEND_OF = "TXMQ_RESEND_OF"

# -- delayed messages (RocketMQ 5's timer properties, RocketMQ 4's delay levels) ----------

#: When a delayed message becomes visible: ms since the epoch.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
#: A delay from the store's receipt, in ms / in seconds.
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
#: A delay level: 1-based index into the store's message_delay_levels.
PROPERTY_DELAY_LEVEL = "DELAY"
#: A message the timer delivered: the timer-queue offset of its timer record (the store's
#: duplicate check after a restart or a failover looks for it).
PROPERTY_TIMER_OFFSET = "TXMQ_TIMER_OFFSET"
#: A recall of a delayed message: a record of the timer topic's recall queue
#: (TIMER_RECALL_QUEUE_ID) naming the timer-queue offset of the timer it cancels.
PROPERTY_TIMER_RECALL = "TXMQ_TIMER_RECALL"
#: The delay properties a producer may set (at most one per message); reserved otherwise.
DELAY_PROPERTIES: frozenset[str] = frozenset(
    {PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_DELAY_LEVEL}
)
#: RocketMQ's messageDelayLevel: level N waits the Nth of these. A retry's level is
#: RETRY_LEVEL_BASE + its reconsume count (the first retry waits 10 s).
DEFAULT_MESSAGE_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
RETRY_LEVEL_BASE = 3
#: RocketMQ's default maxReconsumeTimes (and a group's retry_max_times).
DEFAULT_MAX_RECONSUME_TIMES = 16

_DELAY_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 1m 2h"`` -> the delays in ms (units ms, s, m, h, d; RocketMQ's syntax).
    Raises ValueError naming the bad item."""
    levels: list[int] = []
    for item in text.split():
        number = item.rstrip("smhd")
        unit = item[len(number) :]
        if unit not in _DELAY_UNITS_MS or not number.isdigit() or int(number) <= 0:
            raise ValueError(f"bad delay level {item!r} in {text!r}: use a positive number with ms, s, m, h or d")
        levels.append(int(number) * _DELAY_UNITS_MS[unit])
    if not levels:
        raise ValueError("at least one delay level is needed")
    return tuple(levels)


# -- priority messages (RocketMQ 5.4's RIP-80) ---------------------------------------------

#: A message's priority on a priority topic: a decimal integer, higher first; the store
#: writes the message to the queue of that id. Kept by retry and dead-letter copies.
PROPERTY_PRIORITY = "TXMQ_PRIORITY"
#: The topic attribute naming a topic's message type (RocketMQ 5's ``message.type``), and
#: the type that makes it a priority topic.
TOPIC_ATTRIBUTE_MESSAGE_TYPE = "message.type"
MESSAGE_TYPE_PRIORITY = "PRIORITY"


def is_priority_topic(attributes: Mapping[str, str]) -> bool:
    """Whether a topic with these attributes is a priority topic."""
    return attributes.get(TOPIC_ATTRIBUTE_MESSAGE_TYPE) == MESSAGE_TYPE_PRIORITY


#: Properties with a field of their own in a txmq message: never user properties.
FIELD_PROPERTIES = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY})
#: The store joins a message's keys with this into KEYS.
KEY_SEPARATOR = " "

#: Property names the system sets or interprets (MessageConst.STRING_HASH_SET, plus the
#: transaction bookkeeping txmq writes). A user property with one of these names would
#: be overwritten or, worse, obeyed, so producers may not set them.
RESERVED_PROPERTIES: frozenset[str] = frozenset(
    {
        "TRACE_ON", "MSG_REGION", PROPERTY_KEYS, PROPERTY_TAGS, "WAIT", "DELAY", "RETRY_TOPIC",
        PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP, "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", PROPERTY_UNIQ_KEY,
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME",
        PROPERTY_PREPARED_QUEUE_OFFSET, "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID",
        "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
        "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS",
        "TIMER_DELAY_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP",
        PROPERTY_CHECK_TIMES, "__transactionId__",
    }
)  # fmt: skip
#: Names with these prefixes are the system's too: txmq's own and the gateway's.
SYSTEM_PROPERTY_PREFIXES = ("TXMQ_", "__RMQ_")
#: The gateway's: a message's RocketMQ 5 type (NORMAL, FIFO, DELAY, TRANSACTION), as its
#: producer sent it (a system property; the message group is ``PROPERTY_SHARDING_KEY``).
PROPERTY_MESSAGE_TYPE = "__RMQ_MESSAGE_TYPE"
#: System properties a copy of a stored message keeps (retry and dead-letter copies, a
#: dead letter resent): what the message is, not how it was delivered. A retried message
#: keeps its priority (RocketMQ's retry copies lose it).
COPIED_SYSTEM_PROPERTIES = frozenset({PROPERTY_MESSAGE_TYPE, PROPERTY_PRIORITY})


def is_system_property(name: str) -> bool:
    """Whether the system set this property (a consumer's copy or a dead letter does
    not carry it on): a reserved name or a system prefix."""
    return name in RESERVED_PROPERTIES or name.startswith(SYSTEM_PROPERTY_PREFIXES)


def copied_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties a copy of a stored message carries over (retry and dead-letter
    copies, by the store or the gateway, and a dead letter resent): the user's, the
    message group (``__SHARDINGKEY``, not a system name), the message type and the
    priority."""
    return {k: v for k, v in properties.items() if k in COPIED_SYSTEM_PROPERTIES or not is_system_property(k)}


# -- sysflag (RocketMQ MessageSysFlag): the transaction type bits ------------------------

TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


# -- permissions (RocketMQ PermName) ------------------------------------------------------

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_ALL = PERM_READ | PERM_WRITE | PERM_INHERIT
DEFAULT_PERM = PERM_READ | PERM_WRITE

# -- system topics and groups (RocketMQ TopicValidator, MixAll) ---------------------------

SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: Where the check loop moves a transaction it gave up on (RocketMQ: no RMQ_SYS_ prefix).
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: Delayed messages wait here, one queue, each consume-queue unit's tag-hash field holding
#: the delivery time (RocketMQ 5's TimerMessageStore topic name).
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: The timer topic's queues: 0 holds delayed messages, 1 the recalls of some of them.
TIMER_QUEUE_ID = 0
TIMER_RECALL_QUEUE_ID = 1
SYSTEM_TOPICS: frozenset[str] = frozenset({TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC})
#: The half and op topics have one queue each.
HALF_QUEUE_ID = 0
#: The check loop's progress on the half and op queues.
TRANS_CHECK_GROUP = "CID_SYS_RMQ_TRANS"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


# -- replicated store groups ---------------------------------------------------------------

#: The grpc.health.v1 service name whose status says a process counts as available: what
#: Kubernetes' readiness probes ask (the chart's ``service:``), while ``""`` (serving at
#: all) stays the liveness and startup status. A store replica reports SERVING on it only
#: while it is an in-sync copy of its group: the leader taking writes, or a follower in
#: the group's in-sync set not waiting for a resync; a store alone, and every other
#: service, as soon as it serves (docs/replication.md "Readiness").
READY_HEALTH_SERVICE = "txmq.ready"


def replica_instance_id(store_id: str, replica_id: str) -> str:
    """The instance id a replica of store group ``store_id`` registers under
    (``SERVICE_KIND_STORE_REPLICA``; docs/replication.md)."""
    return f"{store_id}.{replica_id}"


def replica_id_of(instance_id: str, store_id: str) -> str | None:
    """The replica id in a replica's instance id when it belongs to ``store_id``."""
    prefix = f"{store_id}."
    return instance_id[len(prefix) :] if instance_id.startswith(prefix) else None


def is_system_topic(topic: str) -> bool:
    return topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in SYSTEM_TOPICS


# -- op entries: how a decision on a half message is recorded ------------------------------
#
# An op message on TRANS_OP_HALF_TOPIC (tag OP_TAG) records decisions on half messages.
# Its body is RocketMQ 5's: the half queue offsets joined by ",". txmq adds the property
# TXMQ_OP_DECISIONS, one ``<half queue offset>:<transaction id>:<C|R>`` per entry, comma
# separated, in body order; the op message's keys are the transaction ids. An op message
# without the property (another tool wrote it) yields its body's offsets with an unknown
# transaction and decision.

#: RocketMQ TransactionalMessageUtil.REMOVE_TAG.
OP_TAG = "d"
OP_COMMIT = "C"
OP_ROLLBACK = "R"

#: An END_TRANSACTION's resolution as the store decides it (``Store.EndTransactions`` /
#: ``DecideTransactions``): COMMIT and ROLLBACK only; UNKNOWN decides nothing.
STORE_DECISIONS: Mapping[int, store_pb2.Decision] = {
    txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT: store_pb2.DECISION_COMMIT,
    txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK: store_pb2.DECISION_ROLLBACK,
}


@dataclass(frozen=True, slots=True)
class OpEntry:
    half_offset: int
    transaction_id: str = ""
    decision: str = ""  # OP_COMMIT, OP_ROLLBACK, or "" (unknown)


def encode_op_body(entries: list[OpEntry]) -> bytes:
    return ",".join(str(e.half_offset) for e in entries).encode()


def encode_op_decisions(entries: list[OpEntry]) -> str:
    return ",".join(f"{e.half_offset}:{e.transaction_id}:{e.decision}" for e in entries)


def decode_op_entries(properties: Mapping[str, str], body: bytes) -> list[OpEntry]:
    """The entries of one op message, from its properties and body; unparsable parts
    are skipped."""
    out: list[OpEntry] = []
    raw = properties.get(PROPERTY_OP_DECISIONS)
    if raw:
        for part in raw.split(","):
            off, _, rest = part.partition(":")
            txid, _, decision = rest.rpartition(":")
            try:
                out.append(OpEntry(int(off), txid, decision))
            except ValueError:
                continue
        return out
    for part in body.decode("ascii", "replace").split(","):
        try:
            out.append(OpEntry(int(part)))
        except ValueError:
            continue
    return out


def is_committed_copy(*, unique_id: str, sys_flag: int, topic: str, transaction_id: str) -> bool:
    """Whether a record is the committed copy of ``transaction_id``: its unique id, the
    COMMIT type, and not on the half topic (a half record never has the COMMIT type, but
    a put-back may be read back before it is classified)."""
    return (
        unique_id == transaction_id
        and transaction_type(sys_flag) == TRANSACTION_COMMIT_TYPE
        and topic != TRANS_HALF_TOPIC
    )


# -- half records: what each record of a transaction on the half queue means --------------
#
# The check loop puts a half message back (a new record on the half queue) after each
# round that looked at it; the record's properties tell why. Read in queue order, each
# record of a transaction after its first is one of these.

HALF_STORED = "half_stored"  # the producer's half message
CHECK_SENT = "check_sent"  # put back after a check was sent (check times + 1)
RESUMED = "resumed"  # an admin brought a discarded transaction back (check times reset)
CHECK_WAITING = "check_waiting"  # no live producer of the group: put back, not checked
IMMUNITY_PUT_BACK = "immunity_put_back"  # still inside its check immunity: put back
PUT_BACK = "put_back"  # another copy with nothing new (e.g. a retried send)
#: Properties only a put-back record carries.
PUT_BACK_PROPERTIES = (PROPERTY_CHECK_TIMES, PROPERTY_CHECK_WAITS, PROPERTY_PREPARED_QUEUE_OFFSET)


def _count(properties: Mapping[str, str], name: str) -> int:
    try:
        return int(properties.get(name) or 0)
    except ValueError:
        return 0


def check_counts(properties: Mapping[str, str]) -> tuple[int, int]:
    """(check times, check waits) of a half record; a bad value counts as 0."""
    return _count(properties, PROPERTY_CHECK_TIMES), _count(properties, PROPERTY_CHECK_WAITS)


def half_record_kind(properties: Mapping[str, str], previous: tuple[int, int] | None) -> str:
    """What a half record means, given the (check times, check waits) of the
    transaction's previous record, or None when it is the first one seen."""
    if previous is None and not any(k in properties for k in PUT_BACK_PROPERTIES):
        return HALF_STORED
    times, waits = check_counts(properties)
    prev_times, prev_waits = previous or (0, 0)
    if times > prev_times:
        return CHECK_SENT
    if times < prev_times:
        return RESUMED
    if waits > prev_waits:
        return CHECK_WAITING
    if PROPERTY_PREPARED_QUEUE_OFFSET in properties:
        return IMMUNITY_PUT_BACK
    return PUT_BACK


# -- check immunity: when a half message may be checked, and a late decision refused --------


def immunity_ms(properties: Mapping[str, str], transaction_timeout_ms: int) -> tuple[int, bool]:
    """(check immunity of a half message, whether it set its own): its
    CHECK_IMMUNITY_TIME_IN_SECONDS, never below the transaction timeout (RocketMQ
    TransactionalMessageUtil.getImmunityTime); a bad value counts as unset."""
    raw = properties.get(PROPERTY_CHECK_IMMUNITY)
    if raw:
        try:
            return max(int(raw) * 1000, transaction_timeout_ms), True
        except ValueError:
            pass
    return transaction_timeout_ms, False


def rejects_late_decision(
    properties: Mapping[str, str], born_timestamp_ms: int, now_ms: int, transaction_timeout_ms: int
) -> bool:
    """RocketMQ 5 rejectCommitOrRollback: a decision that does not answer a check, for a
    half message that set CHECK_IMMUNITY_TIME_IN_SECONDS, after that immunity passed."""
    window, own = immunity_ms(properties, transaction_timeout_ms)
    return own and now_ms - born_timestamp_ms > window


# -- request limits (txmq) -------------------------------------------------------------------

#: The longest filter expression (TAG or SQL92) a subscription may carry, in UTF-8 bytes;
#: the SDK, the pull service and the store refuse longer ones with
#: CODE_ILLEGAL_FILTER_EXPRESSION. RocketMQ sets no limit of its own (only its 16 MB frame),
#: but real subscriptions are tens to hundreds of bytes, and an IN list of a thousand short
#: values still fits in 16 KiB. What it bounds: an SQL92 expression compiles into up to
#: ~200 bytes of closures per byte of text (measured), so one compiled filter holds at
#: most a few MiB and takes tens of milliseconds to parse (docs/sql92.md).
MAX_FILTER_EXPRESSION_BYTES = 16 * 1024
#: The longest consumer client id a ConsumerHeartbeat may carry, in UTF-8 bytes (a DNS
#: name's limit; the SDK's default id, ``hostname@pid@8 hex digits``, is far shorter).
MAX_CLIENT_ID_BYTES = 255
#: Most topics one ConsumerHeartbeat may name (what the pull service keeps per consumer).
MAX_HEARTBEAT_TOPICS = 1024
