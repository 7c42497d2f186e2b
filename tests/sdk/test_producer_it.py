"""Producer against the real session cluster: send, batch, queue choice, errors, retries."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from txmq import (
    Admin,
    BadRequestError,
    ForbiddenError,
    Message,
    MessageQueue,
    NotFoundError,
    PayloadTooLargeError,
    Perm,
    Producer,
    SendResult,
    SendStatus,
    ServiceKind,
)
from txmq.v1 import errors_pb2

MIB = 1024 * 1024


def test_send_then_view_and_query_by_key_and_unique_id(producer: Producer, admin: Admin, topic: str) -> None:
    msg = Message(topic, b"hello", tags="TagA", keys=("order-1", "user-7"), properties={"color": "red"}, flag=3)
    result = producer.send(msg)

    assert result.status is SendStatus.OK
    assert msg.unique_id is not None and result.msg_id == msg.unique_id
    assert result.message_queue.topic == topic and result.offset_msg_id

    viewed = admin.view_message(result.offset_msg_id)
    assert (viewed.topic, viewed.body, viewed.tags, viewed.keys, viewed.flag) == (
        topic,
        b"hello",
        "TagA",
        ("order-1", "user-7"),
        3,
    )
    assert viewed.properties["color"] == "red"
    assert viewed.msg_id == msg.unique_id
    assert (viewed.store_id, viewed.queue_id) == (result.message_queue.store_id, result.message_queue.queue_id)
    assert (viewed.queue_offset, viewed.commit_log_offset) == (result.queue_offset, result.commit_log_offset)
    assert viewed.born_timestamp_ms > 0 and viewed.store_timestamp_ms >= viewed.born_timestamp_ms - 60_000

    by_key = admin.query_messages_by_key(topic, "user-7")
    assert [m.offset_msg_id for m in by_key] == [result.offset_msg_id]
    assert admin.query_message_by_unique_id(msg.unique_id).offset_msg_id == result.offset_msg_id
    assert admin.query_message_by_unique_id(msg.unique_id, topic=topic).body == b"hello"


def test_sends_go_round_robin_over_the_write_queues(producer: Producer, admin: Admin, topic: str) -> None:
    results = [producer.send(Message(topic, f"m{i}".encode())) for i in range(8)]
    assert Counter(r.message_queue.queue_id for r in results) == {0: 2, 1: 2, 2: 2, 3: 2}
    offsets = {o.queue.queue_id: (o.min_offset, o.max_offset) for o in admin.queue_offsets(topic)}
    assert offsets == {q: (0, 2) for q in range(4)}


def test_pinned_queue_id(producer: Producer, topic: str) -> None:
    results = [producer.send(Message(topic, b"x", queue_id=2)) for _ in range(3)]
    assert [(r.message_queue.queue_id, r.queue_offset) for r in results] == [(2, 0), (2, 1), (2, 2)]
    with pytest.raises(BadRequestError) as info:
        producer.send(Message(topic, b"x", queue_id=9))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_QUEUE_ID


def test_send_batch_stores_all_in_one_queue(producer: Producer, admin: Admin, topic: str) -> None:
    msgs = [Message(topic, f"b{i}".encode(), keys=f"batch-{i}") for i in range(5)]
    results = producer.send_batch(msgs)

    assert len({r.message_queue for r in results}) == 1
    first = results[0].queue_offset
    assert [r.queue_offset for r in results] == list(range(first, first + 5))
    assert [r.msg_id for r in results] == [m.unique_id for m in msgs]
    assert len({r.msg_id for r in results}) == 5
    for i, r in enumerate(results):
        assert admin.view_message(r.offset_msg_id).body == f"b{i}".encode()
        assert admin.query_message_by_unique_id(r.msg_id, topic=topic).keys == (f"batch-{i}",)


def test_a_big_batch_fits_in_one_call(producer: Producer, topic: str) -> None:
    # 40 x 1 MiB: far beyond gRPC's default 4 MiB message limit.
    results = producer.send_batch([Message(topic, bytes(MIB)) for _ in range(40)], timeout=30)
    assert len(results) == 40


def test_batch_must_share_topic_and_queue(producer: Producer, topic: str) -> None:
    with pytest.raises(BadRequestError):
        producer.send_batch([Message(topic, b"a"), Message(topic + "x", b"b")])
    with pytest.raises(BadRequestError):
        producer.send_batch([Message(topic, b"a", queue_id=0), Message(topic, b"b", queue_id=1)])
    with pytest.raises(BadRequestError):
        producer.send_batch([])


def test_unknown_topic(producer: Producer) -> None:
    with pytest.raises(NotFoundError) as info:
        producer.send(Message("sdk-no-such-topic", b"x"))
    assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND and not info.value.retriable


def test_bad_topic_name(producer: Producer) -> None:
    with pytest.raises(BadRequestError) as info:
        producer.send(Message("bad topic!", b"x"))
    assert info.value.code == errors_pb2.CODE_ILLEGAL_TOPIC


def test_system_topic(producer: Producer) -> None:
    with pytest.raises(ForbiddenError) as info:
        producer.send(Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"))
    assert info.value.code == errors_pb2.CODE_SYSTEM_TOPIC


def test_reserved_property(producer: Producer, topic: str) -> None:
    with pytest.raises(BadRequestError) as info:
        producer.send(Message(topic, b"x", properties={"REAL_TOPIC": "elsewhere"}))
    assert info.value.metadata["property"] == "REAL_TOPIC"


class CountSends(grpc.UnaryUnaryClientInterceptor):
    """Records the unique ids of the SendMessage calls that reach the channel; with
    ``lose_first_answer``, the first call is delivered to the store and then reported
    UNAVAILABLE, as when the answer is lost on the way back."""

    def __init__(self, *, lose_first_answer: bool = False) -> None:
        self.unique_ids: list[str] = []
        self._lose_next = lose_first_answer

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        outcome = continuation(details, request)
        if details.method.endswith("/SendMessage"):
            self.unique_ids.append(request.message.unique_id)
            if self._lose_next:
                self._lose_next = False
                outcome.result()  # stored for real
                raise AnswerLost()
        return outcome


class AnswerLost(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "the answer was lost"

    def trailing_metadata(self) -> tuple:
        return ()


def test_a_retried_send_keeps_its_unique_id(bootstrap: str, admin: Admin, topic: str) -> None:
    sends = CountSends(lose_first_answer=True)
    with Producer("sdk-test-producer", bootstrap, interceptors=[sends]) as producer:
        msg = Message(topic, b"once", keys="retried")
        result = producer.send(msg)

    assert sends.unique_ids == [msg.unique_id, msg.unique_id]
    assert result.msg_id == msg.unique_id
    # Both attempts reached the store; the second was answered from its idempotence
    # window with the first's result (docs/store.md "Idempotent sends"): one copy.
    assert result.duplicate
    copies = admin.query_messages_by_key(topic, "retried")
    assert [c.msg_id for c in copies] == [msg.unique_id]
    assert copies[0].offset_msg_id == result.offset_msg_id


def test_errors_that_a_retry_cannot_fix_are_not_retried(bootstrap: str, topic: str) -> None:
    sends = CountSends()
    # A client limit above the store's 4 MiB, so the store is the one to refuse it.
    with Producer("sdk-test-producer", bootstrap, max_message_size_bytes=8 * MIB, interceptors=[sends]) as producer:
        with pytest.raises(PayloadTooLargeError) as info:
            producer.send(Message(topic, bytes(4 * MIB + 1)))
    assert info.value.code == errors_pb2.CODE_MESSAGE_BODY_TOO_LARGE and not info.value.retriable
    assert len(sends.unique_ids) == 1


def test_oversized_body_is_refused_before_sending(bootstrap: str, topic: str) -> None:
    sends = CountSends()
    with Producer("sdk-test-producer", bootstrap, interceptors=[sends]) as producer:
        with pytest.raises(PayloadTooLargeError) as info:
            producer.send(Message(topic, bytes(4 * MIB + 1)))
    assert info.value.code == errors_pb2.CODE_MESSAGE_BODY_TOO_LARGE
    assert sends.unique_ids == []


def test_a_topic_made_read_only_refuses_sends(
    bootstrap: str, admin: Admin, topic: str, wait_route: Callable[..., None]
) -> None:
    sends = CountSends()
    with Producer("sdk-test-producer", bootstrap, interceptors=[sends]) as producer:
        producer.send(Message(topic, b"before"))
        admin.update_topic(topic, perm=Perm.READ)
        # The producer's cached route still says writable: the store itself refuses.
        with pytest.raises(ForbiddenError) as info:
            producer.send(Message(topic, b"after"))
        assert info.value.code == errors_pb2.CODE_TOPIC_NOT_WRITABLE
        assert len(sends.unique_ids) == 2
        # The error made the producer look the route up again before its next send: once
        # routes show the change, it knows without asking the store.
        wait_route(topic, lambda route: route.write_queues() == [])
        with pytest.raises(ForbiddenError) as info:
            producer.send(Message(topic, b"after"))
        assert info.value.code == errors_pb2.CODE_TOPIC_NOT_WRITABLE
        assert len(sends.unique_ids) == 2


def test_a_bootstrap_list_skips_dead_addresses(txmq_cluster, topic: str) -> None:  # type: ignore[no-untyped-def]
    with Producer("sdk-test-producer", f"127.0.0.1:1,{txmq_cluster.bootstrap}") as producer:
        assert producer.send(Message(topic, b"x")).status is SendStatus.OK


def test_send_needs_start(bootstrap: str, topic: str) -> None:
    producer = Producer("sdk-test-producer", bootstrap)
    with pytest.raises(RuntimeError):
        producer.send(Message(topic, b"x"))
    producer.start()
    producer.send(Message(topic, b"x"))
    producer.shutdown()
    producer.shutdown()
    with pytest.raises(RuntimeError):
        producer.send(Message(topic, b"x"))


def test_sends_spread_over_stores_and_fail_over(service_factory, wait_until) -> None:  # type: ignore[no-untyped-def]
    """Two private stores: a topic on both gets queues on both; when one dies, sends
    retry on the other."""
    stores = [service_factory.store(), service_factory.store()]
    bootstrap = stores[0].address
    with Admin(bootstrap) as admin:
        # Each service sees the others through its copy of etcd, a moment after they register.
        wait_until(lambda: len(admin.endpoints(ServiceKind.STORE)) == 2)
        admin.create_topic("spread", read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: len(admin.topic_route("spread").queues) == 2)
        with Producer("sdk-test-producer", bootstrap, send_timeout=10) as producer:
            before = [producer.send(Message("spread", b"x")).message_queue for _ in range(4)]
            assert sorted(before) == [MessageQueue("spread", s, q) for s in ("store-0", "store-1") for q in (0, 1)]
            stores[1].kill()  # its registration outlives it until the lease expires
            after = [producer.send(Message("spread", b"y")).message_queue.store_id for _ in range(4)]
            assert after == ["store-0"] * 4


def test_one_producer_serves_many_threads(producer: Producer, topic: str) -> None:
    def send_ten(worker: int) -> list[SendResult]:
        return [producer.send(Message(topic, f"{worker}-{i}".encode())) for i in range(10)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = [r for batch in pool.map(send_ten, range(4)) for r in batch]
    assert len({r.msg_id for r in results}) == 40
    # The threads share one round-robin counter: every queue got exactly a quarter.
    assert Counter(r.message_queue.queue_id for r in results) == {0: 10, 1: 10, 2: 10, 3: 10}
