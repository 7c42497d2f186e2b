"""The gateway's Telemetry sessions (txmq_gateway.telemetry) against a fake txcheck: a
real in-process gRPC server implementing ``txmq.v1.Transaction/ProducerChannel``, found
through a fake cluster view, so the producer channels are real gRPC streams."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest
from support.clock import ManualClock

from txmq.v1 import common_pb2, txcheck_pb2, txcheck_pb2_grpc
from txmq_gateway.backend import Backend
from txmq_gateway.convert import TransactionHandle
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.telemetry import (
    CONSUMER_RETRY_DELAYS_MS,
    ClientHub,
    ProducerLink,
    server_settings,
)
from txmq_gateway.v2 import Code, pb, svc, svc_grpc

GUARD_S = 10.0  # a hang guard, not a timing claim
REFUSED_GROUP = "refused-topic"


# -- a fake txcheck ---------------------------------------------------------------------


@dataclass(eq=False)
class FakeChannel:
    """One ProducerChannel stream as the fake txcheck holds it."""

    hello: txcheck_pb2.ProducerHello
    outgoing: asyncio.Queue[txcheck_pb2.ServerCommand | None] = field(default_factory=asyncio.Queue)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def check(self, check: txcheck_pb2.CheckTransactionState) -> None:
        self.outgoing.put_nowait(txcheck_pb2.ServerCommand(check=check))

    def end(self) -> None:
        """End the stream from the server's side (as a txcheck restart does)."""
        self.outgoing.put_nowait(None)


class FakeTxcheck(txcheck_pb2_grpc.TransactionServicer):
    """Registers each channel after its hello (initial metadata, as txcheck does), sends
    what tests queue, and notes when the producer's side goes away."""

    def __init__(self) -> None:
        self.opened: asyncio.Queue[FakeChannel] = asyncio.Queue()

    async def ProducerChannel(
        self, request_iterator: AsyncIterator[txcheck_pb2.ProducerCommand], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[txcheck_pb2.ServerCommand]:
        first = await anext(aiter(request_iterator))
        assert first.WhichOneof("command") == "hello"
        if first.hello.producer_group == REFUSED_GROUP:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "illegal producer group")
        channel = FakeChannel(first.hello)
        await context.send_initial_metadata((("txmq-channel", "open"),))
        self.opened.put_nowait(channel)

        async def drain() -> None:
            async for _ in request_iterator:
                pass

        reader = asyncio.create_task(drain())
        getter: asyncio.Future[txcheck_pb2.ServerCommand | None] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(channel.outgoing.get())
                done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    return
                command = getter.result()
                if command is None:
                    return
                yield command
        finally:
            # Before any await: grpc may cancel a handler again while its finally awaits.
            channel.closed.set()
            for task in (reader, getter):
                if task is not None:
                    task.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def next_channel(self) -> FakeChannel:
        return await asyncio.wait_for(self.opened.get(), GUARD_S)


class FakeCluster:
    """The part of ClusterView that Backend uses for txcheck: live endpoints by kind."""

    def __init__(self) -> None:
        self.txcheck: list[str] = []

    def endpoints(self, kind: int = common_pb2.SERVICE_KIND_UNSPECIFIED) -> list[common_pb2.Endpoint]:
        if kind != common_pb2.SERVICE_KIND_TXCHECK:
            return []
        return [
            common_pb2.Endpoint(kind=kind, instance_id=f"txcheck-{n}", address=address)
            for n, address in enumerate(self.txcheck)
        ]


@dataclass
class Env:
    txcheck: FakeTxcheck
    cluster: FakeCluster
    backend: Backend
    address: str
    settings: GatewaySettings


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    txcheck = FakeTxcheck()
    server = grpc.aio.server()
    txcheck_pb2_grpc.add_TransactionServicer_to_server(txcheck, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{port}"
    cluster = FakeCluster()
    cluster.txcheck.append(address)
    backend = Backend(cluster, timeout_ms=5_000)  # type: ignore[arg-type]
    try:
        yield Env(txcheck, cluster, backend, address, GatewaySettings())
    finally:
        await backend.close()
        await server.stop(None)


@pytest.fixture
async def hub(env: Env) -> AsyncIterator[ClientHub]:
    h = ClientHub(env.backend, env.settings)
    try:
        yield h
    finally:
        await h.close()


# -- a v2 client's side of a session, driven directly -------------------------------------


class Stream:
    """What a client sends on its Telemetry stream, and what it gets back."""

    def __init__(self, hub: ClientHub, client_id: str) -> None:
        self._sent: asyncio.Queue[svc.TelemetryCommand | None] = asyncio.Queue()
        self.replies = hub.session(client_id, self._commands())

    async def _commands(self) -> AsyncIterator[svc.TelemetryCommand]:
        while (command := await self._sent.get()) is not None:
            yield command

    def send(self, settings: pb.Settings) -> None:
        self._sent.put_nowait(svc.TelemetryCommand(settings=settings))

    def end(self) -> None:
        """The client ends its side of the stream."""
        self._sent.put_nowait(None)

    async def recv(self) -> svc.TelemetryCommand:
        return await asyncio.wait_for(anext(self.replies), GUARD_S)

    async def ask(self, settings: pb.Settings) -> svc.TelemetryCommand:
        self.send(settings)
        return await self.recv()

    async def assert_ended(self) -> None:
        with pytest.raises(StopAsyncIteration):
            await self.recv()

    async def aclose(self) -> None:
        await self.replies.aclose()


@contextlib.asynccontextmanager
async def stream(hub: ClientHub, client_id: str) -> AsyncIterator[Stream]:
    s = Stream(hub, client_id)
    try:
        yield s
    finally:
        await s.aclose()


def producer_settings(*topics: str, request_timeout_s: int = 3) -> pb.Settings:
    """Settings as rocketmq-python-client's Producer.sync_setting_req builds them."""
    settings = pb.Settings(
        client_type=pb.PRODUCER,
        publishing=pb.Publishing(
            topics=[pb.Resource(name=t) for t in topics], max_body_size=128 * 1024 * 1024, validate_message_type=True
        ),
        metric=pb.Metric(on=False),
    )
    settings.request_timeout.seconds = request_timeout_s
    return settings


def consumer_settings(client_type: int, group: str, topic: str, *, long_polling_s: int | None = None) -> pb.Settings:
    settings = pb.Settings(
        client_type=client_type,
        subscription=pb.Subscription(
            group=pb.Resource(name=group),
            subscriptions=[
                pb.SubscriptionEntry(
                    topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="a||b")
                )
            ],
        ),
    )
    settings.request_timeout.seconds = 3
    if long_polling_s is not None:
        settings.subscription.long_polling_timeout.seconds = long_polling_s
    return settings


def half_message_check(topic: str) -> txcheck_pb2.CheckTransactionState:
    """A check as txcheck's check loop sends it: the half message under its real topic,
    its system properties still attached."""
    view = common_pb2.MessageView(
        message=common_pb2.Message(
            topic=topic,
            queue_id=2,
            body=b"order 42",
            tags="created",
            keys=["order-42"],
            unique_id="7F0000010001ABCDEF0123456789",
            born_timestamp_ms=1_700_000_000_123,
            properties={
                "REAL_TOPIC": topic,
                "REAL_QID": "2",
                "TRAN_MSG": "true",
                "PGROUP": topic,
                "__RMQ_MESSAGE_TYPE": "TRANSACTION",
                "region": "eu",
            },
        ),
        queue_offset=17,
        commit_log_offset=4096,
        store_timestamp_ms=1_700_000_000_200,
        store_host="10.0.0.5:10911",
        store_id="store-a",
    )
    return txcheck_pb2.CheckTransactionState(
        message=view,
        transaction_id="7F0000010001ABCDEF0123456789",
        commit_log_offset=4096,
        tran_state_table_offset=17,
        store_id="store-a",
    )


# -- settings ---------------------------------------------------------------------------


async def test_producer_settings_are_answered_with_limits_and_open_a_channel(env: Env, hub: ClientHub) -> None:
    async with stream(hub, "client-p1") as s:
        answer = await s.ask(producer_settings("tx-orders"))
        assert answer.status.code == Code.OK
        assert answer.HasField("settings")
        got = answer.settings
        assert got.client_type == pb.PRODUCER
        assert got.publishing.max_body_size == env.settings.max_body_size_bytes
        assert got.publishing.validate_message_type
        assert [t.name for t in got.publishing.topics] == ["tx-orders"]
        assert got.request_timeout.seconds == 3
        assert got.backoff_policy.max_attempts == 3
        assert got.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
        exp = got.backoff_policy.exponential_backoff
        assert (exp.initial.ToMilliseconds(), exp.max.ToMilliseconds(), exp.multiplier) == (10, 1_000, 2.0)

        channel = await env.txcheck.next_channel()
        assert channel.hello == txcheck_pb2.ProducerHello(
            producer_group="tx-orders", client_id="client-p1", accepts_check_batches=True
        )

        # settings are re-sent periodically: each is answered, no second channel opens
        again = await s.ask(producer_settings("tx-orders"))
        assert again.status.code == Code.OK and again.settings.publishing.max_body_size > 0
        channel.check(half_message_check("tx-orders"))  # a round trip: the channel is open
        assert (await s.recv()).HasField("recover_orphaned_transaction_command")
        assert hub.producer_channels("client-p1") == {"tx-orders": env.address}
        assert env.txcheck.opened.empty()
        info = hub.client("client-p1")
        assert info is not None and info.client_type == pb.PRODUCER and info.sessions == 1


async def test_consumer_settings(env: Env, hub: ClientHub) -> None:
    async with stream(hub, "client-c1") as s:
        answer = await s.ask(consumer_settings(pb.SIMPLE_CONSUMER, "g-orders", "orders", long_polling_s=60))
        assert answer.status.code == Code.OK
        sub = answer.settings.subscription
        assert sub.group.name == "g-orders"
        assert [e.topic.name for e in sub.subscriptions] == ["orders"]
        assert sub.subscriptions[0].expression.expression == "a||b"
        assert sub.HasField("fifo") and not sub.fifo
        assert sub.receive_batch_size == env.settings.max_receive_batch_size
        # the client asked for 60 s: cut to the gateway's longest
        assert sub.long_polling_timeout.ToMilliseconds() == env.settings.max_long_polling_timeout_ms
        assert answer.settings.request_timeout.seconds == 3
        policy = answer.settings.backoff_policy
        assert policy.max_attempts == env.settings.max_delivery_attempts
        assert policy.WhichOneof("strategy") == "customized_backoff"
        assert [d.ToMilliseconds() for d in policy.customized_backoff.next] == list(CONSUMER_RETRY_DELAYS_MS)
        info = hub.client("client-c1")
        assert info is not None and info.group == "g-orders" and info.client_type == pb.SIMPLE_CONSUMER
        assert hub.producer_channels("client-c1") == {}
    assert env.txcheck.opened.empty()


def test_consumer_long_polling_timeout() -> None:
    settings = GatewaySettings(max_long_polling_timeout_ms=30_000)
    simple = server_settings(consumer_settings(pb.SIMPLE_CONSUMER, "g", "t", long_polling_s=5), settings)
    assert simple.subscription.long_polling_timeout.ToMilliseconds() == 5_000
    # a push consumer sends none and polls as long as told
    push = server_settings(consumer_settings(pb.PUSH_CONSUMER, "g", "t"), settings)
    assert push.subscription.long_polling_timeout.ToMilliseconds() == 30_000
    assert push.backoff_policy.max_attempts == settings.max_delivery_attempts


@pytest.mark.parametrize(
    "client_type", [pb.CLIENT_TYPE_UNSPECIFIED, pb.PULL_CONSUMER, pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER, 99]
)
async def test_unknown_client_type_is_refused(env: Env, hub: ClientHub, client_type: int) -> None:
    async with stream(hub, "client-u1") as s:
        settings = producer_settings("tx-orders")
        settings.client_type = client_type
        answer = await s.ask(settings)
        assert answer.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
        assert not answer.HasField("settings")
        # the stream stays usable
        answer = await s.ask(producer_settings())
        assert answer.status.code == Code.OK
    assert env.txcheck.opened.empty()


async def test_consumer_without_group_and_client_without_id(hub: ClientHub) -> None:
    async with stream(hub, "client-c2") as s:
        answer = await s.ask(consumer_settings(pb.PUSH_CONSUMER, "", "orders"))
        assert answer.status.code == Code.ILLEGAL_CONSUMER_GROUP
    async with stream(hub, "") as s:
        answer = await s.ask(producer_settings("tx-orders"))
        assert answer.status.code == Code.CLIENT_ID_REQUIRED


# -- transaction checks -----------------------------------------------------------------


async def test_check_becomes_recover_orphaned_transaction_command(env: Env, hub: ClientHub) -> None:
    async with stream(hub, "client-p2") as s:
        await s.ask(producer_settings("tx-pay"))
        channel = await env.txcheck.next_channel()
        check = half_message_check("tx-pay")
        channel.check(check)

        command = await s.recv()
        assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
        recover = command.recover_orphaned_transaction_command
        assert hub.handles.decode(recover.transaction_id) == TransactionHandle(
            store_id="store-a", commit_log_offset=4096, queue_offset=17, transaction_id=check.transaction_id
        )
        message = recover.message
        assert message.topic.name == "tx-pay"
        assert message.body == b"order 42"
        assert message.system_properties.message_id == check.transaction_id
        assert message.system_properties.message_type == pb.TRANSACTION
        assert message.system_properties.tag == "created"
        assert list(message.system_properties.keys) == ["order-42"]
        assert dict(message.user_properties) == {"region": "eu"}


async def test_a_check_batch_becomes_one_command_per_check(env: Env, hub: ClientHub) -> None:
    """txcheck sends checks in batches to channels whose hello accepts them (the
    gateway's does); the official client gets one RecoverOrphanedTransaction each."""
    async with stream(hub, "client-p2b") as s:
        await s.ask(producer_settings("tx-pay"))
        channel = await env.txcheck.next_channel()
        assert channel.hello.accepts_check_batches
        checks = []
        for i in range(3):
            c = half_message_check("tx-pay")
            c.transaction_id = c.message.message.unique_id = f"7F0000010001ABCDEF01234567{i:02d}"
            c.commit_log_offset = 4096 + i
            checks.append(c)
        channel.outgoing.put_nowait(
            txcheck_pb2.ServerCommand(check_batch=txcheck_pb2.CheckTransactionBatch(checks=checks))
        )
        got = [(await s.recv()).recover_orphaned_transaction_command for _ in range(3)]
        handles = [hub.handles.decode(r.transaction_id) for r in got]
        assert [h.transaction_id for h in handles] == [c.transaction_id for c in checks]
        assert [h.commit_log_offset for h in handles] == [4096, 4097, 4098]


async def test_ending_the_session_closes_its_channels(env: Env, hub: ClientHub) -> None:
    s = Stream(hub, "client-p3")
    await s.ask(producer_settings("tx-a", "tx-b"))
    channels = [await env.txcheck.next_channel(), await env.txcheck.next_channel()]
    assert sorted(c.hello.producer_group for c in channels) == ["tx-a", "tx-b"]
    s.end()  # the client ends its side: the stream ends, the channels close
    await s.assert_ended()
    for channel in channels:
        await asyncio.wait_for(channel.closed.wait(), GUARD_S)
    info = hub.client("client-p3")
    assert info is not None and info.sessions == 0

    # a stream closed by the server side (aclose, as the servicer does when the RPC ends)
    s = Stream(hub, "client-p3")
    await s.ask(producer_settings("tx-a"))
    channel = await env.txcheck.next_channel()
    await s.aclose()
    await asyncio.wait_for(channel.closed.wait(), GUARD_S)
    assert hub.producer_channels("client-p3") == {}


async def test_topics_added_and_dropped_by_later_settings(env: Env, hub: ClientHub) -> None:
    async with stream(hub, "client-p4") as s:
        await s.ask(producer_settings("tx-a"))
        a = await env.txcheck.next_channel()
        await s.ask(producer_settings("tx-b"))
        b = await env.txcheck.next_channel()
        assert b.hello.producer_group == "tx-b"
        await asyncio.wait_for(a.closed.wait(), GUARD_S)
        assert not b.closed.is_set()
        assert list(hub.producer_channels("client-p4")) == ["tx-b"]


async def test_channel_reopens_when_txcheck_ends_it(env: Env, hub: ClientHub) -> None:
    async with stream(hub, "client-p5") as s:
        await s.ask(producer_settings("tx-r"))
        first = await env.txcheck.next_channel()
        first.end()  # a txcheck restart
        await asyncio.wait_for(first.closed.wait(), GUARD_S)
        second = await env.txcheck.next_channel()
        assert second.hello == first.hello
        # checks flow on the new channel
        second.check(half_message_check("tx-r"))
        command = await s.recv()
        assert command.recover_orphaned_transaction_command.message.topic.name == "tx-r"


async def test_channel_waits_for_a_live_txcheck(env: Env, hub: ClientHub) -> None:
    env.cluster.txcheck.clear()
    async with stream(hub, "client-p6") as s:
        await s.ask(producer_settings("tx-w"))
        assert hub.producer_channels("client-p6") == {"tx-w": None}
        env.cluster.txcheck.append(env.address)  # a replica registers
        channel = await env.txcheck.next_channel()
        assert channel.hello.producer_group == "tx-w"


async def test_a_refused_channel_is_not_retried(env: Env) -> None:
    checks: list[txcheck_pb2.CheckTransactionState] = []
    link = ProducerLink(
        env.backend,
        topic=REFUSED_GROUP,
        client_id="client-x",
        on_checks=lambda _, cs: checks.extend(cs),
        open_timeout_s=5,
    )
    link.start()
    assert link.task is not None
    await asyncio.wait_for(link.task, GUARD_S)  # gives up instead of retrying forever
    assert link.opens == 0 and not link.connected.is_set()


# -- registry ---------------------------------------------------------------------------


async def test_terminate_closes_the_producer_channels(env: Env, hub: ClientHub) -> None:
    async with stream(hub, "client-p7") as s:
        await s.ask(producer_settings("tx-t"))
        channel = await env.txcheck.next_channel()
        hub.terminate("client-p7", "")
        await asyncio.wait_for(channel.closed.wait(), GUARD_S)
        assert hub.producer_channels("client-p7") == {}


async def test_heartbeats_and_expiry(env: Env) -> None:
    clock = ManualClock()
    hub = ClientHub(env.backend, GatewaySettings(client_expiry_ms=60_000), clock=clock)
    try:
        hub.heartbeat("client-h1", pb.SIMPLE_CONSUMER, "g1")
        info = hub.client("client-h1")
        assert info is not None and (info.client_type, info.group, info.sessions) == (pb.SIMPLE_CONSUMER, "g1", 0)
        clock.advance(59_000)
        assert hub.expire() == []
        hub.heartbeat("client-h1", pb.SIMPLE_CONSUMER, "g1")
        clock.advance(59_000)
        assert hub.expire() == []
        clock.advance(2_000)
        assert hub.expire() == ["client-h1"]
        assert hub.client("client-h1") is None

        # a client holding a stream does not expire; it does once the stream is gone
        async with stream(hub, "client-h2") as s:
            await s.ask(producer_settings())
            clock.advance(3_600_000)
            assert hub.expire() == []
        assert hub.expire() == []  # last seen when its stream ended
        clock.advance(61_000)
        assert hub.expire() == ["client-h2"]

        hub.heartbeat("client-h3", pb.PRODUCER, "")
        hub.terminate("client-h3", "")
        assert hub.client("client-h3") is None
    finally:
        await hub.close()


async def test_close_ends_sessions_and_channels(env: Env) -> None:
    hub = ClientHub(env.backend, env.settings)
    s = Stream(hub, "client-p8")
    try:
        await s.ask(producer_settings("tx-c"))
        channel = await env.txcheck.next_channel()
        await asyncio.wait_for(hub.close(), GUARD_S)
        await s.assert_ended()
        await asyncio.wait_for(channel.closed.wait(), GUARD_S)
        # a session opened after close ends at once
        late = Stream(hub, "client-p9")
        await late.assert_ended()
    finally:
        await s.aclose()


# -- over gRPC: a cancelled Telemetry call ----------------------------------------------


class TelemetryOnly(svc_grpc.MessagingServiceServicer):
    """A servicer shaped as the gateway's: the session closed with the RPC."""

    def __init__(self, hub: ClientHub) -> None:
        self.hub = hub

    async def Telemetry(
        self, request_iterator: AsyncIterator[svc.TelemetryCommand], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[svc.TelemetryCommand]:
        client_id = dict(context.invocation_metadata() or ()).get("x-mq-client-id", "")
        async with contextlib.aclosing(self.hub.session(str(client_id), request_iterator)) as commands:
            async for command in commands:
                yield command


async def test_cancelled_telemetry_call_closes_the_channel(env: Env, hub: ClientHub) -> None:
    server = grpc.aio.server()
    svc_grpc.add_MessagingServiceServicer_to_server(TelemetryOnly(hub), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        call = svc_grpc.MessagingServiceStub(channel).Telemetry(metadata=(("x-mq-client-id", "client-g1"),))
        await call.write(svc.TelemetryCommand(settings=producer_settings("tx-g")))
        answer = await asyncio.wait_for(call.read(), GUARD_S)
        assert answer.status.code == Code.OK
        assert answer.settings.publishing.max_body_size == env.settings.max_body_size_bytes
        producer = await env.txcheck.next_channel()
        assert producer.hello.client_id == "client-g1"

        producer.check(half_message_check("tx-g"))
        recover = await asyncio.wait_for(call.read(), GUARD_S)
        assert recover.recover_orphaned_transaction_command.message.topic.name == "tx-g"

        call.cancel()
        await asyncio.wait_for(producer.closed.wait(), GUARD_S)
        info = hub.client("client-g1")
        assert info is not None and info.sessions == 0
    finally:
        await channel.close()
        await server.stop(None)


def test_terminated_and_expired_clients_are_reported_gone() -> None:
    from txmq_gateway.settings import GatewaySettings
    from txmq_gateway.telemetry import ClientHub

    clock = ManualClock()
    gone: list[str] = []
    hub = ClientHub(None, GatewaySettings(client_expiry_ms=1_000), clock=clock, on_client_gone=gone.append)  # type: ignore[arg-type]
    hub._ensure_sweeper = lambda: None  # type: ignore[method-assign] - no event loop needed here
    hub.heartbeat("a", 3, "G")
    hub.heartbeat("b", 3, "G")
    hub.terminate("a", "G")
    assert gone == ["a"]
    clock.advance(2_000)
    assert hub.expire() == ["b"] and gone == ["a", "b"]
