"""A child process that holds a key with ``FencedLease`` and acts only while its holding
is valid (tests/runtime/test_lease.py pauses it with SIGSTOP).

    python lease_holder.py ENDPOINT KEY TTL_MS JOURNAL

Every 20 ms it asks ``holds(key)`` and appends one JSON line to JOURNAL: ``acted``
(holding valid: this is the action ownership allows, with its epoch), or ``idle`` (not
holding; it campaigns again). ``held`` when a campaign is won, ``lost`` when the lease
reports a loss. ``checked_ms`` is CLOCK_MONOTONIC (the same clock in every process of the
machine), read right before the check. It exits when its parent goes away.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from txmq_runtime.clock import SYSTEM_CLOCK
from txmq_runtime.etcd import RETRYABLE, etcd_client
from txmq_runtime.lease import FencedLease, LeaseLapsed


def main(endpoint: str, key: str, ttl_ms: int, journal: str) -> None:
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(kind: str, **fields: object) -> None:
        os.write(fd, (json.dumps({"kind": kind, "pid": os.getpid(), **fields}) + "\n").encode())

    async def run() -> None:
        parent = os.getppid()
        async with etcd_client(endpoint) as client:
            lease = FencedLease(
                client,
                name="child",
                ttl_ms=ttl_ms,
                on_lost=lambda h, reason: record("lost", epoch=h.epoch, reason=reason, at_ms=SYSTEM_CLOCK.now_ms()),
            )
            lease.start()
            while os.getppid() == parent:
                checked_ms = SYSTEM_CLOCK.now_ms()
                held = lease.holds(key)
                if held is not None:
                    record("acted", epoch=held.epoch, checked_ms=checked_ms)  # no await in between
                else:
                    record("idle", checked_ms=checked_ms)
                    if lease.valid():
                        try:
                            won = await lease.campaign(key, f"child-{os.getpid()}".encode())
                        except (LeaseLapsed, *RETRYABLE):
                            won = None
                        if won is not None and won.holding is not None:
                            record("held", epoch=won.holding.epoch)
                await asyncio.sleep(0.02)
            await lease.close()

    asyncio.run(run())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
