"""Cluster secrets sealed in etcd (txmq_runtime.secrets.SecretBox), against the session's
real etcd: the raw etcd value of the gateway's transaction-handle key holds no key
material once the gateway runs with auth; the key reads back the same; another
auth_secret_key, or none, cannot open it; a key stored raw before sealing is sealed in
place, the same bytes (handles signed with it stay valid)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from support import EtcdServer, ServiceFactory
from support.processes import private_prefix

from txmq_gateway.convert import HANDLE_KEY_SECRET
from txmq_runtime import secrets
from txmq_runtime.etcd import etcd_client

SERVICE_SECRET = "sealed-secrets-service-secret"


@pytest.fixture
async def etcd_conn(etcd: EtcdServer) -> AsyncIterator[Any]:
    async with etcd_client(etcd.endpoint) as client:
        yield client


def assert_sealed(raw: bytes, key_material: bytes) -> None:
    assert raw.startswith(secrets.SEALED_MARK)
    assert key_material not in raw
    for i in range(len(key_material) - 7):  # not even 8 bytes of it in a row
        assert key_material[i : i + 8] not in raw


async def test_the_gateway_seals_its_handle_key(service_factory: ServiceFactory, etcd_conn: Any) -> None:
    service_factory.start(
        "gateway", "--auth_enabled=true", "--auth_access_key", "txmq-admin", "--auth_secret_key", SERVICE_SECRET
    )
    key = secrets.secret_key(service_factory.etcd_prefix, HANDLE_KEY_SECRET)
    raw = (await etcd_conn.get(key.encode())).value
    opened = secrets.SecretBox(SERVICE_SECRET).open(key, raw)
    assert opened is not None and len(opened) == secrets.SECRET_BYTES
    assert_sealed(raw, opened)
    # what a second gateway (or a restart) reads: the same key
    assert await secrets.get_or_create(etcd_conn, key, box=secrets.SecretBox(SERVICE_SECRET)) == opened


async def test_made_sealed_and_read_back(etcd_conn: Any) -> None:
    key = secrets.secret_key(private_prefix(), HANDLE_KEY_SECRET)
    box = secrets.SecretBox(SERVICE_SECRET)
    first = await secrets.get_or_create(etcd_conn, key, box=box)
    assert_sealed((await etcd_conn.get(key.encode())).value, first)
    assert await secrets.get_or_create(etcd_conn, key, box=box, random_bytes=lambda n: b"\1" * n) == first


@pytest.mark.parametrize(
    ("box", "reason"),
    [(secrets.SecretBox("another-service-secret"), "another auth_secret_key"), (None, "no auth_secret_key")],
)
async def test_a_sealed_key_cannot_be_opened_without_the_services_secret(
    etcd_conn: Any, box: secrets.SecretBox | None, reason: str
) -> None:
    key = secrets.secret_key(private_prefix(), HANDLE_KEY_SECRET)
    await secrets.get_or_create(etcd_conn, key, box=secrets.SecretBox(SERVICE_SECRET))
    with pytest.raises(secrets.SecretUnusable, match=reason):
        await secrets.get_or_create(etcd_conn, key, box=box)


async def test_a_sealed_value_cannot_be_moved_to_another_key(etcd_conn: Any) -> None:
    prefix = private_prefix()
    key, other = secrets.secret_key(prefix, HANDLE_KEY_SECRET), secrets.secret_key(prefix, "other")
    box = secrets.SecretBox(SERVICE_SECRET)
    await secrets.get_or_create(etcd_conn, key, box=box)
    await etcd_conn.put(other.encode(), (await etcd_conn.get(key.encode())).value)
    with pytest.raises(secrets.SecretUnusable, match="another auth_secret_key"):
        await secrets.get_or_create(etcd_conn, other, box=box)


async def test_a_raw_key_is_sealed_in_place_and_stays_the_same(etcd_conn: Any) -> None:
    key = secrets.secret_key(private_prefix(), HANDLE_KEY_SECRET)
    raw = await secrets.get_or_create(etcd_conn, key)  # as a gateway without sealing wrote it
    assert (await etcd_conn.get(key.encode())).value == raw
    box = secrets.SecretBox(SERVICE_SECRET)
    assert await secrets.get_or_create(etcd_conn, key, box=box) == raw
    assert_sealed((await etcd_conn.get(key.encode())).value, raw)
    assert await secrets.get_or_create(etcd_conn, key, box=box) == raw
