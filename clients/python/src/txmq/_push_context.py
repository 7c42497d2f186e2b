"""What the push consumer's pieces share: ``PushContext``, the consumer as they see it.

``PushConsumer`` (``txmq.consumer``) is put together from pieces with one job each:

- ``txmq._push_membership.GroupMembership``: heartbeats, the group's membership, a
  subscription the group refuses;
- ``txmq._push_assignment.QueueAssignment``: the rebalance (which queues are ours) and
  taking on or releasing a queue;
- ``txmq._offset_store.OffsetStore``: the committed offsets: where a queue starts, and
  committing its commit point;
- ``txmq._push_pulling.QueuePuller``: the long polls of each queue, flow control, pull
  failures and a paused group;
- ``txmq._push_concurrent.ConcurrentService``: concurrent consumption and its retries
  (send-back, local redelivery); orderly consumption is ``txmq._orderly``.

The consumer owns what they share: its settings, its lock and the tables it guards
(subscriptions, process queues), and the running state ``start()`` creates and
shutdown ends (the pull client, the timer, the thread pools, the orderly service). The
pieces read that state from the consumer at each call, and call each other through the
consumer's entry points (``_pull``, ``_submit``, ``_commit``, ``_release``), the ones the
timer, the thread pools and the orderly service call too.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Protocol

from txmq._consumer_types import ConsumeStatus
from txmq._failures import FailureLog
from txmq._orderly import OrderlyService
from txmq._process_queue import ProcessQueue, Timer
from txmq._pulling import PullClient
from txmq._push_config import PushConsumerConfig
from txmq._rebalance import MembershipView
from txmq._subscription import Subscription
from txmq.errors import TxmqError
from txmq.message import MessageExt, MessageQueue
from txmq.v1 import errors_pb2

MessageListener = Callable[[list[MessageExt]], ConsumeStatus]


class PushContext(Protocol):
    group: str
    client_id: str
    _config: PushConsumerConfig
    # Guards the tables below and the consumer's state.
    _lock: threading.Lock
    _subs: dict[str, Subscription]
    _queues: dict[MessageQueue, ProcessQueue]
    _listener: MessageListener | None
    _view: MembershipView
    _failures: FailureLog
    # Created by start(); None before.
    _client: PullClient | None
    _timer: Timer | None
    _dispatcher: concurrent.futures.ThreadPoolExecutor | None
    _consumers: concurrent.futures.ThreadPoolExecutor | None
    _orderly: OrderlyService | None

    @property
    def _running(self) -> bool: ...

    def _handle(self, key: object, what: str, err: TxmqError) -> None:
        """A failed background call: stop on a non-retriable error, else log (bounded)."""
        ...

    def _request_rebalance(self) -> None: ...

    def _pull(self, pq: ProcessQueue) -> None: ...

    def _submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None: ...

    def _consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None: ...

    def _commit(self, pq: ProcessQueue) -> None: ...

    def _release(self, mq: MessageQueue) -> None: ...


def retry_topic_absent(config: PushConsumerConfig, topic: str, err: TxmqError) -> bool:
    """The group's retry topic before its first send-back: not an error."""
    return topic == config.retry_topic and err.code == errors_pb2.CODE_TOPIC_NOT_FOUND
