"""``txmq user``, ``txmq acl``, ``txmq whoami``: users and their permissions on a cluster
with auth on (docs/security.md). Every command calls as the global --access-key (a super
user for user and ACL changes)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from txmq import Admin, Policy, TxmqError
from txmq.access import ACTIONS, User
from txmq.v1 import errors_pb2
from txmq_cli import key_cmds
from txmq_cli.admin_cmds import _admin_command
from txmq_cli.credentials import client_options
from txmq_cli.options import option


def _admin(endpoint: str) -> Admin:
    return Admin(endpoint, **client_options())


_PRODUCE_HELP = "Byte-rate quota on sends, per store (0: none; super users have none)."
_FETCH_HELP = "Byte-rate quota on pulls, per pull service (0: none; super users have none)."


@click.group()
def user() -> None:
    """Users: an access key (the username) and a secret key; super users pass every check."""


@user.command("create")
@click.argument("username")
@option(
    "--secret-key",
    prompt=True,
    hide_input=True,
    confirmation_prompt=True,
    envvar="TXMQ_NEW_SECRET_KEY",
    help="The user's secret key, 8..128 characters (asked for when not given).",
)
@option("--super", "super_user", is_flag=True, help="A super user: passes every permission check.")
@option("--produce-bytes-per-second", "produce_bps", type=click.IntRange(min=0), default=0, help=_PRODUCE_HELP)
@option("--fetch-bytes-per-second", "fetch_bps", type=click.IntRange(min=0), default=0, help=_FETCH_HELP)
@_admin_command
def user_create(
    username: str, secret_key: str, super_user: bool, produce_bps: int, fetch_bps: int, endpoint: str, output: str
) -> None:
    """Create USERNAME (no permissions until `txmq acl allow`)."""
    with _admin(endpoint) as admin:
        created = admin.create_user(
            username,
            secret_key,
            super_user=super_user,
            produce_bytes_per_second=produce_bps,
            fetch_bytes_per_second=fetch_bps,
        )
    _emit_users([created], output)


@user.command("update")
@click.argument("username")
@option("--secret-key", envvar="TXMQ_NEW_SECRET_KEY", help="A new secret key.")
@option("--super/--no-super", "super_user", default=None, help="Make or unmake a super user.")
@option("--disable/--enable", "disabled", default=None, help="A disabled user is refused at once.")
@option("--produce-bytes-per-second", "produce_bps", type=click.IntRange(min=0), default=None, help=_PRODUCE_HELP)
@option("--fetch-bytes-per-second", "fetch_bps", type=click.IntRange(min=0), default=None, help=_FETCH_HELP)
@_admin_command
def user_update(
    username: str,
    secret_key: str | None,
    super_user: bool | None,
    disabled: bool | None,
    produce_bps: int | None,
    fetch_bps: int | None,
    endpoint: str,
    output: str,
) -> None:
    """Change USERNAME's secret key, super-user flag, state or byte-rate quotas."""
    with _admin(endpoint) as admin:
        updated = admin.update_user(
            username,
            secret_key=secret_key,
            super_user=super_user,
            disabled=disabled,
            produce_bytes_per_second=produce_bps,
            fetch_bytes_per_second=fetch_bps,
        )
    _emit_users([updated], output)


@user.command("delete")
@click.argument("username")
@_admin_command
def user_delete(username: str, endpoint: str, output: str) -> None:
    """Delete USERNAME and its ACL."""
    with _admin(endpoint) as admin:
        admin.delete_user(username)
    click.echo(f"deleted user {username}")


@user.command("list")
@_admin_command
def user_list(endpoint: str, output: str) -> None:
    """Every user (never a secret)."""
    with _admin(endpoint) as admin:
        users = admin.list_users()
    _emit_users(users, output)


def _emit_users(users: Sequence[User], output: str) -> None:
    rows = [
        {
            "username": u.username,
            "super_user": u.super_user,
            "disabled": u.disabled,
            "produce_bytes_per_second": u.produce_bytes_per_second,
            "fetch_bytes_per_second": u.fetch_bytes_per_second,
        }
        for u in users
    ]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    for u in users:
        flags = [f for f, on in (("super", u.super_user), ("disabled", u.disabled)) if on]
        flags += [
            f"{direction} quota {rate} B/s"
            for direction, rate in (("produce", u.produce_bytes_per_second), ("fetch", u.fetch_bytes_per_second))
            if rate
        ]
        click.echo(f"{u.username}{'  (' + ', '.join(flags) + ')' if flags else ''}")


@click.group()
def acl() -> None:
    """Permissions (RocketMQ ACL 2.0): Allow/Deny actions on Cluster, Topic:<name>, Group:<name>
    (a trailing * for a prefix, Topic:* / Group:* / * for any); deny wins; nothing allowed is denied."""


_ACTIONS_HELP = f"ACTIONS: some of {', '.join(ACTIONS)}."


def _change(username: str, endpoint: str, output: str, change) -> None:
    with _admin(endpoint) as admin:
        policies = change(admin.get_acl(username))
        stored = admin.put_acl(username, policies)
    _emit_policies(username, stored, output)


@acl.command("allow")
@click.argument("username")
@click.argument("resource")
@click.argument("actions", nargs=-1, required=True)
@option("--source", "sources", multiple=True, help="Only from this address or network (CIDR); repeatable.")
@_admin_command
def acl_allow(
    username: str, resource: str, actions: tuple[str, ...], sources: tuple[str, ...], endpoint: str, output: str
) -> None:
    """Allow USERNAME ACTIONS on RESOURCE (replaces an earlier rule on the same RESOURCE)."""
    rule = Policy(resource, actions, True, sources)
    _change(username, endpoint, output, lambda ps: [p for p in ps if p.resource != resource] + [rule])


acl_allow.help = f"{acl_allow.help} {_ACTIONS_HELP}"


@acl.command("deny")
@click.argument("username")
@click.argument("resource")
@click.argument("actions", nargs=-1, required=True)
@option("--source", "sources", multiple=True, help="Only from this address or network (CIDR); repeatable.")
@_admin_command
def acl_deny(
    username: str, resource: str, actions: tuple[str, ...], sources: tuple[str, ...], endpoint: str, output: str
) -> None:
    """Deny USERNAME ACTIONS on RESOURCE, whatever else allows them."""
    rule = Policy(resource, actions, False, sources)
    _change(username, endpoint, output, lambda ps: [p for p in ps if p.resource != resource] + [rule])


@acl.command("remove")
@click.argument("username")
@click.argument("resource")
@_admin_command
def acl_remove(username: str, resource: str, endpoint: str, output: str) -> None:
    """Remove USERNAME's rule on RESOURCE."""
    _change(username, endpoint, output, lambda ps: [p for p in ps if p.resource != resource])


@acl.command("show")
@click.argument("username")
@_admin_command
def acl_show(username: str, endpoint: str, output: str) -> None:
    """USERNAME's rules."""
    with _admin(endpoint) as admin:
        policies = admin.get_acl(username)
    _emit_policies(username, policies, output)


@acl.command("list")
@_admin_command
def acl_list(endpoint: str, output: str) -> None:
    """Every user's rules."""
    with _admin(endpoint) as admin:
        acls = admin.list_acls()
    if output == "json":
        click.echo(json.dumps({u: [_policy_dict(p) for p in ps] for u, ps in acls.items()}, indent=2))
        return
    for username, policies in acls.items():
        _emit_policies(username, policies, output)


def _policy_dict(p: Policy) -> dict[str, object]:
    return {"resource": p.resource, "actions": list(p.actions), "allow": p.allow, "source_ips": list(p.source_ips)}


def _emit_policies(username: str, policies: Sequence[Policy], output: str) -> None:
    if output == "json":
        click.echo(json.dumps({"username": username, "policies": [_policy_dict(p) for p in policies]}, indent=2))
        return
    click.echo(f"{username}:" + ("" if policies else " (no rules: every call denied)"))
    for p in policies:
        click.echo(f"  {p}")


@click.command()
@_admin_command
def whoami(endpoint: str, output: str) -> None:
    """Who the cluster takes these credentials for."""
    with _admin(endpoint) as admin:
        try:
            me = admin.whoami()
        except TxmqError as err:
            # Services serve the Auth service only with auth_enabled: without it every
            # caller is anonymous, which is the answer, not an error.
            if err.code != errors_pb2.CODE_NOT_IMPLEMENTED:
                raise
            me = {"username": "", "super_user": False, "authenticated_by": "", "auth_enabled": False}
    if output == "json":
        click.echo(json.dumps(me, indent=2))
    elif not me["username"]:
        click.echo("anonymous" if me["auth_enabled"] else "anonymous (auth is off)")
    else:
        click.echo(f"{me['username']}{' (super user)' if me['super_user'] else ''}, by {me['authenticated_by']}")


def register(group: click.Group) -> None:
    group.add_command(user)
    group.add_command(acl)
    group.add_command(whoami)
    group.add_command(key_cmds.auth)
