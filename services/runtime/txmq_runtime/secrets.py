"""Cluster-wide secret keys kept in etcd under ``<etcd_prefix>/secrets/<name>``.

A secret is made once, by whichever process asks for it first: ``get_or_create`` reads the
key and, when it is absent, writes random bytes there with a create-if-absent transaction;
every process, however they race, returns the bytes etcd holds. So replicas of a service
behind one load balancer, and restarts, share the same key (the gateway signs its
transaction handles with one).

The value is the raw key bytes. Deleting it, or overwriting it, invalidates whatever was
signed with the old key once the processes holding it restart.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import aetcd

from txmq_runtime.etcd import retrying

log = logging.getLogger("txmq.secrets")

#: Bytes of a secret made by ``get_or_create`` (HMAC-SHA256 keys: the hash's size).
SECRET_BYTES = 32
#: A stored secret shorter than this is refused (too weak to keep using).
MIN_SECRET_BYTES = 16


class SecretUnusable(Exception):
    """The key in etcd holds something that cannot serve as a secret (too short)."""


def secret_key(etcd_prefix: str, name: str) -> str:
    """The etcd key of secret ``name``: ``<etcd_prefix>/secrets/<name>``."""
    if not name or "/" in name:
        raise ValueError(f"a secret's name is one key segment, got {name!r}")
    return f"{etcd_prefix}/secrets/{name}"


async def get_or_create(
    etcd: aetcd.Client,
    key: str,
    *,
    size: int = SECRET_BYTES,
    give_up_after_s: float | None = None,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> bytes:
    """The secret at ``key``; when absent, ``size`` random bytes are put there first
    (create-if-absent: of several processes racing, one write wins and all return it).

    etcd errors are retried (``txmq_runtime.etcd.retrying``) until ``give_up_after_s``,
    then raised. SecretUnusable when the stored value is shorter than MIN_SECRET_BYTES."""
    if size < MIN_SECRET_BYTES:
        raise ValueError(f"a secret needs at least {MIN_SECRET_BYTES} bytes, not {size}")
    k = key.encode()

    async def attempt() -> tuple[bool, bytes]:
        tx = etcd.transactions
        created, responses = await etcd.transaction(
            compare=[tx.version(k) == 0],
            success=[tx.put(k, random_bytes(size)), tx.get(k)],
            failure=[tx.get(k)],
        )
        return created, _value(responses[-1] if responses else None)

    created: bool
    value: bytes
    created, value = await retrying(give_up_after_s=give_up_after_s)(attempt)
    if len(value) < MIN_SECRET_BYTES:
        raise SecretUnusable(
            f"etcd key {key} holds {len(value)} bytes; a secret needs at least {MIN_SECRET_BYTES} "
            "(delete the key to have a new one made; whatever the old one signed becomes invalid)"
        )
    if created:
        log.info("made the secret %s (%d random bytes)", key, len(value))
    return value


def _value(response: Any) -> bytes:
    """The value of a transaction's range response (a list of (value, KeyValue));
    empty when the key does not exist."""
    if not response:
        return b""
    return bytes(response[0][1].value)
