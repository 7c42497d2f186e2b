"""Encoding and decoding of commit-log records. The layout is defined once, in the
SDK's ``txmq.records`` (the producer sends records in it over ``SendStream``).

The unused end of a segment (too small for the next record) starts with a blank marker:
total size (u32) = bytes left in the segment, magic (u32) = BLANK_MAGIC. A record is
only written where it leaves room for that marker, so a segment always ends in a
record that fills it exactly or in a blank marker.

A record carries its own physical offset, so stale bytes (e.g. of a deleted segment
reused by the file system) never validate at another position.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from txmq.codec_native import patch as _native_patch
from txmq.codec_native import verify as _native_verify
from txmq.codec_native import walk as _native_walk
from txmq.protocol import KEY_SEPARATOR
from txmq.records import (  # noqa: F401  (re-exported for the store)
    BLANK_MAGIC,
    BORN_TIMESTAMP_AT,
    HEAD,
    HEADER_SIZE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MESSAGE_MAGIC,
    NAME_VALUE_SEPARATOR,
    PREFIX,
    PROPERTY_SEPARATOR,
    QUEUE_ID_AT,
    RECORD_CRC_START,
    STORE_TIMESTAMP_AT,
    U8,
    U16,
    decode_host,
    decode_properties,
    encode_properties,
    pop_field_properties,
    topic_prefix,
)

from .model import (
    StoredMessage,
    with_field_properties,
)

BLANK_SIZE = 8  # a blank marker is total size + magic
BLANK = struct.Struct(">II")
MIN_RECORD_SIZE = HEADER_SIZE + 1 + 1 + 2  # empty body is rejected earlier, but decodable

_crc32 = zlib.crc32


class CorruptRecord(ValueError):
    """Bytes that are not a complete, intact record at the expected position."""


@dataclass(slots=True)
class PreparedRecord:
    """A validated message with everything encoded that does not depend on where it
    lands; ``commitlog`` adds queue offset, physical offset and store time."""

    topic: str
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: bytes  # 20 bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    body_crc: int
    tail: bytes  # topic length + topic + properties length + properties
    size: int
    tag_code: int
    tags: str
    keys: tuple[str, ...]
    unique_id: str
    user_properties: Mapping[str, str]
    extra_properties: Mapping[str, str] | None  # added by the store; win over user ones
    takes_queue_slot: bool  # see model.takes_queue_slot
    indexed: bool  # see model.is_indexed
    # A record a producer sent in the commit-log layout (SendStream): it lies at
    # ``frame_pos`` of ``frame`` and is patched there (``patch_record``), not encoded.
    frame: bytearray | None = None
    frame_pos: int = 0

    def all_properties(self) -> dict[str, str]:
        """Every stored property (built on demand: only arrival watchers need it)."""
        props = dict(self.user_properties)
        if self.extra_properties:
            props.update(self.extra_properties)
        return with_field_properties(props, tags=self.tags, keys=self.keys, unique_id=self.unique_id)


def encode_tail(topic: str, properties: bytes) -> bytes:
    """Topic length + topic + properties length + properties."""
    return topic_prefix(topic) + U16.pack(len(properties)) + properties


def encode_record(
    rec: PreparedRecord, queue_offset: int, physical_offset: int, store_timestamp_ms: int, store_host: bytes
) -> tuple[bytes, bytes, bytes, bytes]:
    """The record's bytes as four parts to join (the body is not copied here).
    Positional arguments: this runs once per stored message."""
    head = HEAD.pack(
        rec.body_crc,
        rec.queue_id,
        rec.flag,
        queue_offset,
        physical_offset,
        rec.sys_flag,
        rec.born_timestamp_ms,
        rec.born_host,
        store_timestamp_ms,
        store_host,
        rec.reconsume_times,
        rec.prepared_transaction_offset,
        len(rec.body),
    )
    crc = _crc32(rec.tail, _crc32(rec.body, _crc32(head)))
    return PREFIX.pack(rec.size, MESSAGE_MAGIC, crc), head, rec.body, rec.tail


_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


def patch_record(
    frame: bytearray,
    pos: int,
    queue_offset: int,
    physical_offset: int,
    born_host: bytes,
    store_timestamp_ms: int,
    store_host: bytes,
) -> None:
    """Write the fields only the store knows into a sent record (as long as its size
    field says), in place, then its record CRC: ``encode_record``'s bytes for the same
    fields, without re-encoding (compiled: ``txmq.codec_native.patch``)."""
    _native_patch(frame, pos, queue_offset, physical_offset, born_host, store_timestamp_ms, store_host)


def set_born_timestamp(frame: bytearray, pos: int, born_timestamp_ms: int) -> None:
    _I64.pack_into(frame, pos + BORN_TIMESTAMP_AT, born_timestamp_ms)


def set_queue_id(frame: bytearray, pos: int, queue_id: int) -> None:
    _U32.pack_into(frame, pos + QUEUE_ID_AT, queue_id)


def encode_blank(size: int) -> bytes:
    return BLANK.pack(size, BLANK_MAGIC)


def read_size_and_magic(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    return BLANK.unpack_from(buf, pos)


def verify_record(buf: bytes | memoryview, pos: int, physical_offset: int) -> int:
    """Validate the record at ``buf[pos:]`` that must sit at ``physical_offset``;
    returns its size. Raises CorruptRecord for a torn, corrupt or misplaced record
    (magic, size, record CRC, claimed offset, field lengths; compiled:
    ``txmq.codec_native.verify``)."""
    try:
        return _native_verify(buf, pos, physical_offset)
    except ValueError as exc:
        reason = str(exc)
    # Raised outside the handler: the ValueError (and, in pure Python, the view of
    # ``buf`` its traceback holds) is gone, so an mmap behind ``buf`` can be closed.
    raise CorruptRecord(reason)


class HeldRecord(NamedTuple):
    """A record of a replica's log that waits for the high watermark: what dispatching
    it needs, read from its bytes in one pass (``walk_records``) instead of a decoded
    message (no body, hosts or property dict per record)."""

    commit_log_offset: int
    store_size: int
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp_ms: int
    topic: str
    properties_text: str  # every stored property, TAGS / KEYS / UNIQ_KEY included
    tags: str
    keys_text: str  # the keys joined by KEY_SEPARATOR
    unique_id: str


_held_record = HeldRecord._make


def walk_records(buf: bytes | memoryview, offset: int, segment_end: int) -> list[HeldRecord]:
    """The records of log bytes read at ``offset`` (within a segment ending at
    ``segment_end``; a blank marker may close it), each checked as ``verify_record``
    checks it, in one pass (compiled: ``txmq.codec_native.walk``). Raises CorruptRecord
    for the first fault; nothing is returned then."""
    try:
        walked = _native_walk(buf, offset, segment_end)
    except ValueError as exc:
        reason = str(exc)
    else:
        return list(map(_held_record, walked))
    raise CorruptRecord(reason)  # outside the handler, as in verify_record


def held_record(msg: StoredMessage) -> HeldRecord:
    """A decoded record (recovery's, or a deposed leader's) as a held one."""
    return HeldRecord(
        msg.commit_log_offset, msg.store_size, msg.queue_id, msg.queue_offset, msg.sys_flag, msg.store_timestamp_ms,
        msg.topic, encode_properties(msg.all_properties()), msg.tags, KEY_SEPARATOR.join(msg.keys), msg.unique_id,
    )  # fmt: skip


def decode_record(
    buf: bytes | memoryview,
    pos: int = 0,
    *,
    verify_crc: bool = False,
    expected_offset: int | None = None,
    with_body: bool = True,
) -> StoredMessage:
    """Decode the record at ``buf[pos:]``. Checks magic and lengths always; with
    ``verify_crc`` also the record CRC (one pass: it covers the body, so the body CRC is
    not computed again) and, with ``expected_offset``, that the record claims that
    position. Every read that serves a record verifies: bytes can rot after recovery
    validated them, and recovery does not re-read segments below the checkpoint.
    ``with_body=False``: the body is left out (b""): what dispatch needs, no copy."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecord("truncated record header")
    size, magic, crc = PREFIX.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC or size < MIN_RECORD_SIZE or size > len(buf) - pos:
        raise CorruptRecord(f"no record here (magic {magic:#x}, size {size})")
    (
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared_offset,
        body_len,
    ) = HEAD.unpack_from(buf, pos + PREFIX.size)
    tpos, ppos, end = _tail_positions(buf, pos, size, body_len)
    body = bytes(buf[pos + HEADER_SIZE : tpos]) if with_body else b""
    if verify_crc and _crc32(memoryview(buf)[pos + RECORD_CRC_START : end]) != crc:
        raise CorruptRecord(f"record CRC mismatch at {physical_offset}")
    if expected_offset is not None and physical_offset != expected_offset:
        raise CorruptRecord(f"record at {expected_offset} claims offset {physical_offset}")
    try:
        topic = bytes(buf[tpos + 1 : ppos]).decode("ascii")
        props = decode_properties(bytes(buf[ppos + 2 : end]).decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptRecord(f"undecodable text in record at {physical_offset}") from exc
    tags, keys, unique_id = pop_field_properties(props)
    bhost, bport = decode_host(born_host)
    shost, sport = decode_host(store_host)
    return StoredMessage(
        topic=topic,
        body=body,
        tags=tags,
        keys=keys,
        properties=props,
        unique_id=unique_id,
        flag=flag,
        queue_id=queue_id,
        queue_offset=queue_offset,
        commit_log_offset=physical_offset,
        store_size=size,
        body_crc=body_crc,
        sys_flag=sys_flag,
        born_timestamp_ms=born_ts,
        born_host=bhost,
        born_port=bport,
        store_timestamp_ms=store_ts,
        store_host=shost,
        store_port=sport,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared_offset,
    )


def _tail_positions(buf: bytes | memoryview, pos: int, size: int, body_len: int) -> tuple[int, int, int]:
    """Where the topic and the properties of the record at ``pos`` begin and where it
    ends; CorruptRecord when its field lengths disagree with its size."""
    end = pos + size
    tpos = pos + HEADER_SIZE + body_len
    if tpos + 3 > end:
        raise CorruptRecord("body length overruns the record")
    topic_len = buf[tpos]
    ppos = tpos + 1 + topic_len
    if ppos + 2 > end:
        raise CorruptRecord("topic length overruns the record")
    (props_len,) = U16.unpack_from(buf, ppos)
    if ppos + 2 + props_len != end:
        raise CorruptRecord("field lengths disagree with the record size")
    return tpos, ppos, end


def read_store_timestamp(buf: bytes | memoryview, pos: int = 0) -> int:
    return _I64.unpack_from(buf, pos + STORE_TIMESTAMP_AT)[0]


_HOST_CACHE: dict[tuple[str, int], bytes] = {}


def encode_host(host: str, port: int) -> bytes:
    """20 bytes: IPv6 address (IPv4 as v4-mapped) + port. ``host`` must be an IP literal."""
    key = (host, port)
    cached = _HOST_CACHE.get(key)
    if cached is None:
        addr = ipaddress.ip_address(host)
        if addr.version == 4:
            addr = ipaddress.IPv6Address(b"\x00" * 10 + b"\xff\xff" + addr.packed)
        cached = addr.packed + _U32.pack(port)
        if len(_HOST_CACHE) < 4096:
            _HOST_CACHE[key] = cached
    return cached


def split_host_port(address: str) -> tuple[str, int]:
    """``"1.2.3.4:5"`` / ``"[::1]:5"`` -> (host, port); raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


UNKNOWN_HOST = encode_host("0.0.0.0", 0)
