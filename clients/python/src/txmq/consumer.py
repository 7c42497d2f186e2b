"""Consumers: ``PullConsumer`` (you pull, per queue and offset; RocketMQ's pull / lite
pull consumer) and ``PushConsumer`` (it pulls for you and calls your listener;
RocketMQ's DefaultMQPushConsumer, clustering mode, concurrent or orderly consumption).

Both talk to the pull service (docs/pull.md), found through the topic route, and read
queue ranges from the stores. See docs/consumers.md.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypeVar

import grpc

from txmq._client import ClientCore, parse_endpoints
from txmq._consumer_types import (
    ConsumeFromWhere,
    ConsumeStatus,
    ExpressionType,
    PullResult,
    PullStatus,
    SendBackResult,
)
from txmq._failures import FailureLog, retriable
from txmq._offset_store import OffsetStore
from txmq._orderly import OrderlyService, StoreLockCalls
from txmq._process_queue import ProcessQueue, Timer
from txmq._pulling import PullClient
from txmq._push_assignment import QueueAssignment, drop
from txmq._push_concurrent import ConcurrentService
from txmq._push_config import DEFAULT_SUSPEND_TIMEOUT_S, ErrorCallback, PushConsumerConfig, check_positive
from txmq._push_context import MessageListener
from txmq._push_membership import GroupMembership
from txmq._push_pulling import QueuePuller
from txmq._rebalance import MembershipView
from txmq._subscription import Subscription, build_subscription
from txmq.errors import BadRequestError, NotFoundError, TxmqError
from txmq.message import MessageExt, MessageQueue
from txmq.models import ServiceKind
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import errors_pb2
from txmq.validation import check_group

__all__ = [
    "ConsumeFromWhere",
    "ConsumeStatus",
    "ExpressionType",
    "MessageListener",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendBackResult",
]

log = logging.getLogger("txmq.consumer")
T = TypeVar("T")


class PullConsumer:
    """Pulls messages from queues you choose, at offsets you choose (RocketMQ's
    DefaultMQPullConsumer / the assign mode of DefaultLitePullConsumer). Thread-safe.

    ``group`` is the consumer group the offsets belong to; ``endpoint`` any txmq
    service. ``timeout`` bounds every call except a suspended pull, which may be held
    ``suspend_timeout`` seconds (its RPC deadline is a little longer). ``tls``: TLS (and
    a client certificate) for every channel (``txmq.TlsConfig``). ``credentials``: the
    user every call is signed as (``txmq.Credentials``).

    Suspended pulls (long polls) share one open stream per pull instance (docs/pull.md
    "The pull stream"), from every thread; a pull service without it is asked with
    unary calls. ``interceptors`` that do not intercept stream calls
    (``grpc.StreamStreamClientInterceptor``) keep every pull a unary call they see.
    """

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        timeout: float = 5.0,
        suspend_timeout: float = DEFAULT_SUSPEND_TIMEOUT_S,
        route_refresh_interval: float = 30.0,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        check_positive(timeout=timeout, suspend_timeout=suspend_timeout, route_refresh_interval=route_refresh_interval)
        self.group = group
        self.endpoint = endpoint
        self._timeout = timeout
        self._suspend_timeout = suspend_timeout
        self._route_refresh_interval = route_refresh_interval
        self._interceptors = tuple(interceptors)
        self._tls = tls
        self._credentials = credentials
        self._lock = threading.Lock()
        self._client: PullClient | None = None
        # Fail on a bad group name or endpoint now rather than on the first call.
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        parse_endpoints(endpoint)

    def start(self) -> None:
        """Open the client (idempotent); nothing is dialled before the first call."""
        with self._lock:
            if self._client is None:
                core = ClientCore(
                    self.endpoint,
                    route_refresh_interval=self._route_refresh_interval,
                    interceptors=self._interceptors,
                    tls=self._tls,
                    credentials=self._credentials,
                )
                self._client = PullClient(core, self.group, timeout=self._timeout, interceptors=self._interceptors)

    def shutdown(self) -> None:
        """Close every channel (a pull in progress fails); ``start()`` opens it again."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> PullConsumer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def _started(self) -> PullClient:
        client = self._client
        if client is None:
            raise RuntimeError("the consumer is not started: call start() or use it in a with block")
        return client

    def _run(self, fn: Callable[[PullClient], T]) -> T:
        """``fn`` on the started client; a call cut off by a concurrent ``shutdown()``
        (gRPC raises ValueError on a closed channel) raises RuntimeError."""
        client = self._started()
        try:
            return fn(client)
        except ValueError:
            if self._client is not client:
                raise RuntimeError("the consumer was shut down during the call") from None
            raise

    # -- queues and pulling ------------------------------------------------------------

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues on every store (RocketMQ's
        fetchSubscribeMessageQueues), ordered by store id and queue id."""
        return self._run(lambda c: c.message_queues(topic))

    def pull(
        self,
        mq: MessageQueue,
        expression: str = "*",
        offset: int = 0,
        max_nums: int = 32,
        *,
        expression_type: ExpressionType = ExpressionType.TAG,
        suspend: bool = True,
        timeout: float | None = None,
    ) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset`` that match
        ``expression``. With ``suspend`` (the default) a pull that finds nothing new is
        held by the service until a matching message arrives or ``timeout`` seconds
        (default ``suspend_timeout``) pass: long polling. Without it, the answer is
        immediate. Statuses: see ``PullStatus``; continue at ``next_begin_offset``."""
        sub, suspend_timeout = pull_arguments(
            mq,
            expression,
            offset,
            max_nums,
            expression_type,
            self._suspend_timeout if timeout is None else timeout,
            suspend,
        )
        return self._run(lambda c: c.pull(mq, sub, offset, max_nums=max_nums, suspend_timeout=suspend_timeout))

    # -- offsets -----------------------------------------------------------------------

    def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` as the group's progress on ``mq`` (RocketMQ's
        updateConsumeOffset; here it is stored at once, not batched)."""
        if offset < 0:
            raise BadRequestError(f"offset {offset} is negative", code=errors_pb2.CODE_ILLEGAL_OFFSET)
        self._run(lambda c: c.commit_offset(mq, offset))

    def fetch_offset(self, mq: MessageQueue) -> int | None:
        """The group's committed offset on ``mq``; None if it never committed one."""
        return self._run(lambda c: c.fetch_offset(mq))

    def min_offset(self, mq: MessageQueue) -> int:
        """The queue's first stored offset."""
        return self._run(lambda c: c.queue_range(mq))[0]

    def max_offset(self, mq: MessageQueue) -> int:
        """The offset the queue's next message will get."""
        return self._run(lambda c: c.queue_range(mq))[1]

    # -- retries -----------------------------------------------------------------------

    def send_back(
        self,
        message: MessageExt,
        *,
        delay_level: int = 0,
        max_reconsume_times: int | None = None,
        uncounted: bool = False,
    ) -> SendBackResult:
        """Send a message this group failed to consume back to its store (RocketMQ's
        consumerSendMsgBack): the store copies it to ``%RETRY%<group>``, due after a
        delay level (0: by its count, 3 + count; 1..N: that level of the store's
        ``message_delay_levels``), with its reconsume count one higher; once the count
        would exceed ``max_reconsume_times`` (default: the group's ``retry_max_times``,
        16), or with ``delay_level=-1``, to ``%DLQ%<group>`` instead. ``uncounted``: put
        it back without counting (never dead-lettered because of this). The count is the
        stored record's; sending the same record back again answers the first copy
        (``duplicate``). Consume ``%RETRY%<group>`` to get the copies (their
        ``RETRY_TOPIC`` property names the original topic). docs/consumers.md "Retries
        and dead letters"."""
        check_send_back(delay_level, max_reconsume_times)
        return self._run(
            lambda c: c.send_back(
                message.topic,
                message,
                delay_level=delay_level,
                max_reconsume_times=max_reconsume_times,
                uncounted=uncounted,
            )
        )


def pull_arguments(
    mq: MessageQueue,
    expression: str,
    offset: int,
    max_nums: int,
    expression_type: ExpressionType,
    hold: float,
    suspend: bool,
) -> tuple[Subscription, float | None]:
    """``PullConsumer.pull``'s arguments checked: the subscription and how long the
    pull may be held (None: answer at once)."""
    if offset < 0:
        raise BadRequestError(f"offset {offset} is negative", code=errors_pb2.CODE_ILLEGAL_OFFSET)
    if max_nums <= 0:
        raise BadRequestError(f"max_nums must be > 0, not {max_nums}", code=errors_pb2.CODE_ILLEGAL_ARGUMENT)
    check_positive(timeout=hold)
    return build_subscription(mq.topic, expression, expression_type), hold if suspend else None


def check_send_back(delay_level: int, max_reconsume_times: int | None) -> None:
    """``PullConsumer.send_back``'s arguments checked."""
    if delay_level < -1:
        raise BadRequestError(f"delay_level must be >= -1, not {delay_level}", code=errors_pb2.CODE_ILLEGAL_ARGUMENT)
    if max_reconsume_times is not None and max_reconsume_times < 0:
        raise BadRequestError(
            f"max_reconsume_times must be >= 0, not {max_reconsume_times}", code=errors_pb2.CODE_ILLEGAL_ARGUMENT
        )


class PushConsumer:
    """Consumes subscribed topics with a listener (RocketMQ's DefaultMQPushConsumer in
    clustering mode, concurrent consumption).

    The queues of each subscribed topic are spread over the group's live consumers
    (``allocate_averagely`` over the sorted ids the pull service reports) and spread
    again when one joins or leaves. Each owned queue is long-polled; messages go to
    ``listener(list[MessageExt]) -> ConsumeStatus`` on up to ``consume_thread_max``
    threads, ``consume_message_batch_max_size`` at a time. Offsets are committed every
    ``commit_interval`` seconds, when a queue is released and on shutdown; the
    committed offset is the lowest message not yet done.

    A message whose listener returns ``RECONSUME_LATER`` (or raises) is sent back to
    the store that holds it, which copies it to ``%RETRY%<group>`` (subscribed by the
    consumer itself), due after a delay level, with ``reconsume_times`` one higher; after
    ``max_reconsume_times`` redeliveries it goes to ``%DLQ%<group>`` instead. A message
    from the retry topic reaches the listener with its original topic.
    ``RECONSUME_LATER_UNCOUNTED`` sends it back without counting. When the send-back
    fails (the store down), the message is delivered again from memory after
    ``retry_backoff`` seconds (doubling up to ``retry_backoff_max``) and skipped after
    ``max_reconsume_times``; meanwhile the queue's commit point stays at it.
    docs/consumers.md "Retries and dead letters".

    Errors: ``start()`` checks every subscription against the cluster (the topic's
    route, then one pull that answers at once, which the pull service validates as any
    pull: the group exists and may consume, the topic is readable, the expression
    parses) and raises a non-retriable ``TxmqError`` there. Later, a retriable error
    (see ``txmq._failures``) is retried with backoff and logged a bounded number of
    times; a non-retriable one stops the whole consumer (offsets committed, the group
    told), is passed to ``on_error(err)`` (on the consumer's service thread, after the
    stop) and raised by ``wait()``.

    ``tls``: TLS (and a client certificate) for every channel (``txmq.TlsConfig``).
    ``credentials``: the user every call is signed as (``txmq.Credentials``).

    Consistent subscriptions: every heartbeat carries the subscriptions; the pull
    service refuses one that subscribes other topics, or a topic with another filter,
    than a live member of the group (``CODE_SUBSCRIPTION_CONFLICT``, naming the other
    member). The consumer then holds no queue (the rest of the group consumes
    everything), logs the conflict as an ERROR once per change, exposes it as
    ``subscription_conflict`` and keeps heartbeating: once the conflicting members are
    gone (or the subscription fixed) it joins the group by itself. ``start()`` does not
    raise for it, so a rolling upgrade that changes the subscription can proceed
    (docs/consumers.md "Consistent subscriptions").

    ``pause_on_consume_disabled`` (default True): a group whose consumption is disabled
    (``Admin.pause_consumer_group``, ``txmq group pause``) is taken as paused, not as
    an error: ``start()`` succeeds, the queues and offsets are kept, their pulls are
    tried again every few seconds (one log line when the pause starts, one when it
    ends) and consumption goes on by itself after the resume. See ``paused``. False: a
    disabled group is an error a retry cannot fix (``start()`` raises, a running
    consumer stops).

    See ``_rebalance`` and docs/consumers.md for how queues change hands.

    ``orderly=True``: orderly consumption (RocketMQ's MessageListenerOrderly; see
    ``txmq._orderly`` and docs/consumers.md "Orderly consumption"). A queue is consumed
    only while the store holding it has locked it for this consumer (renewed every third
    of the lease, trusted for half of it), by one thread at a time, in offset order. A
    failed batch suspends its queue for ``suspend_current_queue_time`` seconds and is
    delivered again; after ``max_reconsume_times`` failures a message goes to the
    group's dead-letter topic. Queues change hands by the lock, not by
    ``takeover_delay``.

    The keywords are checked and kept as a ``txmq._push_config.PushConsumerConfig``; the
    work is done by pieces with one job each (membership, queue assignment, offsets,
    pulls, concurrent consumption and retries), listed in ``txmq._push_context``.
    """

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        client_id: str | None = None,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = 16,
        retry_backoff: float = 1.0,
        retry_backoff_max: float = 60.0,
        heartbeat_interval: float = 10.0,
        rebalance_interval: float = 20.0,
        takeover_delay: float | None = None,
        commit_interval: float = 5.0,
        suspend_timeout: float = DEFAULT_SUSPEND_TIMEOUT_S,
        pull_error_backoff: float = 1.0,
        timeout: float = 5.0,
        route_refresh_interval: float = 30.0,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        on_error: ErrorCallback | None = None,
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
        pause_on_consume_disabled: bool = True,
        orderly: bool = False,
        suspend_current_queue_time: float = 1.0,
    ) -> None:
        self._config = config = PushConsumerConfig(
            group=group, endpoint=endpoint, client_id=client_id, consume_from=consume_from,
            consume_thread_max=consume_thread_max, consume_message_batch_max_size=consume_message_batch_max_size,
            pull_batch_size=pull_batch_size, pull_threshold_for_queue=pull_threshold_for_queue,
            consume_concurrently_max_span=consume_concurrently_max_span, max_reconsume_times=max_reconsume_times,
            retry_backoff_s=retry_backoff, retry_backoff_max_s=retry_backoff_max,
            heartbeat_interval_s=heartbeat_interval, rebalance_interval_s=rebalance_interval,
            takeover_delay_s=takeover_delay, commit_interval_s=commit_interval, suspend_timeout_s=suspend_timeout,
            pull_error_backoff_s=pull_error_backoff, timeout_s=timeout, route_refresh_interval_s=route_refresh_interval,
            interceptors=tuple(interceptors), on_error=on_error, tls=tls, credentials=credentials,
            pause_on_consume_disabled=pause_on_consume_disabled, orderly=bool(orderly),
            suspend_current_queue_time_s=suspend_current_queue_time,
        )  # fmt: skip
        self.group = group
        self.endpoint = endpoint
        self.client_id = client_id or f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"

        self._lock = threading.Lock()
        self._subs: dict[str, Subscription] = {}
        self._listener: MessageListener | None = None
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        self._state = "created"  # -> running -> stopped
        self._view = MembershipView(self.client_id, config.effective_takeover_delay_s)
        self._wake = threading.Event()
        self._rebalance_now = False
        self._client: PullClient | None = None
        self._service: threading.Thread | None = None
        self._timer: Timer | None = None
        self._dispatcher: concurrent.futures.ThreadPoolExecutor | None = None
        self._consumers: concurrent.futures.ThreadPoolExecutor | None = None
        # Orderly consumption (txmq._orderly; docs/consumers.md "Orderly consumption").
        self._orderly: OrderlyService | None = None
        self._error: TxmqError | None = None
        self._stopped = threading.Event()
        self._failures = FailureLog(log)
        # The pieces (txmq._push_context).
        self._membership = GroupMembership(self)
        self._offsets = OffsetStore(self)
        self._assignment = QueueAssignment(self, self._offsets)
        self._puller = QueuePuller(self)
        self._concurrent = ConcurrentService(self)

    # -- configuration -----------------------------------------------------------------

    def subscribe(
        self, topic: str, expression: str = "*", expression_type: ExpressionType = ExpressionType.TAG
    ) -> None:
        """Consume ``topic`` (messages matching ``expression``). Subscribing again
        replaces the expression; allowed before and after ``start``. After ``start``
        it is checked against the cluster first, as ``start()`` checks (a subscription
        that cannot work raises here and changes nothing)."""
        sub = build_subscription(topic, expression, expression_type)
        client = self._client
        if client is not None and self._running:
            self._check_subscription(client, sub)
        with self._lock:
            self._subs[topic] = sub
            self._rebalance_now = True
        self._wake.set()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``; its queues are released at the next rebalance."""
        with self._lock:
            self._subs.pop(topic, None)
            self._rebalance_now = True
        self._wake.set()

    def register_message_listener(self, listener: MessageListener) -> None:
        """``listener(messages) -> ConsumeStatus``, called on consume threads. An
        exception, or anything but ``CONSUME_SUCCESS``, means ``RECONSUME_LATER``."""
        if not callable(listener):
            raise TypeError("the listener must be callable")
        self._listener = listener

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer consumes right now."""
        with self._lock:
            return set(self._queues)

    @property
    def subscription_conflict(self) -> TxmqError | None:
        """The pull service's last CODE_SUBSCRIPTION_CONFLICT refusal of this consumer's
        heartbeat (it holds no queue meanwhile); None once a heartbeat is accepted."""
        return self._membership.conflict

    @property
    def paused(self) -> bool:
        """Whether the group's pulls are refused as paused (``pause_on_consume_disabled``)."""
        return self._puller.paused

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start heartbeating, rebalancing and consuming. A consumer starts once."""
        config = self._config
        with self._lock:
            if self._state != "created":
                raise RuntimeError(f"the consumer is {self._state}; a consumer starts once")
            if self._listener is None:
                raise RuntimeError("register a message listener before start()")
            if not self._subs:
                raise RuntimeError("subscribe to a topic before start()")
            core = ClientCore(
                self.endpoint,
                route_refresh_interval=config.route_refresh_interval_s,
                interceptors=config.interceptors,
                tls=config.tls,
                credentials=config.credentials,
            )
            # Orderly: the store fences the commits with the queue locks.
            fence = self.client_id if config.orderly else ""
            client = PullClient(
                core, self.group, timeout=config.timeout_s, commit_client_id=fence, interceptors=config.interceptors
            )
            subs = list(self._subs.values())
            self._state = "starting"
        try:
            for sub in subs:
                self._check_subscription(client, sub)
        except BaseException:
            client.close()
            with self._lock:
                if self._state == "starting":
                    self._state = "created"  # fix the subscription and start again
            raise
        with self._lock:
            if self._state != "starting":  # shut down meanwhile
                client.close()
                return
            # The group's retry topic, as RocketMQ's clustering mode subscribes it: every
            # member the same way (it exists once a first message was sent back).
            retry = config.retry_topic
            self._subs.setdefault(retry, build_subscription(retry, "*", ExpressionType.TAG))
            self._client = client
            self._timer = Timer(f"txmq-consumer-timer-{self.group}")
            self._dispatcher = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="txmq-consumer-pull")
            self._consumers = concurrent.futures.ThreadPoolExecutor(
                config.consume_thread_max, thread_name_prefix=f"txmq-consume-{self.group}"
            )
            self._service = threading.Thread(target=self._service_loop, name=f"txmq-consumer-{self.group}", daemon=True)
            if config.orderly:
                self._orderly = self._new_orderly(client)
            self._state = "running"
        self._timer.start()
        if self._orderly is not None:
            self._orderly.start()
        self._service.start()

    def _new_orderly(self, client: PullClient) -> OrderlyService:
        assert self._listener is not None and self._timer is not None and self._consumers is not None
        config = self._config
        return OrderlyService(
            client_id=self.client_id,
            listener=self._listener,
            calls=StoreLockCalls(client, self.group, self.client_id, timeout=config.timeout_s),
            submit=self._consumers.submit,
            call_later=self._timer.call_later,
            commit=self._commit,
            on_lapsed=self._request_rebalance,
            batch_size=config.consume_message_batch_max_size,
            max_reconsume_times=config.max_reconsume_times,
            suspend_time=config.suspend_current_queue_time_s,
        )

    def _request_rebalance(self) -> None:
        with self._lock:
            self._rebalance_now = True
        self._wake.set()

    def _check_subscription(self, client: PullClient, sub: Subscription) -> None:
        """Raise what makes ``sub`` fail for good; a retriable failure (a service down)
        is logged and left to the running consumer."""
        try:
            queues = client.message_queues(sub.topic)
            if not queues:
                raise NotFoundError(
                    f"topic {sub.topic!r} has no readable queue", code=errors_pb2.CODE_TOPIC_NOT_READABLE
                )
            mq = queues[0]
            high = client.queue_range(mq)[1]
            # Validated as every pull is; answered at once (no hold), reads nothing new.
            client.pull(mq, sub, high, max_nums=1, suspend_timeout=None)
        except TxmqError as err:
            if err.code == errors_pb2.CODE_TOPIC_NOT_FOUND and self._stores_live(client):
                raise  # stores are up and none has it: it does not exist
            if err.code == errors_pb2.CODE_CONSUME_DISABLED and self._config.pause_on_consume_disabled:
                self._puller.set_paused(None, True)  # starts paused; pulls wait for the resume
                return
            if not retriable(err):
                raise
            log.warning(
                "consumer %s: cannot check the subscription to %s now (%s); starting anyway",
                self.client_id,
                sub.topic,
                err,
            )

    @staticmethod
    def _stores_live(client: PullClient) -> bool:
        try:
            return bool(client.core.routes.endpoints(ServiceKind.STORE, timeout=client.timeout))
        except TxmqError:
            return False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the consumer stops (``shutdown()``, or an error a retry cannot
        fix, which is raised here) or ``timeout`` seconds pass; True if it stopped."""
        stopped = self._stopped.wait(timeout)
        if self._error is not None:
            raise self._error
        return stopped

    @property
    def error(self) -> TxmqError | None:
        """The error that stopped the consumer, if one did."""
        return self._error

    def shutdown(self) -> None:
        """Stop pulling, let running listeners finish, commit every queue's offset, tell
        the pull instances this consumer is leaving (the rest of the group takes its
        queues at their next rebalance) and close. Idempotent; after a stop on an error
        it only waits for that stop to end."""
        with self._lock:
            if self._state in ("created", "starting", "stopped"):  # start() sees "stopped" and backs out
                self._state = "stopped"
                self._stopped.set()
                return
        if not self._stop() and self._service is not threading.current_thread():
            self._stopped.wait()  # another thread is stopping it

    def _stop(self) -> bool:
        """Stop a running consumer; False when another thread does (or did)."""
        with self._lock:
            if self._state != "running":
                return False
            self._state = "stopping"
            queues = list(self._queues.values())
        self._wake.set()
        assert self._service and self._timer and self._dispatcher and self._consumers and self._client
        if self._service is not threading.current_thread():
            self._service.join()
        for pq in queues:
            drop(pq)
        self._timer.stop()
        self._dispatcher.shutdown(wait=True)
        self._consumers.shutdown(wait=True, cancel_futures=True)
        for pq in queues:
            self._commit(pq)
        if self._orderly is not None:
            self._orderly.close()  # after the commits: unlock
        with self._lock:
            self._queues.clear()
            topics = sorted(self._subs)
        try:
            self._client.heartbeat(self._membership.pull_addresses(topics), self.client_id, topics, leaving=True)
        except TxmqError as err:
            log.info("consumer %s: telling the group it leaves failed: %s", self.client_id, err)
        self._client.close()
        with self._lock:
            self._state = "stopped"
        self._stopped.set()
        return True

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    @property
    def _tls(self) -> TlsConfig | None:
        """TLS for every channel, kept where every SDK facade keeps it."""
        return self._config.tls

    @property
    def _running(self) -> bool:
        return self._state == "running" and self._error is None

    def _fail(self, err: TxmqError) -> bool:
        """A retry cannot fix ``err``: have the service thread stop the consumer. False
        when it is stopping already."""
        with self._lock:
            if self._error is not None or self._state != "running":
                return False
            self._error = err
        log.error("consumer %s of group %s stops: %s (a retry cannot fix this)", self.client_id, self.group, err)
        self._wake.set()
        return True

    def _handle(self, key: object, what: str, err: TxmqError) -> None:
        """A failed background call: stop on a non-retriable error, else log (bounded)."""
        if retriable(err):
            self._failures.failed(key, f"consumer {self.client_id}: {what}", err)
        elif not self._fail(err):  # while stopping (e.g. the last commits): say it once
            log.warning("consumer %s: %s failed: %s", self.client_id, what, err)

    # -- heartbeat, rebalance, commits (the service thread) -----------------------------

    def _service_loop(self) -> None:
        while self._running:
            try:
                self._serve()
            except TxmqError as err:
                self._handle("service", "service loop", err)
                self._wake.wait(self._config.heartbeat_interval_s)
            except Exception:  # a bug here must not end heartbeats for good
                log.exception("consumer %s: service loop failed; restarting it", self.client_id)
                self._wake.wait(self._config.heartbeat_interval_s)
        error = self._error
        if error is None:
            return  # shut down by shutdown()
        try:
            self._stop()
        except Exception:
            log.exception("consumer %s: stopping after an error failed", self.client_id)
            with self._lock:
                self._state = "stopped"
            self._stopped.set()
        if self._config.on_error is not None:
            try:
                self._config.on_error(error)
            except Exception:
                log.exception("consumer %s: the on_error callback failed", self.client_id)

    def _serve(self) -> None:
        config = self._config
        next_heartbeat = next_rebalance = 0.0
        next_commit = time.monotonic() + config.commit_interval_s
        last_heard = time.monotonic()
        while self._running:
            self._wake.clear()  # before reading the flags: a wake-up after this is kept
            now = time.monotonic()
            if now >= next_heartbeat:
                changed = self._membership.heartbeat(now)
                if changed is not None:
                    last_heard = now
                    if changed:
                        next_rebalance = now
                else:
                    self._membership.unheard(now - last_heard)
                next_heartbeat = now + config.heartbeat_interval_s
            with self._lock:
                requested, self._rebalance_now = self._rebalance_now, False
            if requested or now >= next_rebalance:
                retry_at = self._rebalance(now)
                next_rebalance = now + config.rebalance_interval_s
                if retry_at is not None:
                    next_rebalance = min(next_rebalance, retry_at)
            if now >= next_commit:
                self._offsets.commit_all()
                next_commit = now + config.commit_interval_s
            wait = min(next_heartbeat, next_rebalance, next_commit) - time.monotonic()
            if wait > 0:
                self._wake.wait(wait)

    # -- the pieces' entry points (txmq._push_context) -----------------------------------------

    def _rebalance(self, now: float) -> float | None:
        """``QueueAssignment.rebalance``: when to rebalance again for queues still waiting."""
        return self._assignment.rebalance(now)

    def _release(self, mq: MessageQueue) -> None:
        """Stop consuming ``mq`` and commit it (``QueueAssignment.release``)."""
        self._assignment.release(mq)

    def _commit(self, pq: ProcessQueue) -> None:
        """Commit ``pq``'s commit point if it moved (``OffsetStore.commit``)."""
        self._offsets.commit(pq)

    def _pull(self, pq: ProcessQueue) -> None:
        """Pull ``pq`` (``QueuePuller.pull``; timer and dispatcher threads)."""
        self._puller.pull(pq)

    def _pull_failed(self, pq: ProcessQueue, err: TxmqError) -> None:
        self._puller.pull_failed(pq, err)

    def _on_pulled(self, pq: ProcessQueue, future: grpc.Future, sub: Subscription) -> None:
        self._puller.on_pulled(pq, future, sub)

    def _submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Hand pulled messages to the consume service: orderly, the queue's one task
        takes its pending messages in order; else a consume thread runs ``messages``."""
        if self._consumers is None or not self._running:
            return
        if self._orderly is not None:
            self._orderly.submit(pq)
            return
        self._concurrent.submit(pq, messages)

    def _consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Run the listener on ``messages`` (``ConcurrentService.consume``; consume threads)."""
        self._concurrent.consume(pq, messages)
