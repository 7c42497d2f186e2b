"""The `settings` parts of helm/txmq/values.schema.json, derived from the services'
settings classes, so Helm checks every value the way the service itself would.

    .venv/bin/python tests/helm/settings_schema.py          # check: exit 1 if stale
    .venv/bin/python tests/helm/settings_schema.py --write  # rewrite the schema file

Only `properties.<service>.properties.settings` is generated (without the secret
settings, SECRET_SETTINGS); the rest of the schema is hand-written, including the
gateway's `auth`, where its secret key comes from. tests/helm/test_settings.py fails when
the committed file differs from what this produces (a setting added, renamed, retyped or
re-bounded in a settings class).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings

from txmq_gateway.settings import GatewaySettings
from txmq_pull.settings import PullSettings
from txmq_store.settings import StoreSettings
from txmq_txcheck.settings import TxcheckSettings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "txmq"
SCHEMA_PATH = CHART / "values.schema.json"

#: service name (values key, env prefix TXMQ_<SERVICE>_) -> its settings class
SERVICES: dict[str, type[BaseSettings]] = {
    "store": StoreSettings,
    "pull": PullSettings,
    "txcheck": TxcheckSettings,
    "gateway": GatewaySettings,
}

#: TLS settings every service has: with tls.enabled, "" becomes the mounted files and
#: enforcing mutual TLS; without, the services' defaults.
TLS_COMPUTED = frozenset(
    {"tls_mode", "tls_client_auth", "tls_cert_file", "tls_key_file", "tls_ca_file", "tls_server_name"}
)

#: Auth settings every service has: with auth on (auth.enabled, security.enabled or the
#: service's auth_enabled), "" becomes auth.accessKey.
AUTH_COMPUTED = frozenset({"auth_access_key"})

#: Settings the chart fills in per pod when their value is "" (see values.yaml).
#: export_dir: with analytics.exports.source=store, the shared volume's exports/.
COMPUTED_WHEN_EMPTY: dict[str, frozenset[str]] = {
    "store": frozenset({"advertised_address", "instance_id", "etcd_endpoints", "etcd_prefix", "store_id"})
    | ({"export_dir", "export_interval_ms"} & set(StoreSettings.model_fields))
    | TLS_COMPUTED
    | AUTH_COMPUTED,
    "pull": frozenset({"advertised_address", "instance_id", "etcd_endpoints", "etcd_prefix"})
    | TLS_COMPUTED
    | AUTH_COMPUTED,
    "txcheck": frozenset({"advertised_address", "instance_id", "etcd_endpoints", "etcd_prefix"})
    | TLS_COMPUTED
    | AUTH_COMPUTED,
    "gateway": frozenset({"advertised_address", "instance_id", "etcd_endpoints", "etcd_prefix"})
    | TLS_COMPUTED
    | AUTH_COMPUTED,
}

_HOW = {
    "tls_mode": '"": enforcing when tls.enabled or security.enabled, else disabled.',
    "tls_client_auth": '"": require when tls.enabled or security.enabled, else none.',
    "tls_cert_file": '"": <tls.mountPath>/tls.crt when tls.enabled or security.enabled.',
    "tls_key_file": '"": <tls.mountPath>/tls.key when tls.enabled or security.enabled.',
    "tls_ca_file": '"": <tls.mountPath>/ca.crt when tls.enabled or security.enabled.',
    "tls_server_name": '"": <release>-bootstrap.<namespace>.svc.<clusterDomain> when tls.enabled or security.enabled.',
    "auth_access_key": '"": auth.accessKey when auth is on (auth.enabled, security.enabled or auth_enabled).',
    "export_interval_ms": '"": 60000 with analytics.exports.source store (the stores export into the volume the '
    "analytics job reads), else 0.",
}
#: How the chart computes a COMPUTED_WHEN_EMPTY setting, when not simply per pod.
COMPUTED_HOW: dict[tuple[str, str], str] = {(service, name): how for service in SERVICES for name, how in _HOW.items()}
#: What the chart does to a setting that is not computed from "" (appended to its description).
CHART_NOTES: dict[str, str] = {
    "auth_enabled": "Chart: true in every service with auth.enabled or security.enabled.",
}

#: Ports the pod declares (containerPort, Service port): a fixed port, or -1 (off); not
#: 0, which picks a random port no Service, probe or scraper could know.
FIXED_OR_OFF_PORTS = frozenset({"metrics_port", "tls_port", "probe_port", "plaintext_port"})

#: Settings that are secrets: not in values.yaml (a plain value would be stored in the
#: release and shown by `helm get values`), refused there by the schema. The chart sets
#: their env var from a Secret the user created (templates/_helpers.tpl, txmq.secretEnv):
#: the gateway's secret_key from gateway.auth.existingSecret (key existingSecretKey), every
#: service's auth_secret_key from auth.existingSecret (key existingSecretKey), and during a
#: key roll its auth_accepted_secret_key from auth.acceptedSecret; etcd_password and
#: auth_etcd_password from the etcd passwords' Secret (keys <service> and auth).
SECRET_SETTINGS: dict[str, frozenset[str]] = {
    service: frozenset(
        {"auth_secret_key", "auth_accepted_secret_key", "etcd_password", "auth_etcd_password"} & set(cls.model_fields)
    )
    | ({"secret_key"} if service == "gateway" else set())
    for service, cls in SERVICES.items()
}


def secret_settings(service: str) -> frozenset[str]:
    return SECRET_SETTINGS.get(service, frozenset())


def value_settings(service: str) -> list[str]:
    """The settings that are values under <service>.settings (all but the secrets)."""
    return [name for name in SERVICES[service].model_fields if name not in secret_settings(service)]


# JSON-schema keywords that constrain a value (pydantic's output, minus titles/defaults).
_KEEP = (
    "type",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
    "items",
)


def _field_schema(prop: dict[str, Any]) -> dict[str, Any]:
    out = {k: prop[k] for k in _KEEP if k in prop}
    if "anyOf" in out:
        out["anyOf"] = [_field_schema(p) for p in out["anyOf"]]
    if "description" in prop:
        out["description"] = prop["description"]
    return out


def settings_schema(service: str) -> dict[str, Any]:
    """The JSON schema of `<service>.settings` in values.yaml."""
    model = SERVICES[service].model_json_schema()
    props: dict[str, Any] = {}
    for name, prop in model["properties"].items():
        if name in secret_settings(service):
            continue
        field = _field_schema(prop)
        if name == "port":
            # Kubernetes needs a fixed port: containerPort, probes and Services use it.
            field["minimum"] = 1
        if name in FIXED_OR_OFF_PORTS:
            # A declared containerPort: a fixed port, or -1 (off); not 0 (random).
            field["not"] = {"const": 0}
            field["description"] = field.get("description", "") + " Chart: a fixed port or -1, not 0."
        if name in COMPUTED_WHEN_EMPTY[service]:
            if "enum" in field and "" not in field["enum"]:
                field["enum"] = [*field["enum"], ""]
            elif field.get("type") not in (None, "string"):
                # A number the chart computes from "": either one is a valid value.
                described = {"description": field.pop("description")} if "description" in field else {}
                field = {**described, "anyOf": [field, {"const": ""}]}
            how = COMPUTED_HOW.get((service, name), '"": computed by the chart per pod.')
            field["description"] = field.get("description", "") + " " + how
        if name in CHART_NOTES:
            field["description"] = field.get("description", "") + " " + CHART_NOTES[name]
        props[name] = field
    return {
        "type": "object",
        "description": f"Settings of the {service} service: each is the env var TXMQ_{service.upper()}_<FIELD>.",
        "additionalProperties": False,
        "properties": props,
    }


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def regenerated(schema: dict[str, Any]) -> dict[str, Any]:
    new = json.loads(json.dumps(schema))
    for service in SERVICES:
        new["properties"][service]["properties"]["settings"] = settings_schema(service)
    return new


def main(argv: list[str]) -> int:
    current = load_schema()
    new = regenerated(current)
    if "--write" in argv:
        SCHEMA_PATH.write_text(json.dumps(new, indent=2) + "\n")
        print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
        return 0
    if new != current:
        print(f"{SCHEMA_PATH.relative_to(ROOT)} is stale: run {Path(__file__).relative_to(ROOT)} --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
