"""v2 messages <-> txmq messages, and the gateway's opaque ids (transaction ids).

A v2 message's system properties map onto txmq's fields (tag, keys, message_id ->
unique_id, born time); the ones txmq has no field for travel as RocketMQ-named
properties (``__SHARDINGKEY`` for a FIFO message group, ``CHECK_IMMUNITY_TIME_IN_SECONDS``
for a transaction's recovery duration) and are hidden again from consumers."""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import json
import os
import re
import zlib
from dataclasses import dataclass

from google.protobuf import duration_pb2, timestamp_pb2

from txmq import protocol
from txmq.protocol import (
    PROPERTY_CHECK_IMMUNITY,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_PRIORITY,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TIMER_DELIVER_MS,
)
from txmq.v1 import common_pb2
from txmq_gateway.status import GatewayError, shorten
from txmq_gateway.v2 import Code, pb

PROPERTY_MESSAGE_GROUP = PROPERTY_SHARDING_KEY
# The gateway's own (a system prefix of txmq.protocol, so never user properties);
# PROPERTY_MESSAGE_TYPE is txmq.protocol's: copies of a message keep it.
PROPERTY_BORN_HOST = "__RMQ_BORN_HOST"
#: v2 system properties txmq carries as RocketMQ-named message properties.
V2_CARRIED_PROPERTIES = frozenset({PROPERTY_MESSAGE_GROUP, PROPERTY_CHECK_IMMUNITY})


def is_system_property(name: str) -> bool:
    """txmq.protocol's rule, plus the v2 fields carried as properties: refused as a v2
    client's user property, hidden from v2 consumers."""
    return protocol.is_system_property(name) or name in V2_CARRIED_PROPERTIES


def from_ms(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def duration(ms: int) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromMilliseconds(ms)
    return d


def decoded_body(message: pb.Message) -> bytes:
    """The body as the application wrote it (GZIP-encoded bodies are inflated)."""
    if message.system_properties.body_encoding == pb.GZIP:
        try:
            return gzip.decompress(message.body)
        except (OSError, EOFError, zlib.error) as exc:
            raise GatewayError(Code.MESSAGE_CORRUPTED, f"body is not valid gzip: {exc}") from None
    return message.body


def to_txmq_message(message: pb.Message, *, queue_id: int | None = None) -> common_pb2.Message:
    """A v2 message as txmq stores it (user properties checked by the store)."""
    sp = message.system_properties
    out = common_pb2.Message(
        topic=message.topic.name,
        body=decoded_body(message),
        tags=sp.tag,
        keys=list(sp.keys),
        unique_id=sp.message_id,
        born_timestamp_ms=sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else 0,
    )
    for name, value in message.user_properties.items():
        if is_system_property(name):
            raise GatewayError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property name {name!r} is reserved")
        out.properties[name] = value
    if sp.message_type:
        out.properties[PROPERTY_MESSAGE_TYPE] = pb.MessageType.Name(sp.message_type)
    if sp.born_host:
        out.properties[PROPERTY_BORN_HOST] = sp.born_host
    if sp.HasField("message_group"):
        out.properties[PROPERTY_MESSAGE_GROUP] = sp.message_group
    if sp.HasField("orphaned_transaction_recovery_duration"):
        seconds = max(1, sp.orphaned_transaction_recovery_duration.ToMilliseconds() // 1000)
        out.properties[PROPERTY_CHECK_IMMUNITY] = str(seconds)
    if sp.HasField("delivery_timestamp"):  # a delayed message (checked by the producer path)
        out.properties[PROPERTY_TIMER_DELIVER_MS] = str(sp.delivery_timestamp.ToMilliseconds())
    if sp.HasField("priority"):  # the store places it by priority (docs/store.md "Priority messages")
        out.properties[PROPERTY_PRIORITY] = str(sp.priority)
    if queue_id is not None:
        out.queue_id = queue_id
    return out


def to_v2_message(
    view: common_pb2.MessageView,
    *,
    topic: str | None = None,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_ms: int | None = None,
) -> pb.Message:
    """A stored message as a v2 client reads it; ``topic`` overrides the stored one
    (a half message is stored under the half topic)."""
    src = view.message
    props = src.properties
    message_type = props.get(PROPERTY_MESSAGE_TYPE, "")
    sp = pb.SystemProperties(
        tag=src.tags,
        keys=list(src.keys),
        message_id=src.unique_id,
        # MD5 in upper-case hex, as RocketMQ's proxy sends: every official client checks
        # it the same way (they disagree on how to print a CRC32: hex or decimal).
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(src.body).hexdigest().upper()),
        body_encoding=pb.IDENTITY,
        message_type=pb.MessageType.Value(message_type) if message_type in pb.MessageType.keys() else pb.NORMAL,
        born_timestamp=from_ms(src.born_timestamp_ms or view.store_timestamp_ms),
        born_host=props.get(PROPERTY_BORN_HOST, view.born_host),
        store_timestamp=from_ms(view.store_timestamp_ms),
        store_host=view.store_host,
        queue_id=src.queue_id if src.HasField("queue_id") else 0,
        queue_offset=view.queue_offset,
    )
    if receipt_handle:
        sp.receipt_handle = receipt_handle
    if delivery_attempt:
        sp.delivery_attempt = delivery_attempt
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(duration(invisible_ms))
    if PROPERTY_MESSAGE_GROUP in props:
        sp.message_group = props[PROPERTY_MESSAGE_GROUP]
    priority = props.get(PROPERTY_PRIORITY, "")
    if priority.isdigit():
        sp.priority = int(priority)
    deliver_ms = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if deliver_ms.isdigit():  # a delayed message, delivered at its time
        sp.delivery_timestamp.CopyFrom(from_ms(int(deliver_ms)))
    out = pb.Message(
        topic=pb.Resource(name=topic or props.get(PROPERTY_REAL_TOPIC) or src.topic),
        system_properties=sp,
        body=src.body,
    )
    for name, value in props.items():
        if not is_system_property(name):
            out.user_properties[name] = value
    return out


# -- opaque ids ------------------------------------------------------------------------

#: Longest token ``decode_token`` reads (a receipt handle is a few hundred characters).
MAX_TOKEN_CHARS = 4096


def encode_token(fields: dict[str, object]) -> str:
    """A compact, URL-safe opaque string for ``fields`` (decoded by ``decode_token``)."""
    raw = json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_token(token: str) -> dict[str, object]:
    """``fields`` of ``encode_token``; ValueError when ``token`` is not one (too long,
    not base64url, not a JSON object, nested too deep)."""
    if len(token) > MAX_TOKEN_CHARS:
        raise ValueError(f"not a gateway token: longer than {MAX_TOKEN_CHARS} characters")
    try:
        fields = json.loads(_b64decode(token))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"not a gateway token: {type(exc).__name__}") from None
    if not isinstance(fields, dict):
        raise ValueError("not a gateway token")
    return fields


_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def _b64decode(text: str) -> bytes:
    """Strict unpadded base64url (ValueError on anything else: other characters, a bad length)."""
    if not _BASE64URL.fullmatch(text):
        raise ValueError("not base64url")
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


#: Longest v2 transaction id decoded (one the gateway issues is about 170 characters).
MAX_TRANSACTION_ID_CHARS = 1024
#: Bytes of a transaction handle's MAC: HMAC-SHA256 truncated to 128 bits.
HANDLE_MAC_BYTES = 16
#: Shortest handle key accepted.
MIN_HANDLE_KEY_BYTES = 16
#: Etcd secret (txmq_runtime.secrets) every gateway of a cluster signs handles with.
HANDLE_KEY_SECRET = "transaction-handle-key"
# What the MAC covers before the encoded fields: which token of which version it is, so
# a MAC of another kind of token under the same key never passes for a handle.
_HANDLE_MAC_CONTEXT = b"txmq-gateway transaction-handle v1\x00"
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class TransactionHandle:
    """What END_TRANSACTION needs of a half message, carried in the v2 transaction id
    (the v2 request names only the topic, message id and transaction id). Encoded and
    authenticated by a ``HandleSigner``."""

    store_id: str
    commit_log_offset: int
    queue_offset: int
    transaction_id: str  # txmq's: the half message's unique id


class HandleSigner:
    """Encodes transaction handles as v2 transaction ids a client cannot forge or alter
    (and, with ``sign``/``open``, other tokens such as receipt handles, each kind under
    its own context string):
    ``<fields>.<mac>``, the fields base64url JSON, the MAC base64url HMAC-SHA256 (first
    16 bytes) over a context string and the exact encoded fields, keyed by a server key.
    Every gateway of a cluster holds the same key (an etcd secret, HANDLE_KEY_SECRET), so
    a handle issued by one is accepted by all, across restarts."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_HANDLE_KEY_BYTES:
            raise ValueError(f"a handle key needs at least {MIN_HANDLE_KEY_BYTES} bytes, not {len(key)}")
        self._key = bytes(key)

    @classmethod
    def ephemeral(cls) -> HandleSigner:
        """A signer with a random key of its own: its handles are accepted by it alone
        (tests, and cores built without the cluster's key)."""
        return cls(os.urandom(32))

    def _mac(self, fields: str, context: bytes = _HANDLE_MAC_CONTEXT) -> bytes:
        mac = hmac.new(self._key, context + fields.encode(), hashlib.sha256)
        return mac.digest()[:HANDLE_MAC_BYTES]

    def sign(self, fields: dict[str, object], *, context: bytes) -> str:
        """``fields`` as a token only this cluster's gateways accept: ``<fields>.<mac>``,
        the MAC over ``context`` (which kind of token) and the encoded fields."""
        encoded = encode_token(fields)
        return f"{encoded}.{_b64encode(self._mac(encoded, context))}"

    def open(self, token: str, *, context: bytes) -> dict[str, object]:
        """The fields of a token ``sign`` made with ``context``; ValueError saying why
        when it is not one (no signature, not in the format, a MAC that does not match,
        malformed fields)."""
        encoded, dot, mac_text = token.partition(".")
        if not dot:
            raise ValueError("it carries no signature")
        try:
            if not (encoded and mac_text):
                raise ValueError("empty part")
            mac = _b64decode(mac_text)
            _b64decode(encoded)
        except ValueError:
            raise ValueError("not in the gateway's format") from None
        if not hmac.compare_digest(mac, self._mac(encoded, context)):
            raise ValueError("its signature does not match (altered, or issued by another cluster)")
        try:
            return decode_token(encoded)
        except ValueError as exc:  # (a valid MAC over bad fields: only with a leaked key)
            raise ValueError(f"malformed fields ({exc})") from None

    def encode(self, handle: TransactionHandle) -> str:
        fields = {
            "s": handle.store_id,
            "c": handle.commit_log_offset,
            "q": handle.queue_offset,
            "t": handle.transaction_id,
        }
        return self.sign(fields, context=_HANDLE_MAC_CONTEXT)

    def decode(self, token: str) -> TransactionHandle:
        """The handle of a transaction id this cluster's gateways issued; anything else
        (too long, not in the format, a MAC that does not match, malformed fields) raises
        GatewayError(INVALID_TRANSACTION_ID) saying why."""
        if len(token) > MAX_TRANSACTION_ID_CHARS:
            raise _not_ours(token, f"longer than {MAX_TRANSACTION_ID_CHARS} characters ({len(token)})")
        try:
            fields = self.open(token, context=_HANDLE_MAC_CONTEXT)
        except ValueError as exc:
            raise _not_ours(token, str(exc)) from None
        try:
            return _handle_of(fields)
        except ValueError as exc:  # (a valid MAC over bad fields: only with a leaked key)
            raise _not_ours(token, f"malformed fields ({exc})") from None


def _handle_of(f: dict[str, object]) -> TransactionHandle:
    store_id, transaction_id = f.get("s"), f.get("t")
    if not (isinstance(store_id, str) and store_id and isinstance(transaction_id, str) and transaction_id):
        raise ValueError("store id and transaction id must be non-empty strings")
    return TransactionHandle(store_id, _offset(f.get("c")), _offset(f.get("q")), transaction_id)


def _offset(value: object) -> int:
    if type(value) is not int or not 0 <= value <= _INT64_MAX:
        raise ValueError("offsets must be integers in [0, 2^63)")
    return value


def _not_ours(token: str, reason: str) -> GatewayError:
    return GatewayError(
        Code.INVALID_TRANSACTION_ID, f"transaction id {shorten(token)} was not issued by txmq: {reason}"
    )
