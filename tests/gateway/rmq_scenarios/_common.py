"""What every scenario script shares: the command line, the client configuration, the
JSON lines on stdout, and the official client's log.

Each script uses only the official RocketMQ 5 Python client (``rocketmq``) and prints
one JSON object per line on stdout: ``{"event": ..., ...}``. A failure of the client is
an ``{"event": "error", "op": ..., "type": ..., "code": ..., "message": ...}`` line (the
script goes on or stops as the scenario needs); anything the script did not expect is a
traceback on stderr and a non-zero exit.

The official client logs to ``~/logs/rocketmq_python/rocketmq_client.log`` only (set
HOME to move it); its WARNING-and-above records are copied to stderr too, and the ones
logged while an operation ran are attached to that operation's error line
(``client_log``), because some failures reach the caller without their code (a route
look-up refused with 40100 raises a bare ``Exception("failed to fetch topic ... route")``
and only the log says why).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rocketmq import ClientConfiguration, Credentials, Message

_print_lock = threading.Lock()
CODE_PATTERN = re.compile(r"\b([1-5]\d{4})\b")  # v2 codes: 20000, 40100, 50400 ...


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--endpoint", required=True, help="the gateway, host:port")
    p.add_argument("--access-key", default="")
    p.add_argument("--secret-key", default="")
    p.add_argument("--request-timeout", type=int, default=5, help="seconds, every unary call")
    p.add_argument("--tls", action="store_true", help="dial with TLS (roots: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)")
    return p


def config(args: argparse.Namespace) -> ClientConfiguration:
    return ClientConfiguration(
        args.endpoint, Credentials(args.access_key, args.secret_key), request_timeout=args.request_timeout
    )


def emit(event: str, **fields: Any) -> None:
    record = {"event": event, "t_ms": int(time.time() * 1000), **fields}
    with _print_lock:
        sys.stdout.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        sys.stdout.flush()


class _ClientLog(logging.Handler):
    """Keeps the official client's WARNING+ records (for error lines) and copies them to stderr."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(threadName)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        self.records.append(line)
        sys.stderr.write(f"rocketmq-client: {line}\n")
        sys.stderr.flush()


CLIENT_LOG = _ClientLog()
logging.getLogger("rocketmq-python-client").addHandler(CLIENT_LOG)


def error_fields(exc: BaseException, log_from: int = 0) -> dict[str, Any]:
    """``type``, ``code`` (the v2 code the client carries, else one found in the client's
    log since ``log_from``), ``code_source``, ``message`` and the ``client_log`` lines."""
    logged = CLIENT_LOG.records[log_from:]
    code = getattr(exc, "code", None)
    source = "exception" if code is not None else None
    if code is None:
        for line in reversed(logged):
            found = CODE_PATTERN.search(line)
            if found:
                code, source = int(found.group(1)), "client_log"
                break
    return {
        "type": type(exc).__name__,
        "code": code,
        "code_source": source,
        "message": str(exc),
        "client_log": logged[-10:],
    }


@contextmanager
def reported(op: str, **context: Any) -> Iterator[None]:
    """Run the block; on a client failure print an error line for ``op`` instead of raising."""
    log_from = len(CLIENT_LOG.records)
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - every client failure is a result here
        emit("error", op=op, **context, **error_fields(exc, log_from))


def message_fields(msg: Message) -> dict[str, Any]:
    """A received (or checked) message as JSON."""
    body = msg.body
    return {
        "message_id": msg.message_id,
        "topic": msg.topic,
        "body": body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body,
        "tag": msg.tag,
        "keys": sorted(msg.keys or ()),
        "properties": dict(msg.properties or {}),
        "delivery_attempt": msg.delivery_attempt,
        "born_host": msg.born_host,
        "born_timestamp": msg.born_timestamp,
        "message_type": msg.message_type,
        "receipt_handle": msg.receipt_handle,
        "message_group": msg.message_group,
        "delivery_timestamp": msg.delivery_timestamp,
        "corrupted": msg.corrupted,
    }


def new_message(
    topic: str, body: str, *, tag: str | None = None, keys: list[str] = (), properties: dict[str, str] | None = None
) -> Message:  # type: ignore[assignment]
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    if tag:
        msg.tag = tag
    for key in keys:
        msg.keys = key  # the setter adds one key per assignment
    for name, value in (properties or {}).items():
        msg.add_property(name, value)
    return msg


def parse_properties(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--property wants NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def start(client: Any) -> bool:
    """``client.startup()``; on success print ``started`` and return True, else an
    ``error`` line (op ``startup``) and False."""
    ok = False
    with reported("startup"):
        client.startup()
        ok = True
    if ok:
        emit("started")
    return ok


def stdin_closed() -> threading.Event:
    """An event set when a line arrives on stdin or stdin closes (how a test says stop)."""
    stop = threading.Event()

    def wait_stdin() -> None:
        sys.stdin.readline()  # a line or EOF
        stop.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    return stop
