"""A send-back the store answers with SEND_STATUS_FLUSH_REPLICA_TIMEOUT (a replicated store
group: the copy is written on the leader, not yet held by every in-sync replica in time)
is a send-back done: the copy is stored and may still become visible, so the consumer
neither sends the message back again nor redelivers it from memory as a failure; the
status is in ``SendBackResult.status``. The same for an orderly consumer's dead letter.
A refusal such as NOT_ENOUGH_REPLICAS (nothing written) is a failed send-back and the
message is redelivered from memory. Fakes only, as test_sendback_unit."""

from __future__ import annotations

from typing import Any

from txmq import ConsumeStatus, SendBackResult
from txmq._pulling import PullClient
from txmq.errors import error
from txmq.message import MessageExt, SendStatus
from txmq.v1 import common_pb2, errors_pb2, store_pb2

from .test_orderly_unit import MQ, message
from .test_sendback_unit import _Client, _msg, _pending, _running


class _ReplicaTimeout(_Client):
    def send_back(self, topic: str, message: MessageExt, **kw: Any) -> SendBackResult:
        r = super().send_back(topic, message, **kw)
        return SendBackResult(
            r.topic, r.dead_lettered, r.reconsume_times, r.msg_id, r.offset_msg_id, r.store_id, r.queue_id,
            r.queue_offset, status=SendStatus.FLUSH_REPLICA_TIMEOUT,
        )  # fmt: skip


class _NotEnoughReplicas(_Client):
    def send_back(self, topic: str, message: MessageExt, **kw: Any) -> SendBackResult:
        self.calls.append(dict(topic=topic))
        raise error(errors_pb2.CODE_NOT_ENOUGH_REPLICAS, "1 of 2 replicas in sync")


def test_a_send_back_stored_but_not_yet_replicated_is_done() -> None:
    client = _ReplicaTimeout()
    consumer, timer, pq, _ = _running(client, ConsumeStatus.RECONSUME_LATER)
    msgs = [_msg(0)]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert len(client.calls) == 1  # sent back once
    assert timer.calls == [] and not pq.pending  # not redelivered from memory: done here
    assert consumer.error is None


def test_a_send_back_refused_for_want_of_replicas_is_redelivered() -> None:
    client = _NotEnoughReplicas()
    consumer, timer, pq, _ = _running(client, ConsumeStatus.RECONSUME_LATER)
    msgs = [_msg(0)]
    _pending(pq, msgs)
    consumer._consume(pq, msgs)
    assert len(timer.calls) == 1 and 0 in pq.pending  # nothing was written: redelivered
    assert consumer.error is None


def test_the_send_back_result_tells_the_status() -> None:
    class Stub:
        def SendBack(self, request: object, timeout: float) -> store_pb2.SendBackResponse:
            result = store_pb2.SendResult(
                status=store_pb2.SEND_STATUS_FLUSH_REPLICA_TIMEOUT,
                msg_id="U0",
                queue=common_pb2.MessageQueue(topic="%RETRY%G", store_id="s1", queue_id=0),
            )
            return store_pb2.SendBackResponse(result=result, reconsume_times=1)

    client = PullClient(None, "G", timeout=1.0)  # type: ignore[arg-type]
    client.store_stub = lambda topic, store_id: Stub()  # type: ignore[method-assign]
    r = client.send_back("T", _msg(0))
    assert r.status is SendStatus.FLUSH_REPLICA_TIMEOUT and r.topic == "%RETRY%G" and not r.dead_lettered


def test_an_orderly_dead_letter_stored_but_not_yet_replicated_is_done() -> None:
    """StoreLockCalls.send_back raises only when the store did not take the dead letter:
    an answer with FLUSH_REPLICA_TIMEOUT returns, so the queue goes on (OrderlyService
    counts a send_back that returns as done: test_orderly_unit)."""
    from txmq._orderly import StoreLockCalls

    class Stub:
        def SendBack(self, request: object, timeout: float) -> store_pb2.SendBackResponse:
            result = store_pb2.SendResult(status=store_pb2.SEND_STATUS_FLUSH_REPLICA_TIMEOUT)
            return store_pb2.SendBackResponse(result=result, dead_lettered=True)

    calls = StoreLockCalls(None, "G", "me", timeout=1.0)
    calls._stub = lambda topic, store_id: Stub()  # type: ignore[method-assign]
    calls.send_back(message(7, MQ), 5)  # does not raise
