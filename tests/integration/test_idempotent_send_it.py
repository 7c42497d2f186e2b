"""Idempotent sends on real processes: a message whose acknowledgement was lost (the
store served the send, the answer never reached the producer, the connection dropped)
is sent again by the SDK's retry and stored once; the retry's answer is the first
send's (``duplicate``)."""

from __future__ import annotations

import threading

import grpc
from support import ServiceFactory
from support.proxy import PartitionProxy
from support.waiting import unique_name, wait_until

from txmq import Message, Producer, SendResult
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc


def queue_bodies(address: str, topic: str) -> list[bytes]:
    with grpc.insecure_channel(address) as channel:
        got = store_pb2_grpc.StoreStub(channel).GetMessage(
            store_pb2.GetMessageRequest(topic=topic, queue_id=0, offset=0, max_messages=32), timeout=10
        )
    return [m.message.body for m in got.messages]


def queue_max(address: str, topic: str) -> int:
    with grpc.insecure_channel(address) as channel:
        got = store_pb2_grpc.StoreStub(channel).GetQueueOffsets(
            store_pb2.GetQueueOffsetsRequest(topic=topic), timeout=10
        )
    return got.queues[0].max_offset


def test_a_send_whose_answer_was_lost_is_stored_once(service_factory: ServiceFactory) -> None:
    proxy = PartitionProxy()  # producers reach the store only through it
    store = service_factory.store("--advertised_address", proxy.address)
    proxy.upstream_port = store.bound_port or 0
    pull = service_factory.start("pull")
    topic = unique_name("Idem")
    with grpc.insecure_channel(store.address) as channel:
        store_pb2_grpc.StoreAdminStub(channel).CreateTopic(
            store_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(name=topic, read_queue_nums=1, write_queue_nums=1)
            ),
            timeout=10,
        )
    with Producer("PID_idem", pull.address, send_timeout=20.0) as producer:
        warm = producer.send(Message(topic, b"warm"))  # the send stream is up
        assert not warm.duplicate
        proxy.hold_answers()
        out: list[SendResult | BaseException] = []

        def send() -> None:
            try:
                out.append(producer.send(Message(topic, b"once")))
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                out.append(exc)

        sender = threading.Thread(target=send)
        sender.start()
        # The store holds it; its answer is being dropped. Now the connection breaks.
        wait_until(lambda: queue_max(store.address, topic) == 2, timeout_s=20)
        proxy.cut()
        proxy.heal()
        sender.join(timeout=30)
        assert not sender.is_alive()
    proxy.close()
    [result] = out
    assert isinstance(result, SendResult), result
    assert result.duplicate  # the retry was answered with the first send's result
    assert queue_bodies(store.address, topic) == [b"warm", b"once"]
    assert result.queue_offset == 1
