"""Idempotent sends: a producer send whose topic and unique id the store accepted within
``idempotence_window_ms`` is answered with that first send's result and not stored
again (docs/store.md "Idempotent sends").

A producer that loses an acknowledgement (a timeout, a dropped connection, a gateway
retrying on another replica of a store group) sends the same message again, with the
same unique id. The store already indexes every record by unique id (``index.py``), so
the question "did I accept (topic, unique id) recently?" costs one walk of one hash
chain per message, no record read, when the answer is no (the common case): the chain
holds only entries whose hash equals the id's, and the walk skips index files older
than the window. A candidate (a retry, or a 32-bit hash collision) is read back and
compared: its unique id, and the topic the producer named (for a half or a delayed
message, the REAL_TOPIC it was moved away from).

Records appended but not dispatched yet (sync flush waiting for its fsync, a replicated
group's leader waiting for its replicas) are not in the index: ``SendWindow`` keeps
their unique ids until their dispatch (``pending``/``dispatched``), so a retry racing
the first send's acknowledgement is caught too.

What is a match: a record as a producer's send left it (``_producer_written``) with the
same unique id whose real topic is the one sent to, stored within the window. System
writes (committed copies of transactions, the check loop's put-backs, retry and
dead-letter copies, timer deliveries) never match and are never checked. Two messages
with one unique id inside one batch are both stored (the window covers earlier sends).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from txmq.protocol import PROPERTY_PREPARED_QUEUE_OFFSET, TIMER_TOPIC, TRANS_HALF_TOPIC

from .codec import PreparedRecord
from .index import IndexService, unique_id_hash
from .model import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_TYPE_MASK,
    StoredMessage,
)

_FOREVER_MS = 2**63 - 1


@dataclass(slots=True, frozen=True)
class FirstSend:
    """What a retried send is answered with: the first send's record."""

    index: int  # the retried message's position in its batch
    unique_id: str
    topic: str  # the topic the producer sent to (the real one for halves and delayed)
    queue_id: int  # the queue it went to (the real one for halves and delayed)
    queue_offset: int  # the half record's for a half message
    commit_log_offset: int
    prepared: bool
    record_topic: str  # where the record lies (the half or timer topic for those)
    properties: dict[str, str]


def real_destination(msg: StoredMessage) -> tuple[str, int]:
    """The topic and queue a producer sent ``msg`` to: REAL_TOPIC / REAL_QID for records
    the store moved (half and delayed messages), else its own."""
    real = msg.properties.get(PROPERTY_REAL_TOPIC)
    if real is None:
        return msg.topic, msg.queue_id
    try:
        return real, int(msg.properties.get(PROPERTY_REAL_QUEUE_ID, ""))
    except ValueError:
        return real, msg.queue_id


def _producer_written(msg: StoredMessage) -> bool:
    """A record as a producer's send left it: a message in its topic, the first half
    record of a transaction (not a check loop's put-back copy) or a delayed message
    waiting in the timer topic. Committed copies, put-backs, discarded transactions,
    retry and dead-letter copies are the system's."""
    kind = msg.sys_flag & TRANSACTION_TYPE_MASK
    if msg.reconsume_times or not (kind == TRANSACTION_NOT_TYPE or kind == TRANSACTION_PREPARED_TYPE):
        return False
    if msg.topic == TRANS_HALF_TOPIC:
        return PROPERTY_PREPARED_QUEUE_OFFSET not in msg.properties
    if msg.topic == TIMER_TOPIC:
        return True
    return PROPERTY_REAL_TOPIC not in msg.properties


class SendWindow:
    """The idempotence window of one store. ``read(offset)`` decodes the record at a
    commit-log offset the index or ``pending`` named (None when it is gone)."""

    def __init__(
        self, window_ms: int, index: Callable[[], IndexService], read: Callable[[int], StoredMessage | None]
    ) -> None:
        self.window_ms = window_ms
        self._index = index  # the store's current index (it is replaced on a resync)
        self._read = read
        # Unique id -> commit-log offset of the last record appended, not dispatched.
        self._pending: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.window_ms > 0

    def first_send(self, index: int, topic: str, unique_id: str, now_ms: int) -> FirstSend | None:
        """The earlier send of (``topic``, ``unique_id``) within the window, if any."""
        if not unique_id:
            return None
        candidates = self._index().recent(unique_id_hash(unique_id), now_ms - self.window_ms)
        pending = self._pending.get(unique_id) if self._pending else None
        if pending is not None:
            candidates = [pending, *candidates]
        for offset in candidates:
            msg = self._read(offset)
            if msg is None or msg.unique_id != unique_id or not _producer_written(msg):
                continue
            real_topic, real_queue = real_destination(msg)
            if real_topic != topic:
                continue
            return FirstSend(
                index=index,
                unique_id=unique_id,
                topic=real_topic,
                queue_id=real_queue,
                queue_offset=msg.queue_offset,
                commit_log_offset=msg.commit_log_offset,
                prepared=msg.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true",
                record_topic=msg.topic,
                properties=msg.properties,
            )
        return None

    # -- records between their append and their dispatch ----------------------------------

    def appended(self, records: list[PreparedRecord], offsets: list[int]) -> None:
        """Records appended whose dispatch (indexing) comes later."""
        if self.window_ms > 0:
            self._pending.update(zip([rec.unique_id for rec in records], offsets, strict=True))

    def dispatched(self, records: list[PreparedRecord]) -> None:
        """Those records are in the index now (or were given up). A unique id appended
        twice before its dispatch is forgotten with its first record, which the index
        answers for from then on."""
        pending = self._pending
        if pending:
            pop = pending.pop
            for rec in records:
                pop(rec.unique_id, None)

    def forget_pending(self) -> None:
        self._pending.clear()

    @property
    def pending_count(self) -> int:
        return len(self._pending)
