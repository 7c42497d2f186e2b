"""The push consumer's side of retries (docs/consumers.md "Retries and dead letters"):
failed messages are sent back with the consumer's limit, a message sent back is done
locally, a failed send-back falls back to local redelivery, the uncounted answer, and a
retry topic's message reaches the listener with its original topic. No processes, no
sleeping: the consumer's timer and pull client are fakes."""

from __future__ import annotations

from typing import Any

from txmq import ConsumeStatus, PushConsumer, SendBackResult
from txmq._process_queue import ProcessQueue
from txmq.errors import error
from txmq.message import MessageExt, MessageQueue
from txmq.protocol import PROPERTY_RETRY_TOPIC, dlq_topic, retry_topic
from txmq.v1 import errors_pb2

GROUP = "sendback-unit"


class _Timer:
    def __init__(self) -> None:
        self.calls: list[tuple[float, Any, tuple[Any, ...]]] = []

    def call_later(self, delay: float, fn: Any, *args: Any) -> None:
        self.calls.append((delay, fn, args))


class _Client:
    def __init__(self, fail: bool = False, dead: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail
        self.dead = dead
        self.stale: list[str] = []

    def mark_route_stale(self, topic: str) -> None:
        self.stale.append(topic)

    def send_back(self, topic: str, message: MessageExt, **kw: Any) -> SendBackResult:
        self.calls.append(dict(topic=topic, offset=message.commit_log_offset, **kw))
        if self.fail:
            raise error(errors_pb2.CODE_SERVICE_NOT_READY, "store down")
        target = dlq_topic(GROUP) if self.dead else retry_topic(GROUP)
        return SendBackResult(target, self.dead, message.reconsume_times + 1, message.msg_id, "X", "s1", 0, 0)


def _msg(offset: int, *, topic: str = "T", reconsume_times: int = 0, props: dict[str, str] | None = None) -> MessageExt:
    return MessageExt(
        topic, b"b", unique_id=f"U{offset}", properties=props or {}, offset_msg_id="", queue_offset=offset,
        commit_log_offset=1000 + offset, store_size_bytes=0, body_crc=0, sys_flag=0, born_timestamp_ms=0,
        born_host="", store_timestamp_ms=0, store_host="", reconsume_times=reconsume_times,
        prepared_transaction_offset=0, store_id="s1",
    )  # fmt: skip


def _running(client: _Client, answer: Any, mq_topic: str = "T") -> tuple[PushConsumer, _Timer, ProcessQueue, list]:
    consumer = PushConsumer(GROUP, "127.0.0.1:1", client_id="c1", max_reconsume_times=3)
    seen: list[tuple[str, int]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        seen.extend((m.topic, m.reconsume_times) for m in msgs)
        if isinstance(answer, Exception):
            raise answer
        return answer

    consumer.register_message_listener(listener)
    timer = _Timer()
    consumer._client = client  # type: ignore[assignment]
    consumer._timer = timer  # type: ignore[assignment]
    consumer._state = "running"
    pq = ProcessQueue(MessageQueue(mq_topic, "s1", 0), 0)
    consumer._queues[pq.mq] = pq
    return consumer, timer, pq, seen


def _pending(pq: ProcessQueue, msgs: list[MessageExt]) -> None:
    pq.take(msgs, msgs[-1].queue_offset + 1)


def test_failed_messages_are_sent_back_and_done_locally() -> None:
    client = _Client()
    consumer, timer, pq, _ = _running(client, ConsumeStatus.RECONSUME_LATER)
    msgs = [_msg(0), _msg(1)]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert [c["offset"] for c in client.calls] == [1000, 1001]
    assert all(c["max_reconsume_times"] == 3 and c["uncounted"] is False and c["topic"] == "T" for c in client.calls)
    assert pq.pending == {} and pq.commit_point() == 2  # the offset passes them
    assert timer.calls == []  # nothing redelivered from memory
    # The first copy on store s1 may have created the retry topic: its route is looked up
    # again and a rebalance asked for, once per store.
    assert client.stale == [retry_topic(GROUP)] and consumer._rebalance_now


def test_an_exception_means_the_same() -> None:
    client = _Client()
    consumer, _timer, pq, _ = _running(client, RuntimeError("boom"))
    msgs = [_msg(0)]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert len(client.calls) == 1 and pq.pending == {}


def test_uncounted_answer_sends_back_uncounted() -> None:
    client = _Client()
    consumer, _timer, pq, _ = _running(client, ConsumeStatus.RECONSUME_LATER_UNCOUNTED)
    msgs = [_msg(0)]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert client.calls[0]["uncounted"] is True and pq.pending == {}


def test_a_failed_send_back_falls_back_to_local_redelivery() -> None:
    client = _Client(fail=True)
    consumer, timer, pq, _ = _running(client, ConsumeStatus.RECONSUME_LATER)
    msgs = [_msg(0)]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert len(client.calls) == 1
    assert list(pq.pending) == [0] and pq.commit_point() == 0  # held in memory
    ((_, fn, args),) = timer.calls
    assert fn == consumer._submit and args[1][0].reconsume_times == 1


def test_a_failed_uncounted_send_back_is_redelivered_without_counting() -> None:
    client = _Client(fail=True)
    consumer, timer, pq, _ = _running(client, ConsumeStatus.RECONSUME_LATER_UNCOUNTED)
    msgs = [_msg(0, reconsume_times=5)]  # past the limit: still not skipped
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    ((_, _, args),) = timer.calls
    assert args[1][0].reconsume_times == 5 and list(pq.pending) == [0]


def test_success_sends_nothing_back() -> None:
    client = _Client()
    consumer, _timer, pq, _ = _running(client, ConsumeStatus.CONSUME_SUCCESS)
    msgs = [_msg(0)]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert client.calls == [] and pq.pending == {}


def test_a_retry_topic_message_has_its_original_topic_and_is_sent_back_from_its_queue() -> None:
    client = _Client(dead=True)
    consumer, _timer, pq, seen = _running(client, ConsumeStatus.RECONSUME_LATER, mq_topic=retry_topic(GROUP))
    msgs = [_msg(0, topic=retry_topic(GROUP), reconsume_times=2, props={PROPERTY_RETRY_TOPIC: "Orders"})]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert seen == [("Orders", 2)]
    assert client.calls[0]["topic"] == retry_topic(GROUP)  # routed by the queue it came from
    assert pq.pending == {}
