"""The group's retry topic is created by the pull service when the group's members first
heartbeat (as RocketMQ's broker does in its heartbeat handler), on the stores of the
topics they subscribe, with the group's retry_queue_nums: every member's first rebalance
shares its queues, before any message was sent back (and with the periodic rebalance
20 s away). A heartbeat that names no store's topic creates nothing."""

from __future__ import annotations

import grpc

from txmq import Admin, PushConsumer
from txmq.errors import NotFoundError
from txmq.protocol import retry_topic
from txmq.v1 import pull_pb2, pull_pb2_grpc

from .conftest import Cluster, unique, wait_until


def test_members_share_the_retry_queues_from_their_first_rebalance(fast_cluster: Cluster) -> None:
    topic, group = unique("retry-at-start"), unique("retry-at-start-group")
    with Admin(fast_cluster.bootstrap) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        admin.create_subscription_group(group, retry_queue_nums=2)
        consumers = [
            PushConsumer(group, fast_cluster.bootstrap, client_id=f"c{i}", heartbeat_interval=0.2, takeover_delay=0.5)
            for i in range(2)
        ]
        try:
            for c in consumers:
                c.subscribe(topic)
                c.register_message_listener(lambda msgs: None)
                c.start()
            retry = retry_topic(group)

            def shared() -> bool:  # one queue of each topic per member (AllocateMessageQueueAveragely)
                return all(sorted(mq.topic for mq in c.assignment()) == sorted([topic, retry]) for c in consumers)

            # Rebalanced on the membership change, not the periodic 20 s.
            wait_until(shared, timeout_s=10, what="both members sharing the topic's and the retry topic's queues")
            cfg = admin.get_topic(retry)
            assert cfg.read_queue_nums == 2 and cfg.write_queue_nums == 2
        finally:
            for c in consumers:
                c.shutdown()
            admin.delete_topic(topic)


def test_a_heartbeat_without_a_served_topic_creates_nothing(fast_cluster: Cluster) -> None:
    group = unique("retry-none-group")
    with grpc.insecure_channel(fast_cluster.pull_address) as channel:
        pull_pb2_grpc.PullStub(channel).ConsumerHeartbeat(
            pull_pb2.ConsumerHeartbeatRequest(consumer_group=group, client_id="c", topics=[unique("no-such-topic")]),
            timeout=5,
        )
    with Admin(fast_cluster.bootstrap) as admin:
        try:
            admin.get_topic(retry_topic(group))
        except NotFoundError:
            pass
        else:
            raise AssertionError("a retry topic was created for a group with no served topic")
