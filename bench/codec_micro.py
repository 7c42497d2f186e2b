"""Micro-benchmark of the record helpers of ``txmq.codec_native``: ``verify``, ``patch``
and ``fields`` per call, the C extension (``txmq._codec_c``) against the pure-Python
reference (``txmq._codec_py``), on one record with a 1 KiB body.

    .venv/bin/python -m bench.codec_micro [--body 1024] [--repeat 7]

Each figure is the best of ``--repeat`` timeit runs (each run long enough to last ~0.2 s),
in nanoseconds per call. Single-threaded; a quiet machine gives steadier figures.
"""

from __future__ import annotations

import argparse
import random
import timeit
from collections.abc import Callable
from types import ModuleType

from txmq import _codec_py
from txmq.records import encode_for_send

STORE_HOST = bytes(10) + b"\xff\xff" + bytes((10, 1, 2, 3)) + (10911).to_bytes(4, "big")
BORN_HOST = bytes(10) + b"\xff\xff" + bytes((10, 9, 8, 7)) + (40000).to_bytes(4, "big")
PHYSICAL_OFFSET = 1 << 30


def record(body_bytes: int) -> bytes:
    body = random.Random(1).randbytes(body_bytes)
    sent = bytearray(encode_for_send("BenchTopic", 3, body, "7F0000010001000000000000000000AB", tags="TagA"))
    _codec_py.patch(sent, 0, 17, PHYSICAL_OFFSET, BORN_HOST, 1_700_000_000_000, STORE_HOST)
    return bytes(sent)


def per_call_ns(fn: Callable[[], object], repeat: int) -> float:
    timer = timeit.Timer(fn)
    number, elapsed = timer.autorange()
    number = max(1, int(number * 0.2 / max(elapsed, 1e-9)))
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e9


def measure(mod: ModuleType, rec: bytes, repeat: int) -> dict[str, float]:
    frame = bytearray(rec)
    verify, patch, fields = mod.verify, mod.patch, mod.fields
    return {
        "verify": per_call_ns(lambda: verify(rec, 0, PHYSICAL_OFFSET), repeat),
        "patch": per_call_ns(lambda: patch(frame, 0, 18, PHYSICAL_OFFSET, BORN_HOST, 1, STORE_HOST), repeat),
        "fields": per_call_ns(lambda: fields(rec, 0), repeat),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--body", type=int, default=1024, help="body bytes of the record (default 1024)")
    parser.add_argument("--repeat", type=int, default=7, help="timeit runs per figure, the best kept (default 7)")
    args = parser.parse_args()
    rec = record(args.body)
    try:
        from txmq import _codec_c
    except ImportError as exc:
        raise SystemExit(
            f"txmq._codec_c is not built ({exc}): .venv/bin/python -m pip install -e clients/python"
        ) from None
    # the two agree on this record (the tests check far more)
    assert _codec_c.fields(rec, 0) == _codec_py.fields(rec, 0)
    native = measure(_codec_c, rec, args.repeat)
    python = measure(_codec_py, rec, args.repeat)
    print(f"record: {len(rec)} bytes ({args.body}-byte body); ns per call, best of {args.repeat}")
    print(f"{'function':<10} {'native':>10} {'python':>10} {'speed-up':>9}")
    for name in ("verify", "patch", "fields"):
        print(f"{name:<10} {native[name]:>10.0f} {python[name]:>10.0f} {python[name] / native[name]:>8.1f}x")


if __name__ == "__main__":
    main()
