"""The commit-log record: the one definition of its layout, shared by the store (which
writes and reads it, ``txmq_store.codec``) and the SDK (which sends records in this
layout over ``Store.SendStream``). All integers big-endian.

    offset  size  field
         0     4  total size (u32): the whole record, this field included
         4     4  magic (u32): MESSAGE_MAGIC
         8     4  record CRC32 (u32) over every byte after this field: [12, total size)
        12     4  body CRC32 (u32)
        16     4  queue id (u32)
        20     4  flag (i32)
        24     8  queue offset (i64)
        32     8  physical offset (i64): the record's own commit-log offset
        40     4  sysflag (u32): transaction type in bits 0xC (RocketMQ MessageSysFlag)
        44     8  born timestamp (i64, ms)
        52    20  born host: 16-byte IPv6 address (IPv4 as v4-mapped) + port (u32)
        72     8  store timestamp (i64, ms)
        80    20  store host: as born host
       100     4  reconsume times (u32)
       104     8  prepared-transaction offset (i64)
       112     4  body length (u32)
       116     b  body
     116+b     1  topic length (u8)
           t      topic (ASCII)
           2      properties length (u16)
           p      properties (UTF-8): name \\x01 value \\x02, repeated; the message's
                  unique id, tags and keys are the properties UNIQ_KEY, TAGS and KEYS
                  (keys joined by a space), as RocketMQ stores them

A record a producer sends (``encode_for_send``) has the same layout: the store checks it
and writes the fields only it knows (queue offset, physical offset, born host as it sees
the connection, store timestamp, store host) and the record CRC over the result. In a
sent record queue id ``ANY_QUEUE`` asks the store to pick the queue, and a born
timestamp of 0 means "the store's time".
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Mapping, Sequence

from txmq.codec_native import fields as _fields
from txmq.ids import offset_msg_id_prefix
from txmq.message import MessageExt
from txmq.protocol import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY

MESSAGE_MAGIC = 0x54584D51  # "TXMQ"
BLANK_MAGIC = 0x54584D42  # "TXMB"
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_TOPIC_BYTES = 255
MAX_PROPERTIES_BYTES = 65_535
ANY_QUEUE = 0xFFFFFFFF

PREFIX = struct.Struct(">III")  # total size, magic, record CRC
HEAD = struct.Struct(">IIiqqIq20sq20sIqI")  # body CRC ... body length (bytes 12..115)
U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
_PORT = struct.Struct(">I")
HEADER_SIZE = PREFIX.size + HEAD.size  # 116
RECORD_CRC_START = PREFIX.size
# Offsets of single fields, for readers that need one of them.
QUEUE_ID_AT = 16
PHYSICAL_OFFSET_AT = 32
BORN_TIMESTAMP_AT = 44
STORE_TIMESTAMP_AT = 72
BODY_LENGTH_AT = 112
assert HEADER_SIZE == 116

_NO_HOST = bytes(20)
_crc32 = zlib.crc32
_topic_prefixes: dict[str, bytes] = {}


def topic_prefix(topic: str) -> bytes:
    """Topic length + topic (cached: a process sends to few topics)."""
    prefix = _topic_prefixes.get(topic)
    if prefix is None:
        topic_bytes = topic.encode("ascii")
        prefix = U8.pack(len(topic_bytes)) + topic_bytes
        if len(_topic_prefixes) < 65_536:
            _topic_prefixes[topic] = prefix
    return prefix


def encode_properties(props: Mapping[str, str]) -> str:
    """The properties text: name \\x01 value \\x02, repeated."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def decode_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if item:
            name, _, value = item.partition(NAME_VALUE_SEPARATOR)
            out[name] = value
    return out


def pop_field_properties(props: dict[str, str]) -> tuple[str, tuple[str, ...], str]:
    """Take the message fields stored as properties out of ``props``: (tags, keys,
    unique id), empty when absent."""
    tags = props.pop(PROPERTY_TAGS, "")
    keys = props.pop(PROPERTY_KEYS, "")
    return tags, tuple(keys.split(KEY_SEPARATOR)) if keys else (), props.pop(PROPERTY_UNIQ_KEY, "")


_HOST_DECODE_CACHE: dict[bytes, tuple[str, int]] = {}


def decode_host(raw: bytes) -> tuple[str, int]:
    """A record's 20-byte host field (IPv6, IPv4 as v4-mapped, + port) -> (host, port)."""
    cached = _HOST_DECODE_CACHE.get(raw)
    if cached is None:
        addr = ipaddress.IPv6Address(raw[:16])
        host = str(addr.ipv4_mapped) if addr.ipv4_mapped is not None else str(addr)
        cached = (host, _PORT.unpack_from(raw, 16)[0])
        if len(_HOST_DECODE_CACHE) < 4096:
            _HOST_DECODE_CACHE[raw] = cached
    return cached


def encode_properties_text(
    unique_id: str, tags: str | None, keys: Sequence[str], properties: Mapping[str, str] | None
) -> bytes:
    """The properties field of a message sent by a producer (already validated)."""
    text = f"{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}{unique_id}{PROPERTY_SEPARATOR}"
    if tags:
        text += f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}{tags}{PROPERTY_SEPARATOR}"
    if keys:
        text += f"{PROPERTY_KEYS}{NAME_VALUE_SEPARATOR}{KEY_SEPARATOR.join(keys)}{PROPERTY_SEPARATOR}"
    if properties:
        text += encode_properties(properties)
    return text.encode("utf-8")


def encode_for_send(
    topic: str,
    queue_id: int | None,
    body: bytes,
    unique_id: str,
    *,
    tags: str | None = None,
    keys: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    flag: int = 0,
    born_timestamp_ms: int = 0,
) -> bytes:
    """One record as a producer sends it over ``SendStream`` (fields the store fills are
    zero). The caller has validated the message (``txmq.validation``)."""
    props = encode_properties_text(unique_id, tags, keys, properties)
    tail = topic_prefix(topic) + U16.pack(len(props)) + props
    head = HEAD.pack(
        _crc32(body),
        ANY_QUEUE if queue_id is None else queue_id,
        flag,
        0,
        0,
        0,
        born_timestamp_ms,
        _NO_HOST,
        0,
        _NO_HOST,
        0,
        0,
        len(body),
    )
    return b"".join((PREFIX.pack(HEADER_SIZE + len(body) + len(tail), MESSAGE_MAGIC, 0), head, body, tail))


# -- reading records a pull returns (PullMessageRequest.raw_records) --------------------


def count_records(records: bytes) -> tuple[int, int]:
    """(records, body bytes) of records back to back (their sizes are trusted: the
    store checked them)."""
    n = body = pos = 0
    end = len(records)
    while pos + HEADER_SIZE <= end:
        (size,) = _PORT.unpack_from(records, pos)
        if size <= 0:
            break
        body += _PORT.unpack_from(records, pos + BODY_LENGTH_AT)[0]
        n += 1
        pos += size
    return n, body


_hosts: dict[bytes, tuple[str, str]] = {}


def _host(raw: bytes) -> tuple[str, str]:
    """20 raw bytes -> ("host:port", the offsetMsgId prefix of that host), cached."""
    cached = _hosts.get(raw)
    if cached is None:
        host, port = decode_host(raw)
        cached = (f"{host}:{port}", offset_msg_id_prefix(host, port))
        if len(_hosts) < 4096:
            _hosts[raw] = cached
    return cached


def decode_messages(records: bytes, store_id: str) -> list[MessageExt]:
    """The records of a pull answer, back to back as stored (the store checked each
    record's CRC before serving it), as the messages a consumer sees: the same fields
    as from a MessageView. Raises ValueError for bytes that are not whole records
    (parsing compiled: ``txmq.codec_native.fields``)."""
    out: list[MessageExt] = []
    pos, end = 0, len(records)
    while pos < end:
        out.append(_decode(records, pos, store_id))
        pos += out[-1].store_size_bytes
    return out


def _decode(buf: bytes, pos: int, store_id: str) -> MessageExt:
    (size, body_crc, queue_id, flag, queue_offset, physical, sys_flag, born_ts, born_raw, store_ts, store_raw,
     reconsume, prepared, body, topic, text) = _fields(buf, pos)  # fmt: skip
    props = decode_properties(text)
    tags, keys, unique_id = pop_field_properties(props)
    born_host, _ = _host(born_raw)
    store_host, prefix = _host(store_raw)
    return MessageExt(
        topic,
        body,
        tags=tags or None,
        keys=keys,
        properties=props,
        unique_id=unique_id or None,
        flag=flag,
        queue_id=queue_id,
        offset_msg_id=f"{prefix}{physical:016X}",
        queue_offset=queue_offset,
        commit_log_offset=physical,
        store_size_bytes=size,
        body_crc=body_crc,
        sys_flag=sys_flag,
        born_timestamp_ms=born_ts,
        born_host=born_host,
        store_timestamp_ms=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        store_id=store_id,
    )
