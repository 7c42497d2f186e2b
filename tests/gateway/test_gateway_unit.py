"""Unit tests of the gateway's own pieces: authentication, message conversion, opaque
ids, send deduplication, queue placement and route building (no processes)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError, error
from txmq.protocol import PROPERTY_TIMER_DELIVER_MS
from txmq.v1 import common_pb2, errors_pb2, route_pb2, store_pb2
from txmq_gateway.auth import Authenticator, SingleKey, parse_authorization, sign
from txmq_gateway.convert import to_txmq_message, to_v2_message
from txmq_gateway.producer import ProducerCore, SendDeduper, Sent
from txmq_gateway.servicer import endpoints_of, queues_of
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError, from_exception
from txmq_gateway.v2 import Code, pb

from .fake_backend import FakeBackend

DATE = "20261122T101500Z"
DATE_MS = 1_795_342_500_000  # DATE in ms since the epoch


def authenticator(ak: str = "AK", sk: str = "SK") -> Authenticator:
    """Authentication of one key, on a clock standing at DATE."""
    return Authenticator(SingleKey(ak, sk), clock=ManualClock(wall_ms=DATE_MS))


def signed(ak: str, sk: str, *, upper: bool = False, date: str = DATE) -> list[tuple[str, str]]:
    signature = sign(sk.encode(), date)
    if upper:
        signature = signature.upper()
    return [
        ("x-mq-date-time", date),
        ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={signature}"),
    ]


# -- authentication ---------------------------------------------------------------------


def test_auth_accepts_a_valid_signature_in_either_hex_case() -> None:
    auth = authenticator()
    assert auth.check(signed("AK", "SK")) == "AK"
    assert auth.check(signed("AK", "SK", upper=True)) == "AK"  # what the Java client sends


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        (signed("AK", "wrong"), "signature"),
        (signed("OTHER", "SK"), "access key"),
        ([("x-mq-date-time", DATE)], "authorization header"),
        ([m for m in signed("AK", "SK") if m[0] != "x-mq-date-time"], "x-mq-date-time"),
        ([("x-mq-date-time", DATE), ("authorization", "Basic Zm9vOmJhcg==")], "algorithm"),
    ],
)
def test_auth_refuses_with_unauthorized(metadata: list[tuple[str, str]], reason: str) -> None:
    with pytest.raises(GatewayError) as info:
        authenticator().check(metadata)
    assert info.value.code == Code.UNAUTHORIZED
    assert reason in info.value.message


def test_auth_is_off_without_both_keys() -> None:
    assert not Authenticator.from_settings(GatewaySettings(access_key="AK")).enabled
    assert Authenticator(None).check([]) is None  # anything goes


def test_signature_is_hmac_sha1_of_the_date() -> None:
    # RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
    assert sign(b"Jefe", "what do ya want for nothing?") == "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
    fields = parse_authorization("MQv2-HMAC-SHA1 Credential=a, SignedHeaders=x-mq-date-time, Signature=ff")
    assert fields == {
        "algorithm": "MQv2-HMAC-SHA1",
        "Credential": "a",
        "SignedHeaders": "x-mq-date-time",
        "Signature": "ff",
    }


# -- conversion -------------------------------------------------------------------------


def v2_message(**system: object) -> pb.Message:
    fields: dict[str, object] = {"message_id": "01ABC", "message_type": pb.NORMAL, "born_host": "10.0.0.1", **system}
    sp = pb.SystemProperties(**fields)  # type: ignore[arg-type]
    sp.born_timestamp.FromMilliseconds(1_700_000_000_123)
    return pb.Message(
        topic=pb.Resource(name="Orders"), body=b"payload", system_properties=sp, user_properties={"k": "v"}
    )


def test_message_round_trip_keeps_what_clients_read() -> None:
    stored = to_txmq_message(v2_message(tag="TagA", keys=["k1", "k2"], message_group="g1"))
    assert (stored.topic, stored.body, stored.tags, list(stored.keys), stored.unique_id) == (
        "Orders",
        b"payload",
        "TagA",
        ["k1", "k2"],
        "01ABC",
    )
    assert stored.born_timestamp_ms == 1_700_000_000_123
    view = common_pb2.MessageView(
        message=stored, queue_offset=7, store_timestamp_ms=1_700_000_000_500, store_host="s:1"
    )
    view.message.queue_id = 3
    back = to_v2_message(view, receipt_handle="h", delivery_attempt=2, invisible_ms=1500)
    sp = back.system_properties
    assert dict(back.user_properties) == {"k": "v"}  # the gateway's own properties are hidden
    assert (sp.tag, list(sp.keys), sp.message_id, sp.message_group, sp.born_host) == (
        "TagA",
        ["k1", "k2"],
        "01ABC",
        "g1",
        "10.0.0.1",
    )
    assert (sp.queue_id, sp.queue_offset, sp.receipt_handle, sp.delivery_attempt) == (3, 7, "h", 2)
    assert sp.invisible_duration.ToMilliseconds() == 1500
    # MD5, upper-case hex (RocketMQ's proxy; the Node.js client prints CRC32 in decimal).
    assert (sp.body_digest.type, sp.body_digest.checksum) == (pb.MD5, hashlib.md5(b"payload").hexdigest().upper())


def test_reserved_property_names_are_refused() -> None:
    message = v2_message()
    message.user_properties["REAL_TOPIC"] = "x"
    with pytest.raises(GatewayError) as info:
        to_txmq_message(message)
    assert info.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_half_message_is_shown_under_its_real_topic() -> None:
    view = common_pb2.MessageView(
        message=common_pb2.Message(
            topic="RMQ_SYS_TRANS_HALF_TOPIC", body=b"x", properties={"REAL_TOPIC": "Orders", "PGROUP": "Orders"}
        )
    )
    back = to_v2_message(view)
    assert back.topic.name == "Orders" and dict(back.user_properties) == {}


def test_txmq_errors_map_to_v2_codes_and_keep_the_domain_name() -> None:
    status = from_exception(error(errors_pb2.CODE_TOPIC_NOT_FOUND, "no such topic"))
    assert status.code == Code.TOPIC_NOT_FOUND and "CODE_TOPIC_NOT_FOUND" in status.message
    assert from_exception(RuntimeError("boom")).code == Code.INTERNAL_ERROR


# -- send deduplication -----------------------------------------------------------------


async def test_dedupe_answers_a_repeat_with_the_first_result() -> None:
    clock = ManualClock()
    dedupe = SendDeduper(window_ms=1_000, max_entries=10, clock=clock)
    calls = []

    async def send() -> Sent:
        calls.append(1)
        return Sent("m", "", len(calls))

    first = await dedupe.once(("T", "m"), send)
    again = await dedupe.once(("T", "m"), send)
    assert first == again and len(calls) == 1
    assert (await dedupe.once(("Other", "m"), send)).offset == 2  # per topic
    clock.advance(999)
    assert (await dedupe.once(("T", "m"), send)).offset == 1  # still within the window: the first result
    clock.advance(1)  # past the window: stored again
    assert (await dedupe.once(("T", "m"), send)).offset == 3


async def test_dedupe_concurrent_repeat_waits_for_the_first_and_failures_are_not_remembered() -> None:
    dedupe = SendDeduper(window_ms=1_000, max_entries=10)
    release = asyncio.Event()
    calls = []

    async def slow() -> Sent:
        calls.append(1)
        await release.wait()
        return Sent("m", "", 1)

    first = asyncio.create_task(dedupe.once(("T", "m"), slow))
    await asyncio.sleep(0)
    second = asyncio.create_task(dedupe.once(("T", "m"), slow))
    await asyncio.sleep(0)
    release.set()
    assert await first == await second and len(calls) == 1

    async def failing() -> Sent:
        calls.append(1)
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError):
        await dedupe.once(("T", "n"), failing)
    assert (await dedupe.once(("T", "n"), slow)).offset == 1  # the retry is sent


async def test_dedupe_forgets_the_oldest_beyond_max_entries() -> None:
    dedupe = SendDeduper(window_ms=60_000, max_entries=2)
    count = [0]

    async def send() -> Sent:
        count[0] += 1
        return Sent("m", "", count[0])

    for message_id in ("a", "b", "c"):
        await dedupe.once(("T", message_id), send)
    assert (await dedupe.once(("T", "a"), send)).offset == 4  # forgotten: stored again
    assert (await dedupe.once(("T", "c"), send)).offset == 3


# -- placement and routes ---------------------------------------------------------------


def core(queues: list[route_pb2.QueueData]) -> tuple[ProducerCore, FakeBackend]:
    """A producer core over the contract-checked fake backend (fake_backend.py) with topic
    Orders on ``queues``; ``backend.sends`` records (store, message, group, prepared)."""
    backend = FakeBackend(commit_log_offset=100)
    backend.add_topic("Orders", {q.store_id: q.write_queue_nums for q in queues})
    return ProducerCore(backend, GatewaySettings()), backend  # type: ignore[arg-type]


TWO_STORES = [
    route_pb2.QueueData(store_id="s1", read_queue_nums=4, write_queue_nums=4, perm=6),
    route_pb2.QueueData(store_id="s2", read_queue_nums=4, write_queue_nums=4, perm=6),
]


async def test_fifo_messages_of_one_group_always_go_to_the_same_queue() -> None:
    producer, backend = core(TWO_STORES)
    for i in range(6):
        message = v2_message(message_group="order-42")
        message.system_properties.message_id = f"id{i}"
        await producer.send_one(message)
    placed = {(store, m.queue_id) for store, m, _, _ in backend.sends}
    assert len(placed) == 1


async def test_normal_messages_alternate_stores_and_let_the_store_pick_the_queue() -> None:
    producer, backend = core(TWO_STORES)
    for i in range(4):
        message = v2_message()
        message.system_properties.message_id = f"id{i}"
        await producer.send_one(message)
    assert {store for store, *_ in backend.sends} == {"s1", "s2"}
    assert not any(m.HasField("queue_id") for _, m, _, _ in backend.sends)


async def test_transactional_send_is_a_half_message_of_the_topic_group() -> None:
    producer, backend = core(TWO_STORES[:1])
    sent = await producer.send_one(v2_message(message_type=pb.TRANSACTION))
    _, _, group, prepared = backend.sends[0]
    assert (group, prepared) == ("Orders", True)
    handle = producer.handles.decode(sent.transaction_id)
    assert (handle.store_id, handle.commit_log_offset, handle.transaction_id) == ("s1", 100, "01ABC")


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda m: m.ClearField("body"), Code.MESSAGE_BODY_EMPTY),
        (lambda m: setattr(m, "body", b"x" * (4 * 1024 * 1024 + 1)), Code.MESSAGE_BODY_TOO_LARGE),
        (lambda m: m.system_properties.ClearField("message_id"), Code.ILLEGAL_MESSAGE_ID),
        (lambda m: setattr(m.system_properties, "message_type", pb.DELAY), Code.ILLEGAL_DELIVERY_TIME),
        (lambda m: m.system_properties.delivery_timestamp.FromMilliseconds(-1000), Code.ILLEGAL_DELIVERY_TIME),
        (
            lambda m: (
                setattr(m.system_properties, "message_type", pb.TRANSACTION),
                m.system_properties.delivery_timestamp.FromSeconds(10),
            ),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (
            lambda m: (
                setattr(m.system_properties, "message_group", "g"),
                m.system_properties.delivery_timestamp.FromSeconds(10),
            ),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (lambda m: setattr(m.system_properties, "message_type", pb.LITE), Code.UNSUPPORTED),
        (lambda m: m.topic.ClearField("name"), Code.ILLEGAL_TOPIC),
    ],
)
async def test_bad_sends_are_refused_with_a_v2_code_and_store_nothing(change, code: int) -> None:  # type: ignore[no-untyped-def]
    producer, backend = core(TWO_STORES)
    message = v2_message()
    change(message)
    response = await producer.send(svc_request(message))
    assert response.status.code == code and response.entries[0].status.code == code
    assert backend.sends == []


async def test_a_delay_message_is_stored_with_its_delivery_time() -> None:
    producer, backend = core(TWO_STORES[:1])
    message = v2_message(message_type=pb.DELAY)
    message.system_properties.delivery_timestamp.FromMilliseconds(1_800_000_000_123)
    await producer.send_one(message)
    [(_, stored, _, prepared)] = backend.sends
    assert not prepared and stored.properties[PROPERTY_TIMER_DELIVER_MS] == "1800000000123"
    # ... and a consumer sees it as a DELAY message with that time (the property hidden).
    view = common_pb2.MessageView(message=stored, store_timestamp_ms=1_800_000_000_200)
    seen = to_v2_message(view)
    assert seen.system_properties.message_type == pb.DELAY
    assert seen.system_properties.delivery_timestamp.ToMilliseconds() == 1_800_000_000_123
    assert PROPERTY_TIMER_DELIVER_MS not in seen.user_properties


def svc_request(*messages: pb.Message):  # type: ignore[no-untyped-def]
    from txmq_gateway.v2 import svc

    return svc.SendMessageRequest(messages=list(messages))


def test_route_has_one_queue_per_txmq_queue_with_permissions() -> None:
    data = [route_pb2.QueueData(store_id="s1", read_queue_nums=2, write_queue_nums=3, perm=6)]
    queues = queues_of("T", data, endpoints_of("10.1.2.3:8081"))
    assert [(q.id, q.permission) for q in queues] == [(0, pb.READ_WRITE), (1, pb.READ_WRITE), (2, pb.WRITE)]
    assert all(q.broker.name == "s1" and q.broker.id == 0 for q in queues)
    assert pb.TRANSACTION in queues[0].accept_message_types and pb.DELAY in queues[0].accept_message_types
    assert queues[0].broker.endpoints.scheme == pb.IPv4
    assert endpoints_of("gateway.txmq.svc:8081").scheme == pb.DOMAIN_NAME
    assert endpoints_of("[::1]:8081").addresses[0].host == "::1"


# -- servicer: a receive the client abandons --------------------------------------------


class FakeContext:
    def invocation_metadata(self) -> list[tuple[str, str]]:
        return [("x-mq-client-id", "c1")]

    def time_remaining(self) -> float:
        return 30.0


class FakeConsumer:
    def __init__(self, deliveries: list) -> None:  # type: ignore[type-arg]
        self.deliveries = deliveries
        self.changed: list[tuple[str, int]] = []

    async def receive(self, **_: object) -> list:  # type: ignore[type-arg]
        return self.deliveries

    async def change_invisible_duration(self, *, receipt_handle: str, invisible_ms: int, **_: object) -> str:
        self.changed.append((receipt_handle, invisible_ms))
        return receipt_handle + "'"


async def test_messages_of_an_abandoned_receive_are_visible_again_at_once() -> None:
    from txmq_gateway.consumer_state import Delivery
    from txmq_gateway.servicer import MessagingServicer
    from txmq_gateway.v2 import svc

    views = [
        common_pb2.MessageView(message=common_pb2.Message(topic="T", body=b"x", unique_id=f"m{i}")) for i in range(2)
    ]
    consumer = FakeConsumer([Delivery(v, f"h{i}", 1, 30_000) for i, v in enumerate(views)])
    servicer = MessagingServicer(
        address="127.0.0.1:1",
        auth=Authenticator(None),
        backend=None,
        producer=None,  # type: ignore[arg-type]
        consumer=consumer,
        clients=None,  # type: ignore[arg-type]
    )
    request = svc.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=pb.MessageQueue(topic=pb.Resource(name="T"))
    )
    stream = servicer.ReceiveMessage(request, FakeContext())  # type: ignore[arg-type]
    first = await anext(stream)
    assert first.message.system_properties.receipt_handle == "h0"
    await stream.aclose()  # the client went away before reading the rest
    for _ in range(10):
        await asyncio.sleep(0)
    assert consumer.changed == [("h0", 0), ("h1", 0)]


async def test_a_receive_read_to_the_end_releases_nothing() -> None:
    from txmq_gateway.consumer_state import Delivery
    from txmq_gateway.servicer import MessagingServicer
    from txmq_gateway.v2 import svc

    view = common_pb2.MessageView(message=common_pb2.Message(topic="T", body=b"x", unique_id="m"))
    consumer = FakeConsumer([Delivery(view, "h", 1, 30_000)])
    servicer = MessagingServicer(
        address="127.0.0.1:1",
        auth=Authenticator(None),
        backend=None,
        producer=None,  # type: ignore[arg-type]
        consumer=consumer,
        clients=None,  # type: ignore[arg-type]
    )
    frames = [f async for f in servicer.ReceiveMessage(svc.ReceiveMessageRequest(), FakeContext())]  # type: ignore[arg-type]
    assert [f.WhichOneof("content") for f in frames] == ["message", "status"]
    assert frames[-1].status.code == Code.OK and consumer.changed == []


# -- normal sends on the shared coalescing mechanism -------------------------------------


class _SilentStore:
    """A store whose send stream takes frames and never answers (a stopped store)."""

    def __init__(self) -> None:
        self.frames: list[store_pb2.RecordFrame] = []
        self._never = asyncio.Event()

    def SendStream(self) -> _SilentStore:
        return self

    async def write(self, frame: store_pb2.RecordFrame) -> None:
        self.frames.append(frame)

    async def read(self) -> store_pb2.RecordAck:
        await self._never.wait()
        raise AssertionError("unreachable")

    def cancel(self) -> bool:
        return True


async def test_a_normal_send_to_a_store_that_never_answers_times_out_typed() -> None:
    from txmq_gateway.backend import Backend

    stream = _SilentStore()
    backend = Backend(cluster=None, timeout_ms=50)  # type: ignore[arg-type]
    backend.store_address = lambda store_id: "127.0.0.1:1"  # type: ignore[method-assign]
    backend.store = lambda store_id: stream  # type: ignore[method-assign,assignment,return-value]
    with pytest.raises(TxmqError) as info:
        await backend.send_normal("s1", common_pb2.Message(topic="T", body=b"x", unique_id="U1"))
    assert info.value.code == errors_pb2.CODE_UPSTREAM_TIMEOUT and info.value.retriable
    assert len(stream.frames) == 1  # it was sent: the store may have it (a retry keeps the id)
    await backend.close()
