"""Registration against a real etcd: one bad key never costs the instance its own key
(issue 16: "a topic created with 2 MB of attributes made the store disappear", "a
producer channel with a 2 MB client id made txcheck disappear from etcd").

- a value over the Registration's limit is refused before it is sent;
- a value etcd itself refuses (over --max-request-bytes: "request is too large"; over
  its gRPC message limit: RESOURCE_EXHAUSTED) is refused alone: the other keys of the
  same write are written, the instance key stays, the lease is kept alive;
- a bad key recorded before the lease (or before a re-registration) does not poison it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support import EtcdServer
from support.processes import private_prefix

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
from txmq_runtime.etcd import etcd_client
from txmq_runtime.registry import MAX_VALUE_BYTES, Registration

TTL_MS = 3_000
NO_LIMIT = 64 << 20  # let etcd be the one that refuses


@pytest.fixture
async def client(etcd: EtcdServer) -> AsyncIterator[Any]:
    async with etcd_client(etcd.endpoint) as c:
        yield c


async def value_of(client: Any, key: str) -> bytes | None:
    return await client.get(key.encode()) and (await client.get(key.encode())).value


async def keys_under(client: Any, prefix: str) -> dict[str, bytes]:
    return {kv.key.decode(): kv.value for kv in await client.get_prefix(prefix.encode())}


async def eventually(what: str, predicate: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def only_refusal(refusals: list[TxmqError], key: str) -> TxmqError:
    assert len(refusals) == 1, refusals
    (err,) = refusals
    assert err.metadata["key"] == key
    return err


@pytest.mark.parametrize(
    ("size", "limit", "by"),
    [
        (2_000_000, MAX_VALUE_BYTES, "the registration's limit"),
        (1_700_000, NO_LIMIT, "etcd: request is too large"),
        (3_000_000, NO_LIMIT, "etcd: larger than its gRPC limit"),
    ],
)
async def test_a_huge_value_is_refused_alone_and_the_instance_key_stays(
    client: Any, size: int, limit: int, by: str
) -> None:
    prefix = private_prefix()
    me, good, bad = f"{prefix}/services/store/s1", f"{prefix}/stores/s1/topics/ok", f"{prefix}/stores/s1/topics/big"
    reg = Registration(client, ttl_ms=TTL_MS, max_value_bytes=limit)
    assert await reg.put(me, b"endpoint") == []
    await reg.start(give_up_after_s=10)
    lease = reg.lease_id
    try:
        refusals = await reg.replace({good: b"small", bad: b"x" * size}, prefix=f"{prefix}/stores/s1/topics/")
        err = only_refusal(refusals, bad)
        assert err.code == errors_pb2.CODE_PAYLOAD_TOO_LARGE, err
        assert await keys_under(client, prefix) == {me: b"endpoint", good: b"small"}
        # Kept alive on the same lease past its TTL: nothing is being rewritten in a loop.
        await asyncio.sleep(TTL_MS / 1000 * 1.5)
        assert reg.lease_id == lease
        assert await keys_under(client, prefix) == {me: b"endpoint", good: b"small"}
        # An update of a key to a value etcd refuses keeps the value etcd holds.
        err = only_refusal(await reg.put(good, b"y" * size), good)
        assert await value_of(client, good) == b"small"
        # And later writes go on as usual.
        assert await reg.put(good, b"smaller") == []
        assert await value_of(client, good) == b"smaller"
    finally:
        await reg.close()
    assert await keys_under(client, prefix) == {}


async def test_a_bad_key_does_not_poison_the_registration_or_a_re_registration(client: Any) -> None:
    prefix = private_prefix()
    me, bad = f"{prefix}/services/txcheck/t1", f"{prefix}/producers/g/t1/" + "c" * 100
    reg = Registration(client, ttl_ms=TTL_MS, max_value_bytes=NO_LIMIT)
    await reg.put(me, b"endpoint")
    assert await reg.put(bad, b"z" * 1_700_000) == []  # not sent yet: nothing to refuse
    await reg.start(give_up_after_s=10)  # the first registration drops the bad key
    try:
        assert await keys_under(client, prefix) == {me: b"endpoint"}
        # The lease is lost (revoked behind its back): everything is written again.
        first = reg.lease_id
        await reg.put(bad, b"z" * 1_700_000)
        await client.revoke_lease(first)

        async def back() -> bool:
            return reg.lease_id != first and await keys_under(client, prefix) == {me: b"endpoint"}

        await eventually("the instance key under a new lease", back)
    finally:
        await reg.close()


async def test_many_keys_over_several_transactions_with_one_bad_among_them(client: Any) -> None:
    prefix = private_prefix()
    reg = Registration(client, ttl_ms=TTL_MS, max_value_bytes=NO_LIMIT)
    await reg.put(f"{prefix}/services/store/s1", b"endpoint")
    await reg.start(give_up_after_s=10)
    try:
        # 250 keys: over 128 operations and, at 12.5 KB each, over etcd's 1.5 MiB per
        # transaction: written in several.
        values = {f"{prefix}/stores/s1/topics/t{i:03d}": b"v" * 12_500 for i in range(250)}
        values[f"{prefix}/stores/s1/topics/t150"] = b"x" * 1_700_000
        refusals = await reg.replace(values, prefix=f"{prefix}/stores/s1/topics/")
        only_refusal(refusals, f"{prefix}/stores/s1/topics/t150")
        held = await keys_under(client, prefix)
        assert len(held) == 250 and f"{prefix}/stores/s1/topics/t150" not in held
    finally:
        await reg.close()
