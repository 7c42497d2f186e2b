"""`txmq dlq resend` (``Admin.resend_dead_letters``) with auth on: a user allowed Sub on
the group and its topic -- no super user, nothing granted on the dead-letter topic --
resends the group's dead letter by id, and resending it again stores nothing (the store
answers the first message). A user without Sub on the group is refused."""

from __future__ import annotations

import pytest
from support.processes import ServiceFactory

from txmq import Admin, Message, Policy, Producer, PullConsumer, TxmqError, signing
from txmq.v1 import errors_pb2

from .conftest import unique

SERVICE_KEY = "txmq-service"
SERVICE_SECRET = "service-secret-0123456789"
AUTH_FLAGS = ("--auth_enabled=true", "--auth_access_key", SERVICE_KEY, "--auth_secret_key", SERVICE_SECRET)
ROOT = signing.Credentials(SERVICE_KEY, SERVICE_SECRET)
ERIN = signing.Credentials("erin", "erin-secret-12")
FRANK = signing.Credentials("frank", "frank-secret-1")


def test_a_user_with_sub_on_the_group_resends_a_dead_letter_once(service_factory: ServiceFactory) -> None:
    store = service_factory.store(*AUTH_FLAGS)
    service_factory.start("pull", *AUTH_FLAGS)
    topic, group = unique("ResendT"), unique("ResendG")
    with Admin(store.address, credentials=ROOT) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        for who, policies in (
            (ERIN, [Policy(f"Topic:{topic}", ("Sub",)), Policy(f"Group:{group}", ("Sub",))]),
            (FRANK, [Policy(f"Topic:{topic}", ("Sub",)), Policy("Group:other", ("Sub",))]),
        ):
            admin.create_user(who.access_key, who.secret_key)
            admin.put_acl(who.access_key, policies)
        with Producer("resend-producer", store.address, credentials=ROOT) as producer:
            sent = producer.send(Message(topic, b"poison", tags="T"))
        with PullConsumer(group, store.address, credentials=ROOT) as pc:
            (mq,) = pc.fetch_message_queues(topic)
            (m,) = pc.pull(mq, "*", 0, 1, suspend=False).messages
            assert pc.send_back(m, delay_level=-1).dead_lettered
        with Admin(store.address, credentials=FRANK) as frank, pytest.raises(TxmqError) as err:
            frank.resend_dead_letters(group, [sent.msg_id])
        assert err.value.code == errors_pb2.CODE_ACCESS_DENIED
        with Admin(store.address, credentials=ERIN) as erin:
            (first,) = erin.resend_dead_letters(group, [sent.msg_id])
            (again,) = erin.resend_dead_letters(group, [sent.msg_id])
        assert first.topic == topic and first.dead_letter_id == sent.msg_id and not first.duplicate
        assert again.duplicate and again.msg_id == first.msg_id and again.queue_offset == first.queue_offset
        with PullConsumer(group, store.address, credentials=ROOT) as pc:
            result = pc.pull(mq, "*", 0, 32, suspend=False)
        assert [x.body for x in result.messages] == [b"poison", b"poison"]  # the original and one resend
        assert result.messages[1].msg_id == first.msg_id
        assert result.messages[1].properties["ORIGIN_MESSAGE_ID"] == sent.msg_id
