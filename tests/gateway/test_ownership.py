"""Consumer-group ownership across gateway replicas (txmq_gateway/ownership.py).

- Owner records and the mirrored directory, the metadata of a forwarded call (no etcd).
- ``GroupOwnership`` against the real etcd of the session (private prefix): claim,
  forward target, a forwarded call never served by a non-owner, loss of the key, lapse
  of the lease by the clock, takeover of a previous incarnation's key, clean handover.
- Two gateways in this process (real gRPC servers, real etcd, one in-memory store shared
  by both consumer cores): the group's messages are split between receives through
  either gateway without overlap, acks and changes work through either, the client's
  signature is checked by the owner, a client cannot make a non-owner serve, an
  abandoned forwarded receive releases its messages at the owner, and when the owner
  loses the group the other gateway serves it from the committed offsets.
- Two gateway processes on one private cluster with the official RocketMQ client
  (tests/gateway/rmq_scenarios/consume_group.py): two members of one group on different
  gateways get every message exactly once and ack through their own gateway; after a
  kill -9 of the owning gateway the other one takes the group over and delivers the
  messages that were left un-acked.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from support import (
    EtcdServer,
    LocalCluster,
    ServiceProcess,
    free_port,
    new_local_cluster,
)
from support.clock import ManualClock
from support.processes import private_prefix
from support.scratch import scoped_dir
from support.scripts import Background, Run

from gateway.test_consumer_core import FakeBackend
from gateway.test_official_client import GatewayEnv, Scenarios, wait_for
from txmq import Admin
from txmq_gateway.auth import Authenticator, SingleKey, sign
from txmq_gateway.consumer import SimpleConsumerCore
from txmq_gateway.consumer_receipts import ReceiptHandle
from txmq_gateway.convert import HandleSigner, duration
from txmq_gateway.ownership import (
    FORWARDED_HEADER,
    Forwarder,
    GroupOwnership,
    GroupRouter,
    Owner,
    OwnerDirectory,
    forward_metadata,
    groups_prefix,
    is_forwarded,
)
from txmq_gateway.servicer import MessagingServicer, add_messaging_servicer
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError
from txmq_gateway.telemetry import ClientHub
from txmq_gateway.v2 import Code, pb, svc, svc_grpc
from txmq_runtime.etcd import etcd_client
from txmq_runtime.lease import VALID_FRACTION

TTL_MS = 2_000
GROUP = "G"
TOPIC = "T"
AK, SK = "ak", "sk"
#: The cluster's handle key: every gateway of a cluster holds the same one.
SIGNER = HandleSigner.ephemeral()


async def eventually(what: str, predicate: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# -- records, directory, metadata (no etcd) ----------------------------------------------


def test_owner_record_round_trip_and_refusals() -> None:
    owner = Owner("gw-1", "10.0.0.1:8081", 0x1234ABCD)
    assert Owner.decode(owner.encode()) == owner
    assert json.loads(owner.encode())["lease"] == "1234abcd"
    for bad in (b"", b"{", b"[]", b'{"instance_id": "x"}', b'{"instance_id": "", "address": "a", "lease": "1"}'):
        assert Owner.decode(bad) is None


def test_directory_mirrors_groups_and_reports_changes() -> None:
    prefix = groups_prefix("/p")
    seen: list[tuple[str, Owner | None]] = []
    d = OwnerDirectory(prefix, on_change=lambda g, o: seen.append((g, o)))
    a, b = Owner("a", "h:1", 1), Owner("b", "h:2", 2)
    # Group names are percent-encoded into one key segment (any name, even with '/').
    d.reset([(prefix + "G%2Fx", a.encode()), (prefix + "x/y", b.encode()), (prefix + "bad", b"junk")])
    assert d.owner("G/x") == a and d.groups() == {"G/x": a}
    d.put(prefix + "G%2Fx", a.encode())  # unchanged: no event
    d.put(prefix + "H", b.encode())
    d.delete(prefix + "G%2Fx")
    d.reset([(prefix + "H", a.encode())])
    assert seen == [("G/x", a), ("H", b), ("G/x", None), ("H", a)]


def test_forwarded_metadata_keeps_the_clients_headers_and_marks_the_call() -> None:
    client = [
        ("user-agent", "grpc-python"),
        ("x-mq-client-id", "c1"),
        ("authorization", "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=ab"),
        ("x-mq-date-time", "20250101T000000Z"),
        ("x-bin", b"\x00"),
        (FORWARDED_HEADER, "spoofed"),
    ]
    out = forward_metadata(client, "gw-b")
    assert out == [*client[1:5], (FORWARDED_HEADER, "gw-b")]
    assert is_forwarded(out) and not is_forwarded(client[:5]) and not is_forwarded(None)


def test_receipt_handles_name_the_owner() -> None:
    h = ReceiptHandle("e1", "s1", TOPIC, 0, 5, 7, "gw-a")
    assert ReceiptHandle.decode(h.encode(SIGNER), SIGNER) == h
    plain = ReceiptHandle("e1", "s1", TOPIC, 0, 5, 7)
    assert ReceiptHandle.decode(plain.encode(SIGNER), SIGNER).owner == ""


# -- GroupOwnership against etcd -----------------------------------------------------------


@pytest.fixture
async def etcd_conn(etcd: EtcdServer) -> AsyncIterator[Any]:
    async with etcd_client(etcd.endpoint) as client:
        yield client


def ownership(client: Any, prefix: str, name: str, lost: list[tuple[str, str]], **kw: Any) -> GroupOwnership:
    return GroupOwnership(
        client,
        etcd_prefix=prefix,
        instance_id=name,
        address=f"{name}.example:8081",
        ttl_ms=TTL_MS,
        on_lost=lambda g: lost.append((name, g)),
        **kw,
    )


async def test_first_caller_claims_others_forward_and_a_forwarded_call_is_never_served_twice(etcd_conn: Any) -> None:
    prefix, lost = private_prefix(), []
    a, b = ownership(etcd_conn, prefix, "a", lost), ownership(etcd_conn, prefix, "b", lost)
    await a.start(timeout_s=5)
    await b.start(timeout_s=5)
    try:
        assert await a.route(GROUP) is None and a.owns(GROUP)
        stored = Owner.decode((await etcd_conn.get(a.key(GROUP).encode())).value)
        assert stored == Owner("a", "a.example:8081", a.lease_id)
        # b learns the owner from etcd in the claim even before its mirror has it.
        assert await b.route(GROUP) == stored and not b.owns(GROUP)
        await eventually("b's mirror", lambda: b.directory.owner(GROUP) == stored)
        assert await b.route(GROUP) == stored
        with pytest.raises(GatewayError) as refused:
            await b.route(GROUP, forwarded=True)  # a forwarded call b must not serve
        assert refused.value.code == Code.INTERNAL_SERVER_ERROR and "served by gateway a" in refused.value.message
        assert await a.route(GROUP, forwarded=True) is None  # the owner serves forwarded calls
        assert await a.route("") is None and "" not in a.owned  # refused by the consumer core
        # A forwarded call for an unowned group is claimed by its receiver.
        assert await b.route("H", forwarded=True) is None and b.owns("H")

        # A clean stop revokes the lease: the groups move at the next call, with a
        # greater epoch (the fencing token of the ownership).
        epoch_a = a.epoch(GROUP)
        assert epoch_a is not None and b.epoch(GROUP) is None
        await a.close()
        assert await etcd_conn.get(a.key(GROUP).encode()) is None
        assert await b.route(GROUP) is None and b.owns(GROUP)
        assert (b.epoch(GROUP) or 0) > epoch_a and a.epoch(GROUP) is None
        assert lost == []  # closing is not losing: the consumer core is closed with it
    finally:
        await a.close()
        await b.close()


async def test_an_owner_whose_key_goes_drops_the_group_and_the_other_takes_it(etcd_conn: Any) -> None:
    prefix, lost = private_prefix(), []
    a, b = ownership(etcd_conn, prefix, "a", lost), ownership(etcd_conn, prefix, "b", lost)
    await a.start(timeout_s=5)
    await b.start(timeout_s=5)
    try:
        assert await a.route(GROUP) is None
        # A mirror that falls behind (re-read without the key) is checked against etcd:
        # the key is still a's, so a keeps the group.
        a.directory.reset([])
        await asyncio.sleep(0.3)
        assert a.owns(GROUP) and lost == []

        await etcd_conn.delete(a.key(GROUP).encode())  # as when a's lease expires
        await eventually("a to drop the group", lambda: lost == [("a", GROUP)])
        assert not a.owns(GROUP)
        assert await b.route(GROUP) is None
        await eventually("a's mirror", lambda: a.directory.owner(GROUP) is not None)
        assert await a.route(GROUP) == Owner("b", "b.example:8081", b.lease_id)
    finally:
        await a.close()
        await b.close()


async def test_an_owner_that_cannot_refresh_its_lease_stops_before_it_can_expire(etcd_conn: Any) -> None:
    prefix, lost, clock = private_prefix(), [], ManualClock()
    a = ownership(etcd_conn, prefix, "a", lost, clock=clock)
    await a.start(timeout_s=5, keep_alive=False)
    try:
        assert await a.route(GROUP) is None
        ttl_s = a.ttl_s
        clock.advance(int(ttl_s * 1000 * VALID_FRACTION) - 10)
        assert a.owns(GROUP)
        clock.advance(20)  # etcd keeps the key a third of the TTL longer
        assert not a.owns(GROUP) and lost == [("a", GROUP)]
        with pytest.raises(GatewayError):
            await a.route(GROUP)  # cannot claim on a lease it cannot vouch for
        await a.tick()  # refreshed: the key is still a's, so the next call re-adopts it
        assert await a.route(GROUP) is None and a.owns(GROUP)
        # The timer does the same without a call (check_validity).
        clock.advance(ttl_s * 1000)
        a.check_validity()
        assert GROUP not in a.owned and lost == [("a", GROUP), ("a", GROUP)]
    finally:
        await a.close()


async def test_a_restarted_instance_takes_over_its_previous_incarnations_key(etcd_conn: Any) -> None:
    prefix, lost = private_prefix(), []
    old_lease = await etcd_conn.lease(30)
    other_lease = await etcd_conn.lease(30)
    try:
        key = groups_prefix(prefix) + GROUP
        await etcd_conn.put(key.encode(), Owner("a", "old:1", old_lease.id).encode(), lease=old_lease.id)
        await etcd_conn.put((key + "2").encode(), Owner("x", "x:1", other_lease.id).encode(), lease=other_lease.id)
        a = ownership(etcd_conn, prefix, "a", lost)
        await a.start(timeout_s=5)
        try:
            old_revision = (await etcd_conn.get(key.encode())).mod_revision
            assert await a.route(GROUP) is None and a.owns(GROUP)
            assert Owner.decode((await etcd_conn.get(key.encode())).value) == Owner("a", "a.example:8081", a.lease_id)
            assert (a.epoch(GROUP) or 0) > old_revision  # the old incarnation's writes are older
            assert await a.route(GROUP + "2") == Owner("x", "x:1", other_lease.id)  # another live owner
        finally:
            await a.close()
    finally:
        await etcd_conn.revoke_lease(old_lease.id)
        await etcd_conn.revoke_lease(other_lease.id)


# -- two gateways in this process ----------------------------------------------------------


def signed(client_id: str, secret: str = SK) -> list[tuple[str, str]]:
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return [
        ("x-mq-client-id", client_id),
        ("x-mq-date-time", date),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={AK}, SignedHeaders=x-mq-date-time, Signature={sign(secret.encode(), date)}",
        ),
    ]


@dataclass
class Gateway:
    name: str
    address: str
    server: grpc.aio.Server
    consumer: SimpleConsumerCore
    clients: ClientHub
    router: GroupRouter
    channel: grpc.aio.Channel

    @property
    def ownership(self) -> GroupOwnership:
        return self.router.ownership

    @property
    def stub(self) -> svc_grpc.MessagingServiceStub:
        return svc_grpc.MessagingServiceStub(self.channel)

    async def receive(self, n: int, client_id: str = "c1", **kw: Any) -> tuple[list[pb.Message], pb.Status]:
        request = svc.ReceiveMessageRequest(
            group=pb.Resource(name=GROUP),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=n,
            invisible_duration=duration(30_000),
            long_polling_timeout=duration(0),
        )
        frames = [
            f
            async for f in self.stub.ReceiveMessage(
                request, metadata=kw.get("metadata") or signed(client_id), timeout=10
            )
        ]
        return [f.message for f in frames if f.HasField("message")], frames[-1].status

    async def ack(self, message: pb.Message, handle: str | None = None, client_id: str = "c1") -> pb.Status:
        request = svc.AckMessageRequest(
            group=pb.Resource(name=GROUP),
            topic=pb.Resource(name=TOPIC),
            entries=[
                svc.AckMessageEntry(
                    message_id=message.system_properties.message_id,
                    receipt_handle=handle or message.system_properties.receipt_handle,
                )
            ],
        )
        return (await self.stub.AckMessage(request, metadata=signed(client_id), timeout=10)).status

    async def change(self, message: pb.Message, invisible_ms: int) -> svc.ChangeInvisibleDurationResponse:
        request = svc.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=GROUP),
            topic=pb.Resource(name=TOPIC),
            receipt_handle=message.system_properties.receipt_handle,
            message_id=message.system_properties.message_id,
            invisible_duration=duration(invisible_ms),
        )
        return await self.stub.ChangeInvisibleDuration(request, metadata=signed("c1"), timeout=10)


async def start_gateway(name: str, etcd: Any, prefix: str, backend: FakeBackend) -> Gateway:
    settings = GatewaySettings(min_invisible_duration_ms=1_000)
    server = grpc.aio.server()
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    consumer = SimpleConsumerCore(backend, settings, commit_interval_ms=3_600_000, instance_id=name, handles=SIGNER)  # type: ignore[arg-type]
    clients = ClientHub(backend, settings)  # type: ignore[arg-type]
    owners = GroupOwnership(
        etcd, etcd_prefix=prefix, instance_id=name, address=address, ttl_ms=TTL_MS, on_lost=consumer.drop_group
    )
    router = GroupRouter(owners, Forwarder(instance_id=name, timeout_ms=5_000))
    servicer = MessagingServicer(
        address=address, auth=Authenticator(SingleKey(AK, SK)), backend=backend, producer=None,  # type: ignore[arg-type]
        consumer=consumer, clients=clients, router=router,
    )  # fmt: skip
    add_messaging_servicer(server, servicer)
    await server.start()
    await owners.start(timeout_s=5)
    return Gateway(name, address, server, consumer, clients, router, grpc.aio.insecure_channel(address))


@pytest.fixture
async def pair(etcd_conn: Any) -> AsyncIterator[tuple[Gateway, Gateway, FakeBackend]]:
    backend = FakeBackend()
    backend.add_topic(TOPIC, {"s1": 1})
    prefix = private_prefix()
    a = await start_gateway("a", etcd_conn, prefix, backend)
    b = await start_gateway("b", etcd_conn, prefix, backend)
    try:
        yield a, b, backend
    finally:
        for g in (a, b):
            await g.clients.close()
            await g.consumer.close()
            await g.router.close()
            await g.channel.close()
        for g in (a, b):
            await g.server.stop(0)


def ids(messages: list[pb.Message]) -> list[str]:
    return [m.system_properties.message_id for m in messages]


async def test_two_gateways_split_a_groups_messages_and_either_takes_acks(
    pair: tuple[Gateway, Gateway, FakeBackend],
) -> None:
    a, b, backend = pair
    for i in range(6):
        backend.put(f"m{i}")
    got_a, status = await a.receive(2)  # a claims the group
    assert status.code == Code.OK and a.ownership.owns(GROUP)
    got_b, status = await b.receive(2, client_id="c2")  # forwarded to a
    assert status.code == Code.OK and not b.ownership.owns(GROUP)
    assert not set(ids(got_a)) & set(ids(got_b)) and len(got_a) == len(got_b) == 2
    assert all(ReceiptHandle.decode(m.system_properties.receipt_handle, SIGNER).owner == "a" for m in got_a + got_b)
    # The owner heard of b's client through the forwarded call (auto-renew liveness).
    assert a.clients.client("c2") is not None and b.clients.client("c2") is None

    # Acks and changes work through either gateway, whoever delivered the message.
    assert (await b.ack(got_a[0])).code == Code.OK
    assert (await a.ack(got_b[0], client_id="c2")).code == Code.OK
    changed = await b.change(got_a[1], 0)
    assert changed.status.code == Code.OK and changed.receipt_handle != got_a[1].system_properties.receipt_handle
    again, _ = await b.receive(4)  # the changed one is visible at once, then the 2 not yet read
    assert ids(again) == [ids(got_a)[1], "id-s1-0-4", "id-s1-0-5"]
    assert (await a.ack(got_a[1], handle=again[0].system_properties.receipt_handle)).code == Code.OK
    assert (await b.ack(got_a[1])).code == Code.INVALID_RECEIPT_HANDLE  # superseded by the change

    # The owner checks the client's own signature: a bad one is refused by b itself,
    # and b never forwards it.
    refused, status = await b.receive(1, metadata=signed("c2", secret="wrong"))
    assert refused == [] and status.code == Code.UNAUTHORIZED
    # A client claiming its call was forwarded does not make b serve the group.
    spoofed, status = await b.receive(1, metadata=[*signed("c2"), (FORWARDED_HEADER, "x")])
    assert spoofed == [] and status.code == Code.INTERNAL_SERVER_ERROR and "served by gateway a" in status.message


async def test_a_consumer_heartbeat_at_a_non_owner_reaches_the_owner(
    pair: tuple[Gateway, Gateway, FakeBackend],
) -> None:
    a, b, _ = pair
    _, status = await a.receive(1, client_id="claimer")  # a owns the group now
    assert status.code in (pb.OK, pb.MESSAGE_NOT_FOUND)
    heartbeat = svc.HeartbeatRequest(group=pb.Resource(name=GROUP), client_type=pb.SIMPLE_CONSUMER)
    answer = await b.stub.Heartbeat(heartbeat, metadata=signed("far-client"), timeout=10)
    assert answer.status.code == pb.OK
    assert b.clients.client("far-client") is not None  # its own gateway knows it
    assert a.clients.client("far-client") is not None  # and so does the owner of its group
    producer = svc.HeartbeatRequest(client_type=pb.PRODUCER)
    await b.stub.Heartbeat(producer, metadata=signed("a-producer"), timeout=10)
    assert a.clients.client("a-producer") is None  # producers have no group: not relayed


async def test_an_abandoned_forwarded_receive_is_released_at_the_owner(
    pair: tuple[Gateway, Gateway, FakeBackend],
) -> None:
    a, b, backend = pair
    assert (await a.receive(1))[1].code == Code.MESSAGE_NOT_FOUND  # a owns the group
    backend.put("m0")
    backend.put("m1")
    owner = await b.router.owner(GROUP, [])
    assert owner is not None and owner.instance_id == "a"

    class Context:
        def invocation_metadata(self) -> list[tuple[str, str]]:
            return signed("c2")

        def time_remaining(self) -> float:
            return 10.0

    request = svc.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)),
        batch_size=2,
        invisible_duration=duration(30_000),
        long_polling_timeout=duration(0),
    )
    frames = b.router.forward_receive(request, Context(), owner)  # type: ignore[arg-type]
    first = await anext(frames)
    assert first.message.system_properties.message_id == "id-s1-0-0"
    await frames.aclose()  # b's client went away mid-answer
    # Both messages were handed out by a; the release makes them visible there again.
    await eventually("the release", lambda: not b.router.forwarder._background, timeout_s=5)
    got, _ = await a.receive(2)
    assert ids(got) == ["id-s1-0-0", "id-s1-0-1"]


async def test_when_the_owner_loses_the_group_the_other_serves_it_from_the_committed_offsets(
    pair: tuple[Gateway, Gateway, FakeBackend], etcd_conn: Any
) -> None:
    a, b, backend = pair
    for i in range(4):
        backend.put(f"m{i}")
    held, _ = await a.receive(4)
    assert ids(held) == [f"id-s1-0-{i}" for i in range(4)]
    assert [(await b.ack(m)).code for m in held[:2]] == [Code.OK, Code.OK]

    await etcd_conn.delete(a.ownership.key(GROUP).encode())  # as when a's lease expires
    await eventually("a to drop the group", lambda: not a.ownership.owns(GROUP))
    # a's last word on the group: its lowest un-acked offset (nothing was committed yet).
    await eventually("the final commit of a", lambda: backend.offsets.get(("s1", GROUP, TOPIC, 0)) == 2)

    # b claims the group and starts from the committed offset: the un-acked two again.
    got, status = await b.receive(4)
    assert status.code == Code.OK and b.ownership.owns(GROUP)
    assert ids(got) == ids(held[2:])
    assert all(ReceiptHandle.decode(m.system_properties.receipt_handle, SIGNER).owner == "b" for m in got)
    await eventually("a's mirror", lambda: (a.ownership.directory.owner(GROUP) or Owner("", "", 0)).instance_id == "b")
    # a's old handle reaches b (forwarded by group) and is refused there, naming a.
    stale = await a.stub.AckMessage(
        svc.AckMessageRequest(
            group=pb.Resource(name=GROUP),
            topic=pb.Resource(name=TOPIC),
            entries=[
                svc.AckMessageEntry(message_id=ids(held)[2], receipt_handle=held[2].system_properties.receipt_handle)
            ],
        ),
        metadata=signed("c1"),
        timeout=10,
    )
    assert stale.status.code == Code.INVALID_RECEIPT_HANDLE and "gateway a" in stale.status.message
    assert [(await a.ack(m)).code for m in got] == [Code.OK, Code.OK]  # through a, to b


# -- two gateway processes, the official client ---------------------------------------------

GATEWAY_ARGS = ("--min_invisible_duration_ms", "1000", "--registration_ttl_ms", str(TTL_MS))


@dataclass
class TwoGateways:
    env: GatewayEnv
    a: ServiceProcess
    b: ServiceProcess
    cluster: LocalCluster


@pytest.fixture(scope="module")
def two_gateways(
    etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TwoGateways]:
    base = scoped_dir(request, tmp_path_factory, "two-gateways")
    prefix = private_prefix()
    cluster = new_local_cluster(base, etcd_endpoints=etcd.endpoint, etcd_prefix=prefix, gateway_args=list(GATEWAY_ARGS))
    cluster.start()
    b = ServiceProcess(
        "gateway",
        port=free_port(),
        etcd_endpoints=etcd.endpoint,
        etcd_prefix=prefix,
        log_path=cluster.log_dir / "gateway-b.log",
        args=list(GATEWAY_ARGS),
    )
    home = base / "client-home"
    home.mkdir()
    try:
        b.start()
        with Admin(cluster.bootstrap) as admin:
            yield TwoGateways(
                GatewayEnv(cluster, etcd.endpoint, prefix, home, admin), cluster.services["gateway"], b, cluster
            )
    finally:
        b.stop()
        cluster.stop()


@pytest.fixture
def scenarios2(two_gateways: TwoGateways) -> Iterator[Scenarios]:
    runner = Scenarios(two_gateways.env)
    runner.logs.append(two_gateways.cluster.log_dir / "gateway-b.log")
    try:
        yield runner
    finally:
        runner.close()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def owner_address(env: GatewayEnv, group: str) -> str | None:
    """The address in the group's owner record in etcd (read on a thread of its own: the
    test itself is synchronous)."""

    async def read() -> str | None:
        async with etcd_client(env.etcd_endpoint) as client:
            got = await client.get(f"{groups_prefix(env.etcd_prefix)}{group}".encode())
        owner = None if got is None else Owner.decode(got.value)
        return None if owner is None else owner.address

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


def now(bg: Background) -> Run:
    bg._sync()  # what the process printed so far
    return bg.run


def received_ids(run: Run, *, after_ms: int = 0) -> list[str]:
    return [m["message_id"] for r in run.events("received") if r["ended_ms"] >= after_ms for m in r["messages"]]


def member(scenarios: Scenarios, endpoint: str, topic: str, group: str, *extra: str) -> Background:
    return scenarios.start(
        "consume_group.py", "--topic", topic, "--group", group, "--max-messages", "1", *extra, endpoint=endpoint
    )


def test_members_on_two_gateways_get_each_message_once_and_ack_through_their_own(
    scenarios2: Scenarios, two_gateways: TwoGateways
) -> None:
    env, explain = two_gateways.env, scenarios2.explain
    topic, group = _name("own"), _name("GID-two")
    env.admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    on_a = member(scenarios2, two_gateways.a.address, topic, group)
    wait_for("gateway A to own the group", lambda: owner_address(env, group) == two_gateways.a.address, explain)
    on_b = member(scenarios2, two_gateways.b.address, topic, group)
    on_b.wait_event("receiving", 30, explain)

    sent = scenarios2.run(
        "produce.py", "--topic", topic, "--count", "20", "--key-prefix", _name("k"), endpoint=two_gateways.b.address
    )
    sent_ids = sorted(r["message_id"] for r in sent.events("sent"))
    assert len(sent_ids) == 20 and not sent.errors(), explain("the producer failed")
    wait_for(
        "every message acked by one of the members",
        lambda: {e["message_id"] for bg in (on_a, on_b) for e in now(bg).events("acked")} >= set(sent_ids),
        explain,
        timeout_s=30,
    )
    runs = [scenarios2.finish(bg, close_stdin=True) for bg in (on_a, on_b)]
    for run in runs:
        assert not run.errors(), explain("a member reported errors")
    counts = collections.Counter(received_ids(runs[0]) + received_ids(runs[1]))
    assert sorted(counts) == sent_ids and set(counts.values()) == {1}, explain(f"deliveries: {counts}")
    assert received_ids(runs[0]) and received_ids(runs[1]), explain("both members should get some of the messages")
    assert all(m["delivery_attempt"] == 1 for r in runs for e in r.events("received") for m in e["messages"])
    # Acked for good: the owner commits every queue's offset up to its end.
    ends = {q.queue.queue_id: q.max_offset for q in env.admin.queue_offsets(topic)}
    wait_for(
        "the group's committed offsets at the end of every queue",
        lambda: {o.queue.queue_id: o.offset for o in env.admin.consume_offsets(group, topic)} == ends,
        explain,
    )


def test_killing_the_owner_moves_the_group_and_its_unacked_messages_come_again(
    scenarios2: Scenarios, two_gateways: TwoGateways
) -> None:
    env, explain = two_gateways.env, scenarios2.explain
    topic, group = _name("own"), _name("GID-kill")
    env.admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    # The member on A keeps what it gets un-acked (invisible for a minute).
    holder = member(scenarios2, two_gateways.a.address, topic, group, "--no-ack", "--invisible-seconds", "60")
    wait_for("gateway A to own the group", lambda: owner_address(env, group) == two_gateways.a.address, explain)
    acker = member(scenarios2, two_gateways.b.address, topic, group)
    acker.wait_event("receiving", 30, explain)

    sent = scenarios2.run(
        "produce.py", "--topic", topic, "--count", "10", "--key-prefix", _name("k"), endpoint=two_gateways.b.address
    )
    sent_ids = {r["message_id"] for r in sent.events("sent")}
    assert len(sent_ids) == 10, explain("the producer failed")
    wait_for(
        "every message delivered to one of the members",
        lambda: set(received_ids(now(holder)) + received_ids(now(acker))) >= sent_ids,
        explain,
        timeout_s=30,
    )
    held = set(received_ids(now(holder)))
    assert held and not held & set(received_ids(now(acker))), explain("the members should split the messages")

    two_gateways.a.kill()  # kill -9 of the owner
    killed_ms = int(time.time() * 1000)
    holder.kill()
    wait_for(
        "gateway B to take the group over and deliver the un-acked messages",
        lambda: (
            set(received_ids(now(acker), after_ms=killed_ms)) >= held
            and {e["message_id"] for e in now(acker).events("acked")} >= sent_ids
        ),
        explain,
        timeout_s=30,
    )
    assert owner_address(env, group) == two_gateways.b.address, explain("B should own the group now")
    scenarios2.finish(acker, close_stdin=True)
