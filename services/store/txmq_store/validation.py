"""Request validation and the encoding of validated messages into records.

Everything here is pure: a rejected message (or batch) leaves the store untouched.
Errors carry ``index`` metadata naming the offending message of a batch.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from txmq.codec_native import fields as _fields
from txmq.errors import TxmqError, error
from txmq.ids import new_unique_id
from txmq.protocol import DELAY_PROPERTIES, RESERVED_PROPERTIES
from txmq.v1 import errors_pb2
from txmq.validation import check_group as check_group_name  # noqa: F401 - one naming rule: SDK, store, pull, txcheck
from txmq_runtime.tags import tag_hash_code

from .codec import (
    HEADER_SIZE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PreparedRecord,
    encode_tail,
    set_born_timestamp,
)
from .configs import is_system_topic
from .model import (
    FIELD_PROPERTIES,
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_TYPE_MASK,
    OutgoingMessage,
    is_indexed,
    takes_queue_slot,
)

NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
MAX_TOPIC_LENGTH = 127
INT32_MAX = 2**31 - 1
_crc32 = zlib.crc32
# (takes a queue slot, indexed) per sysflag transaction type, looked up once per message.
_TRAITS = {t: (takes_queue_slot(t), is_indexed(t)) for t in range(0, TRANSACTION_TYPE_MASK + 1, 4)}

_tag_codes: dict[str, int] = {}
#: What producers may not set: the reserved names but the delay properties (one per
#: message, checked by ``timer.delivery_time``).
PRODUCER_RESERVED = RESERVED_PROPERTIES - DELAY_PROPERTIES


def cached_tag_code(tag: str) -> int:
    code = _tag_codes.get(tag)
    if code is None:
        if len(_tag_codes) >= 65_536:
            _tag_codes.clear()
        code = _tag_codes[tag] = tag_hash_code(tag)
    return code


def check_topic_name(name: str, **metadata: str) -> None:
    if not name:
        raise error(errors_pb2.CODE_ILLEGAL_TOPIC, "topic is empty", **metadata)
    if len(name) > MAX_TOPIC_LENGTH:
        raise error(
            errors_pb2.CODE_ILLEGAL_TOPIC, f"topic is {len(name)} characters long, at most {MAX_TOPIC_LENGTH}",
            topic=name[:MAX_TOPIC_LENGTH], **metadata,
        )  # fmt: skip
    if not NAME_PATTERN.fullmatch(name):
        raise error(
            errors_pb2.CODE_ILLEGAL_TOPIC, f"topic {name!r} has characters outside [%|a-zA-Z0-9_-]",
            topic=name, **metadata,
        )  # fmt: skip


def check_writable_topic_name(name: str, **metadata: str) -> None:
    """A topic producers and admins may use: legal and not a system topic."""
    check_topic_name(name, **metadata)
    if is_system_topic(name):
        raise error(errors_pb2.CODE_SYSTEM_TOPIC, f"{name} is a system topic", topic=name, **metadata)


# -- topic and subscription-group configs ------------------------------------------------

#: Topic attributes (RocketMQ's are a few short ``+name=value`` pairs): limits per entry
#: and for the whole config. A config is written to topics.json, shipped to followers and
#: published to etcd (one key per topic, etcd refuses values over 1.5 MiB): one admin
#: call must not be able to make any of those fail (issue 16).
MAX_TOPIC_ATTRIBUTES = 64
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 4 * 1024
#: A topic or subscription-group config, as its JSON document encodes it.
MAX_CONFIG_BYTES = 64 * 1024


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_topic_attributes(attributes: Mapping[str, str], **metadata: str) -> None:
    """CODE_ILLEGAL_ARGUMENT for too many attributes or an empty name, CODE_PAYLOAD_TOO_LARGE
    for a name or value over its limit."""
    if len(attributes) > MAX_TOPIC_ATTRIBUTES:
        raise error(
            errors_pb2.CODE_ILLEGAL_ARGUMENT,
            f"{len(attributes)} topic attributes, at most {MAX_TOPIC_ATTRIBUTES}", **metadata,
        )  # fmt: skip
    for name, value in attributes.items():
        if not name:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "a topic attribute has an empty name", **metadata)
        if (n := _utf8(name)) > MAX_ATTRIBUTE_KEY_BYTES:
            raise error(
                errors_pb2.CODE_PAYLOAD_TOO_LARGE,
                f"topic attribute name of {n} bytes, at most {MAX_ATTRIBUTE_KEY_BYTES}",
                attribute=name[:64], **metadata,
            )  # fmt: skip
        if (n := _utf8(value)) > MAX_ATTRIBUTE_VALUE_BYTES:
            raise error(
                errors_pb2.CODE_PAYLOAD_TOO_LARGE,
                f"topic attribute {name[:64]!r} has a value of {n} bytes, at most {MAX_ATTRIBUTE_VALUE_BYTES}",
                attribute=name[:64], **metadata,
            )  # fmt: skip


def check_config_size(document: Mapping[str, object], what: str, **metadata: str) -> None:
    """CODE_PAYLOAD_TOO_LARGE when ``document`` (a config as its file holds it) encodes to
    more than MAX_CONFIG_BYTES of JSON."""
    size = len(json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > MAX_CONFIG_BYTES:
        raise error(
            errors_pb2.CODE_PAYLOAD_TOO_LARGE,
            f"the {what} config encodes to {size} bytes, at most {MAX_CONFIG_BYTES}", **metadata,
        )  # fmt: skip


@dataclass(slots=True, frozen=True)
class MessageLimits:
    max_body_bytes: int
    max_properties_bytes: int
    max_record_bytes: int  # what fits a commit-log segment


_UNIQ_PREFIX = f"{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}"
_UNIQ_PREFIX_LEN = len(_UNIQ_PREFIX)
MIN_DECODED_SIZE = HEADER_SIZE + 3  # an empty body, topic and properties
_NO_PROPERTIES: Mapping[str, str] = {}


def _bad(code: int, message: str, index: int) -> TxmqError:
    return error(code, message, index=str(index))


def _check_body(length: int, limits: MessageLimits, index: int) -> None:
    if not length:
        raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, "message body is empty", index)
    if length > limits.max_body_bytes:
        raise _bad(
            errors_pb2.CODE_MESSAGE_BODY_TOO_LARGE, f"body of {length} bytes exceeds {limits.max_body_bytes}", index
        )


def _check_properties_size(length: int, limits: MessageLimits, index: int) -> None:
    if length > limits.max_properties_bytes:
        raise _bad(
            errors_pb2.CODE_MESSAGE_PROPERTIES_TOO_LARGE,
            f"properties take {length} bytes encoded, at most {limits.max_properties_bytes}", index,
        )  # fmt: skip


def _check_record_size(size: int, limits: MessageLimits, index: int) -> None:
    if size > limits.max_record_bytes:
        raise _bad(
            errors_pb2.CODE_MESSAGE_BODY_TOO_LARGE,
            f"message of {size} bytes does not fit a commit-log segment ({limits.max_record_bytes})", index,
        )  # fmt: skip


class MessageEncoder:
    """Checks messages' content and encodes them as records, for one request (born
    host, receive time and whether it is a system send are per request)."""

    __slots__ = ("_born_host", "_limits", "_now_ms", "_reserved", "_system")

    def __init__(self, *, limits: MessageLimits, born_host: bytes, now_ms: int, system: bool) -> None:
        self._limits = limits
        self._born_host = born_host
        self._now_ms = now_ms
        self._system = system
        # Producers may not set what the system sets or obeys (e.g. the check counter of
        # a half message); system sends carry such properties on purpose.
        self._reserved = FIELD_PROPERTIES if system else PRODUCER_RESERVED

    def prepare(
        self,
        msg: OutgoingMessage,
        index: int,
        topic: str,
        queue_id: int,
        extra_properties: Mapping[str, str] | None,
        sys_flag: int,
    ) -> PreparedRecord:
        """Encode ``msg`` for ``topic``/``queue_id`` (resolved by the caller, e.g.
        rewritten for a half message); ``extra_properties`` are system properties the
        store adds. Positional: this runs once per message."""
        limits = self._limits
        body = msg.body
        _check_body(len(body), limits, index)
        if not -(2**31) <= msg.flag <= INT32_MAX:
            raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, f"flag {msg.flag} is not a 32-bit integer", index)
        unique_id = msg.unique_id or new_unique_id()
        tags, keys, props = msg.tags, msg.keys, msg.properties
        if not (tags or keys or props or extra_properties):
            # The common case, the unique id alone: what the general path below makes.
            if NAME_VALUE_SEPARATOR in unique_id or PROPERTY_SEPARATOR in unique_id:
                raise _bad(
                    errors_pb2.CODE_ILLEGAL_MESSAGE,
                    "tags, keys, unique id and properties must not contain \\x01 or \\x02", index,
                )  # fmt: skip
            encoded = f"{_UNIQ_PREFIX}{unique_id}{PROPERTY_SEPARATOR}".encode()
        else:
            encoded = self._encode_properties(index, unique_id, tags, keys, props, extra_properties)
        _check_properties_size(len(encoded), limits, index)
        tail = encode_tail(topic, encoded)
        size = HEADER_SIZE + len(body) + len(tail)
        _check_record_size(size, limits, index)
        system = self._system
        if system and not (0 <= msg.reconsume_times <= INT32_MAX and 0 <= sys_flag <= 0xFFFFFFFF):
            raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, "reconsume times / sysflag out of range", index)
        return PreparedRecord(
            topic,
            queue_id,
            msg.flag,
            sys_flag,
            msg.born_timestamp_ms or self._now_ms,
            self._born_host,
            msg.reconsume_times if system else 0,
            msg.prepared_transaction_offset if system else 0,
            body,
            _crc32(body),
            tail,
            size,
            cached_tag_code(tags) if tags else 0,
            tags,
            keys,
            unique_id,
            props,
            extra_properties,
            *_TRAITS[sys_flag & TRANSACTION_TYPE_MASK],
        )

    def unpack(self, blob: bytearray, pos: int, index: int) -> PreparedRecord:
        """Check the record a producer sent at ``blob[pos:]`` (``Store.SendStream``, layout in
        ``txmq.records``) and take it as it is: its topic, properties and body are stored
        byte for byte where they lie; the commit log writes in the fields only the store
        knows (``codec.patch_record``). The record's ``queue_id`` may be ``ANY_QUEUE``;
        the caller resolves it."""
        limits = self._limits
        try:
            (size, body_crc, queue_id, flag, _qo, _po, sys_flag, born_ts, _bh, _st, _sh, reconsume, prepared, body,
             topic, text) = _fields(blob, pos)  # fmt: skip
        except ValueError as exc:  # a torn or malformed record, or text that does not decode
            raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, f"not a well-formed record: {exc}", index) from None
        if sys_flag or reconsume or prepared:
            raise _bad(
                errors_pb2.CODE_ILLEGAL_MESSAGE,
                "a sent record's sysflag, reconsume times and prepared-transaction offset must be 0", index,
            )  # fmt: skip
        _check_body(len(body), limits, index)
        _check_properties_size(size - MIN_DECODED_SIZE - len(body) - len(topic), limits, index)  # ASCII topic
        _check_record_size(size, limits, index)
        if _crc32(body) != body_crc:
            raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, "body CRC mismatch: the record was damaged", index)
        if not topic:
            raise _bad(errors_pb2.CODE_ILLEGAL_TOPIC, "topic is empty", index)
        keys: tuple[str, ...]
        if (
            text.startswith(_UNIQ_PREFIX)
            and text.count(NAME_VALUE_SEPARATOR) == 1
            and text.find(PROPERTY_SEPARATOR) == len(text) - 1
        ):
            # The common case, the unique id alone.
            unique_id, tags, keys, props = text[_UNIQ_PREFIX_LEN:-1], "", (), _NO_PROPERTIES
        else:
            unique_id, tags, keys, props = self._parse_properties(text, index)
        if not unique_id:
            raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, "a sent record must carry its unique id (UNIQ_KEY)", index)
        if not born_ts:
            born_ts = self._now_ms
            set_born_timestamp(blob, pos, born_ts)
        return PreparedRecord(
            topic,
            queue_id,
            flag,
            0,
            born_ts,
            self._born_host,
            0,
            0,
            body,
            body_crc,
            b"",
            size,
            cached_tag_code(tags) if tags else 0,
            tags,
            keys,
            unique_id,
            props,
            None,
            True,
            True,
            blob,
            pos,
        )

    def _parse_properties(self, text: str, index: int) -> tuple[str, str, tuple[str, ...], dict[str, str]]:
        """A sent record's properties text -> unique id, tags, keys, other properties; the
        same rules as for a message sent field by field."""
        if not text.endswith(PROPERTY_SEPARATOR):
            raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, "properties must end with \\x02", index)
        items = text[:-1].split(PROPERTY_SEPARATOR)
        if text.count(NAME_VALUE_SEPARATOR) != len(items):
            raise _bad(
                errors_pb2.CODE_ILLEGAL_MESSAGE,
                "tags, keys, unique id and properties must not contain \\x01 or \\x02", index,
            )  # fmt: skip
        unique_id = tags = ""
        keys: tuple[str, ...] = ()
        props: dict[str, str] = {}
        reserved = self._reserved
        seen: set[str] = set()
        for item in items:
            name, _, value = item.partition(NAME_VALUE_SEPARATOR)
            if not name:
                raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, "property with an empty name", index)
            if name in seen:
                raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, f"property {name} appears twice", index)
            seen.add(name)
            if name == PROPERTY_UNIQ_KEY:
                unique_id = value
            elif name == PROPERTY_TAGS:
                tags = value
            elif name == PROPERTY_KEYS:
                keys = tuple(value.split(KEY_SEPARATOR)) if value else ()
                if not all(keys):
                    raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, f"keys {value!r} hold an empty key", index)
            elif name in reserved:
                raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, f"property name {name} is reserved", index)
            else:
                props[name] = value
        return unique_id, tags, keys, props

    def _encode_properties(
        self,
        index: int,
        unique_id: str,
        tags: str,
        keys: tuple[str, ...],
        props: Mapping[str, str],
        extra_properties: Mapping[str, str] | None,
    ) -> bytes:
        """The properties text of a message with tags, keys or properties, encoded."""
        parts = [f"{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}{unique_id}{PROPERTY_SEPARATOR}"]
        if tags:
            parts.append(f"{PROPERTY_TAGS}{NAME_VALUE_SEPARATOR}{tags}{PROPERTY_SEPARATOR}")
        if keys:
            for key in keys:
                if not key or KEY_SEPARATOR in key:
                    raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, f"key {key!r} is empty or contains a space", index)
            joined = KEY_SEPARATOR.join(keys)
            parts.append(f"{PROPERTY_KEYS}{NAME_VALUE_SEPARATOR}{joined}{PROPERTY_SEPARATOR}")
        if props:
            for name, value in props.items():
                if not name:
                    raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, "property with an empty name", index)
                if name in self._reserved:
                    raise _bad(errors_pb2.CODE_ILLEGAL_MESSAGE, f"property name {name} is reserved", index)
                if extra_properties is not None and name in extra_properties:
                    continue  # the store's value wins (e.g. REAL_TOPIC of a half message)
                parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
        if extra_properties:
            for name, value in extra_properties.items():
                parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
        text = "".join(parts)
        # Each part holds exactly one separator of each kind unless a tag, key, id, name
        # or value smuggled one in: two C-speed counts instead of a scan per string.
        if text.count(NAME_VALUE_SEPARATOR) != len(parts) or text.count(PROPERTY_SEPARATOR) != len(parts):
            raise _bad(
                errors_pb2.CODE_ILLEGAL_MESSAGE,
                "tags, keys, unique id and properties must not contain \\x01 or \\x02", index,
            )  # fmt: skip
        encoded = text.encode("utf-8")
        return encoded
