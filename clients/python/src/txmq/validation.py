"""Client-side checks, done before any network call (RocketMQ's ``Validators``); the
store, pull and txcheck services apply the same naming rules through this module.

The store checks again; checking here turns an obvious mistake into an error that
names the field, without a round trip, and keeps the retry loop from retrying it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from txmq.errors import BadRequestError, ForbiddenError, PayloadTooLargeError
from txmq.protocol import (
    DELAY_PROPERTIES,
    KEY_SEPARATOR,
    MAX_CLIENT_ID_BYTES,
    MAX_FILTER_EXPRESSION_BYTES,
    RESERVED_PROPERTIES,
    is_system_topic,
)
from txmq.v1 import errors_pb2

#: Reserved names a producer may not set: all but the delay properties (the store checks those).
_PRODUCER_RESERVED = RESERVED_PROPERTIES - DELAY_PROPERTIES

# RocketMQ's TopicValidator / Validators rules; groups share the character set.
_NAME_RE = re.compile(r"[%|a-zA-Z0-9_-]+")
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255

_INT32 = range(-(2**31), 2**31)


# The store separates properties with these (common.proto), so they cannot appear in them.
_SEPARATORS = ("\u0001", "\u0002")


def check_topic(topic: str) -> None:
    _check_name(topic, what="topic", max_length=TOPIC_MAX_LENGTH, code=errors_pb2.CODE_ILLEGAL_TOPIC)


def check_group(group: str, *, code: int) -> None:
    _check_name(group, what="group", max_length=GROUP_MAX_LENGTH, code=code)


def _check_name(name: str, *, what: str, max_length: int, code: int) -> None:
    if not name:
        raise BadRequestError(f"the {what} name is empty", code=code)
    if len(name) > max_length:
        raise BadRequestError(f"the {what} name {name[:32]!r}... is longer than {max_length} characters", code=code)
    if not _NAME_RE.fullmatch(name):
        raise BadRequestError(f"the {what} name {name!r} may only contain [%|a-zA-Z0-9_-]", code=code)


#: How much of a filter expression an error message shows.
FILTER_EXPRESSION_PREVIEW_CHARS = 200


def _utf8_size(text: str) -> int:
    """``text``'s size in UTF-8 bytes (a lone surrogate counts 3, as "surrogatepass"
    encodes it); ASCII text is not encoded."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def filter_expression_preview(text: str) -> str:
    """``text`` itself when short, else its first FILTER_EXPRESSION_PREVIEW_CHARS
    characters and how many there are (what error messages and metadata echo)."""
    if len(text) <= FILTER_EXPRESSION_PREVIEW_CHARS:
        return text
    return f"{text[:FILTER_EXPRESSION_PREVIEW_CHARS]}... ({len(text)} characters)"


def check_filter_expression_size(expression: str, *, kind: str = "filter") -> None:
    """Raise BadRequestError (CODE_ILLEGAL_FILTER_EXPRESSION) for an expression longer
    than MAX_FILTER_EXPRESSION_BYTES in UTF-8; the message shows only its start.
    ``kind`` names it in the message ("tag", "SQL92")."""
    if len(expression) <= MAX_FILTER_EXPRESSION_BYTES // 4:
        return  # at most 4 bytes a character: fits
    size = _utf8_size(expression)
    if size <= MAX_FILTER_EXPRESSION_BYTES:
        return
    shown = filter_expression_preview(expression)
    raise BadRequestError(
        f"the {kind} expression has {size} bytes (UTF-8), more than the limit of {MAX_FILTER_EXPRESSION_BYTES}: "
        f"{shown!r}",
        code=errors_pb2.CODE_ILLEGAL_FILTER_EXPRESSION,
        metadata={
            "expression": shown,
            "expression_bytes": str(size),
            "limit_bytes": str(MAX_FILTER_EXPRESSION_BYTES),
        },
    )


def check_message(
    *,
    topic: str,
    body: bytes,
    tags: str | None,
    keys: Iterable[str],
    properties: Mapping[str, str],
    flag: int,
    max_body_bytes: int,
) -> None:
    """Raise BadRequestError / ForbiddenError / PayloadTooLargeError for a message the
    store would refuse."""
    check_send_topic(topic)
    check_message_content(body, tags, keys, properties, flag, max_body_bytes)


def check_send_topic(topic: str) -> None:
    """The topic part of ``check_message`` (once per batch: a batch shares its topic)."""
    check_topic(topic)
    if is_system_topic(topic):
        raise ForbiddenError(
            f"sending to system topic {topic!r} is forbidden",
            code=errors_pb2.CODE_SYSTEM_TOPIC,
            metadata={"topic": topic},
        )


def check_message_content(
    body: bytes,
    tags: str | None,
    keys: Iterable[str],
    properties: Mapping[str, str],
    flag: int,
    max_body_bytes: int,
) -> None:
    """Everything ``check_message`` checks but the topic, in the same order.
    Positional: this runs once per message sent."""
    if not body:
        raise BadRequestError("the message body is empty", code=errors_pb2.CODE_ILLEGAL_MESSAGE)
    if len(body) > max_body_bytes:
        raise PayloadTooLargeError(
            f"the message body has {len(body)} bytes, more than the limit of {max_body_bytes}",
            code=errors_pb2.CODE_MESSAGE_BODY_TOO_LARGE,
        )
    if properties:
        for name, value in properties.items():
            if not name:
                raise BadRequestError("a property name is empty", code=errors_pb2.CODE_ILLEGAL_MESSAGE)
            if name in _PRODUCER_RESERVED:
                raise BadRequestError(
                    f"the property name {name!r} is reserved for the system; choose another",
                    code=errors_pb2.CODE_ILLEGAL_MESSAGE,
                    metadata={"property": name},
                )
            _check_no_separator(name, what="property name")
            _check_no_separator(value, what=f"value of property {name!r}")
    if keys:
        for key in keys:
            if not key or KEY_SEPARATOR in key:
                raise BadRequestError(
                    f"the key {key!r} is empty or contains a space", code=errors_pb2.CODE_ILLEGAL_MESSAGE
                )
            _check_no_separator(key, what="key")
    if flag not in _INT32:
        raise BadRequestError(f"the flag {flag} is not a 32-bit integer", code=errors_pb2.CODE_ILLEGAL_MESSAGE)
    if tags is not None:
        _check_no_separator(tags, what="tag")


def _check_no_separator(text: str, *, what: str) -> None:
    if any(sep in text for sep in _SEPARATORS):
        raise BadRequestError(f"the {what} {text!r} contains U+0001 or U+0002", code=errors_pb2.CODE_ILLEGAL_MESSAGE)


def check_client_id(client_id: str) -> None:
    """A client id the services keep (a consumer's membership, a producer channel's etcd
    key): not empty, at most MAX_CLIENT_ID_BYTES of UTF-8 (CODE_ILLEGAL_ARGUMENT)."""
    if not client_id:
        raise BadRequestError("client_id is empty", code=errors_pb2.CODE_ILLEGAL_ARGUMENT)
    if len(client_id) > MAX_CLIENT_ID_BYTES // 4:
        size = len(client_id.encode("utf-8", "surrogatepass"))
        if size > MAX_CLIENT_ID_BYTES:
            raise BadRequestError(
                f"client_id has {size} bytes (UTF-8), more than the limit of {MAX_CLIENT_ID_BYTES}: "
                f"{client_id[:64]!r}...",
                code=errors_pb2.CODE_ILLEGAL_ARGUMENT,
                metadata={"client_id_bytes": str(size), "limit": str(MAX_CLIENT_ID_BYTES)},
            )
