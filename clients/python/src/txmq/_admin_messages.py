"""``Admin``'s message calls: a message by offsetMsgId or by key / unique id, and a
group's dead letters (docs/consumers.md "Retries and dead letters")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from txmq._admin_base import AdminBase, Store
from txmq._convert import message_ext_from_proto
from txmq.errors import BadRequestError, NotFoundError
from txmq.ids import decode_offset_msg_id
from txmq.message import MessageExt
from txmq.protocol import PROPERTY_DLQ_ORIGIN_TOPIC, dlq_topic
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc
from txmq.validation import check_group, check_topic

#: Dead letters read per GetMessage call (``Admin.list_dead_letters``).
_DLQ_PAGE = 256
#: Dead letters named per ResendDeadLetters call (the store takes at most 1000).
_RESEND_BATCH = 1000


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
    ORIGIN_MESSAGE_ID property names the dead letter (``dead_letter_id``); ``duplicate``:
    it was resent before, and this is the first message (nothing stored now)."""

    dead_letter_id: str
    msg_id: str
    topic: str
    store_id: str
    queue_id: int
    queue_offset: int
    duplicate: bool = False  # resent before: the first message, nothing stored now


class MessageAdmin(AdminBase):
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

    def _query(self, stores: Sequence[Store], request: store_pb2.QueryMessagesRequest) -> list[MessageExt]:
        found = [
            message_ext_from_proto(view)
            for store in stores
            for view in self._call(store, self._store_stub(store).QueryMessages, request).messages
        ]
        return sorted(found, key=lambda m: (m.store_timestamp_ms, m.store_id, m.commit_log_offset))

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
        holds them (``ConsumerControl.ResendDeadLetters``): each as a new message with
        the body, tags, keys and user properties of the dead letter and
        ORIGIN_MESSAGE_ID = its id. Each dead letter is resent once: asked again, the
        store answers the first message (``duplicate``). The dead letters stay in the
        dead-letter topic. Needs Sub on the group and on the origin topics.

        ``ids``: the dead letters with these unique ids, asked of every store (or
        ``store_id``); an id no store holds raises NotFoundError MESSAGE_NOT_FOUND once
        the others were resent (running it again resends nothing twice). None: every
        one, listed first (``list_dead_letters``: reading ``%DLQ%<group>`` needs Sub on
        that topic)."""
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        stores = self._stores(store_id)
        if ids is None:
            held: dict[str, list[str]] = {}
            for d in self.list_dead_letters(group, store_id=store_id, max_results=1_000_000):
                held.setdefault(d.store_id, []).append(d.msg_id)
            asked = {s.store_id: list(dict.fromkeys(held[s.store_id])) for s in stores if s.store_id in held}
        else:
            wanted = list(dict.fromkeys(ids))
            asked = {s.store_id: wanted for s in stores}
        resent: list[ResentDeadLetter] = []
        for store in stores:
            names = asked.get(store.store_id, [])
            stub = self._core.stub(store.address, store_pb2_grpc.ConsumerControlStub)
            for i in range(0, len(names), _RESEND_BATCH):
                request = store_pb2.ResendDeadLettersRequest(group=group, unique_ids=names[i : i + _RESEND_BATCH])
                for r in self._call(store, stub.ResendDeadLetters, request).resent:
                    q = r.result.queue
                    resent.append(
                        ResentDeadLetter(
                            r.dead_letter_id,
                            r.result.msg_id,
                            q.topic,
                            q.store_id,
                            q.queue_id,
                            r.result.queue_offset,
                            r.result.duplicate,
                        )
                    )
        if ids is not None:
            missing = [i for i in dict.fromkeys(ids) if i not in {r.dead_letter_id for r in resent}]
            if missing:
                raise NotFoundError(
                    f"group {group} has no dead letter {missing[0]!r}",
                    code=errors_pb2.CODE_MESSAGE_NOT_FOUND,
                    metadata={"unique_id": missing[0], "group": group},
                )
        return resent


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
