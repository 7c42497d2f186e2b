"""asyncio front ends of the txmq SDK (docs/sdk.md, "The asyncio client"): the same
semantics and errors as the threaded clients of ``txmq``, awaited from coroutines.

- ``Producer``: ``await send(msg)``, ``await send_batch(msgs)``, ``async with``.
- ``PushConsumer``: ``async for msg in consumer``, or an async listener.
"""

from txmq.aio.consumer import AsyncListener, PushConsumer
from txmq.aio.producer import Producer

__all__ = ["AsyncListener", "Producer", "PushConsumer"]
