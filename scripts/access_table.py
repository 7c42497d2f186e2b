"""Writes protos/ACCESS.md: what every RPC of every txmq service needs from its caller,
read from the (txmq.v1.access) options in protos/ (run by scripts/gen_protos.sh;
tests/runtime/test_access_table.py fails when the file is stale)."""

from __future__ import annotations

import sys
from pathlib import Path

from txmq.v1 import auth_pb2
from txmq_runtime.auth import access_of, txmq_methods

HEADER = """# txmq access table

Generated from the `(txmq.v1.access)` option of every RPC in `protos/` by
`scripts/gen_protos.sh` — do not edit. What a caller needs once a cluster runs with
`auth_enabled` (docs/security.md): **anyone** (no credentials), **user** (any authenticated
user, plus every permission listed: the resource named by that request field — a message on
the path that is not set, or an optional field left empty, is not checked; an empty name is
matched only by `Topic:*` / `Group:*` / `*` rules), or **super user** (the services' own
identity and operators). Deny by default; a Deny rule wins; super users pass every check;
system topics (`RMQ_SYS_*`, `TRANS_CHECK_MAX_TIME_TOPIC`) are for super users only. Failures:
`UNAUTHENTICATED` (`CODE_UNAUTHENTICATED`, `CODE_INVALID_CREDENTIALS`, `CODE_REQUEST_EXPIRED`)
and `PERMISSION_DENIED` (`CODE_ACCESS_DENIED`, metadata `user`, `resource`, `action`).
The gateway (apache.rocketmq.v2) maps its calls to the same users and rules: docs/gateway.md.
KEDA's ExternalScaler (served by the pull service, protos/externalscaler) is KEDA's contract,
not txmq's: its access is declared in `txmq_runtime.auth.FOREIGN_ACCESS` instead; KEDA
authenticates with a client certificate (docs/kubernetes.md).

| service | RPC | who | permissions | also checked by the handler |
|---|---|---|---|---|
"""

_SCOPE = {
    auth_pb2.ACCESS_SCOPE_ANYONE: "anyone",
    auth_pb2.ACCESS_SCOPE_USER: "user",
    auth_pb2.ACCESS_SCOPE_SUPER_USER: "super user",
}


def _check(check: auth_pb2.ResourceCheck) -> str:
    rtype = auth_pb2.ResourceType.Name(check.type).removeprefix("RESOURCE_TYPE_").capitalize()
    action = auth_pb2.Action.Name(check.action).removeprefix("ACTION_").capitalize()
    if check.type == auth_pb2.RESOURCE_TYPE_CLUSTER:
        where = "Cluster" + (f" (when `{check.field}` is set)" if check.field else "")
    elif check.field:
        where = f"{rtype}:`{check.field}`" + (" (if set)" if check.when_set else "")
    else:
        where = f"{rtype}:* (all)"
    return f"{action} on {where}"


def render() -> str:
    rows = []
    for method in txmq_methods():
        access = access_of(method)
        scope = _SCOPE.get(access.scope, "—") if access else "**missing**"
        checks = "; ".join(_check(c) for c in access.checks) if access and access.checks else "—"
        handler = access.handler_checks if access and access.handler_checks else "—"
        rows.append(f"| {method.containing_service.name} | {method.name} | {scope} | {checks} | {handler} |")
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "protos" / "ACCESS.md"
    out.write_text(render())
