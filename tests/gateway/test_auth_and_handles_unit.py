"""Unit tests of what a v2 client cannot forge (issue 16): signed transaction handles
(MAC round trip, tampering, a wrong key, every malformed class answered
INVALID_TRANSACTION_ID), the clock-skew window of the authorization signature (edges on
a manual clock, malformed dates) and header values that are not text. No processes."""

from __future__ import annotations

import base64
import json
import logging
import sys
from typing import Any

import grpc
import pytest
from support.clock import ManualClock

from txmq.v1 import txcheck_pb2
from txmq_gateway.auth import (
    BAD_CREDENTIALS,
    DEFAULT_CLOCK_SKEW_MS,
    Authenticator,
    SingleKey,
    header_text,
    parse_date_time,
    sign,
)
from txmq_gateway.convert import (
    HANDLE_MAC_BYTES,
    MAX_TRANSACTION_ID_CHARS,
    HandleSigner,
    TransactionHandle,
    decode_token,
    encode_token,
)
from txmq_gateway.producer import ProducerCore
from txmq_gateway.service import HeaderEncodingLog
from txmq_gateway.servicer import MessagingServicer, add_messaging_servicer
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError, shorten
from txmq_gateway.v2 import Code, pb, svc, svc_grpc

KEY = bytes(range(32))
HANDLE = TransactionHandle("store-0", 123_456, 17, "7F00000100012A9F0000000000000001")


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def refused(signer: HandleSigner, token: str) -> str:
    """The message of the INVALID_TRANSACTION_ID that ``token`` gets."""
    with pytest.raises(GatewayError) as info:
        signer.decode(token)
    assert info.value.code == Code.INVALID_TRANSACTION_ID, info.value
    assert len(info.value.message) < 250  # never the whole input
    return info.value.message


def signed_fields(signer: HandleSigner, fields_text: str) -> str:
    """A token whose MAC is right over ``fields_text`` (what only a key holder can make)."""
    return f"{fields_text}.{b64(signer._mac(fields_text))}"


# -- transaction handles ---------------------------------------------------------------------


def test_a_handle_round_trips_through_any_signer_with_the_key() -> None:
    token = HandleSigner(KEY).encode(HANDLE)
    assert HandleSigner(KEY).decode(token) == HANDLE  # another gateway, or after a restart
    fields, _, mac = token.partition(".")
    assert json.loads(base64.urlsafe_b64decode(fields + "==")) == {
        "s": "store-0",
        "c": 123_456,
        "q": 17,
        "t": HANDLE.transaction_id,
    }
    assert len(base64.urlsafe_b64decode(mac + "==")) == HANDLE_MAC_BYTES
    assert len(token) < 200


def test_a_key_shorter_than_16_bytes_is_refused() -> None:
    with pytest.raises(ValueError):
        HandleSigner(b"k" * 15)


def test_ephemeral_signers_do_not_accept_each_others_handles() -> None:
    a, b = HandleSigner.ephemeral(), HandleSigner.ephemeral()
    assert a.decode(a.encode(HANDLE)) == HANDLE
    assert "signature does not match" in refused(b, a.encode(HANDLE))


def test_a_tampered_field_is_refused() -> None:
    signer = HandleSigner(KEY)
    _, _, mac = signer.encode(HANDLE).partition(".")
    for changed in (
        {"s": "store-0", "c": 0, "q": 17, "t": HANDLE.transaction_id},  # the offset of the issue
        {"s": "store-1", "c": 123_456, "q": 17, "t": HANDLE.transaction_id},
        {"s": "store-0", "c": 123_456, "q": 18, "t": HANDLE.transaction_id},
        {"s": "store-0", "c": 123_456, "q": 17, "t": "7F00000100012A9F0000000000000002"},
    ):
        assert "signature does not match" in refused(signer, f"{encode_token(changed)}.{mac}")


def test_a_tampered_mac_or_one_of_another_key_is_refused() -> None:
    signer = HandleSigner(KEY)
    fields, _, mac = signer.encode(HANDLE).partition(".")
    raw = bytearray(base64.urlsafe_b64decode(mac + "=="))
    raw[0] ^= 1
    assert "signature does not match" in refused(signer, f"{fields}.{b64(bytes(raw))}")
    assert "signature does not match" in refused(signer, f"{fields}.{b64(bytes(raw[:8]))}")  # truncated
    other = HandleSigner(bytes(reversed(KEY)))
    assert "signature does not match" in refused(signer, other.encode(HANDLE))


FORGED_JSON = encode_token({"s": "store-0", "c": 0, "q": 0, "t": "x"})  # what the issue sent, unsigned


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "carries no signature"),
        (FORGED_JSON, "carries no signature"),  # valid JSON, no MAC (today's format)
        (FORGED_JSON + ".", "not in the gateway's format"),
        (FORGED_JSON + "." + b64(b"\0" * 16), "signature does not match"),  # wrong MAC
        ("!!!." + b64(b"\0" * 16), "not in the gateway's format"),  # not base64
        (FORGED_JSON + ".a", "not in the gateway's format"),  # a base64 length that cannot be
        (FORGED_JSON + ".ab=c", "not in the gateway's format"),  # padding inside
        (FORGED_JSON + "." + b64(b"\0" * 16) + ".x", "not in the gateway's format"),
        ("é." + b64(b"\0" * 16), "not in the gateway's format"),
        # The classes that answered INTERNAL before: overflow and recursion, unsigned.
        (encode_token({"s": "s", "c": 10**40, "q": 0, "t": "x"}) + "." + b64(b"\0" * 16), "signature does not match"),
        (b64(b"[" * 700) + "." + b64(b"\0" * 16), "signature does not match"),
        ("A" * (MAX_TRANSACTION_ID_CHARS + 1), f"longer than {MAX_TRANSACTION_ID_CHARS}"),
        ("A" * 10_000_000, f"longer than {MAX_TRANSACTION_ID_CHARS}"),
    ],
)
def test_malformed_or_forged_ids_are_invalid_transaction_id(token: str, reason: str) -> None:
    message = refused(HandleSigner(KEY), token)
    assert reason in message and "not issued by txmq" in message


@pytest.mark.parametrize(
    "fields_text",
    [
        b64(b"not json"),
        b64(b"\xff\xfe"),  # not UTF-8
        b64(b"[1, 2]"),  # not an object
        b64(b"[" * 700),  # nested deep
        encode_token({"s": "s", "c": 0, "q": 0}),  # a field missing
        encode_token({"s": "s", "c": "0", "q": 0, "t": "x"}),  # a string offset
        encode_token({"s": "s", "c": True, "q": 0, "t": "x"}),  # a bool is no offset
        encode_token({"s": "s", "c": 1.5, "q": 0, "t": "x"}),
        encode_token({"s": "s", "c": -1, "q": 0, "t": "x"}),
        encode_token({"s": "s", "c": 2**63, "q": 0, "t": "x"}),  # past int64
        encode_token({"s": "s", "c": 0, "q": 10**40, "t": "x"}),
        encode_token({"s": 5, "c": 0, "q": 0, "t": "x"}),
        encode_token({"s": "", "c": 0, "q": 0, "t": "x"}),
        encode_token({"s": "s", "c": 0, "q": 0, "t": ["x"]}),
        b64(b'{"s":"s","c":' + b"9" * 5000 + b',"q":0,"t":"x"}')[:900],  # cut, still signed
    ],
)
def test_signed_but_malformed_fields_are_invalid_transaction_id(fields_text: str) -> None:
    """Only a holder of the key can make these; they are refused all the same."""
    signer = HandleSigner(KEY)
    token = signed_fields(signer, fields_text)
    assert len(token) <= MAX_TRANSACTION_ID_CHARS
    assert "malformed fields" in refused(signer, token)


def test_the_largest_offsets_are_kept() -> None:
    signer = HandleSigner(KEY)
    handle = TransactionHandle("s", 2**63 - 1, 2**63 - 1, "t")
    assert signer.decode(signer.encode(handle)) == handle


def test_a_long_id_is_quoted_short() -> None:
    message = refused(HandleSigner(KEY), "Z" * 1000)
    assert "Z" * 65 not in message and "1000 characters" in message
    assert shorten("x" * 10) == "'xxxxxxxxxx'"
    assert shorten(b"\xff" * 100).endswith("(100 bytes)")


def test_decode_token_refuses_deep_nesting_and_long_tokens_with_value_error() -> None:
    """Receipt handles decode with decode_token too: no RecursionError escapes it."""
    with pytest.raises(ValueError):
        decode_token(b64(b"[" * 3000))
    with pytest.raises(ValueError):
        decode_token("A" * 5000)
    with pytest.raises(ValueError):
        decode_token("a b")  # not base64url: no character is skipped
    assert decode_token(encode_token({"x": 1})) == {"x": 1}


class RecordingBackend:
    def __init__(self) -> None:
        self.ends: list[txcheck_pb2.EndTransactionRequest] = []

    async def end_transaction(self, request: txcheck_pb2.EndTransactionRequest) -> None:
        self.ends.append(request)


def end_request(transaction_id: str, message_id: str = HANDLE.transaction_id) -> svc.EndTransactionRequest:
    return svc.EndTransactionRequest(
        topic=pb.Resource(name="Orders"),
        message_id=message_id,
        transaction_id=transaction_id,
        resolution=pb.COMMIT,
        source=pb.SOURCE_CLIENT,
    )


async def test_end_transaction_with_a_forged_id_reaches_nothing() -> None:
    backend = RecordingBackend()
    producer = ProducerCore(backend, GatewaySettings(), handles=HandleSigner(KEY))  # type: ignore[arg-type]
    for forged in (
        encode_token({"s": "store-0", "c": 0, "q": 0, "t": HANDLE.transaction_id}),
        HandleSigner(b"another cluster's key!").encode(HANDLE),
        encode_token({"s": "s", "c": 10**40, "q": 0, "t": "x"}) + "." + b64(b"\0" * 16),
    ):
        with pytest.raises(GatewayError) as info:
            await producer.end_transaction(end_request(forged))
        assert info.value.code == Code.INVALID_TRANSACTION_ID
    assert backend.ends == []
    await producer.end_transaction(end_request(HandleSigner(KEY).encode(HANDLE)))
    [end] = backend.ends
    assert (end.store_id, end.commit_log_offset, end.tran_state_table_offset, end.transaction_id) == (
        "store-0",
        123_456,
        17,
        HANDLE.transaction_id,
    )


# -- the signature's date ------------------------------------------------------------------

NOW = "20261122T101500Z"
NOW_MS = 1_795_342_500_000


def signed(date: str, *, ak: str = "AK", sk: str = "SK") -> list[tuple[str, str | bytes]]:
    return [
        ("x-mq-date-time", date),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sign(sk.encode(), date)}",
        ),
    ]


def auth_at(wall_ms: int, **kw: Any) -> Authenticator:
    return Authenticator(SingleKey("AK", "SK"), clock=ManualClock(wall_ms=wall_ms), **kw)


def unauthorized(auth: Authenticator, metadata: list[tuple[str, str | bytes]]) -> str:
    with pytest.raises(GatewayError) as info:
        auth.check(metadata)
    assert info.value.code == Code.UNAUTHORIZED
    return info.value.message


def test_the_default_window_is_15_minutes_as_the_settings_say() -> None:
    assert DEFAULT_CLOCK_SKEW_MS == GatewaySettings().auth_clock_skew_ms == 900_000
    assert Authenticator.from_settings(GatewaySettings(access_key="a", secret_key="b")).clock_skew_ms == 900_000
    assert (
        Authenticator.from_settings(
            GatewaySettings(access_key="a", secret_key="b", auth_clock_skew_ms=5_000)
        ).clock_skew_ms
        == 5_000
    )


@pytest.mark.parametrize(
    ("clock_ms", "accepted"),
    [
        (NOW_MS, True),
        (NOW_MS - DEFAULT_CLOCK_SKEW_MS, True),  # the date is 15 min ahead: the edge
        (NOW_MS - DEFAULT_CLOCK_SKEW_MS - 1, False),
        (NOW_MS + DEFAULT_CLOCK_SKEW_MS, True),  # the date is 15 min old: the edge
        (NOW_MS + DEFAULT_CLOCK_SKEW_MS + 1, False),
    ],
)
def test_the_date_must_be_within_the_window_either_way(clock_ms: int, accepted: bool) -> None:
    auth = auth_at(clock_ms)
    if accepted:
        assert auth.check(signed(NOW)) == "AK"
    else:
        message = unauthorized(auth, signed(NOW))
        assert "auth_clock_skew_ms" in message and ("ahead of" in message or "behind" in message)


def test_a_narrow_window_and_no_window() -> None:
    assert auth_at(NOW_MS + 1_000, clock_skew_ms=1_000).check(signed(NOW)) == "AK"
    unauthorized(auth_at(NOW_MS + 1_001, clock_skew_ms=1_000), signed(NOW))
    assert auth_at(NOW_MS + 10 * 365 * 86_400_000, clock_skew_ms=0).check(signed(NOW)) == "AK"  # 0: no window


@pytest.mark.parametrize(
    "date",
    [
        "20010101T000000Z",
        "20991231T235959Z",
        "19700101T000000Z",
        "9999-12-31T23:59:59-23:59",
        "0001-01-01T00:00:00+23:59",
    ],
)
def test_old_and_future_dates_are_replays(date: str) -> None:
    message = unauthorized(auth_at(NOW_MS), signed(date))
    assert repr(date) in message and NOW in message  # what the client sent, what the gateway reads


def test_a_client_writing_local_time_is_told_to_run_in_utc() -> None:
    """RocketMQ's Java/Python/Go/C# clients write local time followed by Z: 8 h ahead in
    UTC+8."""
    message = unauthorized(auth_at(NOW_MS), signed("20261122T181500Z"))
    assert "8h00m ahead of" in message and "TZ=UTC" in message


@pytest.mark.parametrize(
    "date",
    [
        "x",
        "20261122T101500",  # no Z
        "20261122101500Z",
        "2026-11-22T10:15:00",  # no offset
        "20261322T101500Z",  # month 13
        "20260230T101500Z",  # 30 February
        "20261122T246000Z",
        "20261122T101560Z",  # a leap second is not a time here
        "20261122T101500z",
        " 20261122T101500Z",
        "2026-11-22T10:15:00+25:00",
        "2" * 5000,
    ],
)
def test_malformed_dates_are_unauthorized(date: str) -> None:
    message = unauthorized(auth_at(NOW_MS, clock_skew_ms=0), signed(date))
    assert "is not a UTC date yyyyMMdd'T'HHmmss'Z'" in message
    assert len(message) < 200


def test_rfc3339_dates_with_an_offset_are_read_as_such() -> None:
    """The Rust client signs RFC 3339 local time with its offset: that is a real instant."""
    assert parse_date_time(NOW) == NOW_MS
    assert parse_date_time("2026-11-22T18:15:00.123456789+08:00") == NOW_MS + 123
    assert parse_date_time("2026-11-22T10:15:00Z") == NOW_MS
    assert parse_date_time("2026-11-22T05:15:00-05:00") == NOW_MS
    assert auth_at(NOW_MS).check(signed("2026-11-22T18:15:00.5+08:00")) == "AK"


def test_a_bad_signature_is_refused_before_the_window_is_told() -> None:
    message = unauthorized(auth_at(NOW_MS), signed("20010101T000000Z", sk="wrong"))
    assert message == BAD_CREDENTIALS


def test_the_lookup_names_the_secret_and_the_access_key_is_returned() -> None:
    secrets = {"alice": b"a-secret", "bob": b"b-secret"}
    auth = Authenticator(secrets.get, clock=ManualClock(wall_ms=NOW_MS))
    assert auth.enabled
    assert auth.check(signed(NOW, ak="alice", sk="a-secret")) == "alice"
    assert auth.check(signed(NOW, ak="bob", sk="b-secret")) == "bob"
    assert unauthorized(auth, signed(NOW, ak="bob", sk="a-secret")) == BAD_CREDENTIALS
    assert unauthorized(auth, signed(NOW, ak="carol", sk="a-secret")) == BAD_CREDENTIALS


# -- header values that are not text ----------------------------------------------------------


@pytest.mark.parametrize(
    "metadata",
    [
        [("x-mq-date-time", NOW), ("authorization", b"\xff\xfe MQv2-HMAC-SHA1")],  # binary, not UTF-8
        [("x-mq-date-time", NOW), ("authorization", "MQv2-HMAC-SHA1 Credential=\xff")],  # gRPC's latin-1 fallback
        [("x-mq-date-time", b"\xc3\x28"), signed(NOW)[1]],
        [("x-mq-date-time", "2026\x001122T101500Z"), signed(NOW)[1]],
        [("x-mq-date-time", "\uff12\uff10\uff12\uff161122T101500Z"), signed(NOW)[1]],  # full-width digits
    ],
)
def test_headers_that_are_not_ascii_text_are_unauthorized(metadata: list[tuple[str, str | bytes]]) -> None:
    message = unauthorized(auth_at(NOW_MS), metadata)
    assert "not" in message and ("ASCII" in message or "printable" in message)


def test_binary_headers_the_gateway_does_not_read_are_left_alone() -> None:
    """The finding: any *-bin header that was not UTF-8 made the check fail INTERNAL."""
    metadata = [*signed(NOW), ("x-anything-bin", b"\xff\xfe\x00"), ("x-mq-client-id-bin", b"\x80")]
    assert auth_at(NOW_MS).check(metadata) == "AK"
    assert header_text(metadata, "x-mq-client-id", Code.BAD_REQUEST) == ""


class Context:
    def __init__(self, metadata: list[tuple[str, str | bytes]]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> list[tuple[str, str | bytes]]:
        return self.metadata


class Clients:
    def __init__(self) -> None:
        self.beats: list[str] = []

    def heartbeat(self, client_id: str, *_: object) -> None:
        self.beats.append(client_id)


def servicer(auth: Authenticator) -> tuple[MessagingServicer, Clients]:
    clients = Clients()
    return MessagingServicer(
        address="127.0.0.1:1", auth=auth, backend=None, producer=None, consumer=None, clients=clients,  # type: ignore[arg-type]
    ), clients  # fmt: skip


@pytest.mark.parametrize(
    ("metadata", "code"),
    [
        ([("x-mq-client-id", "caf\xe9")], Code.BAD_REQUEST),
        ([("x-mq-client-id", b"\xff")], Code.BAD_REQUEST),
        ([("x-mq-client-id", "c1"), ("authorization", b"\xff")], Code.UNAUTHORIZED),
    ],
)
async def test_bad_header_values_through_the_servicer_are_typed(
    metadata: list[tuple[str, str | bytes]], code: int
) -> None:
    auth = Authenticator(None) if code != Code.UNAUTHORIZED else auth_at(NOW_MS)
    rpc, clients = servicer(auth)
    response = await rpc.Heartbeat(svc.HeartbeatRequest(), Context(metadata))  # type: ignore[arg-type]
    assert response.status.code == code
    assert clients.beats == []
    frames = [f async for f in rpc.Telemetry(_nothing(), Context(metadata))]  # type: ignore[arg-type]
    assert [f.status.code for f in frames] == [code]


async def test_a_binary_header_does_not_disturb_a_good_call() -> None:
    rpc, clients = servicer(auth_at(NOW_MS))
    metadata = [("x-mq-client-id", "c1"), *signed(NOW), ("x-trace-bin", b"\xff\xfe")]
    response = await rpc.Heartbeat(svc.HeartbeatRequest(client_type=pb.PRODUCER), Context(metadata))  # type: ignore[arg-type]
    assert response.status.code == Code.OK and clients.beats == ["c1"]


async def _nothing() -> Any:
    return
    yield


# -- no traceback per call in the log ------------------------------------------------------------


def grpc_record(msg: str, *args: object) -> logging.LogRecord:
    try:
        b"\xff".decode()
    except UnicodeDecodeError:
        exc_info = sys.exc_info()
    return logging.LogRecord("grpc._cython.cygrpc", logging.ERROR, "cygrpc", 1, msg, args, exc_info)


def test_grpc_header_decoding_errors_become_one_warning_a_minute() -> None:
    now = [0.0]
    quiet = HeaderEncodingLog(every_s=60.0, clock=lambda: now[0])
    first = grpc_record("Invalid encoding on %s", b"\xff\xfe secret-ish value")
    assert quiet.filter(first)
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert "\\xff" not in first.getMessage() and "secret-ish" not in first.getMessage()
    for _ in range(5):
        assert not quiet.filter(grpc_record("Invalid encoding on %s", b"\xff"))
    now[0] = 60.0
    again = grpc_record("Invalid encoding on %s", b"\xff")
    assert quiet.filter(again) and "5 more" in again.getMessage()
    other = grpc_record("Unexpected [%s] raised", "X")
    assert quiet.filter(other) and other.levelno == logging.ERROR  # anything else untouched


async def test_rpcs_not_served_are_unimplemented_without_an_error_logged(caplog: pytest.LogCaptureFixture) -> None:
    rpc, _ = servicer(Authenticator(None))
    server = grpc.aio.server()
    add_messaging_servicer(server, rpc)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = svc_grpc.MessagingServiceStub(channel)
            calls = [lambda: stub.SyncLiteSubscription(svc.SyncLiteSubscriptionRequest(), timeout=5)]
            for call in calls:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call()
                assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            # Served since (PullMessage, UpdateOffset, RecallMessage): a bad request is a typed status.
            recall = await stub.RecallMessage(svc.RecallMessageRequest(recall_handle="txr1.x"), timeout=5)
            assert recall.status.code == Code.BAD_REQUEST and "recall handle" in recall.status.message
            assert (await stub.UpdateOffset(svc.UpdateOffsetRequest(), timeout=5)).status.code == Code.ILLEGAL_TOPIC
            frames = [f async for f in stub.PullMessage(svc.PullMessageRequest(), timeout=5)]
            assert [f.status.code for f in frames] == [Code.ILLEGAL_TOPIC]
    finally:
        await server.stop(0)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_verified_client_certificate_names_the_user_of_an_unsigned_call() -> None:
    secrets = {"alice": b"a-secret", "bob": b"b-secret"}
    auth = Authenticator(secrets.get, clock=ManualClock(wall_ms=NOW_MS))
    assert auth.check([], certificate_user="alice") == "alice"
    with pytest.raises(GatewayError) as info:
        auth.check([], certificate_user="ghost")
    assert (info.value.code, info.value.message) == (Code.UNAUTHORIZED, "the client certificate names no enabled user")
    # A signature, when there is one, wins: a wrong one is refused whatever the certificate says.
    assert auth.check(signed(NOW, ak="bob", sk="b-secret"), certificate_user="alice") == "bob"
    with pytest.raises(GatewayError) as info:
        auth.check(signed(NOW, ak="bob", sk="a-secret"), certificate_user="alice")
    assert info.value.message == BAD_CREDENTIALS
