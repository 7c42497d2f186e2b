"""The commit-log record helpers in pure Python: the reference implementation of
``verify``, ``patch``, ``fields`` and ``walk``, which ``txmq._codec_c`` (``_codec.c``) implements
again in C with identical results, exceptions and messages. Use them through
``txmq.codec_native``, which picks the compiled module when it is built.

The record layout is documented in ``txmq.records`` (all integers big-endian). The
constants are repeated here rather than imported, so ``txmq.records`` may use this module
without an import cycle; ``tests/unit/test_codec_native.py`` checks they agree.

Every function takes any C-contiguous bytes-like object (``patch`` a writable one) and a
``pos`` >= 0; a buffer that is not bytes-like, or integers that are not ints, raise
TypeError; everything wrong with the values raises ValueError (for undecodable text its
subclass UnicodeDecodeError). No input reads or writes outside the buffer.
"""

from __future__ import annotations

import operator
import struct
import zlib

__all__ = ["fields", "patch", "verify", "walk"]

MESSAGE_MAGIC = 0x54584D51  # "TXMQ"
HEADER_SIZE = 116
RECORD_CRC_START = 12
#: The smallest record ``verify`` accepts (``txmq_store.codec.MIN_RECORD_SIZE``: a
#: one-byte topic) and the smallest ``fields`` decodes (an empty topic).
MIN_VERIFIED_SIZE = HEADER_SIZE + 1 + 1 + 2
MIN_DECODED_SIZE = HEADER_SIZE + 3
HOST_SIZE = 20
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1

_PREFIX = struct.Struct(">III")  # total size, magic, record CRC (bytes 0..11)
_HEAD = struct.Struct(">IIiqqIq20sq20sIqI")  # body CRC ... body length (bytes 12..115)
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_OFFSETS = struct.Struct(">qq")  # queue offset, physical offset (bytes 24..39)
_STORED = struct.Struct(">q20s")  # store timestamp, store host (bytes 72..99)
_crc32 = zlib.crc32
_index = operator.index

Readable = bytes | bytearray | memoryview
#: What ``fields`` returns (see there).
Fields = tuple[int, int, int, int, int, int, int, int, bytes, int, bytes, int, int, bytes, str, str]


def _readable(obj: object) -> Readable:
    """``obj`` as something indexed and measured in bytes (TypeError if not bytes-like)."""
    if type(obj) is bytes or type(obj) is bytearray:
        return obj
    view = memoryview(obj)  # type: ignore[arg-type]  # TypeError for what is not bytes-like
    if not view.c_contiguous:
        raise TypeError("a C-contiguous bytes-like object is required")
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _writable(obj: object) -> bytearray | memoryview:
    if type(obj) is bytearray:
        return obj
    view = memoryview(obj)  # type: ignore[arg-type]
    if view.readonly:
        raise TypeError(f"a writable bytes-like object is required, not '{type(obj).__name__}'")
    if not view.c_contiguous:
        raise TypeError("a C-contiguous bytes-like object is required")
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def verify(buf: Readable, pos: int, physical_offset: int, /) -> int:
    """Validate the record at ``buf[pos:]`` that must sit at ``physical_offset``; returns
    its size. The checks, their order and messages of ``txmq_store.codec.verify_record``
    (whose CorruptRecord is a ValueError), plus: a negative ``pos`` is a ValueError."""
    buf = _readable(buf)
    pos = _index(pos)
    physical_offset = _index(physical_offset)
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    avail = len(buf) - pos
    if avail < RECORD_CRC_START:
        raise ValueError(f"{avail} bytes left at {physical_offset}, no record header")
    size, magic, crc = _PREFIX.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise ValueError(f"bad magic {magic:#x} at {physical_offset}")
    if size < MIN_VERIFIED_SIZE or size > avail:
        raise ValueError(f"impossible size {size} at {physical_offset} ({avail} bytes left)")
    end = pos + size
    if _crc32(memoryview(buf)[pos + RECORD_CRC_START : end]) != crc:
        raise ValueError(f"record CRC mismatch at {physical_offset}")
    (phys,) = _I64.unpack_from(buf, pos + 32)
    if phys != physical_offset:
        raise ValueError(f"record at {physical_offset} claims offset {phys}")
    (body_len,) = _U32.unpack_from(buf, pos + HEADER_SIZE - 4)
    tpos = pos + HEADER_SIZE + body_len
    if tpos + 3 > end:
        raise ValueError(f"body length {body_len} overruns record at {physical_offset}")
    ppos = tpos + 1 + buf[tpos]
    if ppos + 2 > end or ppos + 2 + _U16.unpack_from(buf, ppos)[0] != end:
        raise ValueError(f"field lengths disagree with size {size} at {physical_offset}")
    return size


def patch(
    frame: bytearray | memoryview,
    pos: int,
    queue_offset: int,
    physical_offset: int,
    born_host: Readable,
    store_timestamp_ms: int,
    store_host: Readable,
    /,
) -> None:
    """Write the fields only the store knows into the record at ``frame[pos:]`` (its size
    is the u32 at ``pos``), in place: queue offset, physical offset, born host, store
    timestamp, store host; then the record CRC over bytes [12, size) of the record. The
    result is what ``txmq_store.codec.encode_record`` makes of the same fields.

    ValueError, checked in this order and before anything is written: a negative
    ``pos``; a host not of 20 bytes (born, then store); an offset or timestamp outside
    the signed 64-bit range (queue offset, physical offset, store timestamp); fewer than
    116 bytes at ``pos``; a record size below 116 or beyond the frame."""
    view = _writable(frame)
    pos = _index(pos)
    queue_offset = _index(queue_offset)
    physical_offset = _index(physical_offset)
    born = bytes(_readable(born_host))  # copies: a host may be a view of the frame itself
    store_timestamp_ms = _index(store_timestamp_ms)
    store = bytes(_readable(store_host))
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    if len(born) != HOST_SIZE:
        raise ValueError(f"born_host is {len(born)} bytes, not {HOST_SIZE}")
    if len(store) != HOST_SIZE:
        raise ValueError(f"store_host is {len(store)} bytes, not {HOST_SIZE}")
    for name, value in (
        ("queue_offset", queue_offset),
        ("physical_offset", physical_offset),
        ("store_timestamp_ms", store_timestamp_ms),
    ):
        if not I64_MIN <= value <= I64_MAX:
            raise ValueError(f"{name} {value} does not fit a signed 64-bit integer")
    avail = len(view) - pos
    if avail < HEADER_SIZE:
        raise ValueError(f"{avail} bytes at {pos}: not a whole record header")
    (size,) = _U32.unpack_from(view, pos)
    if size < HEADER_SIZE or size > avail:
        raise ValueError(f"impossible record size {size} at {pos} ({avail} bytes left in the frame)")
    _OFFSETS.pack_into(view, pos + 24, queue_offset, physical_offset)
    view[pos + 52 : pos + 72] = born
    _STORED.pack_into(view, pos + 72, store_timestamp_ms, store)
    _U32.pack_into(view, pos + 8, _crc32(memoryview(view)[pos + RECORD_CRC_START : pos + size]))


def fields(buf: Readable, pos: int, /) -> Fields:
    """The record at ``buf[pos:]`` decoded, its CRC not checked: ``(size, body_crc,
    queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp_ms,
    born_host_raw20, store_timestamp_ms, store_host_raw20, reconsume_times,
    prepared_transaction_offset, body, topic, properties_text)``.

    ValueError, in this order: a negative ``pos``; fewer than 116 bytes at ``pos``; a
    wrong magic, a size below 119 or beyond the buffer; a body length overrunning the
    record; a topic length overrunning it; a properties length disagreeing with its
    size. UnicodeDecodeError (a ValueError) for a topic that is not ASCII, then for
    properties that are not UTF-8."""
    buf = _readable(buf)
    pos = _index(pos)
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        raise ValueError(f"{avail} bytes at {pos}: not a whole record header")
    size, magic, _ = _PREFIX.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC or size < MIN_DECODED_SIZE or size > avail:
        raise ValueError(f"no whole record at {pos} (magic {magic:#x}, size {size})")
    (body_crc, queue_id, flag, queue_offset, physical, sys_flag, born_ts, born_raw, store_ts, store_raw, reconsume,
     prepared, body_len) = _HEAD.unpack_from(buf, pos + RECORD_CRC_START)  # fmt: skip
    end = pos + size
    tpos = pos + HEADER_SIZE + body_len
    if tpos + 3 > end:
        raise ValueError(f"body length {body_len} overruns the record at {pos}")
    topic_len = buf[tpos]
    ppos = tpos + 1 + topic_len
    if ppos + 2 > end:
        raise ValueError(f"topic length {topic_len} overruns the record at {pos}")
    (props_len,) = _U16.unpack_from(buf, ppos)
    if ppos + 2 + props_len != end:
        raise ValueError(f"properties length {props_len} disagrees with the record size {size} at {pos}")
    topic = bytes(buf[tpos + 1 : ppos]).decode("ascii")
    props = bytes(buf[ppos + 2 : end]).decode("utf-8")
    body = bytes(buf[pos + HEADER_SIZE : tpos])
    return (size, body_crc, queue_id, flag, queue_offset, physical, sys_flag, born_ts, born_raw, store_ts, store_raw,
            reconsume, prepared, body, topic, props)  # fmt: skip


BLANK_MAGIC = 0x54584D42  # "TXMB": a segment's closing blank marker
BLANK_SIZE = 8
_BLANK = struct.Struct(">II")
_WALKED = struct.Struct(">I4xq8xI28xq")  # queue id, queue offset, sys flag, store timestamp (16..80)
_OFFSET_BOUND = 2**62
#: What ``walk`` returns per record (see there).
Walked = tuple[int, int, int, int, int, int, str, str, str, str, str]


def walk(buf: Readable, offset: int, segment_end: int, /) -> list[Walked]:
    """Check a shipment of copied log bytes read at ``offset`` (not past its segment,
    which ends at ``segment_end``) in one pass: whole records, each passing ``verify`` at
    its own offset, and at most a blank marker closing the segment (``txmq_store.
    replication.check_copied``). Per record: ``(physical_offset, size, queue_id,
    queue_offset, sys_flag, store_timestamp_ms, topic, properties_text, tags, keys_text,
    unique_id)``: what dispatching it needs, the message fields stored as properties
    (TAGS, KEYS, UNIQ_KEY; the last of a name wins, "" when absent) taken out as
    ``decode_properties`` would, the text itself left whole.

    ValueError for the first fault, nothing returned then: offsets outside +-2**62 (the
    segment end outside the signed 64-bit range); bytes ending inside a record header;
    a blank marker not closing the segment exactly at the end of the bytes; ``verify``'s
    faults (its messages); UnicodeDecodeError for undecodable text."""
    buf = _readable(buf)
    offset = _index(offset)
    segment_end = _index(segment_end)
    if not -_OFFSET_BOUND <= offset <= _OFFSET_BOUND or not I64_MIN <= segment_end <= I64_MAX:
        raise ValueError(f"offsets {offset}, {segment_end} out of range")
    out: list[Walked] = []
    n = len(buf)
    at = 0
    while at < n:
        here = offset + at
        if n - at < BLANK_SIZE:
            raise ValueError(f"shipment at {offset} ends inside a record header")
        size, magic = _BLANK.unpack_from(buf, at)
        if magic == BLANK_MAGIC:
            if here + size != segment_end or size != n - at:
                raise ValueError(f"blank marker at {here} does not close its segment")
            break
        verify(buf, at, here)
        queue_id, queue_offset, sys_flag, store_ts = _WALKED.unpack_from(buf, at + 16)
        (body_len,) = _U32.unpack_from(buf, at + HEADER_SIZE - 4)
        tpos = at + HEADER_SIZE + body_len
        ppos = tpos + 1 + buf[tpos]
        topic = bytes(buf[tpos + 1 : ppos]).decode("ascii")
        props = bytes(buf[ppos + 2 : at + size]).decode("utf-8")
        fields_of = {"TAGS": "", "KEYS": "", "UNIQ_KEY": ""}
        for item in props.split("\x02"):
            if item:
                name, _, value = item.partition("\x01")
                if name in fields_of:
                    fields_of[name] = value
        out.append((here, size, queue_id, queue_offset, sys_flag, store_ts, topic, props, fields_of["TAGS"],
                    fields_of["KEYS"], fields_of["UNIQ_KEY"]))  # fmt: skip
        at += size
    return out
