"""txmq.aio.TransactionProducer with real store and txcheck processes (short check
intervals): commit, rollback, an exception, and an UNKNOWN settled by the async check
callback through the producer's channel."""

from __future__ import annotations

import asyncio
from typing import Any

from support import ServiceFactory
from support.waiting import wait_until
from txcheck.helpers import FAST, new_topic, visible

from txmq import LocalTransactionState, Message, MessageExt
from txmq.aio import AsyncTransactionListener, TransactionProducer


class Listener(AsyncTransactionListener):
    def __init__(self) -> None:
        self.execute = LocalTransactionState.COMMIT
        self.checked: list[str] = []
        self.committed_by_check = asyncio.Event()

    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        await asyncio.sleep(0)  # a coroutine of the application
        if arg == "raise":
            raise RuntimeError("the local transaction failed")
        return self.execute

    async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """``b"unknown"`` is committed at its second check; the rest stay UNKNOWN."""
        self.checked.append(msg.unique_id or "")
        if msg.body == b"unknown" and self.checked.count(msg.unique_id or "") >= 2:
            self.committed_by_check.set()
            return LocalTransactionState.COMMIT
        return LocalTransactionState.UNKNOWN


async def test_commit_rollback_and_a_check(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    service_factory.start("txcheck", *FAST)
    topic = new_topic(store)
    listener = Listener()
    async with asyncio.timeout(90), TransactionProducer("PG_AIO", store.address, listener=listener) as producer:
        assert await producer.wait_channel(30)
        committed = await producer.send_message_in_transaction(Message(topic, b"commit"), arg=1)
        assert committed.local_transaction_state is LocalTransactionState.COMMIT
        assert committed.transaction_id == committed.msg_id

        listener.execute = LocalTransactionState.ROLLBACK
        rolled = await producer.send_message_in_transaction(Message(topic, b"rollback"))
        assert rolled.local_transaction_state is LocalTransactionState.ROLLBACK

        failed = await producer.send_message_in_transaction(Message(topic, b"raised"), arg="raise")
        assert failed.local_transaction_state is LocalTransactionState.UNKNOWN
        assert isinstance(failed.local_exception, RuntimeError)

        listener.execute = LocalTransactionState.UNKNOWN
        pending = await producer.send_message_in_transaction(Message(topic, b"unknown"))
        assert pending.local_transaction_state is LocalTransactionState.UNKNOWN
        await listener.committed_by_check.wait()
        assert listener.checked.count(pending.transaction_id) >= 2
        await asyncio.to_thread(wait_until, lambda: b"unknown" in visible(store.address, topic), what="checked commit")
    # The one that raised is checked UNKNOWN from then on: never visible, like the rollback.
    assert sorted(visible(store.address, topic)) == [b"commit", b"unknown"]
