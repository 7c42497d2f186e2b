"""The store's dead letters (a send-back of the SDK's consumers, sendback.py) keep what
the message is: its RocketMQ 5 message type and message group, the same properties the
gateway's dead letters carry (tests/gateway/test_dead_letter_properties_unit.py), plus
the send-back's own."""

from __future__ import annotations

import pytest

from txmq.protocol import (
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SENDBACK_OF,
    PROPERTY_SHARDING_KEY,
)
from txmq_store.sendback import DeadLetterResend, SendBack

from .conftest import StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")

GROUP = "CG_DLQ_PROPS"
# The same in tests/gateway/test_dead_letter_properties_unit.py.
PROPS = {PROPERTY_MESSAGE_TYPE: "FIFO", PROPERTY_SHARDING_KEY: "order-7", "__RMQ_BORN_HOST": "10.0.0.1", "k": "v"}
KEPT = {PROPERTY_MESSAGE_TYPE: "FIFO", PROPERTY_SHARDING_KEY: "order-7", "k": "v"}


async def test_the_stores_dead_letter_and_its_resend_keep_the_message_type_and_group(stores: StoreFactory) -> None:
    store = await stores.open()
    store.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    (r,) = await store.send([msg(b"x", properties=PROPS, unique_id="U-1")])
    out = await SendBack(store).send_back(
        group=GROUP, commit_log_offset=r.commit_log_offset, unique_id=r.msg_id, delay_level=-1
    )
    letter = store.reader.view_message(out.result.commit_log_offset)
    own = {PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_SENDBACK_OF}
    assert {k: v for k, v in letter.properties.items() if k not in own} == {
        **KEPT,
        PROPERTY_DLQ_ORIGIN_TOPIC: "TopicA",
    }
    (resent,) = await DeadLetterResend(store).resend(group=GROUP, unique_ids=[r.msg_id])
    again = store.reader.view_message(resent.result.commit_log_offset)
    assert {k: v for k, v in again.properties.items() if k in PROPS} == KEPT
