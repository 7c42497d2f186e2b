"""``Admin``'s users and permissions (clusters with auth_enabled; docs/security.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from txmq._admin_base import AdminBase
from txmq.access import Policy, User, acl_to_proto
from txmq.v1 import auth_pb2, auth_pb2_grpc

R = TypeVar("R")


class AuthAdmin(AdminBase):
    def create_user(
        self,
        username: str,
        secret_key: str,
        *,
        super_user: bool = False,
        produce_bytes_per_second: int = 0,
        fetch_bytes_per_second: int = 0,
    ) -> User:
        """``*_bytes_per_second``: the user's byte-rate quotas on each store (sends) and
        pull service (pulls); 0: none. Super users have none."""
        request = auth_pb2.CreateUserRequest(
            user=auth_pb2.User(
                username=username,
                secret_key=secret_key,
                super_user=super_user,
                produce_bytes_per_second=produce_bytes_per_second,
                fetch_bytes_per_second=fetch_bytes_per_second,
            )
        )
        return User.from_proto(self._auth(lambda s: s.CreateUser, request).user)

    def update_user(
        self,
        username: str,
        *,
        secret_key: str | None = None,
        super_user: bool | None = None,
        disabled: bool | None = None,
        produce_bytes_per_second: int | None = None,
        fetch_bytes_per_second: int | None = None,
    ) -> User:
        """Change what is given; the rest stays (a new secret, like a new quota, takes
        effect at once; a quota of 0 removes it)."""
        current = self.get_user(username)
        user = auth_pb2.User(
            username=username,
            secret_key=secret_key or "",
            super_user=current.super_user if super_user is None else super_user,
            disabled=current.disabled if disabled is None else disabled,
            produce_bytes_per_second=_or(produce_bytes_per_second, current.produce_bytes_per_second),
            fetch_bytes_per_second=_or(fetch_bytes_per_second, current.fetch_bytes_per_second),
        )
        return User.from_proto(self._auth(lambda s: s.UpdateUser, auth_pb2.UpdateUserRequest(user=user)).user)

    def delete_user(self, username: str) -> None:
        """Deletes the user and its ACL."""
        self._auth(lambda s: s.DeleteUser, auth_pb2.DeleteUserRequest(username=username))

    def get_user(self, username: str) -> User:
        return User.from_proto(self._auth(lambda s: s.GetUser, auth_pb2.GetUserRequest(username=username)).user)

    def list_users(self) -> list[User]:
        return [User.from_proto(u) for u in self._auth(lambda s: s.ListUsers, auth_pb2.ListUsersRequest()).users]

    def put_acl(self, username: str, policies: Sequence[Policy]) -> list[Policy]:
        """Replace the user's whole ACL."""
        acl = acl_to_proto(username, policies)
        response = self._auth(lambda s: s.PutAcl, auth_pb2.PutAclRequest(acl=acl))
        return [Policy.from_proto(p) for p in response.acl.policies]

    def get_acl(self, username: str) -> list[Policy]:
        response = self._auth(lambda s: s.GetAcl, auth_pb2.GetAclRequest(username=username))
        return [Policy.from_proto(p) for p in response.acl.policies]

    def delete_acl(self, username: str) -> None:
        self._auth(lambda s: s.DeleteAcl, auth_pb2.DeleteAclRequest(username=username))

    def list_acls(self) -> dict[str, list[Policy]]:
        response = self._auth(lambda s: s.ListAcls, auth_pb2.ListAclsRequest())
        return {a.username: [Policy.from_proto(p) for p in a.policies] for a in response.acls}

    def whoami(self) -> dict[str, object]:
        """Who the cluster takes this client for: username, super_user, authenticated_by."""
        r = self._auth(lambda s: s.WhoAmI, auth_pb2.WhoAmIRequest())
        return {
            "username": r.username,
            "super_user": r.super_user,
            "authenticated_by": r.authenticated_by,
            "auth_enabled": r.auth_enabled,
        }

    def _auth(self, method: Callable[[auth_pb2_grpc.AuthStub], Callable[..., R]], request: object) -> R:
        """Any service answers the Auth service (with auth on): asked as routes are."""
        return self._core.routes.ask_any(auth_pb2_grpc.AuthStub, method, request, timeout=self._timeout)


def _or(given: int | None, current: int) -> int:
    return current if given is None else given
