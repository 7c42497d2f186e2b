"""etcd's own auth for a local cluster (``txmq up --tls``): a root user for set-up, one
etcd user and role per kind of txmq service that may read and write only what that kind
needs, and ``txmq-auth``, the only one that writes the user book (docs/etcd.md "Who may
read and write what").

Every service reads the keys route look-ups need (``services/`` through ``stores/``) and
the user book (``auth/``: every service mirrors it), and writes its own kind's endpoint
keys; beyond that:

- store: ``stores/`` (its topics) and ``store-groups/`` (a replicated group's state and
  leader), and ``services/store_replica/``;
- txcheck: ``txcheck/`` (producer channels, check-loop leaders);
- gateway: ``gateway/`` (consumer-group owners) and ``secrets/`` (the transaction-handle
  key);
- pull: nothing more.

``txmq-auth`` writes ``auth/`` (users, sealed secrets, ACLs) and ``secrets/`` (what
``txmq auth rotate-key`` re-seals); the services that serve Auth writes get its password
(``BOOK_WRITERS``), the others forward those writes to them.

The passwords are made once, kept 0600 in ``<data-dir>/etcd-auth/<user>``, and reach the
services through their env vars (``TXMQ_<SERVICE>_ETCD_PASSWORD``). ``set_up`` is
idempotent: on a data dir whose etcd already has auth on it signs in as root and makes
sure of every user, role and grant again (a new ``--etcd-prefix`` gets its grants).
"""

from __future__ import annotations

import os
import secrets as random_secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from aetcd.rpc import auth_pb2, rpc_pb2, rpc_pb2_grpc

if TYPE_CHECKING:
    from txmq_cli.certs import TlsFiles

ROOT = "root"
_READ = auth_pb2.Permission.READ
_READWRITE = auth_pb2.Permission.READWRITE
_CALL_TIMEOUT_S = 10.0


#: The etcd user (and role) that writes the user book.
AUTH = "txmq-auth"
#: The kinds of service given AUTH's password (``auth_etcd_username``): they serve Auth
#: writes, the others forward them (txmq_runtime.auth_service.BookWrites).
BOOK_WRITERS = ("txcheck",)


def service_user(service: str) -> str:
    """The etcd user (and role) of a kind of service: ``txmq-store``."""
    return f"txmq-{service}"


@dataclass(frozen=True, slots=True)
class Grant:
    """Read or read-write on the keys [key, range_end)."""

    perm: int
    key: str
    range_end: str

    @classmethod
    def prefix(cls, perm: int, prefix: str) -> Grant:
        return cls(perm, prefix, _prefix_end(prefix))


def _prefix_end(prefix: str) -> str:
    """The end of the range of keys starting with ``prefix`` (its last byte plus one)."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()


#: Beyond its own endpoint keys, what each kind writes (docs/etcd.md).
_WRITES = {
    "store": ("services/store_replica/", "stores/", "store-groups/"),
    "txcheck": ("txcheck/",),
    "pull": (),
    "gateway": ("gateway/", "secrets/"),
}


def grants(prefix: str, service: str) -> list[Grant]:
    """What the role of ``service`` may do under ``prefix`` (``/txmq``). The book is
    granted READ on the very range older set-ups granted READWRITE: etcd replaces a
    grant on the same keys, so set-up takes the write away from an older cluster."""
    return [
        Grant(_READ, f"{prefix}/services/", f"{prefix}/stores0"),  # route look-ups (ClusterView.view_range)
        Grant.prefix(_READ, f"{prefix}/auth/"),
        Grant.prefix(_READWRITE, f"{prefix}/services/{service}/"),
        *(Grant.prefix(_READWRITE, f"{prefix}/{part}") for part in _WRITES[service]),
    ]


def book_grants(prefix: str) -> list[Grant]:
    """What ``txmq-auth`` may do: write the user book and re-seal the cluster secrets."""
    return [Grant.prefix(_READWRITE, f"{prefix}/auth/"), Grant.prefix(_READWRITE, f"{prefix}/secrets/")]


def passwords(directory: Path, users: list[str]) -> dict[str, str]:
    """Each user's password from ``directory/<user>``, made (random, 0600) when missing."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    found = {}
    for user in users:
        path = directory / user
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(random_secrets.token_urlsafe(24))
        found[user] = path.read_text().strip()
    return found


class EtcdAuthSetupFailed(RuntimeError):
    """etcd did not take the users, roles or auth (one line says why)."""


def set_up(endpoint: str, files: TlsFiles, *, prefix: str, services: list[str], secrets: Mapping[str, str]) -> None:
    """Root, a user and role per service with its grants, ``txmq-auth`` with its, then
    auth on (see the module docstring). ``secrets``: the passwords of root, of every
    ``service_user`` and of ``AUTH`` (without it no one may write the user book)."""
    with grpc.secure_channel(endpoint, channel_credentials(files)) as channel:
        auth = rpc_pb2_grpc.AuthStub(channel)
        try:
            token = _root_token(auth, secrets[ROOT])
            enabled = token is not None
            call = _Caller(auth, () if token is None else (("token", token),))
            call.user(ROOT, secrets[ROOT], role=ROOT)
            for service in services:
                name = service_user(service)
                call.role(name, grants(prefix, service))
                call.user(name, secrets[name], role=name)
            if AUTH in secrets:
                call.role(AUTH, book_grants(prefix))
                call.user(AUTH, secrets[AUTH], role=AUTH)
            if not enabled:
                auth.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=_CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise EtcdAuthSetupFailed(f"setting up etcd's users at {endpoint} failed: {exc.details()}") from None


def _root_token(auth: Any, password: str) -> str | None:
    """Root's token; None while etcd's auth is off (its status cannot be asked without
    a user once it is on: a certificate's common name is no user of ours)."""
    try:
        reply = auth.Authenticate(rpc_pb2.AuthenticateRequest(name=ROOT, password=password), timeout=_CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:  # "authentication is not enabled"
            return None
        raise
    return str(reply.token)


class _Caller:
    """The set-up calls, each one idempotent (what exists already is kept or updated)."""

    def __init__(self, auth: Any, metadata: tuple[tuple[str, str], ...]) -> None:
        self._auth = auth
        self._metadata = metadata

    def _call(self, method: str, request: Any, *, exists_ok: bool = False) -> bool:
        """Whether the call made something new (False: it existed, with ``exists_ok``)."""
        try:
            getattr(self._auth, method)(request, timeout=_CALL_TIMEOUT_S, metadata=self._metadata)
        except grpc.RpcError as exc:
            # FAILED_PRECONDITION "user name already exists" / "role name already exists"
            if not (exists_ok and "already exists" in (exc.details() or "")):
                raise
            return False
        return True

    def user(self, name: str, password: str, *, role: str) -> None:
        created = self._call("UserAdd", rpc_pb2.AuthUserAddRequest(name=name, password=password), exists_ok=True)
        # A new password only when etcd has another: a change ends the user's tokens (ours, for root).
        if not created and not self._password_is(name, password):
            self._call("UserChangePassword", rpc_pb2.AuthUserChangePasswordRequest(name=name, password=password))
        self._call("UserGrantRole", rpc_pb2.AuthUserGrantRoleRequest(user=name, role=role))

    def _password_is(self, name: str, password: str) -> bool:
        """Whether etcd takes ``password`` for ``name`` (False too while auth is off)."""
        try:
            self._auth.Authenticate(rpc_pb2.AuthenticateRequest(name=name, password=password), timeout=_CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                return False
            raise
        return True

    def role(self, name: str, granted: list[Grant]) -> None:
        self._call("RoleAdd", rpc_pb2.AuthRoleAddRequest(name=name), exists_ok=True)
        for grant in granted:
            perm = auth_pb2.Permission(permType=grant.perm, key=grant.key.encode(), range_end=grant.range_end.encode())
            self._call("RoleGrantPermission", rpc_pb2.AuthRoleGrantPermissionRequest(name=name, perm=perm))


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Mutual-TLS credentials from ``files`` (the CA, the certificate as client certificate)."""
    return grpc.ssl_channel_credentials(
        root_certificates=files.ca.read_bytes(),
        private_key=files.key.read_bytes(),
        certificate_chain=files.cert.read_bytes(),
    )
