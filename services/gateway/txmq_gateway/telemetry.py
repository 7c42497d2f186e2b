"""Client sessions of the v2 protocol: Telemetry streams, heartbeats, terminations.

A RocketMQ 5 client opens one ``Telemetry`` stream per endpoint and sends its settings
on it (again every few minutes); the gateway answers each with the settings the client
must use (``server_settings``): without ``publishing.max_body_size`` the official
clients refuse every send.

A producer's stream is also how the gateway reaches it for transaction checks. For each
topic the producer publishes to, its session holds a txmq producer channel
(``txmq.v1.Transaction/ProducerChannel``) to a live txcheck replica, with producer group
= the topic: the gateway stores v2 half messages under that group, as RocketMQ 5's proxy
registers gRPC producers under their topics. A check arriving on such a channel goes
down the v2 stream as a ``RecoverOrphanedTransactionCommand``; the client answers it
with a unary ``EndTransaction`` (source SOURCE_SERVER_CHECK), which the servicer
handles. Channels are reopened with backoff when they break (a txcheck restart) and
closed when the session ends or the client terminates.

The hub also keeps a registry of the clients it knows (heartbeats and sessions); a
client with neither for ``client_expiry_ms`` is forgotten.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import grpc

from txmq.errors import TxmqError
from txmq.protocol import PROPERTY_REAL_TOPIC
from txmq.v1 import common_pb2, errors_pb2, txcheck_pb2
from txmq_gateway.backend import Backend
from txmq_gateway.convert import (
    HandleSigner,
    TransactionHandle,
    duration,
    to_v2_message,
)
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError, from_exception, ok, status
from txmq_gateway.v2 import Code, pb, svc
from txmq_runtime.backoff import Backoff, BackoffPolicy
from txmq_runtime.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("txmq.gateway.telemetry")

# Producers: RocketMQ 5 proxy defaults (3 attempts, exponential 10 ms .. 1 s, x2).
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1_000
PRODUCER_BACKOFF_MULTIPLIER = 2.0

# Consumers: RocketMQ's redelivery schedule (retry n waits the n-th delay; the last one
# repeats). A push consumer that fails a message makes it invisible for this long.
CONSUMER_RETRY_DELAYS_MS: tuple[int, ...] = tuple(
    s * 1_000 for s in (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1_200, 1_800, 3_600, 7_200)
)

CONSUMER_TYPES = frozenset({pb.SIMPLE_CONSUMER, pb.PUSH_CONSUMER})
SUPPORTED_TYPES = CONSUMER_TYPES | {pb.PRODUCER}

# Producer channels to txcheck: reconnect backoff (as the txmq SDK's channel does).
RECONNECT_BACKOFF = BackoffPolicy(first_ms=100, max_ms=2_000)
# Longest a session's end or the hub's close waits for its tasks to finish.
CLOSE_WAIT_S = 2.0
# Commands waiting for a slow client; checks beyond this are dropped (txcheck asks again).
MAX_PENDING_COMMANDS = 1_000
# The expiry sweep runs at most this far apart.
MAX_SWEEP_INTERVAL_S = 10.0


# -- settings ------------------------------------------------------------------------


def server_settings(
    client: pb.Settings, settings: GatewaySettings, *, validate_message_type: bool = True
) -> pb.Settings:
    """The settings the gateway answers a client's settings with: the client's own
    (client type, access point, request timeout, user agent, topics, subscriptions)
    completed with the gateway's limits and retry policy.

    Raise GatewayError(UNRECOGNIZED_CLIENT_TYPE) for a client type the gateway does not
    serve (only PRODUCER, SIMPLE_CONSUMER and PUSH_CONSUMER are), ILLEGAL_CONSUMER_GROUP
    for a consumer without a group."""
    client_type = client.client_type
    if client_type not in SUPPORTED_TYPES:
        name = pb.ClientType.Name(client_type) if client_type in pb.ClientType.values() else str(client_type)
        raise GatewayError(Code.UNRECOGNIZED_CLIENT_TYPE, f"client type {name} is not supported by txmq")
    out = pb.Settings()
    out.CopyFrom(client)
    out.metric.CopyFrom(pb.Metric(on=False))  # the gateway collects no client metrics
    if client_type == pb.PRODUCER:
        out.publishing.max_body_size = settings.max_body_size_bytes
        out.publishing.validate_message_type = validate_message_type
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=PRODUCER_MAX_ATTEMPTS,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=duration(PRODUCER_BACKOFF_INITIAL_MS),
                    max=duration(PRODUCER_BACKOFF_MAX_MS),
                    multiplier=PRODUCER_BACKOFF_MULTIPLIER,
                ),
            )
        )
        return out
    sub = out.subscription
    if not sub.group.name:
        raise GatewayError(Code.ILLEGAL_CONSUMER_GROUP, "a consumer's settings must name its group")
    # FIFO order is kept by the gateway (one message per message group in flight), so push
    # consumers keep their concurrent mode: a failure is nacked and redelivered in order.
    sub.fifo = False
    sub.receive_batch_size = settings.max_receive_batch_size
    longest = settings.max_long_polling_timeout_ms
    asked = client.subscription.long_polling_timeout.ToMilliseconds()  # 0 when not set
    # A push consumer sends none and long-polls for as long as the gateway says.
    sub.long_polling_timeout.CopyFrom(duration(min(asked, longest) if asked > 0 else longest))
    out.backoff_policy.CopyFrom(
        pb.RetryPolicy(
            max_attempts=settings.max_delivery_attempts,
            customized_backoff=pb.CustomizedBackoff(next=[duration(ms) for ms in CONSUMER_RETRY_DELAYS_MS]),
        )
    )
    return out


# -- producer channels -----------------------------------------------------------------


class _Refused(Exception):
    """txcheck refused the channel for good (e.g. the group name is illegal)."""


#: Called with the checks of one ServerCommand (one, or a check_batch).
CheckHandler = Callable[["ProducerLink", Sequence[txcheck_pb2.CheckTransactionState]], None]


class ProducerLink:
    """One txmq producer channel held for a v2 producer: producer group ``topic`` on a
    live txcheck replica, reopened (on any replica) with backoff when it breaks, until
    ``stop``. The checks of each command it receives (one, or a batch) are handed to
    ``on_checks`` together."""

    def __init__(
        self, backend: Backend, *, topic: str, client_id: str, on_checks: CheckHandler, open_timeout_s: float
    ) -> None:
        self.backend = backend
        self.topic = topic
        self.client_id = client_id
        self._on_checks = on_checks
        self._open_timeout_s = open_timeout_s
        #: Set while a channel is open (txcheck registered it).
        self.connected = asyncio.Event()
        #: The txcheck replica holding the open channel, None when none is open.
        self.address: str | None = None
        #: How many times a channel was opened (reconnects count).
        self.opens = 0
        self._stopped = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"txmq-gateway-channel-{self.topic}-{self.client_id}")

    def stop(self) -> None:
        """Close the channel (the task ends once it notices; see ``task``)."""
        self._stopped = True
        if self._task is not None and not self._task.done():
            self._task.cancel()

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def _run(self) -> None:
        backoff = Backoff(RECONNECT_BACKOFF)
        warned = False
        while not self._stopped:
            addresses = self.backend.addresses(common_pb2.SERVICE_KIND_TXCHECK)
            if not addresses and not warned:
                log.warning(
                    "no txcheck replica is live: checks of topic %s cannot reach %s yet", self.topic, self.client_id
                )
                warned = True
            opened = False
            for address in addresses:
                if self._stopped:
                    return
                try:
                    opened = await self._serve(address)
                except _Refused as exc:
                    log.warning("txcheck refused a producer channel for topic %s: %s; giving up", self.topic, exc)
                    return
                if opened:
                    warned = False
                    break
            if opened:
                backoff.reset()
            await backoff.sleep()

    async def _open(self, call: grpc.aio.StreamStreamCall) -> bool:
        """Say hello; True once txcheck registered the channel."""
        hello = txcheck_pb2.ProducerHello(
            producer_group=self.topic, client_id=self.client_id, accepts_check_batches=True
        )
        await call.write(txcheck_pb2.ProducerCommand(hello=hello))
        await call.initial_metadata()  # txcheck sends it once the channel is registered
        if call.done():  # refused (or ended) instead: read() raises its status
            await call.read()
            return False
        return True

    async def _serve(self, address: str) -> bool:
        """Run one channel to ``address`` until it breaks; True if it was open."""
        call = self.backend.producer_channel(address)
        opened = False
        try:
            # asyncio.timeout, not wait_for: wait_for may swallow a cancellation (stop)
            # that arrives as the channel opens.
            async with asyncio.timeout(self._open_timeout_s):
                if not await self._open(call):
                    return False
            opened = True
            self.opens += 1
            self.address = address
            self.connected.set()
            log.info("producer channel of topic %s for %s open to %s", self.topic, self.client_id, address)
            while not self._stopped:
                command = await call.read()
                if command is grpc.aio.EOF:
                    log.info("txcheck %s ended the producer channel of topic %s", address, self.topic)
                    break
                kind = command.WhichOneof("command")
                if kind == "check":
                    checks: Sequence[txcheck_pb2.CheckTransactionState] = [command.check]
                elif kind == "check_batch":
                    checks = command.check_batch.checks
                else:
                    continue  # (end_result: only for ENDs sent up the channel, which the gateway does not)
                try:
                    self._on_checks(self, checks)
                except Exception:
                    log.exception("checks of topic %s could not be passed on", self.topic)
        except grpc.aio.AioRpcError as exc:
            err = TxmqError.from_rpc_error(exc)
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT or err.code == errors_pb2.CODE_ILLEGAL_PRODUCER_GROUP:
                raise _Refused(str(err)) from None
            log.info("producer channel of topic %s to %s broke: %s", self.topic, address, exc.code().name)
        except asyncio.InvalidStateError as exc:
            log.info("producer channel of topic %s to %s broke: %s", self.topic, address, exc)
        except TimeoutError:
            log.info("txcheck %s did not open a producer channel within %.1f s", address, self._open_timeout_s)
        finally:
            self.connected.clear()
            self.address = None
            call.cancel()
        return opened


# -- sessions and the registry -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """What the gateway knows of a client (a snapshot)."""

    client_id: str
    client_type: int
    group: str
    last_seen_ms: int  # on the hub's clock (now_ms)
    sessions: int


@dataclass(eq=False)
class _Client:
    client_id: str
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    last_seen_ms: int = 0
    sessions: set[_Session] = field(default_factory=set)
    #: With auth: the user whose calls first named this client id (``claim``).
    user: str | None = None


_STOP = None  # queued to end a session's stream


@dataclass(eq=False)
class _Session:
    """One Telemetry stream."""

    seq: int
    client_id: str
    out: asyncio.Queue[svc.TelemetryCommand | None] = field(default_factory=asyncio.Queue)
    links: dict[str, ProducerLink] = field(default_factory=dict)
    # Tasks of this session's stopped links that may still be closing their channel.
    closing: set[asyncio.Task[None]] = field(default_factory=set)
    reader: asyncio.Task[None] | None = None
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    stopped: bool = False

    def push(self, command: svc.TelemetryCommand, *, droppable: bool = False) -> bool:
        """Queue ``command`` for the client; False if the session ended or (``droppable``)
        too many commands wait already."""
        if self.stopped or (droppable and self.out.qsize() >= MAX_PENDING_COMMANDS):
            return False
        self.out.put_nowait(command)
        return True

    def tasks(self) -> list[asyncio.Task[None]]:
        found = [link.task for link in self.links.values() if link.task is not None]
        found += self.closing
        if self.reader is not None:
            found.append(self.reader)
        return found


class ClientHub:
    """Every client this gateway knows, by client id, and their Telemetry sessions."""

    def __init__(
        self,
        backend: Backend,
        settings: GatewaySettings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_client_gone: Callable[[str], None] | None = None,
        handles: HandleSigner | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings
        #: Signs the transaction ids of checks (the cluster's key, the one the producer
        #: core checks EndTransaction with; without one, a key of this hub alone).
        self.handles = handles or HandleSigner.ephemeral()
        self._clock = clock
        # Told when a client terminates or expires (the consumer core stops renewing
        # that client's messages).
        self._on_client_gone = on_client_gone
        self._clients: dict[str, _Client] = {}
        self._sessions: set[_Session] = set()
        self._seq = itertools.count(1)
        self._closed = False
        self._sweeper: asyncio.Task[None] | None = None
        # Tasks of stopped links still closing their channel (close waits for them).
        self._retiring: set[asyncio.Task[None]] = set()

    # -- registry ----------------------------------------------------------------------

    def heartbeat(self, client_id: str, client_type: int, group: str) -> None:
        """A Heartbeat: the client is alive."""
        if not client_id:
            return
        client = self._client(client_id)
        if client_type:
            client.client_type = client_type
        if group:
            client.group = group
        client.last_seen_ms = self._clock.now_ms()
        self._ensure_sweeper()

    def claim(self, client_id: str, username: str) -> None:
        """With auth, a client id belongs to the user whose call first named it, until the
        client is forgotten (terminated, or expired after ``client_expiry_ms`` without a
        sign of life). The id names a client's state here (its producer channels and the
        transaction checks they receive, its auto-renewed messages), so another user's
        call naming it is refused (FORBIDDEN): a user who guesses another's client id
        cannot end that client's channels, take its checks or release its messages."""
        if not client_id:
            return
        client = self._client(client_id)
        if client.user is None:
            client.user = username
            self._ensure_sweeper()
        elif client.user != username:
            raise GatewayError(
                Code.FORBIDDEN, f"client id {client_id[:128]!r} is in use by another user; each client needs its own"
            )

    def terminate(self, client_id: str, group: str) -> None:
        """NotifyClientTermination: close the client's producer channels and forget it
        (its open streams, if any, are still served until they end)."""
        client = self._clients.get(client_id)
        if client is None:
            return
        for session in client.sessions:
            self._stop_links(session, list(session.links))
        if not client.sessions:
            del self._clients[client_id]
        log.info("client %s (group %r) terminated", client_id, group)
        self._gone(client_id)

    def client(self, client_id: str) -> ClientInfo | None:
        """What is known of ``client_id``; None when it is unknown (or was forgotten)."""
        client = self._clients.get(client_id)
        if client is None:
            return None
        return ClientInfo(client.client_id, client.client_type, client.group, client.last_seen_ms, len(client.sessions))

    def clients(self) -> list[ClientInfo]:
        return [info for cid in list(self._clients) if (info := self.client(cid)) is not None]

    def producer_channels(self, client_id: str) -> dict[str, str | None]:
        """Topic -> txcheck address of each open-or-opening producer channel of the
        client's sessions (None while not open)."""
        client = self._clients.get(client_id)
        found: dict[str, str | None] = {}
        for session in client.sessions if client is not None else ():
            for topic, link in session.links.items():
                if found.get(topic) is None:
                    found[topic] = link.address
        return found

    def expire(self) -> list[str]:
        """Forget the clients with no stream and no heartbeat for ``client_expiry_ms``;
        their ids."""
        limit = self._clock.now_ms() - self.settings.client_expiry_ms
        gone = [c.client_id for c in self._clients.values() if not c.sessions and c.last_seen_ms < limit]
        for client_id in gone:
            del self._clients[client_id]
            log.info("client %s expired", client_id)
            self._gone(client_id)
        return gone

    def _gone(self, client_id: str) -> None:
        if self._on_client_gone is not None:
            try:
                self._on_client_gone(client_id)
            except Exception:
                log.exception("client-gone listener failed for %s", client_id)

    def _client(self, client_id: str) -> _Client:
        client = self._clients.get(client_id)
        if client is None:
            client = self._clients[client_id] = _Client(client_id, last_seen_ms=self._clock.now_ms())
        return client

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None and not self._closed:
            self._sweeper = asyncio.create_task(self._sweep(), name="txmq-gateway-client-expiry")

    async def _sweep(self) -> None:
        interval = min(self.settings.client_expiry_ms / 2000, MAX_SWEEP_INTERVAL_S)
        while True:
            await asyncio.sleep(interval)
            self.expire()

    # -- sessions ----------------------------------------------------------------------

    async def session(
        self,
        client_id: str,
        commands: AsyncIterator[svc.TelemetryCommand],
        *,
        check: Callable[[svc.TelemetryCommand], None] | None = None,
    ) -> AsyncIterator[svc.TelemetryCommand]:
        """One Telemetry stream: answers to the client's settings, and commands pushed
        to it (RecoverOrphanedTransactionCommand for a producer).

        ``check`` (the user's permissions, access.py) sees every command the client sends
        first: one it refuses (GatewayError) is answered with that status and otherwise
        ignored (refused settings open no producer channel and change nothing).

        Ends when the client ends its side of the stream, when ``close`` is called, or
        when the stream is cancelled. Close it with ``contextlib.aclosing`` so its
        producer channels close at once when the RPC is cancelled (they also close when
        reading ``commands`` fails)."""
        if self._closed:
            return
        session = self._open_session(client_id)
        self._start_reader(session, commands, check)
        try:
            while True:
                command = await session.out.get()
                if command is _STOP:
                    return
                yield command
        finally:
            await self._end_session(session)

    def _open_session(self, client_id: str) -> _Session:
        session = _Session(next(self._seq), client_id)
        self._sessions.add(session)
        if client_id:
            client = self._client(client_id)
            client.sessions.add(session)
            client.last_seen_ms = self._clock.now_ms()
        self._ensure_sweeper()
        log.debug("telemetry session %d of %s open", session.seq, client_id or "<no client id>")
        return session

    def _start_reader(
        self,
        session: _Session,
        commands: AsyncIterator[svc.TelemetryCommand],
        check: Callable[[svc.TelemetryCommand], None] | None = None,
    ) -> None:
        session.reader = asyncio.create_task(
            self._read(session, commands, check), name=f"txmq-gateway-telemetry-{session.seq}"
        )

    async def _read(
        self,
        session: _Session,
        commands: AsyncIterator[svc.TelemetryCommand],
        check: Callable[[svc.TelemetryCommand], None] | None = None,
    ) -> None:
        """The client's side of the stream; the session ends with it."""
        ended = "the client ended the stream"
        try:
            async for command in commands:
                kind = command.WhichOneof("command")
                if check is not None:
                    try:
                        check(command)
                    except GatewayError as err:
                        session.push(svc.TelemetryCommand(status=from_exception(err)))
                        continue
                if kind == "settings":
                    session.push(self._answer_settings(session, command.settings))
                else:
                    log.debug("telemetry session %d: ignoring a %s command", session.seq, kind)
        except asyncio.CancelledError:
            ended = "cancelled"
            raise
        except Exception as exc:  # noqa: BLE001 - the RPC broke (cancelled, deadline, connection lost)
            ended = f"{type(exc).__name__}: {exc}"
        finally:
            self._stop_session(session, ended)

    def _answer_settings(self, session: _Session, client_settings: pb.Settings) -> svc.TelemetryCommand:
        if not session.client_id:
            return svc.TelemetryCommand(
                status=status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id is missing from the metadata")
            )
        try:
            answer = server_settings(client_settings, self.settings)
        except GatewayError as err:
            log.info("settings of client %s refused: %s", session.client_id, err)
            return svc.TelemetryCommand(status=from_exception(err))
        session.client_type = client_settings.client_type
        client = self._client(session.client_id)
        client.client_type = client_settings.client_type
        client.last_seen_ms = self._clock.now_ms()
        if client_settings.client_type in CONSUMER_TYPES:
            client.group = client_settings.subscription.group.name
        if client_settings.client_type == pb.PRODUCER:
            self._sync_links(session, (t.name for t in client_settings.publishing.topics))
        return svc.TelemetryCommand(status=ok(), settings=answer)

    def _sync_links(self, session: _Session, topics: Iterable[str]) -> None:
        """Hold one producer channel per topic listed, and none for the others."""
        wanted = {t for t in topics if t}
        self._stop_links(session, [t for t in session.links if t not in wanted])
        for topic in sorted(wanted - session.links.keys()):
            link = ProducerLink(
                self.backend,
                topic=topic,
                client_id=session.client_id,
                on_checks=functools.partial(self._on_checks, session),
                open_timeout_s=self.backend.timeout_s,
            )
            session.links[topic] = link
            link.start()

    def _stop_links(self, session: _Session, topics: list[str]) -> None:
        for topic in topics:
            link = session.links.pop(topic)
            link.stop()
            task = link.task
            if task is not None and not task.done():
                session.closing.add(task)
                self._retiring.add(task)
                task.add_done_callback(session.closing.discard)
                task.add_done_callback(self._retiring.discard)

    def _on_checks(
        self, session: _Session, link: ProducerLink, checks: Sequence[txcheck_pb2.CheckTransactionState]
    ) -> None:
        """Transaction checks from txcheck (one, or a batch), down the v2 stream as one
        ``RecoverOrphanedTransactionCommand`` each: the official clients take them one
        by one (the message under its real topic; the transaction id carries what
        END_TRANSACTION needs, signed with ``handles``). Checks the session has no room
        for are dropped (the check loop asks again next round) with one line per batch."""
        if not checks:
            return
        if session.stopped:
            log.info(
                "%d check(s) of topic %s for %s dropped (first: %s): the session ended",
                len(checks),
                link.topic,
                session.client_id,
                checks[0].transaction_id,
            )
            return
        dropped: list[str] = []
        for check in checks:
            view = check.message
            topic = view.message.properties.get(PROPERTY_REAL_TOPIC) or view.message.topic or link.topic
            handle = TransactionHandle(
                store_id=check.store_id,
                commit_log_offset=check.commit_log_offset,
                queue_offset=check.tran_state_table_offset,
                transaction_id=check.transaction_id,
            )
            command = svc.TelemetryCommand(
                recover_orphaned_transaction_command=svc.RecoverOrphanedTransactionCommand(
                    message=to_v2_message(view, topic=topic), transaction_id=self.handles.encode(handle)
                )
            )
            if session.push(command, droppable=True):
                log.debug("check of transaction %s sent to %s", check.transaction_id, session.client_id)
            else:
                dropped.append(check.transaction_id)
        if dropped:
            log.warning(
                "%d of %d check(s) of topic %s for %s dropped (first: %s): %d commands wait already",
                len(dropped),
                len(checks),
                link.topic,
                session.client_id,
                dropped[0],
                MAX_PENDING_COMMANDS,
            )

    def _stop_session(self, session: _Session, reason: str) -> None:
        """End ``session`` now (idempotent): its stream ends, its channels close and the
        client no longer counts it."""
        if session.stopped:
            return
        session.stopped = True
        self._sessions.discard(session)
        session.out.put_nowait(_STOP)
        self._stop_links(session, list(session.links))
        if session.reader is not None and not session.reader.done() and session.reader is not asyncio.current_task():
            session.reader.cancel()
        client = self._clients.get(session.client_id)
        if client is not None:
            client.sessions.discard(session)
            client.last_seen_ms = self._clock.now_ms()
        log.debug("telemetry session %d of %s ended: %s", session.seq, session.client_id, reason)

    async def _end_session(self, session: _Session) -> None:
        # Everything that matters happens synchronously first: gRPC may cancel a handler
        # again while its clean-up awaits.
        self._stop_session(session, "the stream ended")
        pending = [t for t in session.tasks() if not t.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=CLOSE_WAIT_S)
            if late:
                log.warning(
                    "telemetry session %d: %d task(s) still closing after %s s", session.seq, len(late), CLOSE_WAIT_S
                )

    async def close(self) -> None:
        """End every session and producer channel (the gateway is stopping); waits at
        most CLOSE_WAIT_S for them."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        closing = list(self._sessions)
        for session in closing:
            self._stop_session(session, "the gateway is stopping")
        tasks = [t for t in self._retiring if not t.done()]
        tasks += [s.reader for s in closing if s.reader is not None and not s.reader.done()]
        if self._sweeper is not None:
            tasks.append(self._sweeper)
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
            if late:
                log.warning("%d producer channel(s) still closing after %s s", len(late), CLOSE_WAIT_S)
        self._sweeper = None
