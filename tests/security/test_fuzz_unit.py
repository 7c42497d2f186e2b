"""The fuzzer's own parts, without processes: RPC enumeration, inputs, verdicts, log scan."""

from __future__ import annotations

import asyncio
import math
import re
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor as D
from rocketmq.grpc_protocol import definition_pb2 as v2pb
from rocketmq.grpc_protocol import service_pb2 as v2svc

from security.fuzz import (
    CLASS_WEIGHTS,
    CLIENT_WRITE_FAILED,
    ERROR_DETAIL_KEY,
    MB,
    RAW_MARKER,
    TEXT_MARKER,
    Caller,
    CallStatus,
    Case,
    FirstStatus,
    Generator,
    Names,
    RewritingProxy,
    Target,
    classify_status,
    classify_txmq_answer,
    classify_v2,
    documented_codes,
    enumerate_targets,
    fuzzed_services,
    open_to_anyone,
    scan_log,
)
from txmq.v1 import errors_pb2, store_pb2

ALL_SERVICES = {"all": list(fuzzed_services())}


def _detail(code: int = errors_pb2.CODE_ILLEGAL_TOPIC) -> list[tuple[str, bytes]]:
    return [(ERROR_DETAIL_KEY, errors_pb2.ErrorDetail(code=code, message="m").SerializeToString())]


PROTOS = Path(__file__).resolve().parents[2] / "protos" / "txmq" / "v1"


def _rpcs_in_proto_sources() -> set[str]:
    """Every ``rpc`` of protos/txmq/v1/*.proto, read from the sources (not the modules)."""
    out = set()
    for proto in PROTOS.glob("*.proto"):
        service = ""
        for line in proto.read_text().splitlines():
            if m := re.match(r"\s*service\s+(\w+)", line):
                service = m[1]
            elif m := re.match(r"\s*rpc\s+(\w+)\s*\(", line):
                out.add(f"/txmq.v1.{service}/{m[1]}")
    return out


def test_every_method_of_the_descriptors_is_a_target() -> None:
    targets = enumerate_targets(ALL_SERVICES)
    paths = {t.path for t in targets}
    v2 = v2svc.DESCRIPTOR.services_by_name["MessagingService"]
    expected = _rpcs_in_proto_sources() | {f"/{v2.full_name}/{m.name}" for m in v2.methods}
    assert paths == expected
    assert len(targets) == len(paths)
    names = {t.service.full_name for t in targets}
    assert names >= {
        "txmq.v1.Store",
        "txmq.v1.StoreAdmin",
        "txmq.v1.StoreReplication",
        "txmq.v1.Pull",
        "txmq.v1.Route",
        "txmq.v1.Transaction",
        "txmq.v1.TransactionPeer",
        "apache.rocketmq.v2.MessagingService",
    }
    assert "/apache.rocketmq.v2.MessagingService/Telemetry" in paths
    assert "/txmq.v1.Store/SendStream" in paths


def test_only_the_fuzzed_packages_are_targets() -> None:
    hosted = {"store": ["txmq.v1.Store", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"]}
    targets = enumerate_targets(hosted)
    assert {t.service.full_name for t in targets} == {"txmq.v1.Store"}
    assert all(t.process == "store" for t in targets)


@pytest.mark.parametrize(
    ("code", "details", "trailers", "v2", "verdict"),
    [
        (grpc.StatusCode.OK, "", None, False, "ok"),
        (grpc.StatusCode.INVALID_ARGUMENT, "bad topic", _detail(), False, "typed"),
        (grpc.StatusCode.NOT_FOUND, "", _detail(errors_pb2.CODE_TOPIC_NOT_FOUND), False, "typed"),
        (grpc.StatusCode.INTERNAL, "boom", _detail(errors_pb2.CODE_INTERNAL_ERROR), False, "untyped"),
        (grpc.StatusCode.INTERNAL, "boom", None, False, "untyped"),
        (grpc.StatusCode.UNKNOWN, "Stream removed", None, False, "untyped"),
        (grpc.StatusCode.INVALID_ARGUMENT, "no detail", None, False, "untyped"),
        (grpc.StatusCode.INVALID_ARGUMENT, "garbage", [(ERROR_DETAIL_KEY, b"\xff\xff\xff")], False, "untyped"),
        (grpc.StatusCode.UNAVAILABLE, "Socket closed", None, False, "untyped"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", None, False, "hang"),
        (grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!", None, True, "typed"),
        (grpc.StatusCode.INVALID_ARGUMENT, "", None, True, "typed"),
        (grpc.StatusCode.INTERNAL, "", None, True, "untyped"),
        (grpc.StatusCode.UNKNOWN, "Stream removed", None, True, "untyped"),
        (grpc.StatusCode.UNAVAILABLE, "Connection reset by peer", None, True, "untyped"),
    ],
)
def test_grpc_status_verdicts(code, details, trailers, v2, verdict) -> None:  # type: ignore[no-untyped-def]
    assert classify_status(code, details, trailers, v2=v2).verdict == verdict


def test_a_stream_open_at_its_deadline_is_not_a_hang() -> None:
    assert classify_status(grpc.StatusCode.DEADLINE_EXCEEDED, "", None, v2=False, stream=True).verdict == "open"
    cancelled = classify_status(grpc.StatusCode.CANCELLED, "", None, v2=False, cancelled_by_us=True)
    assert cancelled.verdict == "open"


def _v2(response: object) -> bytes:
    return response.SerializeToString()  # type: ignore[attr-defined]


def test_v2_status_verdicts() -> None:
    out = v2svc.QueryRouteResponse.DESCRIPTOR
    code = v2pb.Code

    def verdict(status_code: int, *, expect_unauthorized: bool = False) -> str:
        frame = _v2(v2svc.QueryRouteResponse(status=v2pb.Status(code=status_code, message="m")))
        return classify_v2([frame], out, expect_unauthorized=expect_unauthorized).verdict

    assert verdict(code.OK) == "ok"
    assert verdict(code.BAD_REQUEST) == "typed"
    assert verdict(code.TOPIC_NOT_FOUND) == "typed"
    assert verdict(code.INTERNAL_ERROR) == "untyped"
    assert verdict(code.INTERNAL_SERVER_ERROR) == "untyped"
    assert verdict(code.UNAUTHORIZED, expect_unauthorized=True) == "typed"
    assert verdict(code.OK, expect_unauthorized=True) == "auth_bypass"
    assert verdict(code.TOPIC_NOT_FOUND, expect_unauthorized=True) == "auth_bypass"
    assert classify_v2([b"\xff\xff"], out, expect_unauthorized=False).verdict == "untyped"


def test_v2_entry_statuses_count() -> None:
    response = v2svc.AckMessageResponse(
        status=v2pb.Status(code=v2pb.Code.MULTIPLE_RESULTS),
        entries=[v2svc.AckMessageResultEntry(status=v2pb.Status(code=v2pb.Code.INTERNAL_ERROR, message="boom"))],
    )
    verdict = classify_v2([_v2(response)], v2svc.AckMessageResponse.DESCRIPTOR, expect_unauthorized=False)
    assert verdict.verdict == "untyped"
    assert "boom" in verdict.message


def _generator(seed: int, *, requests: int = 400, max_bytes: int = 8 * MB) -> Generator:
    targets = enumerate_targets(ALL_SERVICES)
    return Generator(seed, targets, requests=requests, max_bytes=max_bytes, names=Names(), clock=lambda: 1.8e9)


def test_the_seed_decides_the_cases() -> None:
    def digest(seed: int) -> list[tuple[str, str, list[bytes], list[tuple[str, str | bytes]]]]:
        return [(c.target.path, c.input_class, c.payloads, c.metadata) for c in _generator(seed, requests=150).cases()]

    assert digest(7) == digest(7)
    assert digest(7) != digest(8)


def test_every_target_and_class_gets_cases() -> None:
    gen = _generator(4, requests=2 * len(enumerate_targets(ALL_SERVICES)) + 1000)
    cases = list(gen.cases())
    assert {c.target.path for c in cases} == {t.path for t in gen.targets}
    assert {c.input_class for c in cases} == {*CLASS_WEIGHTS, "metadata"}
    assert {c.stream_end for c in cases if c.target.method.client_streaming} == {"half_close", "hang_up"}
    assert any(c.expect_unauthorized for c in cases)
    assert any(c.raw_headers for c in cases)
    assert all(not c.metadata for c in cases if not c.target.v2)


def test_huge_values_stay_within_the_budget() -> None:
    requests, budget = 500, 6 * MB
    gen = _generator(6, requests=requests, max_bytes=budget)
    sizes = [c.size for c in gen.cases()]
    # Values of 64 KB and less are not paid from the budget.
    assert sum(sizes) <= budget + requests * 80 * 1024
    assert max(sizes) >= MB  # and huge ones are there


def _string_field() -> D.FieldDescriptor:
    return store_pb2.GetMessageRequest.DESCRIPTOR.fields_by_name["topic"]


def test_non_utf8_text_is_put_on_the_wire() -> None:
    gen = _generator(1)
    msg = store_pb2.GetMessageRequest(topic=f"{TEXT_MARKER}000001")
    data = gen.encode(msg)
    assert TEXT_MARKER.encode() not in data
    assert len(data) == len(msg.SerializeToString())
    with pytest.raises(Exception):  # noqa: B017 - protobuf's DecodeError, whatever its module
        store_pb2.GetMessageRequest.FromString(data)


def test_hostile_values_by_type() -> None:
    gen = _generator(11)
    int32 = store_pb2.GetMessageRequest.DESCRIPTOR.fields_by_name["queue_id"]
    ints = {gen._hostile_scalar(int32)[0] for _ in range(200)}
    assert {-(2**31), 2**31 - 1, -1} <= ints
    expression = store_pb2.GetMessageRequest.DESCRIPTOR.fields_by_name["filter"].message_type.fields_by_name[
        "expression"
    ]
    whats = {gen._hostile_string(expression)[1] for _ in range(400)}
    assert any(w.startswith("SQL92 '(' * ") for w in whats)
    assert "non-UTF-8 text" in whats
    enum = store_pb2.GetMessageRequest.DESCRIPTOR.fields_by_name["filter"].message_type.fields_by_name["type"]
    value, _ = gen._hostile_scalar(enum)
    assert value not in [v.number for v in enum.enum_type.values]
    double_values = [v for v in (gen._hostile_scalar(f)[0] for f in _float_fields() for _ in range(20))]
    assert not double_values or any(isinstance(v, float) and (math.isnan(v) or math.isinf(v)) for v in double_values)


def _float_fields() -> list[D.FieldDescriptor]:
    out = []
    for service in fuzzed_services().values():
        for method in service.methods:
            for f in method.input_type.fields:
                if f.type in (D.FieldDescriptor.TYPE_FLOAT, D.FieldDescriptor.TYPE_DOUBLE):
                    out.append(f)
    return out


def test_destructive_calls_name_scratch_topics() -> None:
    gen = _generator(2, requests=3000)
    for case in gen.cases():
        if case.target.method.name in ("DeleteTopic", "DeleteSubscriptionGroup") and case.input_class == "valid":
            request = case.target.method.input_type
            assert b"fuzz-topic" not in case.payloads[0], request.full_name
            assert b"fuzz-group" not in case.payloads[0], request.full_name


def test_log_scan_counts_tracebacks_and_errors(tmp_path: Path) -> None:
    log = tmp_path / "store.log"
    log.write_text(
        "2026-01-01 10:00:00,000 INFO [1] txmq.server: store ready\n"
        "2026-01-01 10:00:01,000 ERROR [1] txmq.rpc: unexpected error in StoreServicer.GetMessage\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "ValueError: -1 is not a valid FilterType\n"
        "2026-01-01 10:00:02,000 ERROR [1] txmq.rpc: unexpected error in StoreServicer.GetMessage\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "ValueError: -2 is not a valid FilterType\n"
        "2026-01-01 10:00:03,000 WARNING [1] txmq.rpc: a request did not parse\n"
    )
    figures = scan_log(log)
    assert (figures.tracebacks, figures.errors) == (2, 2)
    assert any("is not a valid FilterType" in e for e in figures.excerpts)
    assert len(figures.excerpts) == 1  # the ERROR line with its traceback's last line; the repeat is the same
    assert scan_log(log, offset=log.stat().st_size).tracebacks == 0


async def test_the_proxy_writes_non_utf8_header_values() -> None:
    received = bytearray()
    done = asyncio.Event()

    async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.extend(await reader.read(1000))
        done.set()
        writer.close()

    server = await asyncio.start_server(sink, "127.0.0.1", 0)
    proxy = RewritingProxy(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
    host, _, port = (await proxy.start()).rpartition(":")
    _, writer = await asyncio.open_connection(host, int(port))
    sent = b"head " + RAW_MARKER + b"000042 tail"
    writer.write(sent)
    await writer.drain()
    await asyncio.wait_for(done.wait(), 5)
    writer.close()
    await proxy.close()
    server.close()
    await server.wait_closed()
    assert len(received) == len(sent)
    assert RAW_MARKER not in received
    assert received.startswith(b"head \xff") and received.endswith(b" tail")
    assert proxy.replaced == 1


def test_targets_name_their_rpc() -> None:
    service = store_pb2.DESCRIPTOR.services_by_name["Store"]
    target = Target("store", service, service.methods_by_name["GetMessage"])
    assert (target.path, target.rpc, target.v2, target.streaming) == (
        "/txmq.v1.Store/GetMessage",
        "Store.GetMessage",
        False,
        False,
    )


def test_per_item_refusals_inside_txmq_answers() -> None:
    out = store_pb2.RecordAck.DESCRIPTOR
    typed = store_pb2.RecordAck(error=errors_pb2.ErrorDetail(code=errors_pb2.CODE_ILLEGAL_MESSAGE, message="torn"))
    internal = store_pb2.RecordAck(error=errors_pb2.ErrorDetail(code=errors_pb2.CODE_INTERNAL_ERROR, message="boom"))
    assert classify_txmq_answer([store_pb2.RecordAck().SerializeToString()], out).verdict == "ok"
    verdict = classify_txmq_answer([typed.SerializeToString()], out)
    assert (verdict.verdict, verdict.code) == ("typed", errors_pb2.CODE_ILLEGAL_MESSAGE)
    assert classify_txmq_answer([internal.SerializeToString()], out).verdict == "untyped"


def test_status_codes_md_is_read_per_rpc(tmp_path: Path) -> None:
    doc = tmp_path / "STATUS_CODES.md"
    doc.write_text(
        "Every RPC may also fail with `CODE_BAD_REQUEST`.\n\n"
        "## Store (`txmq.v1.Store`)\n\n| RPC | codes |\n|---|---|\n"
        "| SendMessage | `ILLEGAL_TOPIC` (not `[%\\|a-z]+`), `TOPIC_NOT_FOUND` |\n"
        "| SendBatch | as SendMessage; `BATCH_TOO_LARGE` |\n"
        "| GetQueueOffsets, SearchOffset | `ILLEGAL_QUEUE_ID` |\n\n"
        "## Transaction (`txmq.v1.Transaction`)\n\n| RPC | codes |\n|---|---|\n"
        "| TransactionPeer.DeliverCheck (between replicas) | `NOT_FOUND` |\n"
    )
    documented, general = documented_codes(doc)
    assert general == {errors_pb2.CODE_BAD_REQUEST}
    assert documented["/txmq.v1.Store/SendMessage"] == {errors_pb2.CODE_ILLEGAL_TOPIC, errors_pb2.CODE_TOPIC_NOT_FOUND}
    assert documented["/txmq.v1.Store/SendBatch"] == {
        errors_pb2.CODE_ILLEGAL_TOPIC,
        errors_pb2.CODE_TOPIC_NOT_FOUND,
        errors_pb2.CODE_BATCH_TOO_LARGE,
    }
    assert documented["/txmq.v1.Store/SearchOffset"] == {errors_pb2.CODE_ILLEGAL_QUEUE_ID}
    assert documented["/txmq.v1.TransactionPeer/DeliverCheck"] == {errors_pb2.CODE_NOT_FOUND}


def test_the_real_status_codes_md_names_every_txmq_rpc_it_documents() -> None:
    documented, general = documented_codes()
    assert errors_pb2.CODE_BAD_REQUEST in general
    assert errors_pb2.CODE_ILLEGAL_TOPIC in documented["/txmq.v1.Store/GetMessage"]
    assert set(documented) <= {t.path for t in enumerate_targets(ALL_SERVICES)}


def test_methods_open_to_anyone_expect_no_refusal() -> None:
    auth = fuzzed_services()["txmq.v1.Auth"]
    assert open_to_anyone(auth.methods_by_name["WhoAmI"])
    assert not open_to_anyone(auth.methods_by_name["CreateUser"])
    assert not open_to_anyone(store_pb2.DESCRIPTOR.services_by_name["Store"].methods_by_name["SendMessage"])


# -- a request write racing the end of the call (grpc.aio's 'Internal error from Core') ----


def _refusing_server() -> tuple[grpc.Server, int]:
    """A server (threads of its own) whose bidi method refuses every call a moment after it
    starts, before reading anything, as a txmq service refuses hostile credentials."""

    def refuse(requests: object, context: grpc.ServicerContext) -> object:
        time.sleep(0.1)
        context.set_trailing_metadata(_detail(errors_pb2.CODE_INVALID_CREDENTIALS))
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown access key")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.stream_stream_rpc_method_handler(refuse)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", {"Refuse": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def _bidi_case() -> Case:
    service = store_pb2.DESCRIPTOR.services_by_name["Store"]
    bidi = next(m for m in service.methods if m.client_streaming and m.server_streaming)
    return Case(0, Target("store", service, bidi), "metadata", [b""], "unknown access key; valid")


async def test_a_write_racing_the_servers_refusal_loses_its_status_in_the_client_not_the_server() -> None:
    """What the fuzzer once counted as the services' untyped errors, reproduced with no
    txmq code: the server's UNAUTHENTICATED (and its detail) reaches the call first, then
    our write, begun before the event loop learnt of it, fails, and grpc.aio replaces the
    status by INTERNAL 'Internal error from Core'. The fuzzer judges the first status."""
    server, port = _refusing_server()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream("/t.T/Refuse")()
            first = FirstStatus()
            call.add_done_callback(first)
            await call.wait_for_connection()  # our headers are out: the server refuses in 0.1 s
            time.sleep(0.5)  # noqa: ASYNC251 - on purpose: the refusal reaches the client's core, not the call
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call.write(b"")
            lost = CallStatus.of_error(raised.value)
            assert (lost.code, lost.details, lost.lost_to_a_write) == (
                grpc.StatusCode.INTERNAL,
                CLIENT_WRITE_FAILED,
                True,
            )
            assert await call.code() == grpc.StatusCode.INTERNAL  # for good: the call says so too
            assert first.status is not None
            assert (first.status.code, first.status.details) == (grpc.StatusCode.UNAUTHENTICATED, "unknown access key")
            verdict = await Caller._recover(call, raised.value, first, _bidi_case())
    finally:
        server.stop(None)
    assert (verdict.verdict, verdict.status, verdict.raced) == (
        "typed",
        "UNAUTHENTICATED/CODE_INVALID_CREDENTIALS",
        True,
    )


class _Done:
    """A finished call, as the status accessors of grpc.aio's calls answer."""

    def __init__(self, status: CallStatus) -> None:
        self.status = status

    async def code(self) -> grpc.StatusCode:
        return self.status.code

    async def details(self) -> str:
        return self.status.details

    async def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self.status.trailers

    async def debug_error_string(self) -> str:
        return self.status.debug


class _Error(grpc.aio.AioRpcError):
    def __init__(self, status: CallStatus) -> None:
        super().__init__(
            status.code, grpc.aio.Metadata(), grpc.aio.Metadata(*status.trailers), status.details, status.debug
        )


LOST = CallStatus(
    grpc.StatusCode.INTERNAL, CLIENT_WRITE_FAILED, (), 'Failed "execute_batch": (<SendMessageOperation>,)'
)
REFUSED = CallStatus(grpc.StatusCode.UNAUTHENTICATED, "no", tuple(_detail(errors_pb2.CODE_UNAUTHENTICATED)), "")


async def test_the_servers_status_arriving_after_the_failed_write_is_judged() -> None:
    call = _Done(LOST)
    first = FirstStatus()
    first(call)  # the failed write was handled first

    async def arrives() -> None:
        await asyncio.sleep(0.1)
        call.status = REFUSED

    task = asyncio.create_task(arrives())
    verdict = await Caller._recover(call, _Error(LOST), first, _bidi_case())
    await task
    assert (verdict.verdict, verdict.code, verdict.raced) == ("typed", errors_pb2.CODE_UNAUTHENTICATED, True)


async def test_a_status_never_recovered_is_the_fuzzers_problem_not_an_untyped_answer() -> None:
    first = FirstStatus()
    first(_Done(LOST))
    verdict = await Caller._recover(_Done(LOST), _Error(LOST), first, _bidi_case())
    assert verdict.verdict == "client_error"


def test_only_the_client_librarys_replacement_counts_as_lost() -> None:
    assert LOST.lost_to_a_write
    sent = CallStatus(grpc.StatusCode.INTERNAL, CLIENT_WRITE_FAILED, (), "INTERNAL:Internal error from Core")
    assert not sent.lost_to_a_write  # a server that says so itself is judged as it said
    assert not CallStatus(grpc.StatusCode.INTERNAL, CLIENT_WRITE_FAILED, tuple(_detail()), LOST.debug).lost_to_a_write
    assert not REFUSED.lost_to_a_write
