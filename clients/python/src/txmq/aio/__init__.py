"""asyncio front ends of the txmq SDK (docs/sdk.md, "The asyncio client"): the same
semantics and errors as the threaded clients of ``txmq``, awaited from coroutines.

- ``Producer``: ``await send(msg)``, ``await send_batch(msgs)``, ``async with``.
- ``PushConsumer``: ``async for msg in consumer``, or an async listener.
- ``PullConsumer``: ``await pull(mq, expression, offset)``, offsets, ``send_back``.
- ``TransactionProducer``: ``await send_message_in_transaction(msg, arg)`` with an
  ``AsyncTransactionListener``.
- ``Admin``: every call of ``txmq.Admin`` as a coroutine (run on a worker thread).
"""

from txmq.aio.admin import Admin
from txmq.aio.consumer import AsyncListener, PushConsumer
from txmq.aio.producer import Producer
from txmq.aio.pull_consumer import PullConsumer
from txmq.aio.transaction import AsyncTransactionListener, TransactionProducer

__all__ = [
    "Admin",
    "AsyncListener",
    "AsyncTransactionListener",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "TransactionProducer",
]
