"""The commit-log record codec: round trip and rejection of torn/corrupt records."""

from __future__ import annotations

import struct

import pytest

from txmq_runtime.tags import tag_hash_code
from txmq_store.codec import (
    BLANK_MAGIC,
    HEADER_SIZE,
    CorruptRecord,
    decode_properties,
    decode_record,
    encode_blank,
    encode_host,
    encode_properties,
    encode_record,
    verify_record,
)
from txmq_store.model import OutgoingMessage
from txmq_store.validation import MessageEncoder, MessageLimits

LIMITS = MessageLimits(max_body_bytes=1 << 20, max_properties_bytes=32767, max_record_bytes=1 << 21)
STORE_HOST = encode_host("10.1.2.3", 10911)


def record_bytes(offset: int = 4096, **kw: object) -> bytes:
    msg = OutgoingMessage(
        topic=kw.pop("topic", "TopicA"),  # type: ignore[arg-type]
        body=kw.pop("body", b"payload \x00\x01\x02 bytes"),  # type: ignore[arg-type]
        tags="TagA",
        keys=("k1", "k2"),
        properties={"color": "red", "ünïcode": "välue"},
        unique_id="UID-1",
        flag=-7,
        born_timestamp_ms=111,
        reconsume_times=3,
        prepared_transaction_offset=99,
    )
    encoder = MessageEncoder(limits=LIMITS, born_host=encode_host("::1", 4242), now_ms=1, system=True)
    rec = encoder.prepare(msg, 0, msg.topic, 5, {"REAL_TOPIC": "X"}, 0x8)
    data = b"".join(encode_record(rec, 17, offset, 222, STORE_HOST))
    assert len(data) == rec.size
    return data


def test_round_trip() -> None:
    data = record_bytes()
    assert verify_record(data, 0, 4096) == len(data)
    m = decode_record(data, verify_crc=True)
    assert (m.topic, m.body, m.tags, m.keys, m.unique_id) == (
        "TopicA", b"payload \x00\x01\x02 bytes", "TagA", ("k1", "k2"), "UID-1"
    )  # fmt: skip
    assert m.properties == {"color": "red", "ünïcode": "välue", "REAL_TOPIC": "X"}
    assert (m.flag, m.queue_id, m.queue_offset, m.commit_log_offset, m.store_size) == (-7, 5, 17, 4096, len(data))
    assert (m.sys_flag, m.born_timestamp_ms, m.store_timestamp_ms) == (0x8, 111, 222)
    assert (m.born_host, m.born_port, m.store_host, m.store_port) == ("::1", 4242, "10.1.2.3", 10911)
    assert (m.reconsume_times, m.prepared_transaction_offset) == (3, 99)
    assert m.all_properties()["TAGS"] == "TagA" and m.all_properties()["KEYS"] == "k1 k2"
    # Fixed header layout: total size, magic, then the fields at their documented offsets.
    assert struct.unpack_from(">I", data, 0)[0] == len(data)
    assert struct.unpack_from(">q", data, 24)[0] == 17 and struct.unpack_from(">q", data, 32)[0] == 4096
    assert len(data) == HEADER_SIZE + len(m.body) + 1 + len("TopicA") + 2 + len(
        encode_properties(m.all_properties()).encode()
    )


def test_tag_code_and_prepared_fields() -> None:
    msg = OutgoingMessage(topic="T", body=b"x", tags="TagA")
    rec = MessageEncoder(limits=LIMITS, born_host=STORE_HOST, now_ms=5, system=False).prepare(msg, 0, "T", 0, None, 0)
    assert rec.tag_code == tag_hash_code("TagA") == 2598919
    assert rec.born_timestamp_ms == 5  # filled in when the producer left it 0
    assert len(rec.unique_id) == 32  # generated when absent


@pytest.mark.parametrize("pos", [8, 13, 40, 120, -3])
def test_any_flipped_byte_is_detected(pos: int) -> None:
    data = bytearray(record_bytes())
    data[pos] ^= 0x40
    with pytest.raises(CorruptRecord):
        verify_record(bytes(data), 0, 4096)


def test_bad_magic_and_impossible_sizes() -> None:
    data = record_bytes()
    with pytest.raises(CorruptRecord, match="magic"):
        verify_record(b"\x00" * len(data), 0, 4096)
    with pytest.raises(CorruptRecord, match="size"):
        verify_record(data[:-1], 0, 4096)  # torn: the record claims more than is there
    tiny = struct.pack(">I", 10) + data[4:]
    with pytest.raises(CorruptRecord, match="size"):
        verify_record(tiny, 0, 4096)
    with pytest.raises(CorruptRecord):
        decode_record(data[: HEADER_SIZE - 1])


def test_record_at_the_wrong_position_is_rejected() -> None:
    data = record_bytes(offset=4096)
    with pytest.raises(CorruptRecord, match="claims offset"):
        verify_record(b"\x00" * 100 + data, 100, 4196)


def test_blank_marker_and_properties() -> None:
    assert struct.unpack(">II", encode_blank(77)) == (77, BLANK_MAGIC)
    props = {"a": "1", "b": "", "c d": "x y"}
    assert decode_properties(encode_properties(props)) == props
    assert encode_properties({"a": "1"}) == "a\x011\x02"


def test_hosts() -> None:
    v4 = encode_host("127.0.0.1", 80)
    assert len(v4) == 20 and v4[:16] == b"\x00" * 10 + b"\xff\xff\x7f\x00\x00\x01"
    assert len(encode_host("fe80::1", 1)) == 20
