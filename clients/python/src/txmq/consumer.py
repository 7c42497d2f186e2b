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

from txmq._backoff import delay as backoff_delay
from txmq._client import ClientCore, parse_endpoints
from txmq._consumer_types import (
    ConsumeFromWhere,
    ConsumeStatus,
    ExpressionType,
    PullResult,
    PullStatus,
    SendBackResult,
    listener_status,
)
from txmq._failures import FailureLog, retriable
from txmq._orderly import OrderlyService, StoreLockCalls
from txmq._process_queue import ProcessQueue, Timer
from txmq._pulling import PullClient, to_pull_result
from txmq._rebalance import MembershipView, allocate_averagely
from txmq._subscription import Subscription, build_subscription
from txmq.errors import BadRequestError, NotFoundError, TxmqError
from txmq.message import MessageExt, MessageQueue
from txmq.models import ServiceKind
from txmq.protocol import PROPERTY_RETRY_TOPIC, RETRY_GROUP_TOPIC_PREFIX, retry_topic
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

MessageListener = Callable[[list[MessageExt]], ConsumeStatus]
ErrorCallback = Callable[[TxmqError], None]

DEFAULT_SUSPEND_TIMEOUT_S = 15.0  # RocketMQ's brokerSuspendMaxTimeMillis
_FLOW_CONTROL_PAUSE_S = 0.05  # RocketMQ's PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
# Heartbeat intervals without any answer after which a consumer gives its queues up
# (the pull service forgets a consumer after 3 of the default 10 s intervals).
_SILENT_HEARTBEATS = 3
# A queue whose pulls keep failing (retriably) waits up to this long between attempts.
_PULL_ERROR_BACKOFF_MAX_S = 30.0
# A paused group's queues are pulled again at most this long apart (RocketMQ's
# pullTimeDelayMillsWhenException), so a resumed group goes on within seconds.
_PAUSED_POLL_MAX_S = 3.0
# Orderly mode: a queue the store would not lock yet is asked for again this soon
# (RocketMQ rebalances again after 500 ms when a lock failed).
_LOCK_RETRY_S = 0.5


def _positive(**values: float) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{name} must be > 0, not {value}")


class PullConsumer:
    """Pulls messages from queues you choose, at offsets you choose (RocketMQ's
    DefaultMQPullConsumer / the assign mode of DefaultLitePullConsumer). Thread-safe.

    ``group`` is the consumer group the offsets belong to; ``endpoint`` any txmq
    service. ``timeout`` bounds every call except a suspended pull, which may be held
    ``suspend_timeout`` seconds (its RPC deadline is a little longer). ``tls``: TLS (and
    a client certificate) for every channel (``txmq.TlsConfig``). ``credentials``: the
    user every call is signed as (``txmq.Credentials``).
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
        _positive(timeout=timeout, suspend_timeout=suspend_timeout, route_refresh_interval=route_refresh_interval)
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
                self._client = PullClient(core, self.group, timeout=self._timeout)

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
        if offset < 0:
            raise BadRequestError(f"offset {offset} is negative", code=errors_pb2.CODE_ILLEGAL_OFFSET)
        if max_nums <= 0:
            raise BadRequestError(f"max_nums must be > 0, not {max_nums}", code=errors_pb2.CODE_ILLEGAL_ARGUMENT)
        hold = self._suspend_timeout if timeout is None else timeout
        _positive(timeout=hold)
        sub = build_subscription(mq.topic, expression, expression_type)
        suspend_timeout = hold if suspend else None
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
        if delay_level < -1:
            raise BadRequestError(
                f"delay_level must be >= -1, not {delay_level}", code=errors_pb2.CODE_ILLEGAL_ARGUMENT
            )
        if max_reconsume_times is not None and max_reconsume_times < 0:
            raise BadRequestError(
                f"max_reconsume_times must be >= 0, not {max_reconsume_times}", code=errors_pb2.CODE_ILLEGAL_ARGUMENT
            )
        return self._run(
            lambda c: c.send_back(
                message.topic,
                message,
                delay_level=delay_level,
                max_reconsume_times=max_reconsume_times,
                uncounted=uncounted,
            )
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
    consumer stops), as before.

    See ``_rebalance`` and docs/consumers.md for how queues change hands.

    ``orderly=True``: orderly consumption (RocketMQ's MessageListenerOrderly; see
    ``txmq._orderly`` and docs/consumers.md "Orderly consumption"). A queue is consumed
    only while the store holding it has locked it for this consumer (renewed every third
    of the lease, trusted for half of it), by one thread at a time, in offset order. A
    failed batch suspends its queue for ``suspend_current_queue_time`` seconds and is
    delivered again; after ``max_reconsume_times`` failures a message goes to the
    group's dead-letter topic. Queues change hands by the lock, not by
    ``takeover_delay``.
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
        check_group(group, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        parse_endpoints(endpoint)
        if on_error is not None and not callable(on_error):
            raise TypeError("on_error must be callable")
        _positive(
            consume_thread_max=consume_thread_max,
            consume_message_batch_max_size=consume_message_batch_max_size,
            pull_batch_size=pull_batch_size,
            pull_threshold_for_queue=pull_threshold_for_queue,
            consume_concurrently_max_span=consume_concurrently_max_span,
            retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max,
            heartbeat_interval=heartbeat_interval,
            rebalance_interval=rebalance_interval,
            commit_interval=commit_interval,
            suspend_timeout=suspend_timeout,
            pull_error_backoff=pull_error_backoff,
            timeout=timeout,
            route_refresh_interval=route_refresh_interval,
            suspend_current_queue_time=suspend_current_queue_time,
        )
        if not isinstance(consume_from, ConsumeFromWhere):
            raise TypeError(f"consume_from must be a ConsumeFromWhere, not {consume_from!r}")
        if max_reconsume_times < 0:
            raise ValueError("max_reconsume_times must be >= 0")
        if takeover_delay is None:
            takeover_delay = heartbeat_interval + 2.0
        if takeover_delay <= heartbeat_interval:
            raise ValueError("takeover_delay must be longer than heartbeat_interval")
        self.group = group
        self.endpoint = endpoint
        self.client_id = client_id or f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"
        self._consume_from = consume_from
        self._consume_thread_max = consume_thread_max
        self._batch_size = consume_message_batch_max_size
        self._pull_batch_size = pull_batch_size
        self._pull_threshold = pull_threshold_for_queue
        self._max_span = consume_concurrently_max_span
        self._max_reconsume_times = max_reconsume_times
        self._retry_backoff = retry_backoff
        self._retry_backoff_max = retry_backoff_max
        self._heartbeat_interval = heartbeat_interval
        self._rebalance_interval = rebalance_interval
        self._commit_interval = commit_interval
        self._suspend_timeout = suspend_timeout
        self._pull_error_backoff = pull_error_backoff
        self._timeout = timeout
        self._route_refresh_interval = route_refresh_interval
        self._interceptors = tuple(interceptors)
        self._tls = tls
        self._credentials = credentials
        # A released queue waits this long for its running listeners before its offset
        # is committed (the new owner starts takeover_delay after the change).
        self._release_timeout = takeover_delay

        self._lock = threading.Lock()
        self._subs: dict[str, Subscription] = {}
        self._listener: MessageListener | None = None
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        self._state = "created"  # -> running -> stopped
        self._view = MembershipView(self.client_id, takeover_delay)
        self._wake = threading.Event()
        self._rebalance_now = False
        self._client: PullClient | None = None
        self._service: threading.Thread | None = None
        self._timer: Timer | None = None
        self._dispatcher: concurrent.futures.ThreadPoolExecutor | None = None
        self._consumers: concurrent.futures.ThreadPoolExecutor | None = None
        self._on_error = on_error
        self._error: TxmqError | None = None
        self._stopped = threading.Event()
        self._failures = FailureLog(log)
        self._pause_on_disabled = pause_on_consume_disabled
        # Queues whose last pull was refused as paused (None: the check at start was).
        self._paused: set[MessageQueue | None] = set()
        self._conflict: TxmqError | None = None
        # Orderly consumption (txmq._orderly; docs/consumers.md "Orderly consumption").
        self._orderly_mode = bool(orderly)
        self._suspend_time = suspend_current_queue_time
        self._orderly: OrderlyService | None = None
        # Failed messages go back to their store, to this topic (subscribed by start()).
        self._retry_topic = retry_topic(group)
        self._sent_back_to: set[str] = set()  # stores this consumer sent a retry copy to

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

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start heartbeating, rebalancing and consuming. A consumer starts once."""
        with self._lock:
            if self._state != "created":
                raise RuntimeError(f"the consumer is {self._state}; a consumer starts once")
            if self._listener is None:
                raise RuntimeError("register a message listener before start()")
            if not self._subs:
                raise RuntimeError("subscribe to a topic before start()")
            core = ClientCore(
                self.endpoint,
                route_refresh_interval=self._route_refresh_interval,
                interceptors=self._interceptors,
                tls=self._tls,
                credentials=self._credentials,
            )
            client = PullClient(core, self.group, timeout=self._timeout)
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
            self._subs.setdefault(self._retry_topic, build_subscription(self._retry_topic, "*", ExpressionType.TAG))
            self._client = client
            self._timer = Timer(f"txmq-consumer-timer-{self.group}")
            self._dispatcher = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="txmq-consumer-pull")
            self._consumers = concurrent.futures.ThreadPoolExecutor(
                self._consume_thread_max, thread_name_prefix=f"txmq-consume-{self.group}"
            )
            self._service = threading.Thread(target=self._service_loop, name=f"txmq-consumer-{self.group}", daemon=True)
            if self._orderly_mode:
                self._orderly = self._new_orderly(client)
            self._state = "running"
        self._timer.start()
        if self._orderly is not None:
            self._orderly.start()
        self._service.start()

    def _new_orderly(self, client: PullClient) -> OrderlyService:
        assert self._listener is not None and self._timer is not None and self._consumers is not None
        return OrderlyService(
            client_id=self.client_id,
            listener=self._listener,
            calls=StoreLockCalls(client, self.group, self.client_id, timeout=self._timeout),
            submit=self._consumers.submit,
            call_later=self._timer.call_later,
            commit=self._commit,
            on_lapsed=self._request_rebalance,
            batch_size=self._batch_size,
            max_reconsume_times=self._max_reconsume_times,
            suspend_time=self._suspend_time,
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
            if err.code == errors_pb2.CODE_CONSUME_DISABLED and self._pause_on_disabled:
                self._set_paused(None, True)  # starts paused; pulls wait for the resume
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
            self._drop(pq)
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
            self._client.heartbeat(self._pull_addresses(topics), self.client_id, topics, leaving=True)
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
                self._wake.wait(self._heartbeat_interval)
            except Exception:  # a bug here must not end heartbeats for good
                log.exception("consumer %s: service loop failed; restarting it", self.client_id)
                self._wake.wait(self._heartbeat_interval)
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
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                log.exception("consumer %s: the on_error callback failed", self.client_id)

    def _serve(self) -> None:
        next_heartbeat = next_rebalance = 0.0
        next_commit = time.monotonic() + self._commit_interval
        last_heard = time.monotonic()
        while self._running:
            self._wake.clear()  # before reading the flags: a wake-up after this is kept
            now = time.monotonic()
            if now >= next_heartbeat:
                changed = self._heartbeat(now)
                if changed is not None:
                    last_heard = now
                    if changed:
                        next_rebalance = now
                elif now - last_heard > _SILENT_HEARTBEATS * self._heartbeat_interval and self._view.members:
                    # The group has probably given our queues to others by now: stop
                    # until a heartbeat gets through again (then the hand-over rule applies).
                    log.warning(
                        "consumer %s: no pull instance heard a heartbeat for %.1fs; releasing every queue",
                        self.client_id, now - last_heard,
                    )  # fmt: skip
                    self._view.forget()
                    with self._lock:
                        owned = sorted(self._queues)
                    for mq in owned:
                        self._release(mq)
                next_heartbeat = now + self._heartbeat_interval
            with self._lock:
                requested, self._rebalance_now = self._rebalance_now, False
            if requested or now >= next_rebalance:
                retry_at = self._rebalance(now)
                next_rebalance = now + self._rebalance_interval
                if retry_at is not None:
                    next_rebalance = min(next_rebalance, retry_at)
            if now >= next_commit:
                self._commit_all()
                next_commit = now + self._commit_interval
            wait = min(next_heartbeat, next_rebalance, next_commit) - time.monotonic()
            if wait > 0:
                self._wake.wait(wait)

    def _pull_addresses(self, topics: list[str]) -> list[str]:
        """The pull instances serving ``topics`` (membership is kept per instance)."""
        assert self._client is not None
        addresses: set[str] = set()
        for topic in topics:
            what = f"finding the pull instances of topic {topic}"
            try:
                addresses.update(self._client.pull_addresses(topic))
            except TxmqError as err:
                if not self._retry_topic_absent(topic, err):
                    self._handle(("pull-addresses", topic), what, err)
            else:
                self._failures.recovered(("pull-addresses", topic), f"consumer {self.client_id}: {what}")
        return sorted(addresses)

    def _heartbeat(self, now: float) -> bool | None:
        """Heartbeat every pull instance of the subscribed topics; whether the
        membership changed, or None when no instance answered."""
        assert self._client is not None
        with self._lock:
            topics = sorted(self._subs)
            subs = [self._subs[topic] for topic in topics]
        addresses = self._pull_addresses(topics)
        if not addresses:
            return None
        try:
            members = self._client.heartbeat(addresses, self.client_id, topics, subscriptions=subs)
        except TxmqError as err:
            if err.code != errors_pb2.CODE_SUBSCRIPTION_CONFLICT:
                raise
            self._set_conflict(err)
            return None
        if members is None:
            return None
        self._set_conflict(None)
        changed = self._view.update(members, now)
        if changed:
            log.info("consumer %s: group %s is now %s", self.client_id, self.group, members)
        return changed

    def _rebalance(self, now: float) -> float | None:
        """Release queues no longer mine, take new ones when the hand-over rule allows;
        returns when to try again for queues still waiting, if any."""
        assert self._client is not None
        view = self._view
        if self._orderly is not None:
            for mq in self._orderly.take_lapsed():
                self._release(mq)  # locked again below, as a queue newly ours
        if not view.known or view.members is None:
            return None  # no heartbeat answered yet: keep what we have
        with self._lock:
            subs = dict(self._subs)
            owned = set(self._queues)
        retry_at: float | None = None
        for mq in sorted(mq for mq in owned if mq.topic not in subs):
            self._release(mq)
        for topic in subs:
            what = f"route of topic {topic}"
            try:
                queues = sorted(self._client.route(topic).read_queues())
            except TxmqError as err:
                if not self._retry_topic_absent(topic, err):
                    self._handle(("route", topic), what, err)
                continue
            self._failures.recovered(("route", topic), f"consumer {self.client_id}: {what}")
            mine = set(allocate_averagely(queues, list(view.members), self.client_id))
            for mq in sorted(mq for mq in owned if mq.topic == topic and mq not in mine):
                self._release(mq)
            for mq in sorted(mine - owned):
                if not self._running:
                    return None
                # Orderly: the store's queue lock decides when a queue changes hands.
                if self._orderly is None and not view.may_take_over(now):
                    retry_at = view.takeover_at()
                    continue
                what = f"starting on {mq}"
                try:
                    if self._acquire(mq) is False:  # orderly: not locked for us yet
                        at = now + _LOCK_RETRY_S
                        retry_at = at if retry_at is None else min(retry_at, at)
                        continue
                except TxmqError as err:
                    self._handle(("acquire", mq), what, err)
                    if not self._running:
                        return None
                    at = now + self._pull_error_backoff
                    retry_at = at if retry_at is None else min(retry_at, at)
                else:
                    self._failures.recovered(("acquire", mq), f"consumer {self.client_id}: {what}")
        return retry_at

    def _acquire(self, mq: MessageQueue) -> bool:
        """Start consuming ``mq`` from its committed offset; False when orderly and the
        store did not lock it for this consumer (yet)."""
        assert self._client is not None
        locked_until = None
        if self._orderly is not None:
            locked_until = self._orderly.lock_new(mq)  # before the offset is read
            if locked_until is None:
                return False
        offset = self._client.fetch_offset(mq)
        if offset is None:
            low, high = self._client.queue_range(mq)
            # A retry queue holds only this group's failed messages: all of them, always
            # (RocketMQ's computePullFromWhere starts retry topics at 0 too).
            first = self._consume_from is ConsumeFromWhere.FIRST_OFFSET or mq.topic == self._retry_topic
            offset = low if first else high
            self._client.commit_offset(mq, offset)
        pq = ProcessQueue(mq, offset)
        pq.committed = offset
        if self._orderly is not None and locked_until is not None:
            self._orderly.add(pq, locked_until)
        with self._lock:
            if not self._running:
                return True
            self._queues[mq] = pq
        log.info("consumer %s: consuming %s from offset %d", self.client_id, mq, offset)
        self._pull(pq)
        return True

    def _release(self, mq: MessageQueue) -> None:
        """Stop pulling ``mq``, wait (bounded) for its running listeners, commit."""
        with self._lock:
            pq = self._queues.pop(mq, None)
        if pq is None:
            return
        self._drop(pq)
        deadline = time.monotonic() + self._release_timeout
        with pq.lock:
            while pq.running and (remaining := deadline - time.monotonic()) > 0:
                pq.lock.wait(remaining)
            if pq.running:
                log.warning(
                    "consumer %s: releasing %s with %d listener(s) still running", self.client_id, mq, pq.running
                )
        self._commit(pq)
        if self._orderly is not None:
            self._orderly.remove(pq)  # unlock, after the commit
        self._failures.forget(("pull", mq))
        log.info("consumer %s: released %s at offset %s", self.client_id, mq, pq.committed)

    def _drop(self, pq: ProcessQueue) -> None:
        with pq.lock:
            pq.dropped = True
            call, pq.pull_call = pq.pull_call, None
        if call is not None:
            call.cancel()

    def _commit_all(self) -> None:
        with self._lock:
            queues = list(self._queues.values())
        for pq in queues:
            if not pq.dropped:
                self._commit(pq)

    def _commit(self, pq: ProcessQueue) -> None:
        """Commit ``pq``'s commit point if it moved. Only the service thread (and
        shutdown, after it) commits, so commits of one queue never race; orderly, also a
        batch that outlived its queue's release, after that release's commit, and only
        while the queue's lock is trusted."""
        assert self._client is not None
        if self._orderly is not None and not self._orderly.may_commit(pq):
            return  # the lock lapsed: another consumer may have the queue by now
        with pq.lock:
            point = pq.commit_point()
            if point == pq.committed:
                return
        what = f"committing the offset of {pq.mq}"
        try:
            self._client.commit_offset(pq.mq, point)
        except TxmqError as err:
            self._handle(("commit", pq.mq), what, err)
            return
        self._failures.recovered(("commit", pq.mq), f"consumer {self.client_id}: {what}")
        with pq.lock:
            pq.committed = point

    # -- pulling (timer and dispatcher threads) ---------------------------------------------

    def _pull(self, pq: ProcessQueue) -> None:
        assert self._client is not None and self._timer is not None
        with pq.lock:
            if pq.dropped or not self._running:
                return
            if len(pq.pending) >= self._pull_threshold or pq.span() >= self._max_span:
                if not pq.flow_controlled_logged:
                    log.info(
                        "consumer %s: %s paused (%d messages pending, span %d)",
                        self.client_id, pq.mq, len(pq.pending), pq.span(),
                    )  # fmt: skip
                    pq.flow_controlled_logged = True
                self._timer.call_later(_FLOW_CONTROL_PAUSE_S, self._pull, pq)
                return
            pq.flow_controlled_logged = False
            offset, attempt = pq.next_offset, pq.failures
        with self._lock:
            sub = self._subs.get(pq.mq.topic)
        if sub is None:
            return  # unsubscribed: the next rebalance releases the queue
        try:
            address = self._client.pull_address(pq.mq, attempt)
        except TxmqError as err:
            self._pull_failed(pq, err)
            return
        request = self._client.pull_request(
            pq.mq, sub, offset, max_nums=self._pull_batch_size, suspend_timeout=self._suspend_timeout,
            client_id=self.client_id,
        )  # fmt: skip
        try:
            future = self._client.pull_stub(address).PullMessage.future(
                request, timeout=self._client.deadline(self._suspend_timeout)
            )
        except (RuntimeError, ValueError) as exc:  # closed meanwhile (shutdown)
            log.debug("consumer %s: pull of %s not sent: %s", self.client_id, pq.mq, exc)
            return
        with pq.lock:
            if pq.dropped:
                future.cancel()
                return
            pq.pull_call = future
        future.add_done_callback(lambda f: self._dispatch(pq, f, sub))

    def _dispatch(self, pq: ProcessQueue, future: grpc.Future, sub: Subscription) -> None:
        # Done-callbacks run on gRPC's thread: hand the work over at once.
        dispatcher = self._dispatcher
        if dispatcher is None or not self._running:
            return
        try:
            dispatcher.submit(self._on_pulled_safely, pq, future, sub)
        except RuntimeError:
            pass  # shut down meanwhile

    def _on_pulled_safely(self, pq: ProcessQueue, future: grpc.Future, sub: Subscription) -> None:
        try:
            self._on_pulled(pq, future, sub)
        except Exception as exc:  # keep the queue going whatever happened
            log.exception("consumer %s: handling a pull of %s failed", self.client_id, pq.mq)
            self._pull_failed(pq, TxmqError(f"handling a pull failed: {exc!r}", retriable=True))

    def _pull_failed(self, pq: ProcessQueue, err: TxmqError) -> None:
        assert self._client is not None and self._timer is not None
        if err.code == errors_pb2.CODE_CONSUME_DISABLED and self._pause_on_disabled:
            self._pull_paused(pq)
            return
        with pq.lock:
            if pq.dropped:
                return
            pq.failures += 1
            failures = pq.failures
        self._handle(("pull", pq.mq), f"pull of {pq.mq}", err)
        if not self._running:
            return
        self._client.core.routes.mark_stale(pq.mq.topic)
        wait = backoff_delay(
            failures, first=self._pull_error_backoff, maximum=max(self._pull_error_backoff, _PULL_ERROR_BACKOFF_MAX_S)
        )
        self._timer.call_later(wait, self._pull, pq)

    # -- a subscription the group refuses (docs/consumers.md "Consistent subscriptions") -----

    @property
    def subscription_conflict(self) -> TxmqError | None:
        """The pull service's last CODE_SUBSCRIPTION_CONFLICT refusal of this consumer's
        heartbeat (it holds no queue meanwhile); None once a heartbeat is accepted."""
        return self._conflict

    def _set_conflict(self, err: TxmqError | None) -> None:
        """Record a refusal (or its end): one log line per change; a refused consumer
        releases every queue and forgets the membership, so it takes none."""
        with self._lock:
            before, self._conflict = self._conflict, err
            owned = sorted(self._queues) if err is not None else []
        if err is not None:
            if before is None or before.message != err.message:
                log.error(
                    "consumer %s: the group refuses its subscription, so it consumes nothing: %s",
                    self.client_id,
                    err.message,
                )
            self._view.forget()
            for mq in owned:
                self._release(mq)
        elif before is not None:
            log.info("consumer %s: the group accepts its subscription again", self.client_id)

    # -- a paused group (consume_enable off; docs/consumers.md "Pausing a group") ------------

    @property
    def paused(self) -> bool:
        """Whether the group's pulls are refused as paused (``pause_on_consume_disabled``)."""
        return bool(self._paused)

    def _set_paused(self, mq: MessageQueue | None, paused: bool) -> None:
        """``mq``'s pulls are (not) refused as paused. The group counts as paused while
        any queue is (a pull held since before the pause still answers): one log line
        when that starts and one when it ends."""
        with self._lock:
            before = bool(self._paused)
            if paused:
                self._paused.add(mq)
            else:
                self._paused.discard(mq)
                self._paused.discard(None)
                self._paused.intersection_update({None, *self._queues})  # released queues
            if bool(self._paused) is before:
                return
        if paused:
            log.warning(
                "consumer %s: group %s is paused (consume disabled); keeping its queues and offsets, "
                "pulling again every %.0fs at most until it resumes",
                self.client_id, self.group, max(self._pull_error_backoff, _PAUSED_POLL_MAX_S),
            )  # fmt: skip
        else:
            log.warning("consumer %s: group %s resumed", self.client_id, self.group)

    def _pull_paused(self, pq: ProcessQueue) -> None:
        """A pull refused as paused: no error, no stop; the same pull again after a backoff."""
        assert self._timer is not None
        with pq.lock:
            if pq.dropped:
                return
            pq.paused_polls += 1
            polls = pq.paused_polls
        self._set_paused(pq.mq, True)
        maximum = max(self._pull_error_backoff, _PAUSED_POLL_MAX_S)
        self._timer.call_later(backoff_delay(polls, first=self._pull_error_backoff, maximum=maximum), self._pull, pq)

    def _on_pulled(self, pq: ProcessQueue, future: grpc.Future, sub: Subscription) -> None:
        with pq.lock:
            if pq.dropped or future.cancelled():
                return
            if pq.pull_call is future:
                pq.pull_call = None
        try:
            response = future.result()
        except grpc.RpcError as exc:
            self._pull_failed(pq, TxmqError.from_rpc_error(exc))
            return
        except grpc.FutureCancelledError:
            return
        try:
            result = to_pull_result(response, sub)
        except TxmqError as err:
            self._pull_failed(pq, err)
            return
        batches: list[list[MessageExt]] = []
        with pq.lock:
            if pq.dropped:
                return
            if pq.failures:
                self._failures.recovered(("pull", pq.mq), f"consumer {self.client_id}: pull of {pq.mq}")
            pq.failures = 0
            pq.paused_polls = 0
            if result.status is PullStatus.FOUND:
                fresh = pq.take(result.messages, result.next_begin_offset)
                batches = [fresh[i : i + self._batch_size] for i in range(0, len(fresh), self._batch_size)]
            else:
                if result.status is PullStatus.OFFSET_ILLEGAL:
                    log.warning(
                        "consumer %s: offset %d of %s is illegal (queue %d..%d); continuing at %d",
                        self.client_id, pq.next_offset, pq.mq, result.min_offset, result.max_offset,
                        result.next_begin_offset,
                    )  # fmt: skip
                    pq.next_offset = result.next_begin_offset
                else:
                    pq.next_offset = max(pq.next_offset, result.next_begin_offset)
        if self._paused:
            self._set_paused(pq.mq, False)
        for batch in batches:
            self._submit(pq, batch)
        self._pull(pq)

    # -- consuming (consume threads) -------------------------------------------------------

    def _submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        consumers = self._consumers
        if consumers is None or not self._running:
            return
        if self._orderly is not None:
            self._orderly.submit(pq)  # one task per queue takes the pending messages in order
            return
        try:
            consumers.submit(self._consume, pq, messages)
        except RuntimeError:
            pass  # shut down meanwhile: the messages stay pending, the commit point before them

    def _consume(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        assert self._listener is not None and self._timer is not None
        with pq.lock:
            if pq.dropped:
                return  # the queue moved on; whoever has it now delivers these
            pq.running += 1
        if pq.mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            _restore_topics(messages)
        status = listener_status(
            self._listener, messages, log, client_id=self.client_id, where=pq.mq, then="reconsuming later"
        )
        uncounted = status is ConsumeStatus.RECONSUME_LATER_UNCOUNTED
        sent_back: list[MessageExt] = []
        if status is not ConsumeStatus.CONSUME_SUCCESS and not pq.dropped:
            sent_back = self._send_back(pq, messages, uncounted=uncounted)
        retry: list[MessageExt] = []
        with pq.lock:
            pq.running -= 1
            if status is ConsumeStatus.CONSUME_SUCCESS:
                for m in messages:
                    pq.pending.pop(m.queue_offset, None)
            else:
                for m in sent_back:  # the store holds a copy now: done here
                    pq.pending.pop(m.queue_offset, None)
                if not pq.dropped:
                    taken = {id(m) for m in sent_back}
                    retry = self._retry_locally(pq, [m for m in messages if id(m) not in taken], uncounted)
            pq.lock.notify_all()
        for m in retry:
            delay = backoff_delay(max(1, m.reconsume_times), first=self._retry_backoff, maximum=self._retry_backoff_max)
            self._timer.call_later(delay, self._submit, pq, [m])

    def _send_back(self, pq: ProcessQueue, messages: list[MessageExt], *, uncounted: bool) -> list[MessageExt]:
        """Send failed messages back to the store that holds them (RocketMQ's
        sendMessageBack): the store copies each to %RETRY%<group> (or past
        max_reconsume_times to %DLQ%<group>). Returns the ones it took; the others (the
        store down, any error) are retried locally, as RocketMQ does."""
        assert self._client is not None
        sent: list[MessageExt] = []
        for m in messages:
            what = f"sending back a failed message of {pq.mq}"
            try:
                result = self._client.send_back(
                    pq.mq.topic, m, max_reconsume_times=self._max_reconsume_times, uncounted=uncounted,
                    client_id=self.client_id,
                )  # fmt: skip
            except (TxmqError, RuntimeError, ValueError) as err:  # RuntimeError/ValueError: closed meanwhile
                self._failures.failed(
                    ("send-back", pq.mq.store_id), f"consumer {self.client_id}: {what} (retrying it locally)",
                    err if isinstance(err, TxmqError) else TxmqError(str(err), retriable=True),
                )  # fmt: skip
                continue
            self._failures.recovered(("send-back", pq.mq.store_id), f"consumer {self.client_id}: {what}")
            if not result.dead_lettered and pq.mq.store_id not in self._sent_back_to:
                # The store may have just created the retry topic: pick its queue up now,
                # not at the next periodic rebalance.
                self._sent_back_to.add(pq.mq.store_id)
                self._client.mark_route_stale(self._retry_topic)
                self._request_rebalance()
            if result.dead_lettered:
                log.error(
                    "consumer %s: message %s (%s offset %d) failed %d times; moved to %s",
                    self.client_id, m.msg_id, pq.mq, m.queue_offset, result.reconsume_times, result.topic,
                )  # fmt: skip
            sent.append(m)
        return sent

    def _retry_locally(self, pq: ProcessQueue, messages: list[MessageExt], uncounted: bool) -> list[MessageExt]:
        """Under ``pq.lock``: the messages to deliver again from memory (their send-back
        failed); one that failed ``max_reconsume_times`` times is logged and skipped."""
        retry: list[MessageExt] = []
        for m in messages:
            if uncounted:
                retry.append(m)
            elif m.reconsume_times >= self._max_reconsume_times:
                log.error(
                    "consumer %s: message %s (%s offset %d) failed %d times; skipped",
                    self.client_id, m.msg_id, pq.mq, m.queue_offset, m.reconsume_times + 1,
                )  # fmt: skip
                pq.pending.pop(m.queue_offset, None)
            else:
                m.reconsume_times += 1
                retry.append(m)
        return retry

    def _retry_topic_absent(self, topic: str, err: TxmqError) -> bool:
        """The group's retry topic before its first send-back: not an error."""
        return topic == self._retry_topic and err.code == errors_pb2.CODE_TOPIC_NOT_FOUND


def _restore_topics(messages: list[MessageExt]) -> None:
    """Messages of a retry topic get back the topic they were first consumed from (the
    listener sees the original topic; reconsume_times is the record's)."""
    for m in messages:
        origin = m.properties.get(PROPERTY_RETRY_TOPIC)
        if origin:
            m.topic = origin
