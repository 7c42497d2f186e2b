"""The transaction-handle key in etcd (txmq_runtime.secrets) against the session's real
etcd, each test under its own prefix: made once by whoever asks first, the same bytes
for everyone after (racing callers included), an unusable stored value refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support import EtcdServer
from support.processes import private_prefix

from txmq_gateway.convert import HANDLE_KEY_SECRET, HandleSigner, TransactionHandle
from txmq_runtime import secrets
from txmq_runtime.etcd import etcd_client


@pytest.fixture
async def etcd_conn(etcd: EtcdServer) -> AsyncIterator[Any]:
    async with etcd_client(etcd.endpoint) as client:
        yield client


def test_the_key_lives_under_the_prefix() -> None:
    assert secrets.secret_key("/txmq", HANDLE_KEY_SECRET) == "/txmq/secrets/transaction-handle-key"
    with pytest.raises(ValueError):
        secrets.secret_key("/txmq", "a/b")


async def test_made_once_then_read_back(etcd_conn: Any) -> None:
    key = secrets.secret_key(private_prefix(), HANDLE_KEY_SECRET)
    first = await secrets.get_or_create(etcd_conn, key)
    assert len(first) == secrets.SECRET_BYTES
    assert (await etcd_conn.get(key.encode())).value == first
    assert await secrets.get_or_create(etcd_conn, key, random_bytes=lambda n: b"\1" * n) == first  # kept
    # What two gateways (or one restarted) do with it: each accepts the other's handles.
    handle = TransactionHandle("s1", 4096, 3, "T1")
    assert (
        HandleSigner(await secrets.get_or_create(etcd_conn, key)).decode(HandleSigner(first).encode(handle)) == handle
    )


async def test_racing_callers_all_get_the_one_that_was_written(etcd_conn: Any) -> None:
    key = secrets.secret_key(private_prefix(), HANDLE_KEY_SECRET)
    made = iter(range(1, 100))
    got = await asyncio.gather(
        *(secrets.get_or_create(etcd_conn, key, random_bytes=lambda n: bytes([next(made)]) * n) for _ in range(8))
    )
    assert len(set(got)) == 1
    assert (await etcd_conn.get(key.encode())).value == got[0]


async def test_a_stored_value_too_short_is_refused(etcd_conn: Any) -> None:
    key = secrets.secret_key(private_prefix(), HANDLE_KEY_SECRET)
    await etcd_conn.put(key.encode(), b"short")
    with pytest.raises(secrets.SecretUnusable) as info:
        await secrets.get_or_create(etcd_conn, key)
    assert "5 bytes" in str(info.value) and key in str(info.value)
    assert (await etcd_conn.get(key.encode())).value == b"short"  # left as it is
    with pytest.raises(ValueError):
        await secrets.get_or_create(etcd_conn, key, size=8)
