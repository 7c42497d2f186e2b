"""The commit-log record helpers, compiled when possible: ``verify``, ``patch``,
``fields`` and ``walk`` (layout in ``txmq.records``).

- ``verify(buf, pos, physical_offset) -> int``: the checks of
  ``txmq_store.codec.verify_record`` (ValueError with its messages); the record's size.
- ``patch(frame, pos, queue_offset, physical_offset, born_host, store_timestamp_ms,
  store_host) -> None``: writes the fields only the store knows into a sent record in
  place, then its record CRC (``encode_record``'s bytes for the same fields).
- ``fields(buf, pos) -> tuple``: the record decoded without its CRC checked.
- ``walk(buf, offset, segment_end) -> list``: a shipment of copied log bytes checked in
  one pass (every record as ``verify`` checks it, a closing blank marker), and per record
  the fields its dispatch needs (a follower's copy, ``txmq_store.replication``).

They come from ``txmq._codec_c``, a C extension (``_codec.c``) that installing the SDK
builds (``clients/python/setup.py``; ``pip install -e clients/python`` in
``scripts/setup.sh``), and otherwise from ``txmq._codec_py``, the pure-Python reference
with identical results, exception classes and messages. ``NATIVE`` tells which one was
loaded. Setting the environment variable ``TXMQ_PURE_PYTHON=1`` before the first import
forces the pure-Python functions (e.g. to compare, or to rule the extension out).
"""

from __future__ import annotations

import os

__all__ = ["NATIVE", "fields", "patch", "verify", "walk"]

NATIVE: bool

if os.environ.get("TXMQ_PURE_PYTHON") == "1":
    from txmq._codec_py import fields, patch, verify, walk

    NATIVE = False
else:
    try:
        from txmq._codec_c import fields, patch, verify, walk
    except ImportError:
        from txmq._codec_py import fields, patch, verify, walk

        NATIVE = False
    else:
        NATIVE = True
