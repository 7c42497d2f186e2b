"""The Auth service (users and ACLs in etcd) and what a service does at start-up with
auth on: mirror ``<prefix>/auth/`` and make sure its own identity — the cluster's service
user, ``auth_access_key`` — exists as a super user (created on first start).

Who writes the book is ``BookWrites`` (docs/etcd.md "Who writes the user book"): on a
locked-down etcd only the book's own etcd user may, so a service without it forwards
Auth writes to one that has it and only checks the identity at start-up."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aetcd
import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from txmq.errors import TxmqError, error
from txmq.v1 import auth_pb2, auth_pb2_grpc, errors_pb2
from txmq_runtime import calls
from txmq_runtime.auth import (
    Authenticator,
    AuthKeys,
    Authorize,
    Guard,
    Sealer,
    UserBook,
    current_principal,
    validate_acl,
    validate_user,
)
from txmq_runtime.etcd import RETRYABLE, EtcdMirror, close_client, etcd_client
from txmq_runtime.etcd_access import EtcdAccess, EtcdAuthFailed
from txmq_runtime.grpc_errors import rpc
from txmq_runtime.registry import ClusterView, encode
from txmq_runtime.settings import ServiceSettings

log = logging.getLogger("txmq.auth")

#: The Endpoint label (and its value) of a service that writes the user book through
#: the book's own etcd user: where the others forward Auth writes.
WRITES_BOOK_LABEL = "auth"
WRITES_BOOK = "writes"
#: How long a forwarded Auth write may take.
FORWARD_TIMEOUT_S = 10.0
#: How often a service that may not write the book looks for the services' identity at start-up.
_IDENTITY_POLL_S = 0.1
#: How long an Auth write waits for this service's copy of the book to show it.
SEEN_WITHIN_S = 2.0
_SEEN_POLL_S = 0.005


class AuthStartupError(Exception):
    """The service's identity does not fit the cluster's (one line says why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class BookWrites:
    """How this process writes the user book. ``access``: through a client of its own as
    the book's etcd user (``auth_etcd_username``). ``forward``: not at all, the service
    has an etcd user of its own that may only read the book; Auth writes go to a service
    labelled ``WRITES_BOOK``. Neither: through the service's etcd client (etcd's auth is
    off, nothing to narrow)."""

    endpoints: str = ""
    access: EtcdAccess | None = None
    forward: bool = False

    @classmethod
    def of(cls, settings: ServiceSettings) -> BookWrites:
        """From the settings; TlsError when the etcd TLS files cannot be read."""
        if settings.auth_etcd_username:
            access = dataclasses.replace(
                EtcdAccess.load(settings),
                username=settings.auth_etcd_username,
                password=settings.auth_etcd_password.get_secret_value(),
            )
            return cls(settings.etcd_endpoints, access)
        return cls(forward=bool(settings.etcd_username))

    def labels(self) -> dict[str, str]:
        """The Endpoint labels that say so (``WRITES_BOOK`` with the book's etcd user)."""
        return {WRITES_BOOK_LABEL: WRITES_BOOK} if self.access is not None else {}


class Security:
    """Auth for one service process: the book, the interceptor, the service's identity."""

    def __init__(
        self,
        *,
        prefix: str,
        access_key: str,
        secret_key: str,
        clock_skew_ms: int,
        accepted_secret_keys: tuple[str, ...] = (),
        book_writes: BookWrites = BookWrites(),
    ) -> None:
        self.keys = AuthKeys(prefix)
        self.sealer = Sealer(secret_key, accepted_secret_keys)
        self.book = UserBook(self.keys, self.sealer)
        self.guard = Guard(self.book)
        #: Every key this process takes as the services' identity: its own first (what it
        #: signs and seals with), then the other one of a key roll.
        self.secret_keys = (secret_key, *accepted_secret_keys)
        self.authenticator = Authenticator(
            self.book, clock_skew_ms=clock_skew_ms, own_identity=(access_key, self.secret_keys)
        )
        self.interceptor = Authorize(self.authenticator, self.guard)
        self.access_key = access_key
        self.secret_key = secret_key
        self.book_writes = book_writes
        #: The etcd client Auth writes go through (None: they are forwarded); set by ``start``.
        self.writer: aetcd.Client | None = None
        self._own_writer = False
        self._mirror: EtcdMirror | None = None

    async def start(self, etcd: aetcd.Client, *, timeout_s: float) -> None:
        """Create the service user if the cluster has none yet and this process may
        write the book, then mirror the book; a process that may not waits for the
        service user instead."""
        writes = self.book_writes
        if writes.access is not None:
            self.writer, self._own_writer = etcd_client(writes.endpoints, writes.access), True
        elif not writes.forward:
            self.writer = etcd
        if self.writer is not None:
            await self._ensure_service_user(self.writer)
        self._mirror = EtcdMirror(etcd, prefix=self.keys.root, sink=self.book)
        await self._mirror.start(timeout_s=timeout_s)
        if self.writer is None:
            await self._await_service_user(timeout_s)
        known = self.book.users.get(self.access_key)
        if known is None or known.secret not in self.secret_keys or not known.user.super_user:
            raise AuthStartupError(
                f"user {self.access_key} in etcd is not this service's identity (auth_secret_key differs, "
                "or it is not a super user)"
            )

    async def _ensure_service_user(self, writer: aetcd.Client) -> None:
        try:
            await ensure_service_user(writer, self.keys, self.sealer, self.access_key, self.secret_key)
        except EtcdAuthFailed as exc:
            raise AuthStartupError(f"{exc} (--auth-etcd-username; --auth-etcd-password)") from None

    async def _await_service_user(self, timeout_s: float) -> None:
        """Until the book holds the services' identity, made by a service that may write it."""
        deadline = time.monotonic() + timeout_s
        while self.access_key not in self.book.users:
            if time.monotonic() > deadline:
                raise AuthStartupError(
                    f"user {self.access_key} (the services' identity) is not in etcd after {timeout_s:g} s: "
                    "a service with the user book's etcd user (auth_etcd_username) creates it, and this "
                    "service's etcd user may not (docs/etcd.md, who writes the user book)"
                )
            await asyncio.sleep(_IDENTITY_POLL_S)

    async def close(self) -> None:
        if self._mirror is not None:
            await self._mirror.close()
        if self._own_writer and self.writer is not None:
            await close_client(self.writer)


def stored_user(sealer: Sealer, user: auth_pb2.User, secret: str) -> bytes:
    """The etcd value of ``user``: the user without its secret, and the secret sealed."""
    return encode(auth_pb2.StoredUser(user=_public(user), sealed_secret=sealer.seal(user.username, secret)))


async def ensure_service_user(etcd: aetcd.Client, keys: AuthKeys, sealer: Sealer, access_key: str, secret: str) -> None:
    user = auth_pb2.User(username=access_key, super_user=True, created_at_ms=time.time_ns() // 1_000_000)
    key = keys.user(access_key).encode()
    created, _ = await etcd.transaction(
        compare=[etcd.transactions.version(key) == 0],
        success=[etcd.transactions.put(key, stored_user(sealer, user, secret))],
        failure=[],
    )
    if created:
        log.info("created the service user %s (super user) in etcd", access_key)


def _book_write(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """An Auth write: made here, or forwarded to a service that writes the book
    (``BookForwarder``) where this one may not; answered once this service's own copy of
    the book shows it, so a read here right after sees it (``txmq acl allow`` reads the
    ACL, then writes it; ``txmq user delete`` then ``user list``)."""
    name = method.__name__

    @functools.wraps(method)
    async def write(self: AuthServicer, request: Message, context: grpc.aio.ServicerContext) -> Any:
        if self._security.writer is None:
            reply = await self._forwarder.forward(name, request)
        else:
            reply = await method(self, request, context)
        await self._seen(name, request, reply)
        return reply

    return write


class AuthServicer(auth_pb2_grpc.AuthServicer):
    """Writes go to etcd (compare-and-swap where they create) through the security's
    writer, or, without one, to a service that writes the book (``BookForwarder``);
    reads answer from the book every service mirrors."""

    def __init__(self, security: Security, cluster: ClusterView, *, enabled: bool) -> None:
        self._security = security
        self._forwarder = BookForwarder(cluster)
        self._enabled = enabled

    @property
    def _book(self) -> UserBook:
        return self._security.book

    @property
    def _etcd(self) -> aetcd.Client:
        assert self._security.writer is not None  # _book_write forwards the writes without one
        return self._security.writer

    async def _seen(self, method: str, request: Message, reply: Message) -> None:
        """Until this service's own copy of the book shows the write (at most
        ``SEEN_WITHIN_S``)."""
        deadline = time.monotonic() + SEEN_WITHIN_S
        while time.monotonic() < deadline:
            if self._shows(method, request, reply):
                return
            await asyncio.sleep(_SEEN_POLL_S)

    def _shows(self, method: str, request: Any, reply: Any) -> bool:
        """Whether the book shows the write ``method`` answered with ``reply``."""
        book = self._book
        if method in ("CreateUser", "UpdateUser"):
            known = book.users.get(reply.user.username)
            return known is not None and known.user == reply.user
        if method == "PutAcl":
            return book.raw_acls.get(reply.acl.username) == reply.acl
        if method == "DeleteUser":
            return request.username not in book.users
        return request.username not in book.raw_acls  # DeleteAcl

    async def _txn(self, compare: list, success: list) -> bool:
        try:
            ok, _ = await self._etcd.transaction(compare=compare, success=success, failure=[])
        except RETRYABLE as exc:
            raise error(errors_pb2.CODE_UNAVAILABLE, f"etcd did not answer: {exc}") from None
        return bool(ok)

    async def _read_user(self, username: str) -> tuple[auth_pb2.StoredUser, int] | None:
        try:
            got = await self._etcd.get(self._security.keys.user(username).encode())
        except RETRYABLE as exc:
            raise error(errors_pb2.CODE_UNAVAILABLE, f"etcd did not answer: {exc}") from None
        if got is None:
            return None
        return json_format.Parse(got.value, auth_pb2.StoredUser(), ignore_unknown_fields=True), got.mod_revision

    def _not_found(self, username: str) -> TxmqError:
        return error(errors_pb2.CODE_USER_NOT_FOUND, f"no user {username[:64]!r}", username=username[:64])

    @rpc
    @_book_write
    async def CreateUser(self, request: auth_pb2.CreateUserRequest, context: grpc.aio.ServicerContext):
        user = request.user
        validate_user(user, secret_required=True)
        user.created_at_ms = time.time_ns() // 1_000_000
        key = self._security.keys.user(user.username).encode()
        created = await self._txn(
            [self._etcd.transactions.version(key) == 0],
            [self._etcd.transactions.put(key, stored_user(self._security.sealer, user, user.secret_key))],
        )
        if not created:
            raise error(errors_pb2.CODE_USER_ALREADY_EXISTS, f"user {user.username} exists", username=user.username)
        return auth_pb2.UserResponse(user=_public(user))

    @rpc
    @_book_write
    async def UpdateUser(self, request: auth_pb2.UpdateUserRequest, context: grpc.aio.ServicerContext):
        user = request.user
        validate_user(user, secret_required=False)
        if user.username == self._security.access_key and (user.disabled or not user.super_user or user.secret_key):
            raise error(
                errors_pb2.CODE_ILLEGAL_ARGUMENT,
                f"{user.username} is the services' own identity: it stays an enabled super user and its secret "
                "is auth_secret_key (change it in every service's settings)",
            )
        found = await self._read_user(user.username)
        if found is None:
            raise self._not_found(user.username)
        stored, revision = found
        secret = user.secret_key or self._security.sealer.open(user.username, stored.sealed_secret)
        if secret is None:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, "the stored secret cannot be unsealed here; give a new one")
        user.created_at_ms = stored.user.created_at_ms
        key = self._security.keys.user(user.username).encode()
        if not await self._txn(
            [self._etcd.transactions.mod(key) == revision],
            [self._etcd.transactions.put(key, stored_user(self._security.sealer, user, secret))],
        ):
            raise error(errors_pb2.CODE_CONFLICT, f"user {user.username} changed meanwhile; try again")
        return auth_pb2.UserResponse(user=_public(user))

    @rpc
    @_book_write
    async def DeleteUser(self, request: auth_pb2.DeleteUserRequest, context: grpc.aio.ServicerContext):
        name = request.username
        if name == self._security.access_key:
            raise error(errors_pb2.CODE_ILLEGAL_ARGUMENT, f"{name} is the services' own identity; it cannot be deleted")
        key = self._security.keys.user(name).encode()
        deleted = await self._txn(
            [self._etcd.transactions.version(key) > 0],
            [
                self._etcd.transactions.delete(key),
                self._etcd.transactions.delete(self._security.keys.acl(name).encode()),
            ],
        )
        if not deleted:
            raise self._not_found(name)
        return auth_pb2.DeleteUserResponse()

    @rpc
    async def GetUser(self, request: auth_pb2.GetUserRequest, context: grpc.aio.ServicerContext):
        known = self._book.users.get(request.username)
        if known is None:
            raise self._not_found(request.username)
        return auth_pb2.UserResponse(user=_public(known.user))

    @rpc
    async def ListUsers(self, request: auth_pb2.ListUsersRequest, context: grpc.aio.ServicerContext):
        users = [_public(k.user) for _, k in sorted(self._book.users.items())]
        return auth_pb2.ListUsersResponse(users=users)

    @rpc
    @_book_write
    async def PutAcl(self, request: auth_pb2.PutAclRequest, context: grpc.aio.ServicerContext):
        acl = request.acl
        validate_acl(acl)
        user_key = self._security.keys.user(acl.username).encode()
        if not await self._txn(
            [self._etcd.transactions.version(user_key) > 0],
            [self._etcd.transactions.put(self._security.keys.acl(acl.username).encode(), encode(acl))],
        ):
            raise self._not_found(acl.username)
        return auth_pb2.AclResponse(acl=acl)

    @rpc
    async def GetAcl(self, request: auth_pb2.GetAclRequest, context: grpc.aio.ServicerContext):
        acl = self._book.raw_acls.get(request.username)
        if acl is None:
            if request.username not in self._book.users:
                raise self._not_found(request.username)
            acl = auth_pb2.Acl(username=request.username)
        return auth_pb2.AclResponse(acl=acl)

    @rpc
    @_book_write
    async def DeleteAcl(self, request: auth_pb2.DeleteAclRequest, context: grpc.aio.ServicerContext):
        try:
            await self._etcd.delete(self._security.keys.acl(request.username).encode())
        except RETRYABLE as exc:
            raise error(errors_pb2.CODE_UNAVAILABLE, f"etcd did not answer: {exc}") from None
        return auth_pb2.DeleteAclResponse()

    @rpc
    async def ListAcls(self, request: auth_pb2.ListAclsRequest, context: grpc.aio.ServicerContext):
        return auth_pb2.ListAclsResponse(acls=[a for _, a in sorted(self._book.raw_acls.items())])

    @rpc
    async def WhoAmI(self, request: auth_pb2.WhoAmIRequest, context: grpc.aio.ServicerContext):
        principal = current_principal()
        if principal is None:
            return auth_pb2.WhoAmIResponse(auth_enabled=self._enabled)
        return auth_pb2.WhoAmIResponse(
            username=principal.username,
            super_user=principal.super_user,
            authenticated_by=principal.via,
            auth_enabled=self._enabled,
        )


class BookForwarder:
    """Sends an Auth write on to a service labelled ``WRITES_BOOK`` (as the services'
    identity: txmq_runtime.calls signs internal calls), trying the next one only when
    one does not answer. Its answer, error included, is the caller's."""

    def __init__(self, cluster: ClusterView) -> None:
        self._cluster = cluster

    def writers(self) -> list[str]:
        return [e.address for e in self._cluster.endpoints() if e.labels.get(WRITES_BOOK_LABEL) == WRITES_BOOK]

    async def forward(self, method: str, request: Message) -> Any:
        writers = self.writers()
        if not writers:
            raise error(
                errors_pb2.CODE_UNAVAILABLE,
                "no service that writes the user book is registered (one with auth_etcd_username: the txcheck "
                "services in txmq up and the chart); this service's etcd user may only read it",
            )
        last: TxmqError | None = None
        for address in writers:
            try:
                return await self._ask(address, method, request)
            except TxmqError as err:
                if not err.unreachable:
                    raise
                last = err
        assert last is not None
        raise last

    @staticmethod
    async def _ask(address: str, method: str, request: Message) -> Any:
        async with calls.internal_channel(address) as channel:
            rpc_method: Callable[..., Awaitable[Any]] = getattr(auth_pb2_grpc.AuthStub(channel), method)
            return await calls.call(lambda: rpc_method(request, timeout=FORWARD_TIMEOUT_S))


def _public(user: auth_pb2.User) -> auth_pb2.User:
    out = auth_pb2.User()
    out.CopyFrom(user)
    out.secret_key = ""
    return out
