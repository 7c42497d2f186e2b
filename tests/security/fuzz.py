"""A seeded, bounded fuzzer over every RPC of every txmq service (issue 16).

    .venv/bin/python -m tests.security.fuzz --seed 1 --requests 20000
    .venv/bin/python -m tests.security.fuzz --seed 1 --requests 2000 --services store,gateway
    .venv/bin/python -m tests.security.fuzz --attach store=127.0.0.1:10911,pull=127.0.0.1:10912,\
txcheck=127.0.0.1:10913,gateway=127.0.0.1:8081 --etcd 127.0.0.1:2379 --logs store=data/logs/store.log

What it does:

- **Cluster.** Starts a private local cluster (etcd, store, pull, txcheck, gateway; the
  ``LocalCluster`` of ``txmq up`` via tests/support, services on port 0, each logging to
  ``<dir>/logs/<name>.log``; the gateway with an access key, so authentication is on),
  or attaches to one (``--attach``). Before fuzzing it creates a topic and a consumer
  group and sends a few messages, so valid requests have something to find.
- **RPCs.** Every service of the generated descriptors of the packages ``txmq.v1`` (every
  ``txmq.v1.*_pb2`` module) and ``apache.rocketmq.v2`` that a process serves, as its
  server reflection lists it: each (process, service, method) is a target. A new RPC or
  service is fuzzed without editing this file. Targets are visited in seeded round-robin
  order, so every one gets about ``requests / targets`` calls.
- **Inputs** (``random.Random(seed)``; the same seed gives the same requests): random
  bytes; valid messages; valid messages with 1-3 fields (nested ones too) given hostile
  values chosen from the field's type (empty, huge strings up to 2 MB, non-UTF-8 text
  put on the wire, negative and extreme integers, unknown enum numbers, NaN, deep and
  huge SQL92, 2 MB maps, 10 000-item repeated fields, illegal names); truncated and
  bit-flipped encodings; unknown fields; for the gateway, hostile metadata (no or garbage
  ``authorization``, correctly signed dates of 2001, 2099 and "x", non-UTF-8 ``-bin``
  headers and raw non-UTF-8 header values, the latter written onto the wire by a small
  proxy that rewrites a marker). Streams get 1-4 messages, then a half-close or a
  hang-up. Huge values are paid from a byte budget spread over the run (``--max-mb``).
- **Calls.** Bounded concurrency; unary calls with a 2 s deadline; streams read for about
  a second, then cancelled.
- **Verdicts** per call: ``ok``; ``typed`` (a txmq service: a non-OK status other than
  INTERNAL/UNKNOWN with a parseable ``txmq-error-bin`` ErrorDetail; the gateway's v2
  protocol: a v2 status other than INTERNAL_ERROR / INTERNAL_SERVER_ERROR, or a gRPC
  status other than INTERNAL/UNKNOWN); ``untyped`` (everything else that failed:
  INTERNAL, UNKNOWN, no detail, "Stream removed", a reset or closed connection, an
  unparseable answer); ``hang`` (our deadline passed on a unary call; counted apart);
  ``open`` (a stream still open when we hung up: expected for streams);
  a client stream whose status grpc.aio replaced by INTERNAL 'Internal error from Core'
  because one of our request writes raced the call's end is judged on the status the
  server sent, recovered from the call (``CLIENT_WRITE_FAILED``; counted apart); a v2
  call whose OK answer was lost that way (nothing to judge) is sent once more;
  ``auth_bypass`` (the gateway did not answer UNAUTHORIZED to a well-formed request with
  hostile credentials).
- **After the run:** "Traceback" and ERROR lines in every service log (written since the
  service started); every process still running (a crash is an exit); every service's
  registration key in etcd (``<prefix>/services/<kind>/<id>``, txmq_runtime.registry)
  still there with the same create revision (a key that vanished and came back under a
  new lease counts as deregistered), and every service still answering.

It prints a figures table and the findings, deduplicated by (process, RPC, input class,
verdict, status, message shape). tests/security/test_fuzz_it.py runs it bounded and seeded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import importlib
import json
import math
import pkgutil
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor as D
from google.protobuf import message_factory
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as v2_definition
from rocketmq.grpc_protocol import service_pb2 as v2_service

import txmq.v1
from txmq.v1 import errors_pb2

#: The proto packages whose services are fuzzed (grpc.health and reflection are not ours).
FUZZED_PACKAGES = ("txmq.v1", "apache.rocketmq.v2")
ERROR_DETAIL_KEY = "txmq-error-bin"  # protos/STATUS_CODES.md
V2_STATUS = "apache.rocketmq.v2.Status"
ERROR_DETAIL = "txmq.v1.ErrorDetail"
V2 = v2_definition.Code
V2_UNTYPED = frozenset({V2.INTERNAL_ERROR, V2.INTERNAL_SERVER_ERROR})
UNTYPED_GRPC = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
#: What a broken transport says: the service did not answer the call it was given.
TRANSPORT_SIGNS = ("Stream removed", "RST_STREAM", "Socket closed", "Connection reset", "failed to connect")

UNARY_DEADLINE_S = 2.0
STREAM_WINDOW_S = 1.0
ACCESS_KEY, SECRET_KEY = "fuzz-ak", "fuzz-secret-key-0123456789"  # >= 16 chars: auth_secret_key
TOPIC, GROUP, PRODUCER_GROUP, CLIENT_ID = "fuzz-topic", "fuzz-group", "fuzz-producer", "fuzz-client"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
MB = 1024 * 1024
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", 64 * MB), ("grpc.max_send_message_length", 64 * MB))
#: Raw header values carrying this marker get it replaced by non-UTF-8 bytes on the wire.
RAW_MARKER = b"qzqNONUTF8qzq"
RAW_MARKER_RE = re.compile(re.escape(RAW_MARKER) + rb"\d{6}")
#: String fields carrying this marker get it replaced by non-UTF-8 bytes after encoding.
TEXT_MARKER = "zqzBADTEXTzqz"
TEXT_MARKER_RE = re.compile(re.escape(TEXT_MARKER.encode()) + rb"\d{6}")

CLASS_WEIGHTS = {
    "valid": 12,
    "mutated": 45,
    "random_bytes": 10,
    "truncated": 9,
    "bitflip": 9,
    "unknown_fields": 5,
}
METADATA_WEIGHT = 15  # v2 targets only
ACCESS_SCOPE_ANYONE = 1  # txmq.v1.AccessScope (protos/txmq/v1/auth.proto)
#: Oneof members that open a client stream (a valid stream starts with one of them).
OPENERS = ("hello", "settings")
VERDICTS = ("ok", "typed", "untyped", "hang", "open", "auth_bypass", "client_error")


# -- the RPCs ------------------------------------------------------------------------------


def fuzzed_services() -> dict[str, D.ServiceDescriptor]:
    """Every service of the fuzzed packages, by full name, from the generated modules
    (each ``txmq.v1.*_pb2`` module, so a new proto file counts too; the v2 protocol)."""
    modules = [v2_service]
    for info in pkgutil.iter_modules(txmq.v1.__path__):
        if info.name.endswith("_pb2"):
            modules.append(importlib.import_module(f"txmq.v1.{info.name}"))
    services: dict[str, D.ServiceDescriptor] = {}
    for module in modules:
        for service in module.DESCRIPTOR.services_by_name.values():
            if service.full_name.rpartition(".")[0] in FUZZED_PACKAGES:
                services[service.full_name] = service
    return services


@dataclass(frozen=True)
class Target:
    process: str
    service: D.ServiceDescriptor
    method: D.MethodDescriptor

    @property
    def path(self) -> str:
        return f"/{self.service.full_name}/{self.method.name}"

    @property
    def rpc(self) -> str:
        return f"{self.service.name}.{self.method.name}"

    @property
    def v2(self) -> bool:
        return self.service.full_name.startswith("apache.rocketmq.v2.")

    @property
    def streaming(self) -> bool:
        return self.method.client_streaming or self.method.server_streaming


def enumerate_targets(hosted: dict[str, Sequence[str]]) -> list[Target]:
    """One target per method of every fuzzed service each process serves (``hosted``:
    process -> full service names, e.g. from ``reflected_services``)."""
    services = fuzzed_services()
    return [
        Target(process, services[name], method)
        for process, names in sorted(hosted.items())
        for name in sorted(names)
        if name in services
        for method in services[name].methods
    ]


def reflected_services(address: str, *, timeout_s: float = 5.0) -> list[str]:
    """The services ``address`` serves, as its server reflection lists them."""
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        for response in stub.ServerReflectionInfo(iter([request]), timeout=timeout_s):
            return [s.name for s in response.list_services_response.service]
    return []


# -- inputs --------------------------------------------------------------------------------


@dataclass
class Case:
    index: int
    target: Target
    input_class: str  # valid, mutated, random_bytes, truncated, bitflip, unknown_fields, metadata
    payloads: list[bytes]
    what: str  # which mutation, for the findings
    metadata: list[tuple[str, str | bytes]] = field(default_factory=list)
    raw_headers: bool = False  # goes through the marker-rewriting proxy
    expect_unauthorized: bool = False
    stream_end: str = ""  # half_close / hang_up, for client streams

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.payloads) + sum(len(k) + len(v) for k, v in self.metadata)


class Budget:
    """Bytes for huge values, spread over the run: request ``i`` of ``n`` may spend up to
    ``total * (i + 1) / n`` in all, so a run stays under ``total`` plus the small stuff."""

    def __init__(self, total_bytes: int, requests: int) -> None:
        self.total = total_bytes
        self.requests = max(1, requests)
        self.spent = 0
        self.index = 0

    def allow(self, size: int) -> bool:
        return self.spent + size <= self.total * (self.index + 1) / self.requests


HUGE_SIZES = (16 * 1024, 128 * 1024, 1 * MB, 2 * MB)
INT_BOUNDS = {
    D.FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    D.FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    D.FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    D.FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    D.FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    D.FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    D.FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    D.FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    D.FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    D.FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_STRING = D.FieldDescriptor.TYPE_STRING
_BYTES = D.FieldDescriptor.TYPE_BYTES
_MESSAGE = D.FieldDescriptor.TYPE_MESSAGE
_ENUM = D.FieldDescriptor.TYPE_ENUM
_BOOL = D.FieldDescriptor.TYPE_BOOL
_FLOATS = (D.FieldDescriptor.TYPE_FLOAT, D.FieldDescriptor.TYPE_DOUBLE)


def message_class(desc: D.Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(desc)


def is_map(f: D.FieldDescriptor) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def open_to_anyone(method: D.MethodDescriptor) -> bool:
    """Whether the method's ``(txmq.v1.access)`` option lets anyone call it (WhoAmI):
    hostile credentials are then no reason to refuse."""
    for f, value in method.GetOptions().ListFields():
        if f.name == "access" and getattr(value, "scope", 0) == ACCESS_SCOPE_ANYONE:
            return True
    return False


def sign(date_time: str, secret_key: str = SECRET_KEY) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def authorization(date_time: str, *, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> str:
    return (
        f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={sign(date_time, secret_key)}"
    )


@dataclass
class Names:
    """What valid requests name: the topic, group and store prepared before the run."""

    topic: str = TOPIC
    group: str = GROUP
    producer_group: str = PRODUCER_GROUP
    store_id: str = "store-0"
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    #: The cluster runs with auth_enabled: every call is signed, and txmq targets get
    #: hostile metadata too.
    auth: bool = False


class Generator:
    """Cases from one ``random.Random(seed)``; generated in order, so a seed always gives
    the same cases whatever the answers."""

    def __init__(
        self,
        seed: int,
        targets: Sequence[Target],
        *,
        requests: int,
        max_bytes: int,
        names: Names,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.rng = random.Random(seed)
        self.clock = clock  # timestamps and signed dates: the only thing the seed does not decide
        self.targets = list(targets)
        self.requests = requests
        self.budget = Budget(max_bytes, requests)
        self.names = names
        self._marker = 0
        self._method = ""
        self._text_markers = False
        self._opening = False  # the next valid message opens a client stream

    # -- the plan

    def cases(self) -> Iterator[Case]:
        order: list[Target] = []
        for i in range(self.requests):
            if not order:
                order = list(self.targets)
                self.rng.shuffle(order)
            self.budget.index = i
            case = self.case(i, order.pop())
            self.budget.spent += case.size
            yield case

    def case(self, index: int, target: Target) -> Case:
        rng = self.rng
        weights = dict(CLASS_WEIGHTS)
        signed = target.v2 or self.names.auth
        if signed:
            weights["metadata"] = METADATA_WEIGHT
        input_class = rng.choices(list(weights), weights=list(weights.values()))[0]
        self._method = target.method.name
        n = rng.randint(1, 4) if target.method.client_streaming else 1
        payloads, whats = [], []
        well_formed = True
        for k in range(n):
            self._opening = k == 0 and target.method.client_streaming
            payload, what, ok = self.payload(target.method.input_type, input_class)
            payloads.append(payload)
            whats.append(what)
            well_formed = well_formed and ok
        case = Case(index, target, input_class, payloads, "; ".join(dict.fromkeys(whats)))
        if target.method.client_streaming:
            case.stream_end = rng.choice(("half_close", "hang_up"))
        if signed:
            self.metadata(case, hostile=input_class == "metadata", well_formed=well_formed)
        return case

    def payload(self, desc: D.Descriptor, input_class: str) -> tuple[bytes, str, bool]:
        """(encoded request, what was done, whether it parses)."""
        rng = self.rng
        if input_class == "random_bytes":
            size = rng.choice((0, 1, 2, 7, 64, 512, 4096, 65536))
            return rng.randbytes(size), f"{size} random bytes", size == 0
        if input_class in ("valid", "metadata"):
            msg = self.valid(desc)
            return msg.SerializeToString(), "valid", True
        msg = self.valid(desc)
        what = "valid"
        if input_class == "mutated" or rng.random() < 0.5:
            what = self.mutate(msg)
        data = self.encode(msg)
        if input_class == "truncated":
            cut = rng.randrange(len(data)) if data else 0
            return data[:cut], f"{what}, cut at {cut}/{len(data)}", False
        if input_class == "bitflip":
            buf = bytearray(data or b"\x00")
            flips = rng.randint(1, 8)
            for _ in range(flips):
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            return bytes(buf), f"{what}, {flips} bits flipped", False
        if input_class == "unknown_fields":
            number = rng.choice((1000, 2**16, 2**29 - 1))
            extra = _varint(number << 3 | 2) + _varint(16) + rng.randbytes(16) + _varint((number + 1) << 3) + _varint(1)
            return data + extra, f"{what}, unknown field {number}", True
        return data, what, not self._text_markers

    def encode(self, msg: Message) -> bytes:
        data = msg.SerializeToString()
        self._text_markers = bool(TEXT_MARKER_RE.search(data))
        if self._text_markers:
            data = TEXT_MARKER_RE.sub(lambda m: b"\xff\xfe\xc3(" + b"\x80" * (len(m.group()) - 4), data)
        return data

    # -- valid messages

    def valid(self, desc: D.Descriptor, *, parent: str = "", depth: int = 0) -> Message:
        msg = message_class(desc)()
        if depth > 4:
            return msg
        skip: set[str] = set()
        opening, self._opening = self._opening, False
        for oneof in desc.oneofs:
            if len(oneof.fields) > 1:
                openers = [f for f in oneof.fields if f.name in OPENERS]
                chosen = openers[0] if opening and openers else self.rng.choice([*oneof.fields, None])
                skip.update(f.name for f in oneof.fields if f is not chosen)
        for f in desc.fields:
            if f.name in skip:
                continue
            if f.message_type is not None and depth >= 3 and not is_map(f):
                continue
            self._set_valid(msg, f, parent=parent, depth=depth)
        return msg

    def _set_valid(self, msg: Message, f: D.FieldDescriptor, *, parent: str, depth: int) -> None:
        if is_map(f):
            key_f, value_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            target = getattr(msg, f.name)
            for _ in range(self.rng.randint(0, 2)):
                key = self.valid_scalar(key_f, parent=f.name)
                if value_f.type == _MESSAGE:
                    target[key].CopyFrom(self.valid(value_f.message_type, parent=f.name, depth=depth + 1))
                else:
                    target[key] = self.valid_scalar(value_f, parent=f.name)
            return
        if f.is_repeated:
            container = getattr(msg, f.name)
            for _ in range(self.rng.randint(1, 2)):
                if f.type == _MESSAGE:
                    container.add().CopyFrom(self.valid(f.message_type, parent=f.name, depth=depth + 1))
                else:
                    container.append(self.valid_scalar(f, parent=parent))
            return
        if f.type == _MESSAGE:
            getattr(msg, f.name).CopyFrom(self.valid_message_field(f, depth=depth))
            return
        setattr(msg, f.name, self.valid_scalar(f, parent=parent))

    def valid_message_field(self, f: D.FieldDescriptor, *, depth: int) -> Message:
        full = f.message_type.full_name
        if full == "google.protobuf.Duration":
            msg = message_class(f.message_type)()
            seconds = 30 if "invisible" in f.name else self.rng.randint(0, 1)
            msg.seconds = seconds  # type: ignore[attr-defined]
            return msg
        if full == "google.protobuf.Timestamp":
            msg = message_class(f.message_type)()
            msg.seconds = int(self.clock())  # type: ignore[attr-defined]
            return msg
        return self.valid(f.message_type, parent=f.name, depth=depth + 1)

    def valid_scalar(self, f: D.FieldDescriptor, *, parent: str = "") -> Any:
        rng, n, p = self.rng, f.name.lower(), parent.lower()
        if f.type == _STRING:
            return self.valid_string(n, p)
        if f.type == _BYTES:
            return b"fuzz body" if "body" in n else rng.randbytes(8)
        if f.type == _BOOL:
            return rng.random() < 0.5
        if f.type == _ENUM:
            numbers = [v.number for v in f.enum_type.values]
            nonzero = [x for x in numbers if x != 0]
            return rng.choice(nonzero or numbers)
        if f.type in _FLOATS:
            return rng.random()
        if "queue_id" in n or "offset" in n or "epoch" in n or "index" in n:
            return 0
        if "perm" in n:
            return 6
        if "timestamp" in n or n.endswith(("_at_ms", "time_ms", "_time")):
            return int(self.clock() * 1000)
        if "timeout" in n or n.endswith("_ms"):
            return 100
        if any(s in n for s in ("num", "max", "size", "count", "batch", "limit", "times")):
            return rng.randint(1, 4)
        return rng.randint(0, 3)

    def valid_string(self, n: str, p: str) -> str:
        rng = self.rng
        # What a destructive call names is a scratch topic or group: never the prepared ones.
        scratch = self._method.startswith(("Create", "Update", "Delete"))
        topic = f"fuzz-scratch-{rng.randint(0, 9)}" if scratch else self.names.topic
        group = f"fuzz-scratch-group-{rng.randint(0, 9)}" if scratch else self.names.group
        if "store_id" in n or n == "broker_name" or (n == "name" and "broker" in p):
            return self.names.store_id
        if "producer_group" in n or (n == "name" and "producer" in p):
            return self.names.producer_group
        if "topic" in n or (n == "name" and "topic" in p):
            return topic
        if "group" in n or (n == "name" and "group" in p):
            return group
        if n == "name":
            return group if "Group" in self._method and not p else topic
        if n in ("resource_namespace", "namespace"):
            return ""
        if "client_id" in n or "instance_id" in n or "replica_id" in n:
            return f"{CLIENT_ID}-{rng.randint(0, 3)}"
        if "expression" in n or n in ("sql", "filter", "sub_string", "subscription"):
            return rng.choice(("*", "TagA || TagB", "a > 1"))
        if "message_id" in n or "msg_id" in n or "unique_id" in n or "transaction_id" in n:
            return rng.randbytes(16).hex().upper()
        if n in ("key", "keys"):
            return "k1"
        if "address" in n or n == "host":
            return "127.0.0.1:1"
        if "tag" in n:
            return "TagA"
        if "language" in n:
            return "PYTHON"
        return f"fuzz{rng.randint(0, 99)}"

    # -- hostile values

    def huge(self, wanted: int) -> int:
        """``wanted`` bytes if the budget allows, else a few KB."""
        return wanted if self.budget.allow(wanted) else min(wanted, 4096)

    def mutate(self, msg: Message) -> str:
        """Give 1-3 fields (possibly nested) hostile values; returns what was done."""
        whats = []
        for _ in range(self.rng.randint(1, 3)):
            what = self._mutate_one(msg, path="")
            if what:
                whats.append(what)
        return ", ".join(whats) or "valid (no fields)"

    def _mutate_one(self, msg: Message, *, path: str, depth: int = 0) -> str:
        fields = list(msg.DESCRIPTOR.fields)
        if not fields:
            return ""
        f = self.rng.choice(fields)
        name = f"{path}{f.name}"
        if f.type == _MESSAGE and not f.is_repeated and depth < 3 and f.message_type.fields and self.rng.random() < 0.4:
            return self._mutate_one(getattr(msg, f.name), path=name + ".", depth=depth + 1)
        try:
            return f"{name}={self._hostile(msg, f)}"
        except (ValueError, TypeError) as exc:  # a value this field's type cannot hold
            return f"{name}: not set ({type(exc).__name__})"

    def _hostile(self, msg: Message, f: D.FieldDescriptor) -> str:
        rng = self.rng
        if is_map(f):
            return self._hostile_map(msg, f)
        if f.is_repeated:
            container = getattr(msg, f.name)
            choice = rng.choice(("many", "empty", "hostile item"))
            if choice == "empty":
                del container[:]
                return "[]"
            if choice == "many":
                items = 10_000 if self.budget.allow(10_000 * 40) else 500
                if f.type == _MESSAGE:
                    one = self.valid(f.message_type, parent=f.name, depth=2)
                    for _ in range(items):
                        container.add().CopyFrom(one)
                else:
                    value = self.valid_scalar(f)
                    container.extend([value] * items)
                return f"{items} items"
            if f.type == _MESSAGE:
                item = container.add()
                return "[+" + (self.mutate(item) if item.DESCRIPTOR.fields else "empty") + "]"
            value, what = self._hostile_scalar(f)
            container.append(value)
            return f"[+{what}]"
        if f.type == _MESSAGE:
            if rng.random() < 0.5:
                msg.ClearField(f.name)
                return "unset"
            getattr(msg, f.name).SetInParent()
            getattr(msg, f.name).Clear()
            getattr(msg, f.name).SetInParent()
            return "empty message"
        value, what = self._hostile_scalar(f)
        setattr(msg, f.name, value)
        return what

    def _hostile_map(self, msg: Message, f: D.FieldDescriptor) -> str:
        rng = self.rng
        key_f, value_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        target = getattr(msg, f.name)
        choice = rng.choice(("2 MB value", "many entries", "hostile key", "hostile value"))
        if key_f.type != _STRING and choice == "hostile key":
            choice = "many entries"
        if value_f.type != _STRING and choice == "2 MB value":
            choice = "many entries"
        if choice == "2 MB value":
            size = self.huge(2 * MB)
            target["k"] = "v" * size
            return f"map with a {size}-byte value"
        if choice == "many entries":
            entries = 10_000 if self.budget.allow(10_000 * 200) else 200
            width = 200 if entries == 10_000 else 16
            for i in range(entries):
                key = f"{i:0{width // 2}d}" if key_f.type == _STRING else self.valid_scalar(key_f)
                if value_f.type == _MESSAGE:
                    target[key].SetInParent()
                else:
                    target[key] = "v" * (width // 2) if value_f.type == _STRING else self.valid_scalar(value_f)
            return f"map of {entries} entries"
        if choice == "hostile key":
            key, what = self._hostile_string(key_f)
            if value_f.type == _MESSAGE:
                target[key].SetInParent()
            else:
                target[key] = self.valid_scalar(value_f)
            return f"map key {what}"
        if value_f.type == _MESSAGE:
            return "map value " + self.mutate(target["k"])
        value, what = self._hostile_scalar(value_f)
        target["k"] = value
        return f"map value {what}"

    def _hostile_scalar(self, f: D.FieldDescriptor) -> tuple[Any, str]:
        rng = self.rng
        if f.type == _STRING:
            return self._hostile_string(f)
        if f.type == _BYTES:
            choice = rng.choice(("empty", "huge", "non-UTF-8", "zeros"))
            if choice == "empty":
                return b"", "b''"
            if choice == "huge":
                size = self.huge(rng.choice(HUGE_SIZES))
                return rng.randbytes(size), f"{size} random bytes"
            if choice == "zeros":
                return b"\x00" * 1024, "1024 zero bytes"
            return b"\xff\xfe\xc3\x28\xa0\xa1", "non-UTF-8 bytes"
        if f.type == _BOOL:
            return True, "true"
        if f.type == _ENUM:
            value = rng.choice((999, 2**31 - 1, -1, -(2**31)))
            return value, f"unknown enum {value}"
        if f.type in _FLOATS:
            value = rng.choice((math.nan, math.inf, -math.inf, 1e308))
            return value, repr(value)
        low, high = INT_BOUNDS.get(f.type, (-(2**31), 2**31 - 1))
        value = rng.choice([v for v in (low, high, -1, 0, high // 2 + 1, 2**31 - 1, -(2**31)) if low <= v <= high])
        return value, str(value)

    def _hostile_string(self, f: D.FieldDescriptor) -> tuple[str, str]:
        rng = self.rng
        n = f.name.lower()
        sqlish = "expression" in n or "sql" in n or "filter" in n
        kinds = [
            "empty",
            "huge",
            "huge",
            "128 chars",
            "control chars",
            "slash",
            "system topic",
            "retry topic",
            "unicode",
        ]
        kinds += ["non-UTF-8", "spaces", "minus one", "odd hex", "deep SQL"]
        if sqlish:
            kinds += ["deep SQL", "deep SQL", "huge SQL", "huge SQL IN", "deep NOT", "bad SQL"]
        kind = rng.choice(kinds)
        if kind == "empty":
            return "", "''"
        if kind == "huge":
            size = self.huge(rng.choice(HUGE_SIZES))
            return "A" * size, f"{size} chars"
        if kind == "128 chars":
            return "a" * 128, "128 chars"
        if kind == "control chars":
            return "a\x00b\x01c\x02\n\r\t", "control chars"
        if kind == "slash":
            return "../a/b", "'../a/b'"
        if kind == "system topic":
            return "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"
        if kind == "retry topic":
            return "%RETRY%fuzz", "%RETRY%fuzz"
        if kind == "unicode":
            return "主题\u202e\ufeff\U0001f600", "unicode"
        if kind == "non-UTF-8":
            self._marker += 1
            return f"{TEXT_MARKER}{self._marker:06d}", "non-UTF-8 text"
        if kind == "spaces":
            return "   ", "spaces"
        if kind == "minus one":
            return "-1", "'-1'"
        if kind == "odd hex":
            return "F" * 31, "31 hex digits"
        if kind == "deep SQL":
            depth = rng.choice((1000, 10_000))
            closed = rng.random() < 0.5
            return ("(" * depth + "a > 1" + ")" * depth) if closed else "(" * depth, f"SQL92 '(' * {depth}"
        if kind == "huge SQL":
            size = self.huge(rng.choice(HUGE_SIZES))
            return "a = 1 OR " * (size // 9) + "a = 1", f"SQL92 of {size} chars (OR chain)"
        if kind == "huge SQL IN":
            size = self.huge(rng.choice(HUGE_SIZES))
            return "a IN (" + ",".join(["'x'"] * max(1, size // 4)) + ")", f"SQL92 IN list of {size} chars"
        if kind == "deep NOT":
            return "NOT " * 5000 + "TRUE", "SQL92 NOT * 5000"
        return rng.choice(("a >", "a BETWEEN", "'unterminated", "a IN ()", "1/0 = 1")), "bad SQL92"

    # -- gateway metadata

    def metadata(self, case: Case, *, hostile: bool, well_formed: bool) -> None:
        rng = self.rng
        date = time.strftime(DATE_FORMAT, time.gmtime(self.clock()))
        ak, sk = self.names.access_key, self.names.secret_key
        headers: dict[str, str | bytes] = {
            "x-mq-client-id": f"{CLIENT_ID}-{rng.randint(0, 3)}",
            "x-mq-language": "PYTHON",
            "x-mq-protocol": "v2",
            "x-mq-date-time": date,
            "authorization": authorization(date, access_key=ak, secret_key=sk),
        }
        if not hostile:
            case.metadata = list(headers.items())
            return
        kind = rng.choice(
            (
                "no authorization",
                "garbage authorization",
                "wrong algorithm",
                "unknown access key",
                "bad signature",
                "date 2001",
                "date 2099",
                "date x",
                "no date",
                "non-UTF-8 -bin headers",
                "raw non-UTF-8 header",
                "no client id",
                "huge client id",
            )
        )
        unauthorized = True
        if kind == "no authorization":
            del headers["authorization"]
        elif kind == "garbage authorization":
            alphabet = "abcdefXYZ0123=,; -_/"
            headers["authorization"] = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
        elif kind == "wrong algorithm":
            headers["authorization"] = str(headers["authorization"]).replace("MQv2-HMAC-SHA1", "MQv2-HMAC-MD5")
        elif kind == "unknown access key":
            headers["authorization"] = authorization(date, access_key="nobody", secret_key=sk)
        elif kind == "bad signature":
            headers["authorization"] = authorization(date, access_key=ak, secret_key="wrong")
        elif kind.startswith("date "):
            stale = {"date 2001": "20010101T000000Z", "date 2099": "20990101T000000Z", "date x": "x"}[kind]
            headers["x-mq-date-time"] = stale
            headers["authorization"] = authorization(stale, access_key=ak, secret_key=sk)
        elif kind == "no date":
            del headers["x-mq-date-time"]
        elif kind == "non-UTF-8 -bin headers":
            unauthorized = False
            for key in rng.sample(
                ("authorization-bin", "x-mq-client-id-bin", "x-mq-date-time-bin", "x-mq-fuzz-bin"), 2
            ):
                headers[key] = b"\xff\xfe" + rng.randbytes(rng.randint(0, 64))
            kind = f"non-UTF-8 {'/'.join(k for k in headers if k.endswith('-bin'))}"
        elif kind == "raw non-UTF-8 header":
            key = rng.choice(("authorization", "x-mq-client-id", "x-mq-date-time"))
            self._marker += 1
            headers[key] = RAW_MARKER.decode() + f"{self._marker:06d}"
            case.raw_headers = True
            unauthorized = key != "x-mq-client-id"
            kind = f"raw non-UTF-8 {key}"
        elif kind == "no client id":
            unauthorized = False
            del headers["x-mq-client-id"]
        else:
            unauthorized = False
            headers["x-mq-client-id"] = "c" * 4096
        case.what = f"{kind}; {case.what}"
        case.metadata = list(headers.items())
        case.expect_unauthorized = unauthorized and well_formed and not open_to_anyone(case.target.method)


# -- verdicts ------------------------------------------------------------------------------


@dataclass
class Verdict:
    verdict: str
    status: str  # gRPC status name, with the txmq or v2 code
    message: str = ""
    code: int | None = None  # the txmq ErrorDetail code, when there is one
    #: The status the server sent was recovered from the call after a request write of
    #: ours raced its end (``Caller._recover``): judged, and counted apart.
    raced: bool = False


def error_detail(trailers: Sequence[tuple[str, str | bytes]] | None) -> errors_pb2.ErrorDetail | None:
    """The ErrorDetail in trailing metadata, if there is one and it parses."""
    for key, value in trailers or ():
        if key == ERROR_DETAIL_KEY and isinstance(value, bytes):
            detail = errors_pb2.ErrorDetail()
            try:
                detail.ParseFromString(value)
            except Exception:  # noqa: BLE001 - any parse failure means no detail
                return None
            return detail
    return None


def classify_status(
    code: grpc.StatusCode,
    details: str,
    trailers: Sequence[tuple[str, str | bytes]] | None,
    *,
    v2: bool,
    stream: bool = False,
    cancelled_by_us: bool = False,
) -> Verdict:
    """The verdict on a call's gRPC status (OK is left to ``classify_v2`` for v2 answers)."""
    name = code.name
    if code == grpc.StatusCode.OK:
        return Verdict("ok", name)
    detail = error_detail(trailers)
    message = details or ""
    if detail is not None:
        status = (
            f"{name}/{errors_pb2.Code.Name(detail.code) if detail.code in errors_pb2.Code.values() else detail.code}"
        )
        verdict = "untyped" if code in UNTYPED_GRPC else "typed"
        return Verdict(verdict, status, detail.message or message, detail.code)  # type: ignore[attr-defined]
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Verdict("open" if stream else "hang", name, message)
    if code == grpc.StatusCode.CANCELLED and cancelled_by_us:
        return Verdict("open", name, message)
    transport = any(sign in message for sign in TRANSPORT_SIGNS) or code == grpc.StatusCode.UNAVAILABLE
    if v2 and code not in UNTYPED_GRPC and not transport:
        return Verdict("typed", name, message)
    return Verdict("untyped", f"{name} (no detail)", message)


def v2_statuses(msg: Message) -> Iterator[Message]:
    """Every set apache.rocketmq.v2.Status inside ``msg`` (entries too)."""
    for f, value in msg.ListFields():
        if f.type != _MESSAGE:
            continue
        items = value if f.is_repeated and not is_map(f) else ([] if is_map(f) else [value])
        for item in items:
            if item.DESCRIPTOR.full_name == V2_STATUS:
                yield item
            else:
                yield from v2_statuses(item)


def classify_v2(frames: Sequence[bytes], output: D.Descriptor, *, expect_unauthorized: bool) -> Verdict:
    """The verdict on the frames of a v2 answer whose gRPC status was OK: the worst of
    their statuses."""
    cls = message_class(output)
    codes: list[tuple[int, str]] = []
    for frame in frames:
        msg = cls()
        try:
            msg.ParseFromString(frame)
        except Exception:  # noqa: BLE001 - an answer that does not parse
            return Verdict("untyped", "OK/unparseable answer", f"{len(frame)} bytes")
        codes.extend((s.code, s.message) for s in v2_statuses(msg))  # type: ignore[attr-defined]
    bad = [(c, m) for c, m in codes if c in V2_UNTYPED]
    if bad:
        return Verdict("untyped", f"OK/{_v2_name(bad[0][0])}", bad[0][1])
    if expect_unauthorized and not any(c == V2.UNAUTHORIZED for c, _ in codes):
        first = codes[0] if codes else (V2.OK, "no status")
        return Verdict("auth_bypass", f"OK/{_v2_name(first[0])}", first[1])
    failed = [(c, m) for c, m in codes if c not in (V2.OK, V2.CODE_UNSPECIFIED)]
    if failed:
        return Verdict("typed", f"OK/{_v2_name(failed[0][0])}", failed[0][1])
    return Verdict("ok", "OK")


#: What a txmq service answers a call whose credentials it does not accept: a 401xx
#: (UNAUTHENTICATED) or 403xx (PERMISSION_DENIED) code (protos/STATUS_CODES.md ranges).
AUTH_REFUSAL_RANGES = (401, 403)


def refused_unauthenticated(verdict: Verdict) -> Verdict:
    """A txmq call with hostile credentials and a well-formed body must be refused as
    such: anything else that got past authentication is a bypass."""
    refused = verdict.code is not None and verdict.code // 100 in AUTH_REFUSAL_RANGES
    if verdict.verdict in ("typed", "ok", "open") and not refused:
        return replace(verdict, verdict="auth_bypass")
    return verdict


def nested_details(msg: Message) -> Iterator[Message]:
    """Every set txmq.v1.ErrorDetail inside ``msg`` (per-item refusals: RecordAck.error,
    DecisionResult.error, ...)."""
    for f, value in msg.ListFields():
        if f.type != _MESSAGE or is_map(f):
            continue
        for item in value if f.is_repeated else [value]:
            if item.DESCRIPTOR.full_name == ERROR_DETAIL:
                yield item
            else:
                yield from nested_details(item)


def classify_txmq_answer(frames: Sequence[bytes], output: D.Descriptor) -> Verdict:
    """The verdict on the frames of a txmq answer whose gRPC status was OK: per-item
    refusals inside it are typed unless they are CODE_INTERNAL_ERROR."""
    cls = message_class(output)
    details: list[Message] = []
    for frame in frames:
        msg = cls()
        try:
            msg.ParseFromString(frame)
        except Exception:  # noqa: BLE001 - an answer that does not parse
            return Verdict("untyped", "OK/unparseable answer", f"{len(frame)} bytes")
        details.extend(nested_details(msg))
    codes = [(d.code, d.message) for d in details if d.code != errors_pb2.CODE_OK]  # type: ignore[attr-defined]
    internal = [(c, m) for c, m in codes if c == errors_pb2.CODE_INTERNAL_ERROR]
    if internal:
        return Verdict("untyped", "OK/item CODE_INTERNAL_ERROR", internal[0][1], errors_pb2.CODE_INTERNAL_ERROR)
    if codes:
        return Verdict("typed", f"OK/item {_txmq_name(codes[0][0])}", codes[0][1], codes[0][0])
    return Verdict("ok", "OK")


def _txmq_name(code: int) -> str:
    return errors_pb2.Code.Name(code) if code in errors_pb2.Code.values() else str(code)


def _v2_name(code: int) -> str:
    return V2.Name(code) if code in V2.values() else str(code)


# -- what STATUS_CODES.md documents -------------------------------------------------------

STATUS_CODES_MD = Path(__file__).resolve().parents[2] / "protos" / "STATUS_CODES.md"
_CODE_TOKEN = re.compile(r"`(?:CODE_)?([A-Z][A-Z0-9_]+)`")


def _codes_in(text: str) -> set[int]:
    names = errors_pb2.Code.keys()
    return {errors_pb2.Code.Value(f"CODE_{t}") for t in _CODE_TOKEN.findall(text) if f"CODE_{t}" in names}


def documented_codes(path: Path = STATUS_CODES_MD) -> tuple[dict[str, set[int]], set[int]]:
    """(RPC path -> the codes its row in STATUS_CODES.md names, the codes every RPC may
    answer: those named outside the tables). A row saying "as SendBatch" or "the store's
    CommitConsumeOffset codes" takes that row's codes too; a section saying errors of the
    store "pass through" takes every Store code."""
    rows: dict[str, str] = {}
    section_of: dict[str, str] = {}
    passes_through: set[str] = set()
    prose: list[str] = []
    service = ""
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            m = re.search(r"`(txmq\.v1\.\w+)`", line)
            service = m[1] if m else ""
            continue
        if not line.startswith("|"):
            prose.append(line)
            if service and "pass through" in line:
                passes_through.add(service)
            continue
        cells = line.replace("\\|", "/").split("|")
        first = cells[1].strip() if len(cells) > 2 else ""
        if not service or first == "RPC" or set(first) <= set("-: "):
            continue
        for name in first.split(","):
            name = re.sub(r"\(.*?\)", "", name).strip()
            owner, _, method = name.rpartition(".")
            key = f"/txmq.v1.{owner}/{method}" if owner else f"/{service}/{method}"
            rows[key] = "|".join(cells[2:])
            section_of[key] = service
    documented = {key: _codes_in(text) for key, text in rows.items()}
    by_method = {key.rpartition("/")[2]: key for key in rows}
    for _ in range(3):  # references of references
        for key, text in rows.items():
            for word in re.findall(r"\b[A-Z][A-Za-z]+\b", text):
                if word in by_method and by_method[word] != key:
                    documented[key] |= documented[by_method[word]]
    store_codes = set().union(*(c for k, c in documented.items() if section_of[k] == "txmq.v1.Store"))
    for key in documented:
        if section_of[key] in passes_through:
            documented[key] |= store_codes
    return documented, _codes_in("\n".join(prose))


# -- the calls -----------------------------------------------------------------------------

#: What grpc.aio's client makes of a call whose status it already has when one of our
#: request writes fails because the call has ended: the server's status (UNAUTHENTICATED
#: and its detail, say) is replaced by INTERNAL 'Internal error from Core', without
#: trailers, and a debug string naming the failed send (grpc/aio/_call.py ``_write``:
#: ``set_internal_error``). The server did not send it: a write that started after the
#: server's status reached the client's core but before its event loop handled it fails.
#: No server can avoid that short of holding the call open until the client half-closes
#: (an unauthenticated client could then keep it open). ``Caller._recover`` judges what
#: the server sent instead; test_fuzz_unit.py reproduces the race deterministically.
CLIENT_WRITE_FAILED = "Internal error from Core"
_FAILED_SEND_SIGNS = ("SendMessageOperation", "send_message")


@dataclass(frozen=True)
class CallStatus:
    code: grpc.StatusCode
    details: str
    trailers: tuple[tuple[str, str | bytes], ...]
    debug: str

    @classmethod
    def of_error(cls, exc: grpc.aio.AioRpcError) -> CallStatus:
        return cls(
            exc.code(), exc.details() or "", tuple(exc.trailing_metadata() or ()), exc.debug_error_string() or ""
        )

    @classmethod
    def of_done_call(cls, call: Any) -> CallStatus:
        """A finished call's status, read synchronously (its accessors do not wait then)."""
        return cls(
            _settled(call.code()),
            _settled(call.details()) or "",
            tuple(_settled(call.trailing_metadata()) or ()),
            _settled(call.debug_error_string()) or "",
        )

    @property
    def lost_to_a_write(self) -> bool:
        """The client library's replacement for the status after a failed request write."""
        return (
            self.code == grpc.StatusCode.INTERNAL
            and self.details == CLIENT_WRITE_FAILED
            and not self.trailers
            and any(sign in self.debug for sign in _FAILED_SEND_SIGNS)
        )


def _settled(awaitable: Any) -> Any:
    """The value of a coroutine that finishes without waiting (a done call's status)."""
    try:
        awaitable.send(None)
    except StopIteration as stop:
        return stop.value
    awaitable.close()
    raise RuntimeError("the call is not done")


class FirstStatus:
    """A done callback keeping the first status a call was given: grpc.aio runs it when
    the status is set, so it sees the server's status before a failed write replaces it."""

    def __init__(self) -> None:
        self.status: CallStatus | None = None

    def __call__(self, call: Any) -> None:
        try:
            self.status = CallStatus.of_done_call(call)
        except Exception:  # noqa: BLE001 - never disturb the call's own bookkeeping
            self.status = None


@dataclass
class Result:
    case: Case
    verdict: Verdict
    elapsed_s: float


class Caller:
    def __init__(self, addresses: dict[str, str], *, raw_addresses: dict[str, str]) -> None:
        self.channels = {p: grpc.aio.insecure_channel(a, options=CHANNEL_OPTIONS) for p, a in addresses.items()}
        self.raw_channels = {p: grpc.aio.insecure_channel(a, options=CHANNEL_OPTIONS) for p, a in raw_addresses.items()}

    async def close(self) -> None:
        for channel in [*self.channels.values(), *self.raw_channels.values()]:
            await channel.close()

    async def call(self, case: Case, rng: random.Random) -> Result:
        start = time.monotonic()
        target = case.target
        channels = self.raw_channels if case.raw_headers and target.process in self.raw_channels else self.channels
        channel = channels[target.process]
        metadata = tuple(case.metadata) or None
        verdict = await self._judged_call(channel, case, metadata, rng)
        if verdict.verdict == "client_error" and verdict.raced:
            # A v2 answer lost to our own write racing the call's end cannot be judged:
            # send the same case once more (the race rarely repeats).
            verdict = await self._judged_call(channel, case, metadata, rng)
        if case.expect_unauthorized and not target.v2:
            verdict = refused_unauthenticated(verdict)
        return Result(case, verdict, time.monotonic() - start)

    async def _judged_call(self, channel: grpc.aio.Channel, case: Case, metadata: Any, rng: random.Random) -> Verdict:
        target = case.target
        try:
            return await self._call(channel, case, metadata, rng)
        except grpc.aio.AioRpcError as exc:
            return classify_status(
                exc.code(), exc.details() or "", exc.trailing_metadata(), v2=target.v2, stream=target.streaming
            )
        except Exception as exc:  # noqa: BLE001 - our side refused (bad metadata): not the service's fault
            return Verdict("client_error", type(exc).__name__, str(exc)[:200])

    async def _call(self, channel: grpc.aio.Channel, case: Case, metadata: Any, rng: random.Random) -> Verdict:
        target = case.target
        method = target.method
        if not method.client_streaming and not method.server_streaming:
            response = await channel.unary_unary(target.path)(
                case.payloads[0], timeout=UNARY_DEADLINE_S, metadata=metadata
            )
            return self._ok(case, [response])
        if not method.client_streaming:
            call = channel.unary_stream(target.path)(case.payloads[0], timeout=STREAM_WINDOW_S + 5, metadata=metadata)
            return await self._read(call, case, window_s=rng.uniform(0.5, STREAM_WINDOW_S))
        gap = rng.uniform(0.0, 0.1)
        hang = case.stream_end == "hang_up"

        async def requests() -> AsyncIterator[bytes]:
            for payload in case.payloads:
                yield payload
                await asyncio.sleep(gap)
            if hang:
                await asyncio.sleep(STREAM_WINDOW_S * 2)  # never half-closed: we cancel

        first = FirstStatus()
        if method.server_streaming:
            call = channel.stream_stream(target.path)(requests(), timeout=STREAM_WINDOW_S + 5, metadata=metadata)
            call.add_done_callback(first)
            window_s = rng.uniform(0.5, STREAM_WINDOW_S)
            try:
                return await self._read(call, case, window_s=window_s)
            except grpc.aio.AioRpcError as exc:
                return await self._recover(call, exc, first, case)
        unary = channel.stream_unary(target.path)(requests(), timeout=STREAM_WINDOW_S + 5, metadata=metadata)
        unary.add_done_callback(first)
        try:
            response = await asyncio.wait_for(asyncio.shield(unary), STREAM_WINDOW_S)
        except TimeoutError:
            unary.cancel()
            return Verdict("open", "CANCELLED")
        except grpc.aio.AioRpcError as exc:
            return await self._recover(unary, exc, first, case)
        return self._ok(case, [response])

    @staticmethod
    async def _recover(call: Any, exc: grpc.aio.AioRpcError, first: FirstStatus, case: Case) -> Verdict:
        """The verdict on a client-streaming call that failed: on the status the server
        sent, also when a request write of ours raced the call's end (``CLIENT_WRITE_FAILED``).
        That status is the call's first one; or, when the failed write was handled first,
        the one the server's status replaces it with a moment later."""
        v2 = case.target.v2
        status = CallStatus.of_error(exc)
        if not status.lost_to_a_write:
            return classify_status(status.code, status.details, status.trailers, v2=v2, stream=True)
        if first.status is not None and not first.status.lost_to_a_write:
            status = first.status
        else:
            deadline = time.monotonic() + 1.0
            while status.lost_to_a_write and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                status = CallStatus.of_done_call(call)
            if status.lost_to_a_write:
                return Verdict(
                    "client_error",
                    "INTERNAL (our request write raced the end of the call)",
                    "grpc.aio replaced the server's status by 'Internal error from Core'; the server's never came",
                )
        if status.code == grpc.StatusCode.OK:
            # The answer's frames are gone with the failed write: only its status is known,
            # which says all of a txmq answer but for per-item refusals, little of a v2 one.
            if v2:
                return Verdict("client_error", "OK (the answer was lost to our raced write)", "", raced=True)
            verdict = Verdict("ok", "OK", "per-item answers lost to our raced write")
        else:
            verdict = classify_status(status.code, status.details, status.trailers, v2=v2, stream=True)
        verdict.raced = True
        return verdict

    async def _read(self, call: Any, case: Case, *, window_s: float) -> Verdict:
        frames: list[bytes] = []
        deadline = time.monotonic() + window_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                frame = await asyncio.wait_for(call.read(), remaining)
            except TimeoutError:
                break
            if frame is grpc.aio.EOF:
                code = await call.code()
                if code != grpc.StatusCode.OK:
                    return classify_status(
                        code, await call.details() or "", await call.trailing_metadata(), v2=case.target.v2, stream=True
                    )
                return self._ok(case, frames)
            frames.append(frame)
        call.cancel()
        verdict = self._ok(case, frames)
        if verdict.verdict == "ok":
            return Verdict("open", "open", f"{len(frames)} frames")
        return verdict

    @staticmethod
    def _ok(case: Case, frames: Sequence[bytes]) -> Verdict:
        if not case.target.v2:
            return classify_txmq_answer(frames, case.target.method.output_type)
        return classify_v2(frames, case.target.method.output_type, expect_unauthorized=case.expect_unauthorized)


class RewritingProxy:
    """A TCP proxy that replaces ``RAW_MARKER`` + 6 digits in what clients send by as many
    non-UTF-8 bytes: gRPC clients refuse to send such header values themselves."""

    def __init__(self, upstream: str) -> None:
        self.upstream_host, _, port = upstream.rpartition(":")
        self.upstream_port = int(port)
        self.replaced = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            writer.close()
            return
        for task in (
            asyncio.create_task(self._pump(reader, up_writer, rewrite=True)),
            asyncio.create_task(self._pump(up_reader, writer, rewrite=False)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, rewrite: bool) -> None:
        try:
            while data := await reader.read(65536):
                if rewrite and RAW_MARKER in data:
                    data, n = RAW_MARKER_RE.subn(lambda m: b"\xff\xfe\xc3(\xa0" + b"\x80" * (len(m.group()) - 5), data)
                    self.replaced += n
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()


# -- the checks after the run --------------------------------------------------------------

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,.]+ (?P<level>[A-Z]+) \[\d+\] (?P<logger>\S+): (?P<message>.*)$")


@dataclass
class LogFigures:
    tracebacks: int = 0
    errors: int = 0
    excerpts: list[str] = field(default_factory=list)  # deduplicated


def scan_log(path: Path, *, offset: int = 0) -> LogFigures:
    """Tracebacks and ERROR/CRITICAL lines in ``path`` from byte ``offset`` on; excerpts
    of each distinct one (the log line before a traceback and its last line)."""
    figures = LogFigures()
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return figures
    seen: set[str] = set()
    last_logged = ""
    last_excerpt = -1  # the excerpt of the last ERROR line, if it was new
    for i, line in enumerate(lines):
        m = LOG_LINE.match(line)
        if m:
            last_logged = line
            last_excerpt = -1
            if m["level"] in ("ERROR", "CRITICAL"):
                figures.errors += 1
                key = re.sub(r"\d+", "N", f"{m['logger']}: {m['message']}")[:160]
                if key not in seen:
                    seen.add(key)
                    figures.excerpts.append(line[:400])
                    last_excerpt = len(figures.excerpts) - 1
        if "Traceback (most recent call last)" in line:
            figures.tracebacks += 1
            end = i + 1
            while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
                end += 1
            last = lines[end] if end < len(lines) else "(end of log)"
            if last_excerpt >= 0:  # the ERROR line it follows: one excerpt for both
                figures.excerpts[last_excerpt] += f"\n      -> {last[:300]}"
                seen.add(re.sub(r"\d+", "N", last)[:160])
                continue
            key = re.sub(r"\d+", "N", last)[:160]
            if key not in seen:
                seen.add(key)
                figures.excerpts.append(f"{last_logged[:300]}\n      -> {last[:300]}")
    return figures


async def registrations(etcd_endpoints: str, prefix: str) -> dict[str, tuple[int, str]]:
    """Every service registration under ``prefix``: key -> (create revision, address)."""
    from txmq_runtime.etcd import close_client, etcd_client

    client = etcd_client(etcd_endpoints)
    try:
        found = await client.get_prefix(f"{prefix}/services/".encode())
    finally:
        await close_client(client)
    out = {}
    for kv in found:
        try:
            address = json.loads(kv.value).get("address", "")
        except ValueError:
            address = ""
        out[kv.key.decode()] = (kv.create_revision, address)
    return out


def serving(address: str, *, timeout_s: float = 5.0) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


# -- the run -------------------------------------------------------------------------------


@dataclass
class Config:
    seed: int = 1
    requests: int = 2000
    concurrency: int = 12
    max_bytes: int = 150 * MB
    services: tuple[str, ...] = ()  # processes to fuzz; empty: all
    verbose: bool = False


@dataclass
class Finding:
    process: str
    rpc: str
    input_class: str
    verdict: str
    status: str
    message: str
    example: str
    count: int = 0


@dataclass
class Report:
    config: Config
    targets: list[Target]
    hosted: dict[str, list[str]]
    results: list[Result] = field(default_factory=list)
    logs: dict[str, LogFigures] = field(default_factory=dict)
    crashed: list[str] = field(default_factory=list)
    deregistered: list[str] = field(default_factory=list)
    unresponsive: list[str] = field(default_factory=list)
    raw_headers_rewritten: int = 0
    elapsed_s: float = 0.0

    @property
    def sent_bytes(self) -> int:
        return sum(r.case.size for r in self.results)

    def count(self, verdict: str) -> int:
        return sum(1 for r in self.results if r.verdict.verdict == verdict)

    @property
    def untyped(self) -> int:
        return self.count("untyped")

    @property
    def raced(self) -> int:
        """Client-streaming calls whose status was recovered after our write raced their end."""
        return sum(1 for r in self.results if r.verdict.raced)

    @property
    def tracebacks(self) -> int:
        return sum(f.tracebacks for f in self.logs.values())

    @property
    def crashes(self) -> int:
        return len(self.crashed)

    def by(self, key: Callable[[Result], str]) -> dict[str, Counter[str]]:
        table: dict[str, Counter[str]] = defaultdict(Counter)
        for r in self.results:
            table[key(r)][r.verdict.verdict] += 1
        return dict(table)

    def requests_per_target(self) -> Counter[str]:
        return Counter(f"{r.case.target.process} {r.case.target.path}" for r in self.results)

    def findings(self) -> list[Finding]:
        """Deduplicated: one per (process, RPC, input class, verdict, status, message shape)."""
        found: dict[tuple[str, ...], Finding] = {}
        for r in self.results:
            v = r.verdict
            if v.verdict not in ("untyped", "hang", "auth_bypass", "client_error"):
                continue
            t = r.case.target
            shape = re.sub(r"\d+", "N", v.message)[:100]
            key = (t.process, t.rpc, r.case.input_class, v.verdict, v.status, shape)
            if key not in found:
                found[key] = Finding(
                    t.process, t.rpc, r.case.input_class, v.verdict, v.status, v.message[:240], r.case.what[:240]
                )
            found[key].count += 1
        order = {"untyped": 0, "auth_bypass": 1, "client_error": 2, "hang": 3}
        return sorted(found.values(), key=lambda f: (order[f.verdict], -f.count))

    def undocumented(self, path: Path = STATUS_CODES_MD) -> list[Finding]:
        """txmq answers whose code STATUS_CODES.md does not name for that RPC (nor for
        every RPC), deduplicated by (process, RPC, code)."""
        if not path.exists():
            return []
        documented, general = documented_codes(path)
        found: dict[tuple[str, str], Finding] = {}
        for r in self.results:
            t, v = r.case.target, r.verdict
            if t.v2 or v.code is None or v.code in general:
                continue
            if t.path in documented and v.code in documented[t.path]:
                continue
            why = "code not in its row" if t.path in documented else "RPC not in STATUS_CODES.md"
            key = (t.rpc, v.status)  # Route and Auth answer alike on every process
            if key not in found:
                found[key] = Finding(
                    t.process, t.rpc, r.case.input_class, why, v.status, v.message[:240], r.case.what[:240]
                )
            found[key].count += 1
        return sorted(found.values(), key=lambda f: -f.count)


async def fuzz(
    targets: Sequence[Target],
    addresses: dict[str, str],
    config: Config,
    names: Names,
    *,
    on_result: Callable[[Result], None] | None = None,
) -> tuple[list[Result], int]:
    """Run the cases against ``addresses`` (process -> host:port); the results, and how
    many raw non-UTF-8 header values the proxy wrote."""
    generator = Generator(config.seed, targets, requests=config.requests, max_bytes=config.max_bytes, names=names)
    proxies = {p: RewritingProxy(a) for p, a in addresses.items() if p == "gateway"}
    raw = {p: await proxy.start() for p, proxy in proxies.items()}
    caller = Caller(addresses, raw_addresses=raw)
    queue: asyncio.Queue[Case | None] = asyncio.Queue(maxsize=config.concurrency * 2)
    results: list[Result] = []
    call_rng = random.Random(config.seed + 1)

    async def worker() -> None:
        while (case := await queue.get()) is not None:
            result = await caller.call(case, call_rng)
            results.append(result)
            if on_result is not None:
                on_result(result)

    workers = [asyncio.create_task(worker()) for _ in range(config.concurrency)]
    try:
        for case in generator.cases():
            await queue.put(case)
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await caller.close()
        for proxy in proxies.values():
            await proxy.close()
    results.sort(key=lambda r: r.case.index)
    return results, sum(p.replaced for p in proxies.values())


class Cluster:
    """The processes under test: a private LocalCluster, or addresses to attach to."""

    def __init__(
        self,
        *,
        addresses: dict[str, str],
        etcd_endpoints: str,
        etcd_prefix: str = "/txmq",
        logs: dict[str, Path] | None = None,
        local: Any = None,
        base_dir: Path | None = None,
        keep: bool = False,
    ) -> None:
        self.addresses = addresses
        self.etcd_endpoints = etcd_endpoints
        self.etcd_prefix = etcd_prefix
        self.logs = logs or {}
        self.log_offsets = {name: _size(path) for name, path in self.logs.items()}
        self.local = local
        self.base_dir = base_dir
        self.keep = keep

    @classmethod
    def start(cls, base_dir: Path | None = None, *, keep: bool = False, auth: bool = False) -> Cluster:
        """etcd, store, pull, txcheck and gateway (its v2 authentication on) in ``base_dir``;
        with ``auth``, every service with auth_enabled (the fuzzer's key is the services'
        own super user)."""
        tests_dir = str(Path(__file__).resolve().parents[1])
        if tests_dir not in sys.path:
            sys.path.insert(0, tests_dir)  # tests/support, as the test suite imports it
        from support.processes import new_local_cluster

        base = base_dir or Path(tempfile.mkdtemp(prefix="txmq-fuzz-"))
        service_args = (
            ["--auth_enabled", "true", "--auth_access_key", ACCESS_KEY, "--auth_secret_key", SECRET_KEY] if auth else []
        )
        local = new_local_cluster(
            base,
            gateway_args=["--access_key", ACCESS_KEY, "--secret_key", SECRET_KEY],
            service_args=service_args,
        )
        local.start()
        addresses = {name: service.address for name, service in local.services.items()}
        logs = {name: service.process.log_path for name, service in local.services.items()}
        cluster = cls(
            addresses=addresses, etcd_endpoints=local.etcd_endpoints, logs=logs, local=local, base_dir=base, keep=keep
        )
        # From the start of this run's output (start-up is checked too).
        cluster.log_offsets = {name: s.process.log_offset for name, s in local.services.items()}
        return cluster

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()
            if self.base_dir is not None and not self.keep:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def crashed(self) -> list[str]:
        if self.local is None:
            return [name for name, address in self.addresses.items() if not serving(address)]
        return [
            f"{name} (exit {s.process.returncode})"
            for name, s in self.local.services.items()
            if not s.process.running()
        ]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def prepare(cluster: Cluster, names: Names, *, timeout_s: float = 30.0) -> None:
    """The topic, consumer group and messages valid requests name; returns once every
    process routes the topic (each serves Route from its own view of etcd)."""
    from txmq import Admin, Message, Producer
    from txmq.signing import Credentials, auth_metadata
    from txmq.v1 import route_pb2, route_pb2_grpc

    credentials = Credentials(names.access_key, names.secret_key) if names.auth else None

    deadline = time.monotonic() + timeout_s
    bootstrap = cluster.addresses.get("store") or next(iter(cluster.addresses.values()))
    with Admin(bootstrap, credentials=credentials) as admin:
        while not (stores := [e.instance_id for e in admin.endpoints() if e.kind.name == "STORE"]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no store registered after {timeout_s} s")
            time.sleep(0.1)
        names.store_id = stores[0]
        admin.create_topic(names.topic, read_queue_nums=4, write_queue_nums=4, exist_ok=True)
        admin.create_subscription_group(names.group, exist_ok=True)
    with Producer(names.producer_group, bootstrap, credentials=credentials) as producer:
        for i in range(16):
            producer.send(Message(names.topic, f"fuzz seed message {i}".encode(), tags="TagA", keys=("k1",)))
    for process, address in cluster.addresses.items():
        with grpc.insecure_channel(address) as channel:
            stub = route_pb2_grpc.RouteStub(channel)
            while True:
                try:
                    metadata = auth_metadata(credentials) if credentials else None
                    stub.QueryRoute(route_pb2.QueryRouteRequest(topic=names.topic), timeout=2.0, metadata=metadata)
                    break
                except grpc.RpcError as exc:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{process} does not route {names.topic}: {exc}") from None
                    time.sleep(0.1)


def run(cluster: Cluster, config: Config, *, names: Names | None = None) -> Report:
    """Fuzz ``cluster`` (prepared here) and check it afterwards."""
    names = names or Names()
    prepare(cluster, names)
    processes = {p: a for p, a in cluster.addresses.items() if not config.services or p in config.services}
    hosted = {p: reflected_services(a) for p, a in processes.items()}
    targets = enumerate_targets(hosted)
    before = asyncio.run(registrations(cluster.etcd_endpoints, cluster.etcd_prefix))
    ours = {k for k, (_, address) in before.items() if address in cluster.addresses.values()}
    report = Report(config, targets, hosted)
    progress = _Progress(config.requests) if config.verbose else None
    started = time.monotonic()
    report.results, report.raw_headers_rewritten = asyncio.run(
        fuzz(targets, processes, config, names, on_result=progress)
    )
    report.elapsed_s = time.monotonic() - started
    time.sleep(1.0)  # let the last answers' log lines land
    after = asyncio.run(registrations(cluster.etcd_endpoints, cluster.etcd_prefix))
    for key in sorted(ours):
        if key not in after:
            report.deregistered.append(f"{key} (gone)")
        elif after[key][0] != before[key][0]:
            report.deregistered.append(
                f"{key} (vanished and came back: create revision {before[key][0]} -> {after[key][0]})"
            )
    for name, address in cluster.addresses.items():
        if not any(a == address for _, a in after.values()) and not any(name in d for d in report.deregistered):
            if not any(a == address for _, a in before.values()):
                report.deregistered.append(f"{name} at {address} (never registered)")
    report.crashed = cluster.crashed()
    report.unresponsive = [p for p, a in cluster.addresses.items() if not serving(a)]
    report.logs = {name: scan_log(path, offset=cluster.log_offsets.get(name, 0)) for name, path in cluster.logs.items()}
    return report


class _Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()

    def __call__(self, result: Result) -> None:
        self.done += 1
        if self.done % 500 == 0 or self.done == self.total:
            rate = self.done / max(1e-6, time.monotonic() - self.started)
            print(f"  {self.done}/{self.total} requests ({rate:.0f}/s)", file=sys.stderr, flush=True)


# -- the figures ---------------------------------------------------------------------------


def _table(title: str, rows: dict[str, Counter[str]], columns: Sequence[str]) -> list[str]:
    width = max([len(title), *(len(k) for k in rows)])
    out = [f"{title:<{width}}  {'requests':>8}  " + "  ".join(f"{c:>11}" for c in columns)]
    for key in sorted(rows):
        counts = rows[key]
        out.append(f"{key:<{width}}  {sum(counts.values()):>8}  " + "  ".join(f"{counts[c]:>11}" for c in columns))
    return out


def format_report(report: Report, *, findings: int = 40) -> str:
    cfg = report.config
    lines = [
        f"txmq fuzz: seed {cfg.seed}, {len(report.results)} requests over {len(report.targets)} RPCs on "
        f"{len(report.hosted)} processes, {report.sent_bytes / MB:.1f} MB sent, {report.elapsed_s:.0f} s",
        "",
    ]
    lines += _table("input class", report.by(lambda r: r.case.input_class), VERDICTS)
    lines.append("")
    lines += _table("process", report.by(lambda r: r.case.target.process), VERDICTS)
    lines.append("")
    per_target = report.requests_per_target()
    missing = [f"{t.process} {t.path}" for t in report.targets if per_target[f"{t.process} {t.path}"] == 0]
    lines += [
        f"RPCs fuzzed: {sum(1 for t in report.targets if per_target[f'{t.process} {t.path}'])}/{len(report.targets)}"
        + (f" (never called: {', '.join(missing)})" if missing else ""),
        f"raw non-UTF-8 header values written by the proxy: {report.raw_headers_rewritten}",
        "",
        f"{'figure':<26}{'value':>7}",
        f"{'requests':<26}{len(report.results):>7}",
        f"{'untyped errors':<26}{report.untyped:>7}",
        f"{'log tracebacks':<26}{report.tracebacks:>7}",
        f"{'crashes':<26}{report.crashes:>7}",
        f"{'services deregistered':<26}{len(report.deregistered):>7}",
        f"{'hangs (deadline passed)':<26}{report.count('hang'):>7}",
        f"{'auth bypasses':<26}{report.count('auth_bypass'):>7}",
        f"{'writes raced call end':<26}{report.raced:>7}  (status recovered: CLIENT_WRITE_FAILED)",
        f"{'log ERROR lines':<26}{sum(f.errors for f in report.logs.values()):>7}",
        f"{'unresponsive after':<26}{len(report.unresponsive):>7}",
        f"{'undocumented answers':<26}{sum(f.count for f in report.undocumented()):>7}",
    ]
    for name, figures in sorted(report.logs.items()):
        lines.append(f"  log {name}: {figures.tracebacks} tracebacks, {figures.errors} ERROR lines")
    for what, items in (("crashed", report.crashed), ("deregistered", report.deregistered)):
        lines += [f"  {what}: {item}" for item in items]
    found = report.findings()
    lines += ["", f"findings ({len(found)} distinct; top {min(findings, len(found))}):"]
    for f in found[:findings]:
        lines.append(
            f"  [{f.verdict}] x{f.count} {f.process} {f.rpc} <{f.input_class}> {f.status}: {f.message[:160]!r}"
            f"\n      input: {f.example[:200]}"
        )
    undocumented = report.undocumented()
    if undocumented:
        lines += ["", f"answers STATUS_CODES.md does not name ({len(undocumented)} distinct):"]
        for f in undocumented[:findings]:
            lines.append(
                f"  x{f.count} {f.process} {f.rpc} {f.status} ({f.verdict}): {f.message[:120]!r}"
                f"\n      e.g. <{f.input_class}> {f.example[:160]}"
            )
    excerpts = [(name, e) for name, figures in sorted(report.logs.items()) for e in figures.excerpts]
    if excerpts:
        lines += ["", "log excerpts (distinct ERROR lines and tracebacks):"]
        for name, e in excerpts[:40]:
            lines.append(f"  {name}: {e}")
    return "\n".join(lines)


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        if part.strip():
            key, sep, value = part.partition("=")
            if not sep:
                raise argparse.ArgumentTypeError(f"expected name=value, got {part!r}")
            out[key.strip()] = value.strip()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.security.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--max-mb", type=float, default=150.0, help="budget of the huge values (MB)")
    parser.add_argument("--services", default="", help="processes to fuzz, comma-separated (default: all)")
    parser.add_argument("--attach", type=_pairs, default=None, help="process=host:port,... of a running cluster")
    parser.add_argument("--etcd", default="127.0.0.1:2379", help="with --attach: etcd endpoints")
    parser.add_argument("--etcd-prefix", default="/txmq", help="with --attach: the cluster's etcd prefix")
    parser.add_argument("--logs", type=_pairs, default={}, help="with --attach: process=log path,...")
    parser.add_argument("--access-key", default=ACCESS_KEY, help="with --attach: the gateway's access key")
    parser.add_argument("--secret-key", default=SECRET_KEY, help="with --attach: the gateway's secret key")
    parser.add_argument("--auth", action="store_true", help="run every service with auth_enabled (signed calls)")
    parser.add_argument("--dir", type=Path, default=None, help="where the private cluster lives (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the private cluster's directory (logs)")
    parser.add_argument("--findings", type=int, default=60, help="how many findings to print")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures and findings here")
    parser.add_argument("--results", type=Path, default=None, help="also write every call's verdict here (JSON lines)")
    args = parser.parse_args(argv)
    config = Config(
        seed=args.seed,
        requests=args.requests,
        concurrency=args.concurrency,
        max_bytes=int(args.max_mb * MB),
        services=tuple(s for s in args.services.split(",") if s),
        verbose=True,
    )
    names = Names(access_key=args.access_key, secret_key=args.secret_key, auth=args.auth)
    if args.attach:
        cluster = Cluster(
            addresses=args.attach,
            etcd_endpoints=args.etcd,
            etcd_prefix=args.etcd_prefix,
            logs={k: Path(v) for k, v in args.logs.items()},
        )
    else:
        print("starting a private cluster ...", file=sys.stderr, flush=True)
        cluster = Cluster.start(args.dir, keep=args.keep or args.dir is not None, auth=args.auth)
        print(f"cluster in {cluster.base_dir}: {cluster.addresses}", file=sys.stderr, flush=True)
    try:
        report = run(cluster, config, names=names)
    finally:
        cluster.stop()
    print(format_report(report, findings=args.findings))
    if args.json is not None:
        args.json.write_text(json.dumps(summary(report), indent=1))
    if args.results is not None:
        with open(args.results, "w") as out:
            for r in report.results:
                row = {
                    "index": r.case.index,
                    "process": r.case.target.process,
                    "rpc": r.case.target.rpc,
                    "class": r.case.input_class,
                    "verdict": r.verdict.verdict,
                    "status": r.verdict.status,
                    "message": r.verdict.message[:300],
                    "raced": r.verdict.raced,
                    "input": r.case.what[:300],
                    "bytes": r.case.size,
                    "elapsed_s": round(r.elapsed_s, 3),
                }
                out.write(json.dumps(row) + "\n")
    bad = report.untyped or report.tracebacks or report.crashes or report.deregistered
    return 1 if bad else 0


def summary(report: Report) -> dict[str, Any]:
    return {
        "seed": report.config.seed,
        "requests": len(report.results),
        "rpcs": len(report.targets),
        "sent_bytes": report.sent_bytes,
        "elapsed_s": round(report.elapsed_s, 1),
        "verdicts": {v: report.count(v) for v in VERDICTS},
        "untyped": report.untyped,
        "tracebacks": report.tracebacks,
        "crashes": report.crashes,
        "deregistered": report.deregistered,
        "raced_writes": report.raced,
        "findings": [f.__dict__ for f in report.findings()],
        "undocumented": [f.__dict__ for f in report.undocumented()],
        "log_excerpts": {name: f.excerpts for name, f in report.logs.items()},
    }


if __name__ == "__main__":
    sys.exit(main())
