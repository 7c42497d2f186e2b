"""An in-memory stand-in for the part of ``txmq_gateway.backend.Backend`` the consumer core
uses (routes, queue offsets, consume offsets, topic creation, sends, pulls with holds).

It is held to the real backend's behaviour by ``test_backend_contract.py``, which runs one
suite against this fake and against ``Backend`` over real store, pull and txcheck
processes: what a test of the consumer core sees from the fake is what it would see from
the services. Held pulls wait on ``clock`` (tests/support's ManualClock), so the tests
that use the fake move time by hand. Fault injection (``pull_errors``, ``send_error``,
``ignore_tag_filter``, ``no_hold``) is what the fake adds; none of it is on by default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from support.clock import ManualClock

from txmq.errors import TxmqError, error
from txmq.protocol import MESSAGE_TYPE_PRIORITY
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, route_pb2, store_pb2

TOPIC = "T"
PERM_READ_WRITE = 6

QKey = tuple[str, str, int]  # (store, topic, queue id)


def _tag_filter(expression: common_pb2.FilterExpression) -> Callable[[common_pb2.Message], bool]:
    text = expression.expression.strip()
    if expression.type == common_pb2.FILTER_TYPE_SQL92 or not text or text == "*":
        return lambda m: True
    tags = {t.strip() for t in text.split("||")}
    return lambda m: m.tags in tags


@dataclass
class FakeBackend:
    """The part of ``Backend`` the consumer core uses, in memory; held pulls wait on
    ``clock``."""

    clock: ManualClock = field(default_factory=ManualClock)
    stores: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> store -> queue nums
    logs: dict[QKey, list[common_pb2.MessageView]] = field(default_factory=dict)
    min_offsets: dict[QKey, int] = field(default_factory=dict)
    offsets: dict[tuple[str, str, str, int], int] = field(default_factory=dict)  # (store, group, topic, qid)
    commits: list[tuple[str, str, str, int, int]] = field(default_factory=list)
    pulls: list[pull_pb2.PullMessageRequest] = field(default_factory=list)
    sent: list[tuple[str, common_pb2.Message]] = field(default_factory=list)
    sends: list[tuple[str, common_pb2.Message, str, bool]] = field(default_factory=list)  # + group, prepared
    halves: list[tuple[str, common_pb2.Message]] = field(default_factory=list)  # prepared, not visible
    ensured: list[tuple[str, str, int]] = field(default_factory=list)
    pull_errors: dict[str, TxmqError] = field(default_factory=dict)  # store -> error every pull raises
    send_error: TxmqError | None = None
    ignore_tag_filter: bool = False  # answer like a tag-hash collision: every message
    no_hold: bool = False  # answer held pulls at once (a pull instance stopping)
    held: int = 0  # pulls waiting for an arrival now
    commit_log_offset: int = 0  # where the next stored message starts
    _next_queue: int = 0
    priority_topics: set[str] = field(default_factory=set)  # routes say message.type=PRIORITY
    _arrivals: dict[QKey, asyncio.Event] = field(default_factory=dict)

    def add_topic(self, topic: str = TOPIC, queues: dict[str, int] | None = None) -> None:
        self.stores[topic] = queues or {"s1": 1}
        for store_id, nums in self.stores[topic].items():
            for qid in range(nums):
                self.logs.setdefault((store_id, topic, qid), [])

    def put(
        self,
        body: str,
        *,
        topic: str = TOPIC,
        store_id: str = "s1",
        queue_id: int = 0,
        tags: str = "",
        properties: dict[str, str] | None = None,
    ) -> common_pb2.MessageView:
        """Store a message as if a producer had sent it (no ``sent`` record)."""
        message = common_pb2.Message(
            topic=topic, body=body.encode(), tags=tags, queue_id=queue_id, properties=properties or {}
        )
        return self._append(store_id, message)

    def _append(self, store_id: str, message: common_pb2.Message) -> common_pb2.MessageView:
        key = (store_id, message.topic, message.queue_id)
        log = self.logs[key]
        offset = self.min_offsets.get(key, 0) + len(log)
        stored = common_pb2.Message()
        stored.CopyFrom(message)
        if not stored.unique_id:
            stored.unique_id = f"id-{store_id}-{message.queue_id}-{offset}"
        view = common_pb2.MessageView(message=stored, queue_offset=offset, store_id=store_id, store_timestamp_ms=1)
        log.append(view)
        arrival = self._arrivals.pop(key, None)
        if arrival is not None:
            arrival.set()
        return view

    def bounds(self, key: QKey) -> tuple[int, int]:
        low = self.min_offsets.get(key, 0)
        return low, low + len(self.logs[key])

    def _queue_nums(self, store_id: str, topic: str) -> int:
        nums = self.stores.get(topic, {}).get(store_id)
        if nums is None:
            raise error(errors_pb2.CODE_TOPIC_NOT_FOUND, f"no topic {topic} on {store_id}", topic=topic)
        return nums

    async def queues(self, topic: str) -> list[route_pb2.QueueData]:
        if topic not in self.stores:
            raise error(errors_pb2.CODE_TOPIC_NOT_FOUND, f"no topic {topic}")
        kind = MESSAGE_TYPE_PRIORITY if topic in self.priority_topics else ""
        return [
            route_pb2.QueueData(
                store_id=s, read_queue_nums=n, write_queue_nums=n, perm=PERM_READ_WRITE, message_type=kind
            )
            for s, n in self.stores[topic].items()
        ]

    async def queue_offsets(self, store_id: str, topic: str) -> dict[int, tuple[int, int]]:
        await asyncio.sleep(0)
        return {qid: self.bounds((store_id, topic, qid)) for qid in range(self._queue_nums(store_id, topic))}

    async def search_offset(self, store_id: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        await asyncio.sleep(0)
        if not 0 <= queue_id < self._queue_nums(store_id, topic):
            raise error(errors_pb2.CODE_ILLEGAL_QUEUE_ID, f"topic {topic} has no queue {queue_id}")
        low, high = self.bounds((store_id, topic, queue_id))
        log = self.logs[(store_id, topic, queue_id)]
        return next((low + i for i, v in enumerate(log) if v.store_timestamp_ms >= timestamp_ms), high)

    async def query_consume_offset(self, store_id: str, *, group: str, topic: str, queue_id: int) -> int | None:
        await asyncio.sleep(0)
        return self.offsets.get((store_id, group, topic, queue_id))

    async def commit_consume_offset(self, store_id: str, *, group: str, topic: str, queue_id: int, offset: int) -> None:
        await asyncio.sleep(0)
        self.commits.append((store_id, group, topic, queue_id, offset))
        self.offsets[(store_id, group, topic, queue_id)] = offset

    async def ensure_topic(self, store_id: str, topic: str, *, queue_nums: int = 1) -> None:
        self.ensured.append((store_id, topic, queue_nums))
        if topic not in self.stores:
            self.add_topic(topic, {store_id: queue_nums})
        elif store_id not in self.stores[topic]:
            self.add_topic(topic, {**self.stores[topic], store_id: queue_nums})

    async def send(
        self, store_id: str, message: common_pb2.Message, *, producer_group: str = "", prepared: bool = False
    ) -> store_pb2.SendResult:
        """Store ``message`` (in its ``queue_id``, else the next queue round robin); a
        prepared one is kept aside, invisible to pulls and queue offsets."""
        await asyncio.sleep(0)
        if self.send_error is not None:
            raise self.send_error
        self.sends.append((store_id, message, producer_group, prepared))
        return self._store(store_id, message, prepared=prepared)

    async def send_normal(self, store_id: str, message: common_pb2.Message) -> store_pb2.SendResult:
        """``send`` of a normal message (the real backend coalesces these over its send
        stream; one at a time here answers the same)."""
        return await self.send(store_id, message)

    async def send_batch(self, store_id: str, messages: list[common_pb2.Message]) -> list[store_pb2.SendResult]:
        """Store ``messages`` in order, all or none (the store validates the batch whole)."""
        await asyncio.sleep(0)
        if self.send_error is not None:
            raise self.send_error
        for message in messages:
            self._queue_nums(store_id, message.topic)
        for message in messages:
            self.sends.append((store_id, message, "", False))
        return [self._store(store_id, m, prepared=False) for m in messages]

    def _store(self, store_id: str, message: common_pb2.Message, *, prepared: bool) -> store_pb2.SendResult:
        nums = self._queue_nums(store_id, message.topic)
        at = self.commit_log_offset
        self.commit_log_offset += 100 + len(message.body)
        if prepared:
            self.halves.append((store_id, message))
            msg_id = message.unique_id or f"half-{at}"
            return store_pb2.SendResult(
                status=store_pb2.SEND_STATUS_OK, msg_id=msg_id, commit_log_offset=at, transaction_id=msg_id
            )
        stored = common_pb2.Message()
        stored.CopyFrom(message)
        if not stored.HasField("queue_id"):
            stored.queue_id = self._next_queue % nums
            self._next_queue += 1
        elif not 0 <= stored.queue_id < nums:
            raise error(errors_pb2.CODE_ILLEGAL_QUEUE_ID, f"queue id {stored.queue_id} is illegal", topic=stored.topic)
        self.sent.append((store_id, message))
        view = self._append(store_id, stored)
        return store_pb2.SendResult(
            status=store_pb2.SEND_STATUS_OK,
            msg_id=view.message.unique_id,
            queue=common_pb2.MessageQueue(topic=stored.topic, store_id=store_id, queue_id=stored.queue_id),
            queue_offset=view.queue_offset,
            commit_log_offset=at,
        )

    def _read(self, request: pull_pb2.PullMessageRequest) -> pull_pb2.PullMessageResponse:
        q = request.queue
        key = (q.store_id, q.topic, q.queue_id)
        low, high = self.bounds(key)
        offset = request.queue_offset
        reply = pull_pb2.PullMessageResponse(min_offset=low, max_offset=high)
        if offset < low or offset > high:
            reply.status = pull_pb2.PULL_STATUS_OFFSET_ILLEGAL
            # Past the end: the store (as RocketMQ's OFFSET_OVERFLOW_BADLY) goes back to the
            # min offset while that is 0, else to the max offset.
            reply.next_begin_offset = low if offset < low or low == 0 else high
            return reply
        if offset == high:
            reply.status = pull_pb2.PULL_STATUS_NO_NEW_MSG
            reply.next_begin_offset = offset
            return reply
        matches = (lambda m: True) if self.ignore_tag_filter else _tag_filter(request.filter)
        log = self.logs[key]
        cursor = offset
        while cursor < high and len(reply.messages) < (request.max_messages or 32):
            view = log[cursor - low]
            cursor += 1
            if matches(view.message):
                reply.messages.append(view)
        reply.status = pull_pb2.PULL_STATUS_FOUND if reply.messages else pull_pb2.PULL_STATUS_NO_MATCHED_MSG
        reply.next_begin_offset = cursor
        return reply

    async def pull(self, request: pull_pb2.PullMessageRequest) -> pull_pb2.PullMessageResponse:
        self.pulls.append(request)
        await asyncio.sleep(0)
        err = self.pull_errors.get(request.queue.store_id)
        if err is not None:
            raise err
        q = request.queue
        nums = self._queue_nums(q.store_id, q.topic)
        if not 0 <= q.queue_id < nums:
            raise error(errors_pb2.CODE_ILLEGAL_QUEUE_ID, f"queue id {q.queue_id} is illegal", topic=q.topic)
        reply = self._read(request)
        if reply.status != pull_pb2.PULL_STATUS_NO_NEW_MSG or not request.suspend or self.no_hold:
            return reply
        key = (q.store_id, q.topic, q.queue_id)
        arrival = self._arrivals.get(key)
        if arrival is None:
            arrival = self._arrivals[key] = asyncio.Event()
        self.held += 1
        try:
            await self.clock.wait(arrival, self.clock.now_ms() + request.suspend_timeout_ms)
        finally:
            self.held -= 1
        return self._read(request)
