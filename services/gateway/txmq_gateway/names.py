"""The topic and group names in v2 requests, checked where every request enters the
gateway (``MessagingServicer._admit``, after authentication and permissions).

The rules are RocketMQ's, as the SDK, the store and the pull service apply them
(``txmq.validation``): a topic is 1..127 and a group 1..255 characters of
``[%|a-zA-Z0-9_-]``. A name the store would refuse is refused before it reaches a core,
an etcd key (a consumer group's ownership claim) or a log line: ILLEGAL_TOPIC or
ILLEGAL_CONSUMER_GROUP, quoting at most the name's first characters. An empty name is
left to the RPC (a producer's heartbeat names no group; where one is required, the RPC
says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
from txmq.validation import GROUP_MAX_LENGTH, TOPIC_MAX_LENGTH, check_group, check_topic
from txmq_gateway.status import GatewayError, shorten
from txmq_gateway.v2 import Code

RESOURCE = "apache.rocketmq.v2.Resource"
#: How deep in a request Resource fields are looked for (v2 nests them at most 3 deep).
_MAX_DEPTH = 6
_NAME_CHARS = "[%|a-zA-Z0-9_-]"


def _check_topic(name: str) -> None:
    check_topic(name)


def _check_group(name: str) -> None:
    check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)


#: Resource field name -> (what it names, the check, the v2 code, the longest legal name).
_KINDS: dict[str, tuple[str, Callable[[str], None], int, int]] = {
    "topic": ("topic", _check_topic, Code.ILLEGAL_TOPIC, TOPIC_MAX_LENGTH),
    "topics": ("topic", _check_topic, Code.ILLEGAL_TOPIC, TOPIC_MAX_LENGTH),
    "group": ("consumer group", _check_group, Code.ILLEGAL_CONSUMER_GROUP, GROUP_MAX_LENGTH),
}

Path = tuple[FieldDescriptor, ...]
_paths: dict[str, tuple[Path, ...]] = {}
#: (Resource field name, name) pairs found legal: the same few topics and groups come in
#: every call, and the rules do not change. Bounded (emptied when full).
_legal: set[tuple[str, str]] = set()
_MAX_LEGAL = 4096


def resource_paths(descriptor: Descriptor) -> tuple[Path, ...]:
    """The field paths from ``descriptor`` to every topic or group Resource (e.g.
    ``message_queue.topic``, ``messages[].topic``), computed once per message type."""
    paths = _paths.get(descriptor.full_name)
    if paths is None:
        paths = _paths[descriptor.full_name] = tuple(_walk(descriptor, (), 0))
    return paths


def _walk(descriptor: Descriptor, prefix: Path, depth: int) -> Iterator[Path]:
    for f in descriptor.fields:
        if f.message_type is None or f.message_type.GetOptions().map_entry:
            continue
        if f.message_type.full_name == RESOURCE:
            if f.name in _KINDS:
                yield (*prefix, f)
        elif depth < _MAX_DEPTH and not f.message_type.full_name.startswith("google.protobuf."):
            yield from _walk(f.message_type, (*prefix, f), depth + 1)


def _resources(message: Message, path: Path, out: list[tuple[str, Message]]) -> None:
    """Append (field name, Resource) of every Resource set at ``path`` in ``message`` to
    ``out`` (a loop, not a generator: this runs on every call)."""
    f, rest = path[0], path[1:]
    if f.is_repeated:
        values = getattr(message, f.name)
    elif message.HasField(f.name):
        values = (getattr(message, f.name),)
    else:
        return
    for value in values:
        if rest:
            _resources(value, rest, out)
        else:
            out.append((f.name, value))


def check_group_name(group: str) -> None:
    """GatewayError ILLEGAL_CONSUMER_GROUP for a consumer group name that breaks
    RocketMQ's naming rules (the empty name too)."""
    try:
        _check_group(group)
    except TxmqError:
        raise GatewayError(
            Code.ILLEGAL_CONSUMER_GROUP,
            f"{shorten(group)} is not a legal consumer group name (1..{GROUP_MAX_LENGTH} characters of {_NAME_CHARS})",
        ) from None


def check_names(request: Message) -> None:
    """GatewayError ILLEGAL_TOPIC / ILLEGAL_CONSUMER_GROUP for the first topic or group
    name in ``request`` that breaks RocketMQ's naming rules."""
    for path in resource_paths(request.DESCRIPTOR):
        found: list[tuple[str, Message]] = []
        _resources(request, path, found)
        for field, resource in found:
            name = resource.name
            if not name or (field, name) in _legal:
                continue
            what, check, code, longest = _KINDS[field]
            try:
                check(name)
            except TxmqError:
                where = ".".join(f.name for f in path)
                raise GatewayError(
                    code,
                    f"{where}: {shorten(name)} is not a legal {what} name (1..{longest} characters of {_NAME_CHARS})",
                ) from None
            if len(_legal) >= _MAX_LEGAL:
                _legal.clear()
            _legal.add((field, name))
