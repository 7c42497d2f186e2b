"""Retries with auth on (docs/consumers.md "Retries and dead letters", "Access"): a user
allowed Sub on its group and its topic (and Pub on the topic) consumes with a
PushConsumer whose failed message goes through %RETRY%<group> -- read as the group --
and ends in %DLQ%<group>; nobody granted anything on the retry topic itself. Another
user may not send that message back."""

from __future__ import annotations

import threading

import pytest
from support.processes import ServiceFactory

from txmq import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    Policy,
    Producer,
    PullConsumer,
    PushConsumer,
    TxmqError,
    signing,
)
from txmq.protocol import dlq_topic
from txmq.v1 import errors_pb2

from .conftest import RETRY_DELAY_LEVELS, unique, wait_until
from .consumer_settings import FAST

SERVICE_KEY = "txmq-service"
SERVICE_SECRET = "service-secret-0123456789"
AUTH_FLAGS = ("--auth_enabled=true", "--auth_access_key", SERVICE_KEY, "--auth_secret_key", SERVICE_SECRET)
ROOT = signing.Credentials(SERVICE_KEY, SERVICE_SECRET)
CAROL = signing.Credentials("carol", "carol-secret-1")
DAVE = signing.Credentials("dave", "dave-secret-12")


@pytest.mark.slow
def test_a_consumer_allowed_its_group_and_topic_retries_through_the_retry_topic(
    service_factory: ServiceFactory,
) -> None:
    store = service_factory.store(*AUTH_FLAGS, "--message_delay_levels", RETRY_DELAY_LEVELS)
    service_factory.start("pull", *AUTH_FLAGS)
    topic, group = unique("AuthRetryT"), unique("AuthRetryG")
    with Admin(store.address, credentials=ROOT) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        for who, policies in (
            (CAROL, [Policy(f"Topic:{topic}", ("Pub", "Sub")), Policy(f"Group:{group}", ("Pub", "Sub"))]),
            (DAVE, [Policy(f"Topic:{topic}", ("Sub",)), Policy("Group:other", ("Sub",))]),
        ):
            admin.create_user(who.access_key, who.secret_key)
            admin.put_acl(who.access_key, policies)
    seen: list[int] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            seen.extend(m.reconsume_times for m in msgs if m.topic == topic)
        return ConsumeStatus.RECONSUME_LATER

    consumer = PushConsumer(
        group, store.address, credentials=CAROL, consume_from=ConsumeFromWhere.FIRST_OFFSET, max_reconsume_times=1,
        **FAST,  # type: ignore[arg-type]
    )  # fmt: skip
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    with Producer(group, store.address, credentials=CAROL) as producer:
        sent = producer.send(Message(topic, b"failing"))
    with consumer:
        wait_until(lambda: len(seen) >= 2, what="the retry copy consumed")
        with Admin(store.address, credentials=ROOT) as admin:
            wait_until(lambda: admin.list_dead_letters(group), what="the message dead-lettered")
        assert consumer.error is None
    assert seen == [0, 1]
    with PullConsumer(group, store.address, credentials=DAVE) as pc:
        (mq,) = pc.fetch_message_queues(topic)
        with pytest.raises(TxmqError) as err:  # dave may not consume as carol's group
            pc.pull(mq, "*", 0, 1, suspend=False)
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
    with PullConsumer("other", store.address, credentials=DAVE) as pc:
        (m,) = pc.pull(mq, "*", 0, 1, suspend=False).messages
        assert m.msg_id == sent.msg_id
        with PullConsumer(group, store.address, credentials=DAVE) as as_carols_group:
            with pytest.raises(TxmqError) as err:
                as_carols_group.send_back(m)
            assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
        dead = pc.send_back(m, delay_level=-1)  # as his own group: allowed
        assert dead.dead_lettered and dead.topic == dlq_topic("other")
