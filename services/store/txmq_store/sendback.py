"""Send-back: a message a consumer group failed to consume, copied to the group's retry
topic (due after a delay level) or, past the retry limit, to its dead-letter topic
(RocketMQ's consumerSendMsgBack; protos/txmq/v1/store.proto ``ConsumerControl.SendBack``;
docs/consumers.md "Retries and dead letters").

- The count is the **stored record's** reconsume count plus one (never a number the
  consumer sends), so the retry limit holds however slowly or often a message is
  consumed (RocketMQ #8332). ``uncounted`` keeps the count (RocketMQ #10050).
- The copy keeps the body, tags, keys, flag, born time, user properties, the message
  type, group and priority (``copied_properties``) and the unique id; it carries ``RETRY_TOPIC``
  (the topic first consumed, kept by a copy of a copy), ``ORIGIN_MESSAGE_ID``, a
  ``DELAY`` level (retry copies) or ``TXMQ_DLQ_ORIGIN_TOPIC`` (dead letters, the
  gateway's convention), and ``TXMQ_SENDBACK_OF`` = ``<group>@<commit-log offset of the
  record sent back>``.
- **Idempotent**: a send-back of a record the group sent back before is answered with
  the first copy, nothing stored. In memory: the send-backs in flight and the recent
  ones; beyond that (and after a restart): the copy keeps the source's unique id, so the
  unique-id index lists it; a candidate stored after the source whose TXMQ_SENDBACK_OF
  names this group and offset is the first copy.

A retried message of a priority topic keeps its priority and its place by it: the
group's retry topic becomes a priority topic (``_ensure_priority``) and the send path
puts the copy in the queue of its priority.

The delay itself is the store's send path's business (a message with a DELAY property
waits in the timer when the store has one); this core only names the level.

``DeadLetterResend`` (``ConsumerControl.ResendDeadLetters``, ``txmq dlq resend``): dead
letters sent again to their origin topic as new messages, each once, with the same kind
of durable idempotence.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from txmq.errors import TxmqError, error
from txmq.protocol import (
    DELAY_PROPERTIES,
    MESSAGE_TYPE_PRIORITY,
    PROPERTY_DELAY_LEVEL,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRIORITY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_RESEND_OF,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SENDBACK_OF,
    RETRY_LEVEL_BASE,
    TOPIC_ATTRIBUTE_MESSAGE_TYPE,
    TRANSACTION_TYPE_MASK,
    copied_properties,
    dlq_topic,
    is_priority_topic,
    is_system_topic,
    retry_topic,
)
from txmq.v1 import errors_pb2

from .configs import SubscriptionGroupConfig
from .message_store import MessageStore
from .model import OutgoingMessage, SendResult, SendStatus, StoredMessage
from .validation import check_group_name

log = logging.getLogger("txmq.store.sendback")

#: Send-backs remembered in memory (answered without an index look-up).
RECENT_MAX = 10_000
#: Most index candidates read when looking for an earlier copy.
COPY_CANDIDATES_MAX = 1_000
#: A dead letter's queue count (RocketMQ: one).
DLQ_QUEUE_NUMS = 1


@dataclass(frozen=True, slots=True)
class SendBackOutcome:
    """The copy stored, or for a send-back seen before the first copy (``duplicate``)."""

    result: SendResult
    dead_lettered: bool
    reconsume_times: int
    duplicate: bool = False


def sendback_key(group: str, commit_log_offset: int) -> str:
    """The TXMQ_SENDBACK_OF value of a copy of the record at ``commit_log_offset``."""
    return f"{group}@{commit_log_offset}"


def retry_level(delay_level: int, stored_times: int, levels: int) -> int:
    """The delay level of a retry copy: the caller's (1..levels), or for 0 RocketMQ's
    RETRY_LEVEL_BASE + the stored reconsume count (10 s, 30 s, 1 min, ... with the
    default table), capped at the last level."""
    if delay_level > 0:
        return delay_level
    return min(RETRY_LEVEL_BASE + stored_times, levels)


class SendBack:
    """The SendBack core of one store (one event loop: no locks)."""

    def __init__(self, store: MessageStore, *, delay_levels: int | None = None) -> None:
        self._store = store
        self._levels = delay_levels if delay_levels is not None else len(store.settings.delay_levels_ms)
        self._in_flight: dict[tuple[str, int], asyncio.Future[SendBackOutcome]] = {}
        self._recent: OrderedDict[tuple[str, int], SendBackOutcome] = OrderedDict()

    async def send_back(
        self,
        *,
        group: str,
        commit_log_offset: int,
        unique_id: str,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
        uncounted: bool = False,
        may_consume: Callable[[str], None] | None = None,
    ) -> SendBackOutcome:
        """Copy the record at ``commit_log_offset`` (which must carry ``unique_id``) to
        the group's retry or dead-letter topic. ``may_consume(topic)`` raises when the
        caller may not consume the record's topic (ACLs)."""
        self._check_request(group, unique_id, delay_level, max_reconsume_times)
        source = self._store.reader.view_message(commit_log_offset)  # a record boundary, or MESSAGE_NOT_FOUND
        if source.unique_id != unique_id:
            raise error(
                errors_pb2.CODE_MESSAGE_NOT_FOUND,
                f"the record at commit-log offset {commit_log_offset} is not message {unique_id}",
                commit_log_offset=str(commit_log_offset), unique_id=unique_id,
            )  # fmt: skip
        if is_system_topic(source.topic):
            raise error(
                errors_pb2.CODE_SYSTEM_TOPIC,
                f"the record at commit-log offset {commit_log_offset} is on system topic {source.topic}",
                topic=source.topic,
            )  # fmt: skip
        if may_consume is not None:
            may_consume(source.topic)
        cfg = self._store.admin.group_in_use(group)  # created on first use, as for committed offsets
        key = (group, commit_log_offset)
        known = self._recent.get(key)
        if known is not None:
            return _as_duplicate(known)
        pending = self._in_flight.get(key)
        if pending is not None:
            return _as_duplicate(await asyncio.shield(pending))
        found = self._earlier_copy(group, source)
        if found is not None:
            self._remember(key, found)
            return _as_duplicate(found)
        limit = cfg.retry_max_times if max_reconsume_times is None else max_reconsume_times
        future: asyncio.Future[SendBackOutcome] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            outcome = await self._copy(group, cfg, source, delay_level, limit, uncounted)
        except BaseException as exc:
            # Waiters for the same record get the failure (a cancelled first call: a
            # retriable one); the future's exception counts as retrieved without waiters.
            failure = exc if isinstance(exc, Exception) else _cancelled(commit_log_offset)
            future.set_exception(failure)
            future.exception()
            raise
        finally:
            del self._in_flight[key]
        future.set_result(outcome)
        self._remember(key, outcome)
        return outcome

    def _check_request(self, group: str, unique_id: str, delay_level: int, max_times: int | None) -> None:
        check_group_name(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if not unique_id:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "unique_id is empty: name the message sent back")
        if delay_level < -1:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"delay_level {delay_level}: use 0 (by count), 1..{self._levels} or -1 (dead-letter)",
                delay_level=str(delay_level),
            )  # fmt: skip
        if delay_level > self._levels:
            raise error(
                errors_pb2.CODE_ILLEGAL_DELIVERY_TIME,
                f"delay level {delay_level} is unknown: the store has {self._levels} (message_delay_levels)",
                delay_level=str(delay_level), levels=str(self._levels),
            )  # fmt: skip
        if max_times is not None and max_times < 0:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"max_reconsume_times {max_times} is negative",
                max_reconsume_times=str(max_times),
            )  # fmt: skip

    def _remember(self, key: tuple[str, int], outcome: SendBackOutcome) -> None:
        self._recent[key] = outcome
        self._recent.move_to_end(key)
        while len(self._recent) > RECENT_MAX:
            self._recent.popitem(last=False)

    def _earlier_copy(self, group: str, source: StoredMessage) -> SendBackOutcome | None:
        """The copy an earlier send-back of ``source`` by ``group`` stored, found through
        the unique-id index (the copy keeps the source's id)."""
        mark = sendback_key(group, source.commit_log_offset)
        # Not bounded by the source's store time: a wall clock stepped back would hide a copy.
        candidates = self._store.reader.query_messages(unique_id=source.unique_id, max_results=COPY_CANDIDATES_MAX)
        for msg in candidates:  # commit-log order: the first copy first
            if msg.commit_log_offset > source.commit_log_offset and msg.properties.get(PROPERTY_SENDBACK_OF) == mark:
                return self._outcome_of(group, msg)
        return None

    def _outcome_of(self, group: str, copy: StoredMessage) -> SendBackOutcome:
        dead = PROPERTY_DLQ_ORIGIN_TOPIC in copy.properties
        topic, queue_id, queue_offset = copy.topic, copy.queue_id, copy.queue_offset
        if is_system_topic(topic):  # a delayed copy still waiting in the store's timer
            topic = dlq_topic(group) if dead else retry_topic(group)
            queue_id = _int(copy.properties.get(PROPERTY_REAL_QUEUE_ID, "0"))
            queue_offset = -1
        prefix = self._store.sender.offset_msg_id_prefix
        result = SendResult(
            SendStatus.OK, copy.unique_id, f"{prefix}{copy.commit_log_offset:016X}", topic, queue_id, queue_offset,
            copy.commit_log_offset,
        )  # fmt: skip
        return SendBackOutcome(result, dead, copy.reconsume_times)

    async def _copy(
        self, group: str, cfg: SubscriptionGroupConfig, source: StoredMessage, delay_level: int, limit: int,
        uncounted: bool,
    ) -> SendBackOutcome:  # fmt: skip
        origin = source.properties.get(PROPERTY_RETRY_TOPIC) or source.topic
        times = source.reconsume_times if uncounted else source.reconsume_times + 1
        dead = delay_level == -1 or (not uncounted and times > limit)
        props = {k: v for k, v in copied_properties(source.properties).items() if k not in DELAY_PROPERTIES}
        props[PROPERTY_RETRY_TOPIC] = origin
        props[PROPERTY_ORIGIN_MESSAGE_ID] = source.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or source.unique_id
        props[PROPERTY_SENDBACK_OF] = sendback_key(group, source.commit_log_offset)
        if dead:
            topic = dlq_topic(group)
            props[PROPERTY_DLQ_ORIGIN_TOPIC] = origin
            created = self._ensure_topic(topic, DLQ_QUEUE_NUMS)
        else:
            topic = retry_topic(group)
            props[PROPERTY_DELAY_LEVEL] = str(retry_level(delay_level, source.reconsume_times, self._levels))
            created = self._ensure_topic(topic, max(1, cfg.retry_queue_nums))
            if PROPERTY_PRIORITY in props:
                created = self._ensure_priority(topic, source.topic) or created
        if created:
            # Routable (and, in a replicated group, held by the followers) before the
            # first copy is stored, as an admin's CreateTopic answers.
            await self._store.admin.topics_propagated()
        copy = OutgoingMessage(
            topic, source.body, source.tags, tuple(source.keys), props, source.unique_id, source.flag, None,
            source.born_timestamp_ms,
        )  # fmt: skip
        copy.sys_flag = source.sys_flag & ~TRANSACTION_TYPE_MASK
        copy.reconsume_times = times
        (result,) = await self._store.sender.send([copy], system=True)
        log.debug(
            "group %s sent back %s (offset %d, count %d) to %s", group, source.unique_id, source.commit_log_offset,
            times, topic,
        )  # fmt: skip
        return SendBackOutcome(result, dead, times)

    def _ensure_topic(self, topic: str, queue_nums: int) -> bool:
        """Create the group's retry / dead-letter topic on this store unless it exists;
        whether it was created now."""
        admin = self._store.admin
        try:
            admin.get_topic(topic)
            return False
        except TxmqError as err:
            if err.code != errors_pb2.CODE_TOPIC_NOT_FOUND:
                raise
        admin.create_topic(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums)
        log.info("created topic %s with %d queue(s) for send-backs", topic, queue_nums)
        return True

    def _ensure_priority(self, topic: str, source_topic: str) -> bool:
        """Make the group's retry topic a priority topic with at least as many queues as
        the priority topic a retried message came from, so the copy waits in the queue of
        its priority (RocketMQ's retry queue loses it) and the consumer reads it as it
        reads the topic. Its other copies are priority 0, the lowest (queue 0 when it had
        one queue). Whether it changed."""
        admin = self._store.admin
        retry, origin = admin.topics.get(topic), admin.topics.get(source_topic)
        if retry is None or origin is None or not is_priority_topic(origin.attributes):
            return False
        queues = max(retry.write_queue_nums, origin.write_queue_nums)
        if is_priority_topic(retry.attributes) and retry.write_queue_nums == queues:
            return False
        attributes = {**retry.attributes, TOPIC_ATTRIBUTE_MESSAGE_TYPE: MESSAGE_TYPE_PRIORITY}
        admin.update_topic(topic, read_queue_nums=max(retry.read_queue_nums, queues), write_queue_nums=queues,
                           attributes=attributes)  # fmt: skip
        log.info("made topic %s a priority topic with %d queues for send-backs from %s", topic, queues, source_topic)
        return True


def _cancelled(commit_log_offset: int, what: str = "send-back", again: str = "send it back again") -> Exception:
    return error(
        errors_pb2.CODE_SERVICE_NOT_READY,
        f"the {what} of the record at commit-log offset {commit_log_offset} was cut off; {again}",
        commit_log_offset=str(commit_log_offset),
    )


def _as_duplicate(outcome: SendBackOutcome) -> SendBackOutcome:
    return SendBackOutcome(outcome.result, outcome.dead_lettered, outcome.reconsume_times, duplicate=True)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


#: Dead-letter ids one ResendDeadLetters request may name.
MAX_RESEND_IDS = 1000


@dataclass(frozen=True, slots=True)
class Resent:
    """A dead letter (``dead_letter_id``, at ``commit_log_offset``) and the message its
    resend stored (or, resent before, the first one: ``result.duplicate``)."""

    dead_letter_id: str
    commit_log_offset: int
    result: SendResult


def resend_id(store_id: str, group: str, commit_log_offset: int, unique_id: str) -> str:
    """The unique id of the message a resend of a dead letter stores (32 uppercase hex
    digits, as any): derived from the dead letter, so a second resend is the same
    message, found again through the unique-id index. Not the dead letter's own id: that
    one is the original message's, on the same topic."""
    text = f"{store_id}/{group}@{commit_log_offset}/{unique_id}".encode()
    return hashlib.blake2b(text, digest_size=16, person=b"txmq-dlq-resend").hexdigest().upper()


class DeadLetterResend:
    """The ResendDeadLetters core of one store (one event loop: no locks): dead letters
    of a group sent again to their origin topic as new messages, each once.

    A dead letter is a record of ``%DLQ%<group>`` on this store, named by its unique id
    (found through the unique-id index; every dead letter of the group with that id is
    resent). The new message keeps the body, tags, keys, flag, born time, user
    properties and the message type and group, with a count of 0, ``ORIGIN_MESSAGE_ID`` = the dead letter's id and
    ``TXMQ_RESEND_OF`` = ``<group>@<the dead letter's commit-log offset>``; its unique id
    is ``resend_id``. Resending a dead letter resent before stores nothing and answers
    the first message (``duplicate``): the one in flight, else the one the unique-id
    index lists with that mark (durable, as send-backs)."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._in_flight: dict[int, asyncio.Future[SendResult]] = {}

    async def resend(
        self, *, group: str, unique_ids: Sequence[str], may_consume: Callable[[str], None] | None = None
    ) -> list[Resent]:
        """Resend the dead letters of ``group`` with these ids that this store holds (ids
        it does not hold are left out of the answer). ``may_consume(topic)`` raises when
        the caller may not consume an origin topic (ACLs): checked for every dead letter
        before any is resent."""
        check_group_name(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        if len(unique_ids) > MAX_RESEND_IDS:
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"{len(unique_ids)} dead letters named in one request, at most {MAX_RESEND_IDS}",
            )  # fmt: skip
        if not all(unique_ids):
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "an empty unique id: name each dead letter")
        topic = dlq_topic(group)
        letters: list[tuple[StoredMessage, str]] = []
        for unique_id in dict.fromkeys(unique_ids):
            found = self._store.reader.query_messages(unique_id=unique_id, max_results=COPY_CANDIDATES_MAX)
            for letter in found:  # commit-log order
                if letter.topic != topic:
                    continue  # the original message, its retry copies, another group's dead letter
                origin = letter.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC, "")
                if not origin:
                    raise error(
                        errors_pb2.CODE_ILLEGAL_ARGUMENT,
                        f"dead letter {unique_id} names no origin topic ({PROPERTY_DLQ_ORIGIN_TOPIC})",
                        unique_id=unique_id,
                    )  # fmt: skip
                if may_consume is not None:
                    may_consume(origin)
                letters.append((letter, origin))
        return [
            Resent(letter.unique_id, letter.commit_log_offset, await self._resend_one(group, letter, origin))
            for letter, origin in letters
        ]

    async def _resend_one(self, group: str, letter: StoredMessage, origin: str) -> SendResult:
        offset = letter.commit_log_offset
        pending = self._in_flight.get(offset)
        if pending is not None:
            return dataclasses.replace(await asyncio.shield(pending), duplicate=True)
        new_id = resend_id(self._store.store_id, group, offset, letter.unique_id)
        mark = sendback_key(group, offset)
        for msg in self._store.reader.query_messages(unique_id=new_id, max_results=COPY_CANDIDATES_MAX):
            if msg.topic == origin and msg.properties.get(PROPERTY_RESEND_OF) == mark:
                prefix = self._store.sender.offset_msg_id_prefix
                return SendResult(
                    SendStatus.OK, msg.unique_id, f"{prefix}{msg.commit_log_offset:016X}", msg.topic, msg.queue_id,
                    msg.queue_offset, msg.commit_log_offset, duplicate=True,
                )  # fmt: skip
        future: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        self._in_flight[offset] = future
        try:
            props = copied_properties(letter.properties)
            props[PROPERTY_ORIGIN_MESSAGE_ID] = letter.unique_id
            props[PROPERTY_RESEND_OF] = mark
            message = OutgoingMessage(
                origin, letter.body, letter.tags, tuple(letter.keys), props, new_id, letter.flag, None,
                letter.born_timestamp_ms,
            )  # fmt: skip
            (result,) = await self._store.sender.send([message], system=True)
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else _cancelled(offset, "resend", "resend it")
            future.set_exception(failure)
            future.exception()
            raise
        finally:
            del self._in_flight[offset]
        future.set_result(result)
        log.info("group %s resent dead letter %s to %s as %s", group, letter.unique_id, origin, new_id)
        return result
