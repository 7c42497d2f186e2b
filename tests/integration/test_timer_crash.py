"""Delayed messages across kill -9 of a real store process (docs/store.md, "Delayed
messages"): timers pending at the kill are delivered after the restart, once and not
before their time; a kill while the timer delivers (its checkpoint behind) duplicates
nothing and loses nothing; a recalled timer is never delivered after a kill. Waits are
liveness guards with generous timeouts."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import grpc
import pytest
from support import ServiceProcess
from support.waiting import wait_until

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc

TOPIC = "TimerCrash"
QUEUES = 4


def store_with_topic(private_store: Callable[..., ServiceProcess], *args: str) -> ServiceProcess:
    store = private_store(*args)
    with grpc.insecure_channel(store.address) as channel:
        store_pb2_grpc.StoreAdminStub(channel).CreateTopic(
            store_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            ),
            timeout=10,
        )
    return store


def send_delayed(address: str, count: int, deliver_at_ms: int, *, batch: int = 1000) -> list[str]:
    """``count`` messages due at ``deliver_at_ms``; their unique ids, as acknowledged."""
    return [r.msg_id for r in send_delayed_results(address, count, deliver_at_ms, batch=batch)]


def send_delayed_results(
    address: str, count: int, deliver_at_ms: int, *, batch: int = 1000
) -> list[store_pb2.SendResult]:
    results: list[store_pb2.SendResult] = []
    with grpc.insecure_channel(address) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        for start in range(0, count, batch):
            n = min(batch, count - start)
            request = store_pb2.SendBatchRequest(
                messages=[
                    common_pb2.Message(
                        topic=TOPIC,
                        body=f"m{start + i}".encode(),
                        properties={"TIMER_DELIVER_MS": str(deliver_at_ms)},
                    )
                    for i in range(n)
                ]
            )
            for result in stub.SendBatch(request, timeout=60).results:
                assert result.status == store_pb2.SEND_STATUS_OK and result.queue_offset == -1
                assert result.deliver_at_ms == deliver_at_ms
                results.append(result)
    return results


def in_queues(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        response = store_pb2_grpc.StoreStub(channel).GetQueueOffsets(
            store_pb2.GetQueueOffsetsRequest(topic=TOPIC), timeout=10
        )
        return sum(q.max_offset for q in response.queues)


def read_all(address: str) -> list[common_pb2.MessageView]:
    views: list[common_pb2.MessageView] = []
    with grpc.insecure_channel(address) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                response = stub.GetMessage(
                    store_pb2.GetMessageRequest(topic=TOPIC, queue_id=queue_id, offset=offset, max_messages=256),
                    timeout=30,
                )
                if response.status != store_pb2.GET_MESSAGE_STATUS_FOUND:
                    break
                views.extend(response.messages)
                offset = response.next_begin_offset
    return views


def check_once(views: list[common_pb2.MessageView], ids: list[str], deliver_at_ms: int) -> None:
    counts = Counter(v.message.unique_id for v in views)
    assert set(counts) == set(ids), f"{len(set(ids) - set(counts))} lost, {len(set(counts) - set(ids))} unknown"
    twice = [uid for uid, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} delivered more than once"
    assert all(v.store_timestamp_ms >= deliver_at_ms for v in views), "delivered before its time"


def test_timers_pending_at_a_kill_are_delivered_once_after_the_restart(
    private_store: Callable[..., ServiceProcess],
) -> None:
    store = store_with_topic(private_store)
    deliver_at = int(time.time() * 1000) + 4_000
    ids = send_delayed(store.address, 200, deliver_at)
    assert in_queues(store.address) == 0  # not yet due
    store.kill()
    store.restart()
    wait_until(lambda: in_queues(store.address) >= len(ids), timeout_s=60, what="delivery after the restart")
    check_once(read_all(store.address), ids, deliver_at)


def test_a_kill_while_delivering_loses_and_duplicates_nothing(private_store: Callable[..., ServiceProcess]) -> None:
    # Sync flush and small batches make the delivery of 10 000 timers take many fsyncs;
    # no periodic checkpoint: the kill lands between deliveries, after the last timer
    # checkpoint, so the restart must find what was delivered.
    store = store_with_topic(
        private_store,
        "--flush_mode", "sync", "--max_batch_messages", "20", "--flush_consume_queue_interval_ms", "600000",
    )  # fmt: skip
    deliver_at = int(time.time() * 1000) + 10_000
    ids = send_delayed(store.address, 10_000, deliver_at, batch=20)
    assert in_queues(store.address) == 0
    seen = 0
    with grpc.insecure_channel(store.address) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            response = stub.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=TOPIC), timeout=10)
            seen = sum(q.max_offset for q in response.queues)
    store.kill()
    assert seen > 0
    store.restart()
    wait_until(lambda: in_queues(store.address) >= len(ids), timeout_s=120, what="delivery after the restart")
    check_once(read_all(store.address), ids, deliver_at)


def test_timers_recalled_before_a_kill_are_never_delivered(private_store: Callable[..., ServiceProcess]) -> None:
    store = store_with_topic(private_store, "--flush_mode", "sync")
    deliver_at = int(time.time() * 1000) + 4_000
    results = send_delayed_results(store.address, 200, deliver_at, batch=50)
    recalled, kept = results[::2], results[1::2]
    with grpc.insecure_channel(store.address) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        for r in recalled:
            resp = stub.RecallMessage(
                store_pb2.RecallMessageRequest(topic=TOPIC, commit_log_offset=r.commit_log_offset, unique_id=r.msg_id),
                timeout=10,
            )
            assert resp.status == store_pb2.SEND_STATUS_OK
    store.kill()  # the timer checkpoint is behind the recalls: the restart reads the recall queue
    store.restart()
    wait_until(lambda: in_queues(store.address) >= len(kept), timeout_s=60, what="delivery after the restart")
    time.sleep(1.5)  # a later tick must deliver nothing more
    check_once(read_all(store.address), [r.msg_id for r in kept], deliver_at)
    with grpc.insecure_channel(store.address) as channel:
        r = kept[0]
        with pytest.raises(grpc.RpcError) as caught:
            store_pb2_grpc.StoreStub(channel).RecallMessage(
                store_pb2.RecallMessageRequest(topic=TOPIC, commit_log_offset=r.commit_log_offset, unique_id=r.msg_id),
                timeout=10,
            )
    err = TxmqError.from_rpc_error(caught.value)
    assert (err.grpc_status, err.code) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        errors_pb2.CODE_MESSAGE_ALREADY_DELIVERED,
    )
