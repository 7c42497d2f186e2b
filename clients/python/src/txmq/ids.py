"""Message ids.

- ``unique_id`` (RocketMQ msgId / UNIQ_KEY): made by the client before the first send,
  so a retried send carries the same id and the store can index it. 32 hex digits:
  host IPv4 (4 bytes) | pid (2) | process random (4) | ms since 2020-01-01 (4) | counter (2).
- ``offset_msg_id``: store host + commit-log offset, as RocketMQ's offsetMsgId:
  IPv4 (4) | port (4) | offset (8) = 32 hex digits, or IPv6 (16) | port (4) | offset (8)
  = 56 hex digits. Uppercase hex.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import socket
import struct
import threading
import time

_EPOCH_MS = 1_577_836_800_000  # 2020-01-01T00:00:00Z
_counter = itertools.count()
_lock = threading.Lock()


def _local_ipv4() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return b"\x7f\x00\x00\x01"


_PREFIX = _local_ipv4() + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)
_PREFIX_HEX = _PREFIX.hex().upper()  # the same for every id of this process
_islice = itertools.islice


def new_unique_id() -> str:
    """A new client unique id (32 uppercase hex digits), unique across processes."""
    with _lock:
        n = next(_counter)
    ms = (int(time.time() * 1000) - _EPOCH_MS) & 0xFFFFFFFF
    return f"{_PREFIX_HEX}{ms:08X}{n & 0xFFFF:04X}"


def new_unique_ids(count: int) -> list[str]:
    """``count`` new unique ids (as ``new_unique_id``), taking the counter once."""
    with _lock:
        ns = list(_islice(_counter, count))
    head = f"{_PREFIX_HEX}{(int(time.time() * 1000) - _EPOCH_MS) & 0xFFFFFFFF:08X}"
    return [f"{head}{n & 0xFFFF:04X}" for n in ns]


_prefixes: dict[tuple[str, int], str] = {}


def offset_msg_id_prefix(host: str, port: int) -> str:
    """The offsetMsgId of commit-log offset N on this store host is this prefix +
    ``f"{N:016X}"`` (cached: an address is parsed once, not once per message)."""
    key = (host, port)
    prefix = _prefixes.get(key)
    if prefix is None:
        prefix = (ipaddress.ip_address(host).packed + struct.pack(">I", port)).hex().upper()
        if len(_prefixes) < 4096:
            _prefixes[key] = prefix
    return prefix


def encode_offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    if commit_log_offset < 0:
        raise ValueError(f"commit-log offset {commit_log_offset} is negative")
    return f"{offset_msg_id_prefix(host, port)}{commit_log_offset:016X}"


def decode_offset_msg_id(offset_msg_id: str) -> tuple[str, int, int]:
    """-> (host, port, commit_log_offset). Raises ValueError on a malformed id."""
    try:
        raw = bytes.fromhex(offset_msg_id)
    except ValueError as exc:
        raise ValueError(f"offset msg id {offset_msg_id!r} is not hex") from exc
    if len(raw) == 16:
        host = str(ipaddress.IPv4Address(raw[:4]))
    elif len(raw) == 28:
        host = str(ipaddress.IPv6Address(raw[:16]))
    else:
        raise ValueError(f"offset msg id {offset_msg_id!r} has {len(raw)} bytes, want 16 or 28")
    port, offset = struct.unpack(">Iq", raw[-12:])
    return host, port, offset
