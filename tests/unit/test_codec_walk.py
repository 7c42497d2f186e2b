"""``walk``, the one-pass check of a follower's shipment: txmq._codec_c and its
pure-Python reference agree (results, exception classes, messages) on valid spans, on
every truncation and bit flip, on misplaced blank markers and on a seeded fuzz; a span
passes exactly when every record in it passes ``verify`` at its own offset; the fields
it returns are ``decode_record``'s."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from test_codec_native import I64_MAX, mutate, native, outcome, patched, sent, stored

from txmq import _codec_py
from txmq.records import BLANK_MAGIC, decode_properties
from txmq_store.codec import CorruptRecord, decode_record, encode_blank, walk_records
from txmq_store.replication import check_copied

SEGMENT_END = 1 << 30


def both_walk(buf: Any, offset: int, segment_end: int = SEGMENT_END) -> tuple[str, Any]:
    py = outcome(_codec_py.walk, buf, offset, segment_end)
    c = outcome(native().walk, buf, offset, segment_end)
    assert c == py, f"walk: C {c!r} != Python {py!r}"
    return py


def span(records: list[bytes], offset: int) -> bytes:
    """``records`` re-placed one after the other from ``offset``."""
    out = bytearray()
    for record in records:
        out += patched(record, physical_offset=offset + len(out), queue_offset=len(out))
    return bytes(out)


def mixed(rng: random.Random) -> list[bytes]:
    unicode_props = {"ünïcode ключ": "välue 值 🎉", "e": ""}
    return [
        sent(rng.randbytes(10)),
        sent(b"u", tags="Täg", keys=("ключ", "k 2"), properties=unicode_props),
        sent(b"t", topic="T" * 255, keys=("only",)),
        sent(b"n", tags=None, keys=()),
        stored(rng.randbytes(300), 0)[0],
        sent(rng.randbytes(2000), topic="Other"),
    ]


def test_a_valid_span_gives_decode_records_fields() -> None:
    rng = random.Random(1)
    for offset in (0, 4096, 2**40):
        data = span(mixed(rng), offset)
        kind, walked = both_walk(data, offset)
        assert kind == "ok" and len(walked) == 6
        at = 0
        for rec in walked:
            msg = decode_record(data, at, verify_crc=True, expected_offset=offset + at)
            props = decode_properties(rec[7])
            assert rec[:7] == (offset + at, msg.store_size, msg.queue_id, msg.queue_offset, msg.sys_flag,
                               msg.store_timestamp_ms, msg.topic)  # fmt: skip
            assert props == msg.all_properties()
            assert (rec[8], tuple(rec[9].split(" ")) if rec[9] else (), rec[10]) == (msg.tags, msg.keys, msg.unique_id)
            at += msg.store_size
        assert at == len(data)
    assert both_walk(b"", 5) == ("ok", [])
    assert both_walk(bytearray(span(mixed(rng), 0)), 0)[0] == "ok"
    assert both_walk(memoryview(span(mixed(rng), 0)), 0)[0] == "ok"


def test_field_properties_as_a_dict_would_have_them() -> None:
    """TAGS / KEYS / UNIQ_KEY: the last of a name wins; a name without a value is ""."""
    cases = {
        "TAGS\x01a\x02TAGS\x01b\x02": ("b", "", ""),
        "TAGS\x01a\x02TAGS\x02": ("", "", ""),
        "\x02\x02KEYS\x01x y\x02UNIQ_KEY\x01u\x01v\x02": ("", "x y", "u\x01v"),
        "TAGSX\x01a\x02TAG\x01b\x02keys\x01c\x02": ("", "", ""),
        "UNIQ_KEY\x01\x02TAGS\x01é\x02": ("é", "", ""),
    }
    for text, want in cases.items():
        record = sent(b"p", properties=None, unique_id="X")
        body_end = 116 + 1
        topic_len = record[body_end]
        ppos = body_end + 1 + topic_len
        raw = text.encode()
        record = record[:ppos] + struct.pack(">H", len(raw)) + raw
        record = struct.pack(">I", len(record)) + record[4:]
        kind, walked = both_walk(patched(record, physical_offset=0), 0)
        assert kind == "ok", walked
        assert tuple(walked[0][8:]) == want, text


def test_a_blank_marker_closes_the_segment_only_at_its_end() -> None:
    data = span(mixed(random.Random(2)), 0)
    closed = data + encode_blank(64) + bytes(56)
    assert len(both_walk(closed, 0, len(data) + 64)[1]) == 6
    assert both_walk(closed, 0, len(data) + 65)[0] == "ValueError"  # not where the segment ends
    assert both_walk(closed + b"x", 0, len(data) + 64)[0] == "ValueError"  # bytes after it
    assert both_walk(closed[:-1], 0, len(data) + 64)[0] == "ValueError"  # cut short
    assert both_walk(encode_blank(8), 100, 108) == ("ok", [])
    assert both_walk(data + struct.pack(">II", 64, BLANK_MAGIC)[:7], 0)[0] == "ValueError"


def test_every_truncation_and_bit_flip_of_a_span() -> None:
    """A damaged span fails, in both, exactly when one of its records fails verify."""
    records = [sent(b"a" * 40), sent(b"b" * 3, keys=("k",)), sent(b"c" * 70, topic="T2")]
    data = span(records, 4096)
    boundaries = {0, len(records[0]), len(records[0]) + len(records[1])}
    for cut in range(len(data)):
        assert both_walk(data[:cut], 4096)[0] == ("ok" if cut in boundaries else "ValueError"), cut
    for at in range(len(data)):
        for bit in (0, 7):
            buf = bytearray(data)
            buf[at] ^= 1 << bit
            kind, _ = both_walk(bytes(buf), 4096)
            assert kind == "ValueError", (at, bit)
    with pytest.raises(CorruptRecord):
        walk_records(data[:-1], 4096, SEGMENT_END)
    assert len(check_copied(data, 4096, SEGMENT_END)) == 3
    assert both_walk(data, 4097)[0] == "ValueError"  # every record claims its own offset


def test_arguments_out_of_range_and_of_the_wrong_type() -> None:
    data = span([sent(b"a")], 0)
    for offset, end in ((2**62 + 1, SEGMENT_END), (-(2**62) - 1, 0), (0, 2**63), (0, -(2**63) - 1)):
        assert both_walk(data, offset, end)[0] == "ValueError"
    for args in (("x", 0, 0), (data, 0.5, 0), (data, 0, None), (data, 0)):
        errors = []
        for mod in (_codec_py, native()):
            with pytest.raises(TypeError) as exc:
                mod.walk(*args)
            errors.append(str(exc.value))
        if len(args) == 3:
            assert errors[0] == errors[1]


def test_fuzz_spans() -> None:
    rng = random.Random(0x5EA)
    base = [sent(rng.randbytes(rng.randrange(0, 300)), keys=("k", "l")) for _ in range(4)]
    outcomes: set[str] = set()
    for i in range(1500):
        offset = rng.choice([0, 4096, 2**40, I64_MAX // 4])
        records = rng.sample(base, rng.randint(1, 4))
        data = bytearray(span(records, offset))
        victim = rng.randrange(len(records))
        start = sum(len(r) for r in records[:victim])
        bad, pad = mutate(rng, data[start : start + len(records[victim])])
        data[start : start + len(records[victim])] = bad[pad:]
        kind, got = both_walk(bytes(data), offset)
        outcomes.add(kind if kind == "ok" else got.split(" ")[0])
        if kind == "ok":  # the mutation left whole, verified records: they are decodable
            pos = 0
            for rec in got:
                decode_record(bytes(data), pos, verify_crc=True, expected_offset=rec[0])
                pos += rec[1]
            assert pos == len(data), i
    assert len(outcomes) >= 5, outcomes
