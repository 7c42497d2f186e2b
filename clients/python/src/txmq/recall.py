"""Recalling a delayed message before it is delivered (docs/sdk.md, "Recall").

A send of a delayed message answers where its timer record lies; ``RecallHandle`` is
that answer as one opaque string (``SendResult.recall_handle``) to keep, pass on, and
hand to ``Producer.recall`` (or ``txmq message recall``) later: the topic, the store (or
store group) holding the record, its commit-log offset and the message's unique id. A
replicated group's replicas hold the record at the same offset, so the handle outlives
a failover. Anyone may make a handle: the store checks it names the timer record of
that message, and recalling needs Pub on the topic.

Format: ``txr1.`` + unpadded URL-safe base64 of ``topic NUL store_id NUL offset NUL
unique_id`` (offset in decimal); the gateway gives official RocketMQ clients the same
string.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from txmq.errors import error
from txmq.v1 import errors_pb2

PREFIX = "txr1."
#: The longest handle accepted (topic 127 + store id + offset + unique id, with room).
MAX_HANDLE_CHARS = 1024


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    store_id: str
    commit_log_offset: int
    unique_id: str

    @classmethod
    def of_send(cls, topic: str, store_id: str, commit_log_offset: int, unique_id: str, deliver_at_ms: int) -> str:
        """The handle a send's answer gives: encoded for a delayed message (``deliver_at_ms``
        set), "" for any other (the SDK's ``SendResult.recall_handle``, the gateway's
        ``SendResultEntry.recall_handle``)."""
        return cls(topic, store_id, commit_log_offset, unique_id).encode() if deliver_at_ms else ""

    def encode(self) -> str:
        raw = "\0".join((self.topic, self.store_id, str(self.commit_log_offset), self.unique_id)).encode()
        return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> RecallHandle:
        """The handle ``text`` names; CODE_ILLEGAL_ARGUMENT when it is not one."""
        if not text.startswith(PREFIX) or len(text) > MAX_HANDLE_CHARS:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"not a txmq recall handle: {text[:64]!r}")
        body = text[len(PREFIX) :]
        try:
            parts = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode().split("\0")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            parts = []
        if len(parts) != 4 or not all(parts) or not parts[2].isdigit():
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"a malformed recall handle: {text[:64]!r}")
        return cls(parts[0], parts[1], int(parts[2]), parts[3])
