"""txmq.protocol: the one vocabulary (codec, classification) and a check that no other
module defines its names again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from txmq import protocol
from txmq.models import Perm
from txmq.protocol import (
    CHECK_SENT,
    CHECK_WAITING,
    HALF_STORED,
    IMMUNITY_PUT_BACK,
    PROPERTY_CHECK_TIMES,
    PROPERTY_CHECK_WAITS,
    PROPERTY_OP_DECISIONS,
    PROPERTY_PREPARED_QUEUE_OFFSET,
    PUT_BACK,
    RESUMED,
    OpEntry,
    decode_op_entries,
    encode_op_body,
    encode_op_decisions,
    half_record_kind,
)

ROOT = Path(__file__).resolve().parents[2]


def test_op_entries_round_trip() -> None:
    entries = [OpEntry(3, "tx-a", protocol.OP_COMMIT), OpEntry(7, "tx:b", protocol.OP_ROLLBACK)]
    body = encode_op_body(entries)
    assert body == b"3,7"  # RocketMQ 5's body: the half queue offsets
    decoded = decode_op_entries({PROPERTY_OP_DECISIONS: encode_op_decisions(entries)}, body)
    assert decoded == entries  # a ':' inside a transaction id survives


def test_op_entries_of_another_tool_come_from_the_body() -> None:
    assert decode_op_entries({}, b"1,x,2") == [OpEntry(1), OpEntry(2)]
    assert decode_op_entries({PROPERTY_OP_DECISIONS: "5:t:C,bad,6:u:R"}, b"") == [
        OpEntry(5, "t", "C"),
        OpEntry(6, "u", "R"),
    ]


@pytest.mark.parametrize(
    ("props", "previous", "kind"),
    [
        ({}, None, HALF_STORED),
        ({PROPERTY_CHECK_TIMES: "1"}, None, CHECK_SENT),
        ({PROPERTY_CHECK_TIMES: "2"}, (1, 0), CHECK_SENT),
        ({PROPERTY_CHECK_TIMES: "0"}, (3, 0), RESUMED),
        ({PROPERTY_CHECK_TIMES: "1", PROPERTY_CHECK_WAITS: "2"}, (1, 1), CHECK_WAITING),
        ({PROPERTY_CHECK_TIMES: "1", PROPERTY_PREPARED_QUEUE_OFFSET: "4"}, (1, 0), IMMUNITY_PUT_BACK),
        ({}, (0, 0), PUT_BACK),
        ({PROPERTY_CHECK_TIMES: "x"}, (0, 0), PUT_BACK),
    ],
)
def test_half_record_kind(props: dict[str, str], previous: tuple[int, int] | None, kind: str) -> None:
    assert half_record_kind(props, previous) == kind


def test_system_names() -> None:
    assert protocol.is_system_topic(protocol.TRANS_HALF_TOPIC)
    assert protocol.is_system_topic(protocol.TRANS_CHECK_MAX_TIME_TOPIC)
    assert not protocol.is_system_topic("Orders")
    assert protocol.is_system_property(protocol.PROPERTY_REAL_TOPIC)
    assert protocol.is_system_property(protocol.PROPERTY_DLQ_ORIGIN_TOPIC)
    assert not protocol.is_system_property("order-id")
    assert (protocol.PERM_READ, protocol.PERM_WRITE, protocol.PERM_INHERIT) == (Perm.READ, Perm.WRITE, Perm.INHERIT)


def test_committed_copy() -> None:
    copy = dict(unique_id="t", sys_flag=protocol.TRANSACTION_COMMIT_TYPE, topic="Orders", transaction_id="t")
    assert protocol.is_committed_copy(**copy)
    assert not protocol.is_committed_copy(**{**copy, "topic": protocol.TRANS_HALF_TOPIC})
    assert not protocol.is_committed_copy(**{**copy, "sys_flag": protocol.TRANSACTION_PREPARED_TYPE})
    assert not protocol.is_committed_copy(**{**copy, "transaction_id": "u"})


def _python_sources() -> list[Path]:
    roots = [ROOT / d for d in ("services", "clients/python/src/txmq", "cli", "analytics", "bench", "tests", "scripts")]
    skip = {"protocol.py", "test_protocol.py"}
    return [p for r in roots for p in r.rglob("*.py") if "_pb2" not in p.name and p.name not in skip]


def test_no_module_defines_the_protocol_names_again() -> None:
    """Each value of txmq.protocol is spelled once: an assignment of one of its string
    values (e.g. ``X = "REAL_TOPIC"``) or of a permission literal anywhere else fails."""
    values = {
        v
        for k, v in vars(protocol).items()
        if k.isupper()
        and isinstance(v, str)
        and len(v) > 2
        and (k.startswith(("PROPERTY_", "TRANS_", "SYSTEM_")) or "TOPIC" in k)
    }
    assign = re.compile(r"""^\s*[A-Z_]+\s*(?::[^=]+)?=\s*["']([^"']+)["']\s*(#.*)?$""")
    perm = re.compile(r"^\s*PERM_[A-Z]+\s*=\s*\d")
    found = []
    for path in _python_sources():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = assign.match(line)
            if (m and m.group(1) in values) or perm.match(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "defined again (import it from txmq.protocol):\n" + "\n".join(found)


def test_services_do_not_import_private_sdk_modules() -> None:
    """The services use the SDK's public modules only (txmq.protocol, txmq.validation,
    txmq.errors, ...); the CLI and the analytics are the SDK's own tools and may not."""
    private = re.compile(r"^\s*(from txmq\._\w+ import|import txmq\._)", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "services").rglob("*.py") if private.search(p.read_text())]
    assert not offenders
