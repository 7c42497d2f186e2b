"""What both producers (``txmq.Producer`` on threads, ``txmq.aio.Producer`` on asyncio)
decide the same way: which queues a send may pick, the records a send puts on the send
stream, the SendResults an ack gives, and when a failed attempt is tried again
(``SendRetry``). No I/O and no waiting here: each front end sleeps, or awaits, the
waits ``SendRetry`` hands it."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from txmq._backoff import delay as backoff_delay
from txmq._convert import SEND_STATUSES
from txmq.errors import BadRequestError, ForbiddenError, NotFoundError, TooManyRequestsError, TxmqError
from txmq.ids import new_unique_id, new_unique_ids
from txmq.message import Message, MessageQueue, SendResult
from txmq.models import TopicRoute
from txmq.records import encode_for_send
from txmq.v1 import errors_pb2, store_pb2
from txmq.validation import check_message, check_message_content, check_send_topic

log = logging.getLogger("txmq.producer")

THROTTLE_BACKOFF_S = 0.05
#: A replicated store group between leaders (docs/replication.md): these refusals stored
#: nothing and the group answers again within a lease, so they are waited out (with
#: backoff, within the send's timeout) rather than counted against ``retry_times``.
LEADER_CHANGE_CODES = frozenset(
    {errors_pb2.CODE_NOT_LEADER, errors_pb2.CODE_NOT_ENOUGH_REPLICAS, errors_pb2.CODE_SERVICE_NOT_READY}
)
LEADER_CHANGE_BACKOFF_S = 0.1


@dataclass(slots=True)
class SendRetry:
    """The retry state of one send: ``attempt()`` before each try, ``failed(err, mq)``
    after a failed one, which says how long to wait before the next (None: give up and
    raise ``err``). ``retry_times`` more attempts at most, within ``deadline``
    (monotonic seconds); throttling and a store group between leaders are waited out,
    within the deadline, without counting."""

    retry_times: int
    deadline: float
    topic: str
    attempts: int = 0
    waits: int = 0
    #: The store the last attempt failed on: the next one avoids it if it can.
    failed_store: str | None = None
    #: The topic lives on one store (group): no other store to retry on.
    alone: bool = False

    def attempt(self) -> None:
        self.attempts += 1

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def failed(self, err: TxmqError, mq: MessageQueue | None) -> float | None:
        """The wait (seconds, maybe 0) before the next attempt, or None: raise ``err``."""
        if mq is not None:
            self.failed_store = mq.store_id
        if not err.retriable:
            return None
        if err.code == errors_pb2.CODE_QUOTA_EXCEEDED and time.monotonic() < self.deadline:
            # Throttled, not failed: wait what the store asks (its retry_after_ms),
            # within the send's timeout, without counting it against retry_times.
            self.attempts -= 1
            left = self.remaining()
            wait = backoff_delay(1, first=THROTTLE_BACKOFF_S, maximum=left, after=err)
            return max(0.0, min(left, wait))
        leader_change = err.code in LEADER_CHANGE_CODES or (self.alone and err.unreachable and mq is not None)
        if leader_change and time.monotonic() < self.deadline:
            self.attempts -= 1
            self.waits += 1
            self.failed_store = None  # the same store group, under its next leader
            left = self.remaining()
            return max(0.0, backoff_delay(self.waits, first=LEADER_CHANGE_BACKOFF_S, maximum=min(left, 1.0)))
        if self.attempts > self.retry_times or time.monotonic() >= self.deadline:
            err.metadata["attempts"] = str(self.attempts)
            return None
        log.warning("send to %s (attempt %d) failed, retrying: %s", mq or self.topic, self.attempts, err)
        if isinstance(err, TooManyRequestsError):
            left = self.remaining()
            wait = backoff_delay(self.attempts, first=THROTTLE_BACKOFF_S, maximum=left, after=err)
            return max(0.0, min(left, wait))
        return 0.0


def encode_entry(msgs: Sequence[Message], queue_id: int, born_timestamp_ms: int) -> bytes:
    """``msgs`` (one topic, validated, with unique ids) as one send-stream entry."""
    return b"".join(
        [
            encode_for_send(
                m.topic,
                queue_id,
                m.body,
                m.unique_id or "",
                tags=m.tags,
                keys=m.keys,
                properties=m.properties,
                flag=m.flag,
                born_timestamp_ms=born_timestamp_ms,
            )
            for m in msgs
        ]
    )


def results_from_ack(
    ack: store_pb2.RecordAck, start: int, count: int, topic: str, unique_ids: Sequence[str], *, prepared: bool = False
) -> list[SendResult]:
    """The SendResults of ``count`` records of one topic from ``start`` in ``ack``
    (``prepared``: half messages, whose transaction id is their unique id)."""
    status = SEND_STATUSES[ack.status]
    prefix, store_id = ack.offset_msg_id_prefix, ack.store_id
    offsets, queue_offsets, queue_ids = ack.commit_log_offsets, ack.queue_offsets, ack.queue_ids
    deliver_at = ack.deliver_at_ms  # empty unless a record of the frame is delayed
    queues: dict[int, MessageQueue] = {}
    out: list[SendResult] = []
    duplicates = {j - start for j in ack.duplicate_indexes} if ack.duplicate_indexes else ()
    for i in range(count):
        j = start + i
        queue_id = queue_ids[j]
        mq = queues.get(queue_id)
        if mq is None:
            mq = queues[queue_id] = MessageQueue(topic, store_id, queue_id)
        offset = offsets[j]
        uid = unique_ids[i]
        out.append(
            SendResult(
                status,
                uid,
                f"{prefix}{offset:016X}",
                mq,
                queue_offsets[j],
                offset,
                uid if prepared else None,
                i in duplicates,
                deliver_at[j] if deliver_at else 0,
            )
        )
    return out


def check_batch_shape(msgs: Sequence[Message]) -> int | None:
    """The queue a batch pins (None: any), or the error saying why it is no batch: empty,
    several topics, or several pinned queues."""
    if not msgs:
        raise BadRequestError("the batch is empty", code=errors_pb2.CODE_ILLEGAL_MESSAGE)
    topic = msgs[0].topic
    if any(m.topic != topic for m in msgs):
        raise BadRequestError("the messages of a batch must share one topic", code=errors_pb2.CODE_ILLEGAL_MESSAGE)
    pinned = {m.queue_id for m in msgs}
    if len(pinned) > 1:
        raise BadRequestError(
            "the messages of a batch go to one queue; their queue_id must agree",
            code=errors_pb2.CODE_ILLEGAL_QUEUE_ID,
        )
    return pinned.pop()


class WriteQueues:
    """``write_queues`` of a route, worked out once per route object (a refresh
    replaces the route, it does not change it)."""

    def __init__(self) -> None:
        self._queues: dict[str, tuple[TopicRoute, list[MessageQueue]]] = {}

    def of(self, route: TopicRoute, queue_id: int | None) -> list[MessageQueue]:
        cached = self._queues.get(route.topic)
        if cached is None or cached[0] is not route:
            cached = self._queues[route.topic] = (route, write_queues(route, None))
        queues = cached[1]
        return queues if queue_id is None else pinned_queues(route, queues, queue_id)


def write_queues(route: TopicRoute, queue_id: int | None) -> list[MessageQueue]:
    """The queues a send may pick, or the error saying why there are none."""
    if not route.queues:
        raise NotFoundError(f"topic {route.topic!r} does not exist", code=errors_pb2.CODE_TOPIC_NOT_FOUND)
    queues = route.write_queues()
    if not queues:
        raise ForbiddenError(f"topic {route.topic!r} has no writable queue", code=errors_pb2.CODE_TOPIC_NOT_WRITABLE)
    return queues if queue_id is None else pinned_queues(route, queues, queue_id)


def pinned_queues(route: TopicRoute, queues: list[MessageQueue], queue_id: int) -> list[MessageQueue]:
    """The write queues with id ``queue_id`` (a message that pins its queue)."""
    pinned = [q for q in queues if q.queue_id == queue_id]
    if not pinned:
        raise BadRequestError(
            f"topic {route.topic!r} has no writable queue {queue_id}",
            code=errors_pb2.CODE_ILLEGAL_QUEUE_ID,
            metadata={"queue_id": str(queue_id)},
        )
    return pinned


def check_and_identify(msg: Message, max_body_bytes: int) -> None:
    """Validate and assign the unique id (on the caller's message, as RocketMQ does, so
    the caller can log it and a resend of the same object keeps it)."""
    check_message(
        topic=msg.topic,
        body=msg.body,
        tags=msg.tags,
        keys=msg.keys,
        properties=msg.properties,
        flag=msg.flag,
        max_body_bytes=max_body_bytes,
    )
    if msg.unique_id is None:
        msg.unique_id = new_unique_id()


def check_and_identify_batch(topic: str, msgs: Sequence[Message], max_body_bytes: int) -> None:
    """``check_and_identify`` for a batch of one topic: the topic is checked once, the
    missing unique ids are made together."""
    check_send_topic(topic)
    for i, m in enumerate(msgs):
        try:
            check_message_content(m.body, m.tags, m.keys, m.properties, m.flag, max_body_bytes)
        except TxmqError:
            # As one check per message would have left them: ids on those before.
            for earlier in msgs[:i]:
                if earlier.unique_id is None:
                    earlier.unique_id = new_unique_id()
            raise
    missing = [m for m in msgs if m.unique_id is None]
    if missing:
        for m, unique_id in zip(missing, new_unique_ids(len(missing)), strict=True):
            m.unique_id = unique_id
