"""Re-sealing what etcd keeps sealed under a new ``auth_secret_key`` (``txmq auth
rotate-key``; the roll around it is in docs/security.md, "Rotating auth_secret_key").

Two kinds of value are sealed with keys derived from the services' secret: users'
secrets in ``<prefix>/auth/users/`` (``auth.Sealer``) and cluster secrets in
``<prefix>/secrets/`` (``secrets.SecretBox``). Each is opened with the old key and
sealed again with the new one, written with a compare on its revision (a value changed
meanwhile is read again and done again), so the services, which mirror the user book,
go on serving throughout: every one of them accepts both keys while this runs. The
services' own identity is the one user whose secret *is* ``auth_secret_key``: its secret
becomes the new key. The secrets themselves (users' and the cluster's) do not change, so
nothing signed with them becomes invalid. Running it again changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import aetcd
from google.protobuf import json_format

from txmq.v1 import auth_pb2
from txmq_runtime.auth import AuthKeys, Sealer
from txmq_runtime.auth_service import stored_user
from txmq_runtime.secrets import SEALED_MARK, SecretBox

#: Compare failures tolerated on one key (someone writing it in a loop) before giving up.
ATTEMPTS_PER_KEY = 20


class RotationFailed(Exception):
    """A value could not be re-sealed (one line says which and why)."""


@dataclasses.dataclass
class Resealed:
    users: int = 0
    secrets: int = 0
    #: Already sealed under the new key (a second run, or a value written meanwhile).
    already: int = 0
    #: Keys neither secret opens: left as they are (another cluster's, or damaged).
    unopenable: list[str] = dataclasses.field(default_factory=list)


class _Keys:
    def __init__(self, old_secret: str, new_secret: str, service_access_key: str) -> None:
        self.old_sealer, self.new_sealer = Sealer(old_secret), Sealer(new_secret)
        self.old_box, self.new_box = SecretBox(old_secret), SecretBox(new_secret)
        self.new_secret = new_secret
        self.service = service_access_key

    def user(self, key: str, value: bytes) -> tuple[bytes | None, bool]:
        """The user's value sealed under the new key, or None with whether it already is."""
        stored = json_format.Parse(value, auth_pb2.StoredUser(), ignore_unknown_fields=True)
        name = stored.user.username
        want = self.new_secret if name == self.service else None
        under_new = self.new_sealer.open(name, stored.sealed_secret)
        if under_new is not None and (want is None or under_new == want):
            return None, True
        secret = self.old_sealer.open(name, stored.sealed_secret) or under_new
        if secret is None:
            return None, False
        return stored_user(self.new_sealer, stored.user, want or secret), False

    def secret(self, key: str, value: bytes) -> tuple[bytes | None, bool]:
        """The cluster secret's value sealed under the new key, or None with whether it already is."""
        if not value.startswith(SEALED_MARK):
            return self.new_box.seal(key, value), False  # stored raw (written before auth was on)
        if self.new_box.open(key, value) is not None:
            return None, True
        secret = self.old_box.open(key, value)
        return (None, False) if secret is None else (self.new_box.seal(key, secret), False)


async def reseal(
    etcd: aetcd.Client, *, prefix: str, old_secret: str, new_secret: str, service_access_key: str
) -> Resealed:
    """Re-seal every sealed value under ``<prefix>`` from ``old_secret`` to ``new_secret``."""
    if old_secret == new_secret:
        raise RotationFailed("the new auth_secret_key is the old one")
    keys = _Keys(old_secret, new_secret, service_access_key)
    done = Resealed()
    users, cluster_secrets = AuthKeys(prefix).users, f"{prefix}/secrets/"
    for root, kind in ((users, "users"), (cluster_secrets, "secrets")):
        listing = await etcd.get_prefix(root.encode(), keys_only=True)
        for kv in listing:
            key = kv.key.decode()
            outcome = await _reseal_one(etcd, key, keys.user if kind == "users" else keys.secret)
            if outcome == "resealed":
                setattr(done, kind, getattr(done, kind) + 1)
            elif outcome == "already":
                done.already += 1
            elif outcome == "unopenable":
                done.unopenable.append(key)
    return done


async def _reseal_one(etcd: aetcd.Client, key: str, resealed: Callable[[str, bytes], tuple[bytes | None, bool]]) -> str:
    k = key.encode()
    for _ in range(ATTEMPTS_PER_KEY):
        got = await etcd.get(k)
        if got is None:
            return "gone"
        try:
            value, already = resealed(key, bytes(got.value))
        except (json_format.ParseError, ValueError):
            return "unopenable"
        if value is None:
            return "already" if already else "unopenable"
        tx = etcd.transactions
        written, _ = await etcd.transaction(
            compare=[tx.mod(k) == got.mod_revision], success=[tx.put(k, value)], failure=[]
        )
        if written:
            return "resealed"
    raise RotationFailed(f"{key} changed on every one of {ATTEMPTS_PER_KEY} attempts; run it again")
