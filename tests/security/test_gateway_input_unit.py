"""What the fuzzer found the gateway answering INTERNAL to, checked without processes:
topic and group names of every v2 request (RocketMQ's rules, at the entry), a QueryOffset
timestamp whose milliseconds do not fit an int64, and echoes of huge names."""

from __future__ import annotations

from typing import Any

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc

from txmq_gateway.auth import Authenticator
from txmq_gateway.names import check_group_name, check_names, resource_paths
from txmq_gateway.servicer import MessagingServicer
from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code

HUGE = "A" * (1024 * 1024)
GROUP, TOPIC = pb.Resource(name="fuzz-group"), pb.Resource(name="fuzz-topic")
QUEUE = pb.MessageQueue(topic=TOPIC, broker=pb.Broker(name="s1"))


def _refused(request: Any) -> GatewayError:
    with pytest.raises(GatewayError) as raised:
        check_names(request)
    assert len(raised.value.message) < 250, "a refusal quotes only the start of a name"
    return raised.value


def test_every_topic_and_group_of_every_request_type_is_found() -> None:
    paths = {
        m.name: sorted(".".join(f.name for f in p) for p in resource_paths(m.input_type))
        for m in svc.DESCRIPTOR.services_by_name["MessagingService"].methods
    }
    assert paths["AckMessage"] == ["group", "topic"]
    assert paths["SendMessage"] == ["messages.topic"]
    assert paths["ReceiveMessage"] == ["group", "message_queue.topic"]
    assert paths["QueryOffset"] == ["message_queue.topic"]
    assert paths["Telemetry"] == [
        "recover_orphaned_transaction_command.message.topic",
        "settings.publishing.topics",
        "settings.subscription.group",
        "settings.subscription.subscriptions.topic",
        "verify_message_command.message.topic",
    ]


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (svc.AckMessageRequest(group=pb.Resource(name=HUGE), topic=TOPIC), Code.ILLEGAL_CONSUMER_GROUP),
        (
            svc.ForwardMessageToDeadLetterQueueRequest(group=pb.Resource(name=HUGE), topic=TOPIC),
            Code.ILLEGAL_CONSUMER_GROUP,
        ),
        (
            svc.ReceiveMessageRequest(group=GROUP, message_queue=pb.MessageQueue(topic=pb.Resource(name="a b"))),
            Code.ILLEGAL_TOPIC,
        ),
        (
            svc.SendMessageRequest(messages=[pb.Message(topic=TOPIC), pb.Message(topic=pb.Resource(name="T" * 128))]),
            Code.ILLEGAL_TOPIC,
        ),
        (svc.HeartbeatRequest(group=pb.Resource(name="g\u00e9")), Code.ILLEGAL_CONSUMER_GROUP),
        (svc.QueryRouteRequest(topic=pb.Resource(name="x\x00")), Code.ILLEGAL_TOPIC),
    ],
)
def test_an_illegal_name_is_refused_with_its_v2_code_quoting_only_its_start(request_: Any, code: int) -> None:
    err = _refused(request_)
    assert err.code == code
    if "AAAA" in err.message:
        assert "1048576 characters" in err.message


def test_legal_and_empty_names_pass() -> None:
    check_names(svc.AckMessageRequest(group=GROUP, topic=TOPIC))
    check_names(svc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="%RETRY%g|x_-9"))]))
    check_names(svc.HeartbeatRequest())  # a producer's heartbeat names no group
    check_names(svc.QueryOffsetRequest(message_queue=QUEUE))
    check_names(svc.HeartbeatRequest(group=pb.Resource(name="g" * 255)))


def test_the_ownership_claim_takes_only_legal_group_names() -> None:
    with pytest.raises(GatewayError) as raised:
        check_group_name(HUGE)
    assert raised.value.code == Code.ILLEGAL_CONSUMER_GROUP and len(raised.value.message) < 200
    check_group_name("fuzz-group")


class _Context:
    def invocation_metadata(self) -> list[tuple[str, str]]:
        return [("x-mq-client-id", "c1")]

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


class _Nothing:
    """A backend, router or core that must not be reached."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} reached with a request the gateway should have refused")


def _servicer() -> MessagingServicer:
    nothing: Any = _Nothing()
    return MessagingServicer(
        address="127.0.0.1:1",
        auth=Authenticator(None),
        backend=nothing,
        producer=nothing,
        consumer=nothing,
        clients=nothing,
        router=nothing,
    )


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(-(2**63), 0), (2**63 - 1, 0), (253_402_300_800, 0), (-62_135_596_801, 0), (0, -1), (0, 1_000_000_000)],
)
async def test_query_offset_refuses_a_timestamp_outside_protobufs_range(seconds: int, nanos: int) -> None:
    request = svc.QueryOffsetRequest(message_queue=QUEUE, query_offset_policy=pb.TIMESTAMP)
    request.timestamp.seconds, request.timestamp.nanos = seconds, nanos
    answer = await _servicer().QueryOffset(request, _Context())  # type: ignore[arg-type]
    assert answer.status.code == Code.BAD_REQUEST, answer.status
    assert "google.protobuf.Timestamp" in answer.status.message


async def test_a_huge_group_is_refused_before_the_ownership_claim() -> None:
    servicer = _servicer()
    ack = await servicer.AckMessage(
        svc.AckMessageRequest(group=pb.Resource(name=HUGE), topic=TOPIC),
        _Context(),  # type: ignore[arg-type]
    )
    dlq = await servicer.ForwardMessageToDeadLetterQueue(
        svc.ForwardMessageToDeadLetterQueueRequest(group=pb.Resource(name=HUGE), topic=TOPIC),
        _Context(),  # type: ignore[arg-type]
    )
    frames = [
        f
        async for f in servicer.ReceiveMessage(
            svc.ReceiveMessageRequest(group=pb.Resource(name=HUGE), message_queue=QUEUE),
            _Context(),  # type: ignore[arg-type]
        )
    ]
    for status in (ack.status, dlq.status, frames[-1].status):
        assert status.code == Code.ILLEGAL_CONSUMER_GROUP and len(status.message) < 200, status
