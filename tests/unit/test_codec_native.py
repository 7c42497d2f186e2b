"""txmq._codec_c (C) and txmq._codec_py (its pure-Python reference): identical results,
exception classes and messages on valid records, on damaged ones and on a seeded fuzz;
``verify`` agrees with ``txmq_store.codec.verify_record``, ``patch`` with
``encode_record``, ``fields`` with ``decode_record``; ``txmq.codec_native`` picks C.

The C module must be present: ``scripts/setup.sh`` (``pip install -e clients/python``)
builds it."""

from __future__ import annotations

import array
import dataclasses
import importlib
import os
import random
import struct
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from txmq import _codec_py, codec_native, records
from txmq.records import HEAD, HEADER_SIZE, MESSAGE_MAGIC, PREFIX, encode_for_send
from txmq_store import codec as store_codec
from txmq_store.codec import PreparedRecord, decode_record, encode_host, encode_record, verify_record
from txmq_store.model import OutgoingMessage
from txmq_store.validation import MessageEncoder, MessageLimits

try:
    from txmq import _codec_c as _native_module
except ImportError as exc:  # reported by the tests that need it, not at collection
    _native_module = None
    _NATIVE_IMPORT_ERROR: ImportError | None = exc
else:
    _NATIVE_IMPORT_ERROR = None


def native() -> ModuleType:
    if _native_module is None:
        pytest.fail(
            f"txmq._codec_c cannot be imported ({_NATIVE_IMPORT_ERROR}); the SDK's install builds it: "
            "`.venv/bin/python -m pip install -e clients/python` (scripts/setup.sh does)"
        )
    return _native_module


LIMITS = MessageLimits(max_body_bytes=1 << 20, max_properties_bytes=65535, max_record_bytes=1 << 21)
STORE_HOST = encode_host("10.1.2.3", 10911)
BORN_HOST = encode_host("::1", 4242)
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
Outcome = tuple[str, Any]


def outcome(fn: Callable[..., Any], *args: Any) -> Outcome:
    """("ok", result) or (exception class name, message): what two implementations
    must agree on. Only ValueError (and its subclasses) may be raised here."""
    try:
        return ("ok", fn(*args))
    except ValueError as exc:
        return (type(exc).__name__, str(exc))


def both(name: str, *args: Any) -> Outcome:
    """Run ``name`` in both modules; they must agree; returns the outcome."""
    py = outcome(getattr(_codec_py, name), *args)
    c = outcome(getattr(native(), name), *args)
    assert c == py, f"{name}: C {c!r} != Python {py!r}"
    return py


def both_patch(frame: bytes, *args: Any) -> tuple[Outcome, bytes]:
    """patch on two copies of ``frame``; outcomes and resulting bytes must agree, and a
    failed patch writes nothing."""
    results = []
    for mod in (_codec_py, native()):
        buf = bytearray(frame)
        results.append((outcome(mod.patch, buf, *args), bytes(buf)))
    assert results[0] == results[1], f"patch: Python {results[0][0]!r}, C {results[1][0]!r}"
    out, after = results[0]
    if out[0] != "ok":
        assert after == frame
    return out, after


def verify_reference(buf: bytes, pos: int, physical_offset: int) -> Outcome:
    try:
        return ("ok", verify_record(buf, pos, physical_offset))
    except store_codec.CorruptRecord as exc:
        return ("ValueError", str(exc))


# -- the corpus ---------------------------------------------------------------------


def sent(body: bytes = b"payload", topic: str = "TopicA", queue_id: int | None = 1, **kw: Any) -> bytes:
    return encode_for_send(topic, queue_id, body, kw.pop("unique_id", "UID-1"), **kw)


def patched(record: bytes, physical_offset: int = 4096, queue_offset: int = 17) -> bytes:
    frame = bytearray(record)
    _codec_py.patch(frame, 0, queue_offset, physical_offset, BORN_HOST, 222, STORE_HOST)
    return bytes(frame)


def stored(body: bytes, physical_offset: int, **kw: Any) -> tuple[bytes, PreparedRecord]:
    """A record as the store encodes a system send (sysflag, reconsume times and the
    prepared offset set), and its PreparedRecord."""
    msg = OutgoingMessage(
        topic=kw.pop("topic", "TopicB"),
        body=body,
        tags=kw.pop("tags", "TagA"),
        keys=("k1", "k2"),
        properties=kw.pop("properties", {"color": "red", "ünïcode": "välue"}),
        unique_id="UID-2",
        flag=-7,
        born_timestamp_ms=111,
        reconsume_times=3,
        prepared_transaction_offset=99,
    )
    encoder = MessageEncoder(limits=LIMITS, born_host=BORN_HOST, now_ms=1, system=True)
    rec = encoder.prepare(msg, 0, msg.topic, 5, {"REAL_TOPIC": "X"}, 0x8)
    return b"".join(encode_record(rec, 17, physical_offset, 222, STORE_HOST)), rec


def _corpus() -> list[tuple[bytes, int]]:
    """Valid records and the physical offset each claims."""
    rng = random.Random(20261123)
    out: list[tuple[bytes, int]] = []
    for n in (0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100, 255, 1000, 1024, 4095, 4096, 5000):
        out.append((patched(sent(rng.randbytes(n)), physical_offset=n * 131), n * 131))
    out.append((patched(sent(b"b", topic="T" * 255)), 4096))  # the longest topic
    out.append((patched(sent(b"b", topic="T" * 127, queue_id=None)), 4096))  # ANY_QUEUE
    unicode_props = {"ünïcode ключ": "välue 值 🎉", "emoji🎉": "\u0000\u00ff\uffff", "e": ""}
    out.append((patched(sent(b"u", tags="Täg", keys=("ключ", "k 2"), properties=unicode_props)), 4096))
    out.append((patched(sent(b"p", properties={"big": "é" * 30_000})), 4096))  # 60 KB of properties
    out.append((patched(sent(b"f", flag=-(2**31), born_timestamp_ms=I64_MAX), physical_offset=0), 0))
    out.append((patched(sent(b"f", flag=2**31 - 1), physical_offset=I64_MAX, queue_offset=I64_MIN), I64_MAX))
    out.append((patched(sent(b"n"), physical_offset=-1, queue_offset=-1), -1))
    for n in (1, 300, 5000):
        out.append((stored(rng.randbytes(n), 8192 + n)[0], 8192 + n))
    return out


CORPUS = _corpus()


def empty_topic_record(physical_offset: int = 4096) -> bytes:
    """119 bytes: empty body, topic and properties. ``fields`` decodes it; ``verify``
    (like verify_record) rejects it, a record has a topic."""
    frame = bytearray(PREFIX.pack(119, MESSAGE_MAGIC, 0) + bytes(HEAD.size) + b"\x00\x00\x00")
    _codec_py.patch(frame, 0, 0, physical_offset, bytes(20), 0, bytes(20))
    return bytes(frame)


def fix_crc(buf: bytearray, pos: int = 0) -> None:
    """Recompute the record CRC of a (damaged) record where its size field allows."""
    (size,) = struct.unpack_from(">I", buf, pos)
    if 12 <= size <= len(buf) - pos:
        struct.pack_into(">I", buf, pos + 8, zlib.crc32(buf[pos + 12 : pos + size]))


def expected_fields(buf: bytes, pos: int) -> tuple[Any, ...]:
    size, _, _ = PREFIX.unpack_from(buf, pos)
    head = HEAD.unpack_from(buf, pos + 12)
    body_len = head[-1]
    tpos = pos + HEADER_SIZE + body_len
    ppos = tpos + 1 + buf[tpos]
    return (size, *head[:-1], buf[pos + HEADER_SIZE : tpos], buf[tpos + 1 : ppos].decode("ascii"),
            buf[ppos + 2 : pos + size].decode("utf-8"))  # fmt: skip


# -- environment --------------------------------------------------------------------


def test_native_module_is_built_and_selected(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = native()
    if codec_native.NATIVE:
        assert (codec_native.verify, codec_native.patch, codec_native.fields) == (mod.verify, mod.patch, mod.fields)
    else:
        assert os.environ.get("TXMQ_PURE_PYTHON") == "1", "txmq.codec_native fell back to Python"
    try:
        monkeypatch.setenv("TXMQ_PURE_PYTHON", "1")
        forced = importlib.reload(codec_native)
        assert not forced.NATIVE
        assert forced.verify is _codec_py.verify
        monkeypatch.delenv("TXMQ_PURE_PYTHON")
        again = importlib.reload(codec_native)
        assert again.NATIVE and again.fields is mod.fields
    finally:
        monkeypatch.undo()
        importlib.reload(codec_native)


def test_constants_agree_with_the_layout() -> None:
    assert _codec_py.HEADER_SIZE == records.HEADER_SIZE == HEADER_SIZE == 116
    assert _codec_py.MESSAGE_MAGIC == records.MESSAGE_MAGIC
    assert _codec_py.RECORD_CRC_START == records.RECORD_CRC_START
    assert _codec_py.MIN_VERIFIED_SIZE == store_codec.MIN_RECORD_SIZE
    assert _codec_py._PREFIX.format == records.PREFIX.format
    assert _codec_py._HEAD.format == records.HEAD.format == ">IIiqqIq20sq20sIqI"


# -- valid records --------------------------------------------------------------------


@pytest.mark.parametrize("index", range(len(CORPUS)))
def test_valid_records_agree(index: int) -> None:
    record, phys = CORPUS[index]
    size = len(record)
    for buf, pos in ((record, 0), (b"\xee" * 13 + record + b"\x00" * 7, 13)):
        assert both("verify", buf, pos, phys) == ("ok", size) == verify_reference(buf, pos, phys)
        result = both("fields", buf, pos)
        assert result == ("ok", expected_fields(buf, pos))
        got = result[1]
        assert [type(v) for v in got] == [int] * 8 + [bytes, int, bytes, int, int, bytes, str, str]
        m = decode_record(buf, pos, verify_crc=True, expected_offset=phys)
        assert (got[0], got[1], got[2], got[3], got[4], got[5]) == (
            m.store_size, m.body_crc, m.queue_id, m.flag, m.queue_offset, m.commit_log_offset
        )  # fmt: skip
        assert (got[6], got[7], got[9], got[11], got[12]) == (
            m.sys_flag, m.born_timestamp_ms, m.store_timestamp_ms, m.reconsume_times, m.prepared_transaction_offset
        )  # fmt: skip
        assert (got[13], got[14]) == (m.body, m.topic)
        assert (got[8], got[10]) == (BORN_HOST, STORE_HOST)


def test_other_buffer_types_agree() -> None:
    record, phys = CORPUS[10]
    expected = both("fields", record, 0)
    for buf in (bytearray(record), memoryview(record), memoryview(bytearray(record)), array.array("B", record)):
        assert both("verify", buf, 0, phys) == ("ok", len(record))
        assert both("fields", buf, 0) == expected
    padded = record + bytes(-len(record) % 4)
    as_u32 = array.array("I", padded)  # measured in bytes, not items
    assert both("verify", as_u32, 0, phys) == ("ok", len(record))
    assert both("fields", memoryview(padded).cast("I"), 0) == expected


def test_empty_topic_record() -> None:
    rec = empty_topic_record()
    assert both("fields", rec, 0) == ("ok", (119, 0, 0, 0, 0, 4096, 0, 0, bytes(20), 0, bytes(20), 0, 0, b"", "", ""))
    assert both("verify", rec, 0, 4096) == verify_reference(rec, 0, 4096)
    assert both("verify", rec, 0, 4096)[1].startswith("impossible size 119")


# -- patch ----------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(len(CORPUS)))
def test_patch_makes_what_encode_record_makes(index: int) -> None:
    """A record patched with the store's fields is byte for byte the record the store
    encodes from the same fields."""
    record, _ = CORPUS[index]
    size, _, _ = PREFIX.unpack_from(record)
    (body_crc, queue_id, flag, _, _, sys_flag, born_ts, _, _, _, reconsume, prepared, body_len) = HEAD.unpack_from(
        record, 12
    )
    tpos = HEADER_SIZE + body_len
    rng = random.Random(index)
    born = rng.randbytes(20)
    store = rng.randbytes(20)
    rec = PreparedRecord(
        topic="",
        queue_id=queue_id,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp_ms=born_ts,
        born_host=born,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=record[HEADER_SIZE:tpos],
        body_crc=body_crc,
        tail=record[tpos:size],
        size=size,
        tag_code=0,
        tags="",
        keys=(),
        unique_id="",
        user_properties={},
        extra_properties=None,
        takes_queue_slot=True,
        indexed=True,
    )
    for qo, po, ts in ((0, 0, 0), (17, 4096, 1_700_000_000_000), (I64_MAX, I64_MIN, -1), (-5, I64_MAX, I64_MIN)):
        expected = b"".join(encode_record(rec, qo, po, ts, store))
        assert both_patch(record, 0, qo, po, born, ts, store) == (("ok", None), expected)
        # inside a larger frame, the bytes around untouched
        frame = b"\xab" * 9 + record + b"\xcd" * 5
        assert both_patch(frame, 9, qo, po, born, ts, store) == (("ok", None), frame[:9] + expected + frame[-5:])
        assert both("verify", expected, 0, po) == ("ok", size)


def test_patch_of_a_sent_record_equals_the_store_encoding() -> None:
    """The store's own PreparedRecord: a record encoded with other store fields and
    another born host, patched, is what encode_record makes."""
    for n in (1, 1024, 5000):
        _, rec = stored(random.Random(n).randbytes(n), 0)
        blank = b"".join(encode_record(dataclasses.replace(rec, born_host=bytes(20)), 0, 0, 0, bytes(20)))
        expected = b"".join(encode_record(rec, 33, 8192, 444, STORE_HOST))
        assert both_patch(blank, 0, 33, 8192, rec.born_host, 444, STORE_HOST) == (("ok", None), expected)
        assert both("fields", expected, 0)[1][4:11] == (33, 8192, 0x8, 111, rec.born_host, 444, STORE_HOST)


def test_patch_hosts_may_be_views_of_the_frame() -> None:
    record, _ = CORPUS[5]
    results = []
    for mod in (_codec_py, native()):
        frame = bytearray(record)
        view = memoryview(frame)
        # born host := the old store host, store host := the old born host (a swap)
        mod.patch(frame, 0, 1, 2, view[80:100], 3, view[52:72])
        del view
        results.append(bytes(frame))
    assert results[0] == results[1]
    assert results[0][52:72] == record[80:100] and results[0][80:100] == record[52:72]


def test_patch_rejects_without_writing() -> None:
    record, _ = CORPUS[3]
    ok = (0, 1, 2, BORN_HOST, 3, STORE_HOST)
    bad_args = [
        (-1, 1, 2, BORN_HOST, 3, STORE_HOST),
        (-(2**80), 1, 2, BORN_HOST, 3, STORE_HOST),
        (1, 1, 2, BORN_HOST, 3, STORE_HOST),  # the "record" at 1 has a nonsense size
        (len(record), 1, 2, BORN_HOST, 3, STORE_HOST),
        (len(record) + 1, 1, 2, BORN_HOST, 3, STORE_HOST),
        (2**63, 1, 2, BORN_HOST, 3, STORE_HOST),
        (2**200, 1, 2, BORN_HOST, 3, STORE_HOST),
        (0, 1, 2, BORN_HOST[:19], 3, STORE_HOST),
        (0, 1, 2, BORN_HOST + b"\x00", 3, STORE_HOST),
        (0, 1, 2, BORN_HOST, 3, b""),
        (0, 2**63, 2, BORN_HOST, 3, STORE_HOST),
        (0, 1, I64_MIN - 1, BORN_HOST, 3, STORE_HOST),
        (0, 1, 2, BORN_HOST, 2**64, STORE_HOST),
    ]
    for args in bad_args:
        assert both_patch(record, *args)[0][0] == "ValueError", args
    assert both_patch(record, *ok)[0] == ("ok", None)
    # frames too short for the record or its header, sizes below a header
    for n in (0, 1, 4, 115, 116, len(record) - 1):
        assert both_patch(record[:n], *ok)[0][0] == "ValueError", n
    for size in (0, 11, 12, 115, len(record) + 1, 0xFFFFFFFF):
        frame = struct.pack(">I", size) + record[4:]
        assert both_patch(frame, *ok)[0][0] == "ValueError", size
    # a 116-byte "record" (a header alone) is patched: the frame holds it
    assert both_patch(struct.pack(">I", 116) + record[4:116], *ok)[0] == ("ok", None)


def test_wrong_types_are_type_errors() -> None:
    record, phys = CORPUS[3]
    strided = memoryview(record * 2)[::2]
    for mod in (_codec_py, native()):
        for args in ((record.decode("latin-1"), 0, phys), (record, 0.0, phys), (record, 0, str(phys)), (strided, 0, 0)):
            with pytest.raises(TypeError):
                mod.verify(*args)
        for args in ((None, 0), (record, "0"), (strided, 0)):
            with pytest.raises(TypeError):
                mod.fields(*args)
        for frame in (record, memoryview(record), "text", memoryview(bytearray(record * 2))[::2]):
            with pytest.raises(TypeError):
                mod.patch(frame, 0, 1, 2, BORN_HOST, 3, STORE_HOST)
        for args in ((0, 1, 2, "x" * 20, 3, STORE_HOST), (0, 1.0, 2, BORN_HOST, 3, STORE_HOST)):
            with pytest.raises(TypeError):
                mod.patch(bytearray(record), *args)


# -- damaged records --------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 3, 14, 19, len(CORPUS) - 2])
def test_every_truncation(index: int) -> None:
    record, phys = CORPUS[index]
    for n in range(len(record)):
        cut = record[:n]
        got = both("verify", cut, 0, phys)
        assert got[0] == "ValueError" and got == verify_reference(cut, 0, phys), n
        assert both("fields", cut, 0)[0] == "ValueError", n
        assert both_patch(cut, 0, 1, 2, BORN_HOST, 3, STORE_HOST)[0][0] == "ValueError", n


@pytest.mark.parametrize("index", [1, 9, 19, 21, len(CORPUS) - 3])
def test_every_bit_flip(index: int) -> None:
    """Any single bit flipped: verify rejects it (the CRC, or a check before it) exactly
    as verify_record does; fields agrees between the two implementations."""
    record, phys = CORPUS[index]
    for i in range(len(record)):
        for bit in range(8):
            buf = bytearray(record)
            buf[i] ^= 1 << bit
            damaged = bytes(buf)
            got = both("verify", damaged, 0, phys)
            assert got[0] == "ValueError" and got == verify_reference(damaged, 0, phys), (i, bit)
            both("fields", damaged, 0)


def damaged(record: bytes, at: int, fmt: str, value: int, crc: bool = True) -> bytes:
    buf = bytearray(record)
    struct.pack_into(fmt, buf, at, value)
    if crc:
        fix_crc(buf)
    return bytes(buf)


def test_damaged_records() -> None:
    record, phys = CORPUS[6]  # 100-byte body
    (body_len,) = struct.unpack_from(">I", record, 112)
    tpos = HEADER_SIZE + body_len
    ppos = tpos + 1 + record[tpos]
    cases: dict[str, tuple[bytes, str | None, str | None]] = {
        # name: (bytes, verify's message start or None for ok, fields' class or None for ok)
        "wrong magic": (damaged(record, 4, ">I", 0x54584D42), "bad magic 0x54584d42", "ValueError"),
        "size too small": (damaged(record, 0, ">I", 119), "impossible size 119", "ValueError"),
        "size below header": (damaged(record, 0, ">I", 12), "impossible size 12", "ValueError"),
        "size beyond buffer": (damaged(record, 0, ">I", len(record) + 1), "impossible size", "ValueError"),
        "size u32 max": (damaged(record, 0, ">I", 0xFFFFFFFF), "impossible size", "ValueError"),
        "size one short": (damaged(record, 0, ">I", len(record) - 1), "field lengths disagree", "ValueError"),
        "crc": (damaged(record, 8, ">I", 0, crc=False), "record CRC mismatch", None),
        "physical offset": (damaged(record, 32, ">q", phys + 1), f"record at {phys} claims offset {phys + 1}", None),
        "body length u32 max": (
            damaged(record, 112, ">I", 0xFFFFFFFF),
            "body length 4294967295 overruns",
            "ValueError",
        ),
        "body length +1": (damaged(record, 112, ">I", body_len + 1), "field lengths disagree", "ValueError"),
        "body length -1": (damaged(record, 112, ">I", body_len - 1), "field lengths disagree", "ValueError"),
        "topic length 255": (damaged(record, tpos, ">B", 255), "field lengths disagree", "ValueError"),
        "topic length 0": (damaged(record, tpos, ">B", 0), "field lengths disagree", "ValueError"),
        "properties length 0": (damaged(record, ppos, ">H", 0), "field lengths disagree", "ValueError"),
        "properties length max": (damaged(record, ppos, ">H", 0xFFFF), "field lengths disagree", "ValueError"),
        "invalid UTF-8": (damaged(record, ppos + 3, ">B", 0xFF), None, "UnicodeDecodeError"),
        "truncated UTF-8": (damaged(record, len(record) - 1, ">B", 0xC3), None, "UnicodeDecodeError"),
        "non-ASCII topic": (damaged(record, tpos + 1, ">B", 0xC4), None, "UnicodeDecodeError"),
        "topic NUL": (damaged(record, tpos + 1, ">B", 0), None, None),
    }
    for name, (buf, verify_message, fields_class) in cases.items():
        got = both("verify", buf, 0, phys)
        assert got == verify_reference(buf, 0, phys), name
        if verify_message is None:
            assert got == ("ok", len(record)), name
        else:
            assert got[0] == "ValueError" and got[1].startswith(verify_message), (name, got)
        fields = both("fields", buf, 0)
        assert fields[0] == (fields_class or "ok"), (name, fields)


def test_undecodable_text_raises_the_same_unicode_error() -> None:
    record, _ = CORPUS[6]
    (body_len,) = struct.unpack_from(">I", record, 112)
    tpos = HEADER_SIZE + body_len
    errors = []
    for mod in (_codec_py, native()):
        with pytest.raises(UnicodeDecodeError) as info:
            mod.fields(damaged(record, tpos + 3, ">B", 0x80), 0)
        e = info.value
        errors.append((e.encoding, e.object, e.start, e.end, e.reason))
    assert errors[0] == errors[1] and errors[0][0] == "ascii"


def test_positions_out_of_bounds() -> None:
    record, phys = CORPUS[4]
    buf = record + record
    assert both("verify", buf, len(record), phys) == ("ok", len(record))  # same claimed offset
    for pos in (-1, -len(buf), -(2**64), 1, len(record) - 1, len(buf) - 12, len(buf) - 1, len(buf), len(buf) + 1,
                2**31, 2**32 + 3, 2**63 - 1, 2**63, 2**64, 2**100):  # fmt: skip
        assert both("verify", buf, pos, phys)[0] == "ValueError", pos
        assert both("verify", buf, pos, 2**70)[0] == "ValueError", pos
        assert both("fields", buf, pos)[0] == "ValueError", pos
        if pos >= 0:
            assert both("verify", buf, pos, phys) == verify_reference(buf, pos, phys), pos
    for phys_arg in (2**63, -(2**63) - 1, 2**64 + phys, True):
        assert both("verify", record, 0, phys_arg)[0] == "ValueError"


# -- fuzz ---------------------------------------------------------------------------------


def mutate(rng: random.Random, record: bytes) -> tuple[bytes, int]:
    """A damaged copy of ``record`` and the position it starts at."""
    buf = bytearray(record)
    size = len(buf)
    body_len = struct.unpack_from(">I", buf, 112)[0]
    tpos = HEADER_SIZE + body_len
    ppos = tpos + 1 + buf[tpos]
    kind = rng.randrange(7)
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(size)] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncated
        del buf[rng.randrange(size) :]
    elif kind == 2:  # a length field rewritten
        at, fmt, bits = rng.choice([(0, ">I", 32), (112, ">I", 32), (tpos, ">B", 8), (ppos, ">H", 16)])
        current = struct.unpack_from(fmt, buf, at)[0]
        value = rng.choice([0, 1, 2**bits - 1, current - 1, current + 1, current + 2, rng.getrandbits(bits)])
        struct.pack_into(fmt, buf, at, value % 2**bits)
    elif kind == 3:  # garbage in the topic or the properties
        start = rng.choice([tpos + 1, ppos + 2])
        for _ in range(rng.randint(1, 3)):
            buf[min(size - 1, start + rng.randrange(max(1, size - start)))] = rng.choice([0x80, 0xC3, 0xFF, 0xED, 0xF4])
    elif kind == 4:  # a header field rewritten (magic, offsets, hosts...)
        at = rng.randrange(4, HEADER_SIZE - 4)
        buf[at : at + 4] = rng.randbytes(4)
    elif kind == 5:  # junk after
        buf += rng.randbytes(rng.randrange(1, 40))
    else:  # random bytes in a record's clothes
        buf = bytearray(PREFIX.pack(rng.randrange(0, 400), MESSAGE_MAGIC, 0) + rng.randbytes(rng.randrange(0, 400)))
    if rng.random() < 0.6 and len(buf) >= 12:
        fix_crc(buf)
    pad = rng.choice([0, 0, 1, 7])
    return bytes(rng.randbytes(pad) + buf), pad


def test_fuzz_two_thousand_mutations() -> None:
    rng = random.Random(0x7E57C0DE)
    sources = [(rec, phys) for rec, phys in CORPUS if len(rec) < 2000]
    seen: set[str] = set()
    for i in range(2000):
        record, phys = rng.choice(sources)
        buf, pos = mutate(rng, record)
        claimed = phys if rng.random() < 0.9 else rng.choice([phys + 1, -1, I64_MAX])
        got = both("verify", buf, pos, claimed)
        assert got == verify_reference(buf, pos, claimed), i
        seen.add(f"verify {got[0]} {got[1] if got[0] == 'ok' else got[1].split(' ')[0]}")
        fields = both("fields", buf, pos)
        seen.add(f"fields {fields[0]}")
        args = (rng.getrandbits(64) - 2**63, rng.getrandbits(64) - 2**63, rng.randbytes(20), rng.getrandbits(63),
                rng.randbytes(20))  # fmt: skip
        both_patch(buf, pos, *args)
    # the fuzz reached past the cheap checks, into every kind of outcome
    assert {"fields ok", "fields ValueError", "fields UnicodeDecodeError"} <= seen
    assert any(s.startswith("verify ok") for s in seen)
    assert {"verify ValueError record", "verify ValueError field", "verify ValueError body"} <= seen
