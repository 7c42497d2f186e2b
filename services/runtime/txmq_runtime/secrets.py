"""Cluster-wide secret keys kept in etcd under ``<etcd_prefix>/secrets/<name>``.

A secret is made once, by whichever process asks for it first: ``get_or_create`` reads the
key and, when it is absent, writes random bytes there with a create-if-absent transaction;
every process, however they race, returns the bytes etcd holds. So replicas of a service
behind one load balancer, and restarts, share the same key (the gateway signs its
transaction handles with one).

With a ``SecretBox`` (a process with ``auth_enabled``: the box's key is derived from
``auth_secret_key``) the value is **sealed** the way users' secrets are: AES-256-GCM
under a key derived with HKDF-SHA256 (its own derivation label), the etcd key as
associated data, behind ``SEALED_MARK``. Whoever reads etcd (a backup, a role that
reaches the key) then learns nothing without ``auth_secret_key``. A raw value written
before sealing is sealed in place on the first read with a box, the same bytes, so what
was signed with it stays valid. Without a box the value is the raw key bytes: a process
without auth has nothing to seal with.

Deleting the value, or overwriting it, invalidates whatever was signed with the old key
once the processes holding it restart.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import aetcd
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from txmq_runtime.etcd import retrying

log = logging.getLogger("txmq.secrets")

#: Bytes of a secret made by ``get_or_create`` (HMAC-SHA256 keys: the hash's size).
SECRET_BYTES = 32
#: A stored secret shorter than this is refused (too weak to keep using).
MIN_SECRET_BYTES = 16


#: How a sealed value begins (a raw random one does so with probability 2**-120).
SEALED_MARK = b"txmq-sealed-v1:"
_NONCE_BYTES = 12


class SecretUnusable(Exception):
    """The key in etcd holds something that cannot serve as a secret (too short, or
    sealed with a key this process does not have)."""


class Keyring:
    """AES-256-GCM keys derived (HKDF-SHA256, under ``label``) from the services' secret
    and from the other secrets a process accepts during a key roll (docs/security.md
    "Rotating auth_secret_key"). Seals with the first; opens with whichever fits, so a
    value sealed under the old or the new secret opens on either side of the roll."""

    def __init__(self, label: bytes, service_secret: str, accepted: Sequence[str] = ()) -> None:
        secrets = [service_secret, *(a for a in accepted if a and a != service_secret)]
        self._aeads = [
            AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(s.encode()))
            for s in secrets
        ]

    def seal(self, data: bytes, associated: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._aeads[0].encrypt(nonce, data, associated)

    def open(self, sealed: bytes, associated: bytes) -> bytes | None:
        """The data; None when no key of the ring sealed it (or it was tampered with)."""
        if len(sealed) <= _NONCE_BYTES:
            return None
        for aead in self._aeads:
            try:
                return aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], associated)
            except InvalidTag:
                continue
        return None


class SecretBox:
    """Seals cluster secrets: a ``Keyring`` under its own label (a sealed user secret,
    ``txmq_runtime.auth.Sealer``, opens nothing here) with the etcd key as associated data
    (a sealed value cannot be moved to another key), behind ``SEALED_MARK``."""

    def __init__(self, service_secret: str, accepted: Sequence[str] = ()) -> None:
        self._ring = Keyring(b"txmq cluster secrets v1", service_secret, accepted)

    def seal(self, key: str, secret: bytes) -> bytes:
        return SEALED_MARK + self._ring.seal(secret, key.encode())

    def open(self, key: str, sealed: bytes) -> bytes | None:
        """The secret; None when it was not sealed with one of this box's keys for ``key``."""
        return self._ring.open(sealed.removeprefix(SEALED_MARK), key.encode())


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
    box: SecretBox | None = None,
) -> bytes:
    """The secret at ``key``; when absent, ``size`` random bytes are put there first
    (create-if-absent: of several processes racing, one write wins and all return it).
    With ``box`` the value in etcd is sealed (module docstring).

    etcd errors are retried (``txmq_runtime.etcd.retrying``) until ``give_up_after_s``,
    then raised. SecretUnusable when the stored value is shorter than MIN_SECRET_BYTES,
    or sealed and ``box`` cannot open it."""
    if size < MIN_SECRET_BYTES:
        raise ValueError(f"a secret needs at least {MIN_SECRET_BYTES} bytes, not {size}")
    k = key.encode()

    async def attempt() -> tuple[bool, bytes]:
        tx = etcd.transactions
        made = random_bytes(size)
        created, responses = await etcd.transaction(
            compare=[tx.version(k) == 0],
            success=[tx.put(k, made if box is None else box.seal(key, made)), tx.get(k)],
            failure=[tx.get(k)],
        )
        return created, _value(responses[-1] if responses else None)

    created: bool
    stored: bytes
    created, stored = await retrying(give_up_after_s=give_up_after_s)(attempt)
    value = _opened(key, stored, box)
    if box is not None and not stored.startswith(SEALED_MARK) and len(value) >= MIN_SECRET_BYTES:
        await _seal_in_place(etcd, key, stored, box, give_up_after_s=give_up_after_s)
    if len(value) < MIN_SECRET_BYTES:
        raise SecretUnusable(
            f"etcd key {key} holds {len(value)} bytes; a secret needs at least {MIN_SECRET_BYTES} "
            "(delete the key to have a new one made; whatever the old one signed becomes invalid)"
        )
    if created:
        log.info("made the secret %s (%d random bytes)", key, len(value))
    return value


def _opened(key: str, stored: bytes, box: SecretBox | None) -> bytes:
    """The secret in ``stored``: opened when sealed, as it is when raw."""
    if not stored.startswith(SEALED_MARK):
        return stored
    if box is None:
        raise SecretUnusable(
            f"etcd key {key} is sealed, and this process has no auth_secret_key to open it (turn auth_enabled on)"
        )
    opened = box.open(key, stored)
    if opened is None:
        raise SecretUnusable(
            f"etcd key {key} is sealed with another auth_secret_key (use the cluster's, or delete the key to have a "
            "new one made; whatever the old one signed becomes invalid)"
        )
    return opened


async def _seal_in_place(
    etcd: aetcd.Client, key: str, raw: bytes, box: SecretBox, *, give_up_after_s: float | None
) -> None:
    """Replace the raw value written before sealing by the same secret sealed, unless
    someone changed it meanwhile (then they wrote it; it is theirs)."""
    k = key.encode()

    async def attempt() -> bool:
        tx = etcd.transactions
        done, _ = await etcd.transaction(
            compare=[tx.value(k) == raw], success=[tx.put(k, box.seal(key, raw))], failure=[]
        )
        return bool(done)

    if await retrying(give_up_after_s=give_up_after_s)(attempt):
        log.info("sealed the secret %s in place (it was stored raw)", key)


def _value(response: Any) -> bytes:
    """The value of a transaction's range response (a list of (value, KeyValue));
    empty when the key does not exist."""
    if not response:
        return b""
    return bytes(response[0][1].value)
