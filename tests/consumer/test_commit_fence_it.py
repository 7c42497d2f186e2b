"""Offset commits fenced by the queue lock, end to end: a store (queue locks of 1 s) and a
pull service in processes of their own. A commit naming a client id (what an orderly
PushConsumer sends) on a queue another client has locked is refused by the store with
QUEUE_LOCKED through the pull service's UpdateConsumerOffset and moves nothing; the
holder's commit and a commit naming no client go through."""

from __future__ import annotations

import time

import grpc
import pytest
from support import ServiceFactory

from txmq import Admin, PullConsumer
from txmq.errors import ConflictError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc

from .conftest import unique

LEASE_MS = 1000


def test_the_store_refuses_a_commit_on_a_queue_another_client_locked(etcd, tmp_path) -> None:  # type: ignore[no-untyped-def]
    factory = ServiceFactory(etcd_endpoints=etcd.endpoint, base_dir=tmp_path)
    try:
        store = factory.store("--queue_lock_lease_ms", str(LEASE_MS))
        pull = factory.start("pull")
        topic, group = unique("fenced-commit"), unique("fenced-group")
        with Admin(pull.address) as admin, PullConsumer(group, pull.address) as consumer:
            admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
            (mq,) = consumer.fetch_message_queues(topic)
            request = store_pb2.LockQueuesRequest(
                group=group,
                client_id="holder",
                queues=[common_pb2.MessageQueue(topic=topic, store_id=mq.store_id, queue_id=0)],
            )
            with grpc.insecure_channel(store.address) as channel:
                stub = store_pb2_grpc.ConsumerControlStub(channel)
                deadline = time.monotonic() + 10
                while not stub.LockQueues(request, timeout=5).locked:  # the grace after the start
                    assert time.monotonic() < deadline, "the store never granted the lock"
                    time.sleep(0.05)
            client = consumer._client
            assert client is not None
            client.commit_client_id = "holder"
            consumer.commit_offset(mq, 1)
            client.commit_client_id = "lapsed"
            with pytest.raises(ConflictError) as info:
                consumer.commit_offset(mq, 0)
            assert info.value.code == errors_pb2.CODE_QUEUE_LOCKED
            assert consumer.fetch_offset(mq) == 1
            client.commit_client_id = ""  # a PullConsumer's commits are not fenced
            consumer.commit_offset(mq, 0)
            assert consumer.fetch_offset(mq) == 0
    finally:
        factory.close()
