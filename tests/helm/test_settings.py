"""The chart's service settings are the services' settings: same names (imported from the
settings classes, so a renamed or new field fails here), same defaults, same constraints,
and the env the chart renders is read back by the settings classes and starts the real
services."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from helm import chart, settings_schema
from helm.chart import Doc, container, env_list, pod_spec, service_workloads
from txmq_runtime.settings import load_settings

SERVICES = settings_schema.SERVICES
VALUES = yaml.safe_load((chart.CHART / "values.yaml").read_text())

#: Settings whose chart default differs from the service's on purpose, and why.
CHART_DEFAULTS: dict[str, dict[str, object]] = {
    "store": {
        "host": "0.0.0.0",  # listen on the pod IP, not loopback
        "port": 10911,  # a fixed port for containerPort, probes and Services
        "data_dir": "/var/lib/txmq/data/store",  # on the PVC
        "metrics_port": 9090,  # Prometheus metrics on, on a port the pod declares
        # Store groups of 3 replicas (store.groups.replicas) acknowledge a write once 2 have
        # it: one replica may be down without refusing writes.
        "min_in_sync": 2,
    },
    "pull": {"host": "0.0.0.0", "port": 10912, "metrics_port": 9090},
    "txcheck": {"host": "0.0.0.0", "port": 10913, "metrics_port": 9090},
    "gateway": {"host": "0.0.0.0", "port": 8081, "metrics_port": 9090},  # 8081: the RocketMQ proxy's port
}
# Routes name the address the client dialled (Service, load balancer, port-forward), not
# the pod IP that clients outside the cluster cannot reach.
if "route_client_endpoints" in SERVICES["gateway"].model_fields:
    CHART_DEFAULTS["gateway"]["route_client_endpoints"] = True
# The health-only plaintext port on (the service default is -1, off): the gRPC probes use
# it when TLS is on, since they cannot speak TLS.
for _service in CHART_DEFAULTS:
    CHART_DEFAULTS[_service]["probe_port"] = 9091
#: "" in values.yaml: the chart computes them per pod.
for _service, _names in settings_schema.COMPUTED_WHEN_EMPTY.items():
    for _name in _names:
        CHART_DEFAULTS[_service][_name] = ""


def fields(service: str) -> list[str]:
    """The settings that are values (<service>.settings): all but the secrets."""
    return settings_schema.value_settings(service)


#: A Secret the tests name for the gateway, and what kubelet would read from it.
GATEWAY_AUTH = {"existingSecret": "gw-auth", "existingSecretKey": "secret-key"}
#: The Secret every service's auth_secret_key comes from (top-level auth.*).
SERVICES_AUTH = {"existingSecret": "txmq-auth", "existingSecretKey": "auth-secret-key"}
#: The other key of a key roll (auth.acceptedSecret).
ACCEPTED_AUTH = {"existingSecret": "txmq-auth-next", "existingSecretKey": "next-key"}
#: The Secret of the services' etcd passwords (etcd.auth.existingSecret), a key per service.
ETCD_AUTH = "txmq-etcd-auth"
SECRETS = {
    ("gw-auth", "secret-key"): "the-secret-key",
    ("txmq-auth", "auth-secret-key"): "services-secret-key-0123",
    ("txmq-auth-next", "next-key"): "services-next-secret-4567",
    **{(ETCD_AUTH, service): f"{service}-etcd-password" for service in ("store", "pull", "txcheck", "gateway")},
    (ETCD_AUTH, "auth"): "auth-etcd-password",
}
#: TLS on (tls.*): every service on enforcing mutual TLS with the mounted Secret.
TLS = {"enabled": True, "secretName": "txmq-tls"}


def secret_source(service: str, name: str) -> dict[str, str]:
    """The Secret (existingSecret, existingSecretKey) a secret setting comes from."""
    if name == "etcd_password":
        return {"existingSecret": ETCD_AUTH, "existingSecretKey": service}
    if name == "auth_etcd_password":
        return {"existingSecret": ETCD_AUTH, "existingSecretKey": "auth"}
    if name == "auth_accepted_secret_key":
        return ACCEPTED_AUTH
    return GATEWAY_AUTH if (service, name) == ("gateway", "secret_key") else SERVICES_AUTH


@pytest.mark.parametrize("service", SERVICES)
def test_values_yaml_has_every_setting_and_nothing_else(service: str) -> None:
    in_values = set(VALUES[service]["settings"])
    expected = set(fields(service))
    assert not expected - in_values, f"add to helm/txmq/values.yaml {service}.settings: {sorted(expected - in_values)}"
    assert not in_values - expected, f"not settings of {service} (renamed?): {sorted(in_values - expected)}"


@pytest.mark.parametrize("service", SERVICES)
def test_values_yaml_defaults_are_the_services_defaults(service: str) -> None:
    differing = {}
    for name, field in SERVICES[service].model_fields.items():
        if name in settings_schema.secret_settings(service):
            continue
        want = CHART_DEFAULTS[service].get(name, field.default)
        got = VALUES[service]["settings"].get(name)
        if got != want:
            differing[name] = (got, want)
    assert not differing, f"{service}.settings in values.yaml (got, want): {differing}"


def test_values_schema_is_generated_from_the_settings_classes() -> None:
    current = settings_schema.load_schema()
    assert settings_schema.regenerated(current) == current, (
        "helm/txmq/values.schema.json is stale: run .venv/bin/python tests/helm/settings_schema.py --write"
    )


@pytest.mark.parametrize("service", SERVICES)
def test_schema_bounds_are_the_settings_bounds(service: str) -> None:
    """Spot check of the generator on what pydantic itself enforces."""
    schema = settings_schema.load_schema()["properties"][service]["properties"]["settings"]
    assert schema["additionalProperties"] is False
    # Secrets are not values: the schema refuses them under settings.
    assert not settings_schema.secret_settings(service) & schema["properties"].keys()
    for name, field in SERVICES[service].model_fields.items():
        if name in settings_schema.secret_settings(service):
            continue
        prop = schema["properties"][name]
        # A number the chart computes from "": its bounds are on the number's branch.
        prop = next((p for p in prop.get("anyOf", []) if p.get("type") == "integer"), prop)
        for meta in field.metadata:
            if hasattr(meta, "ge"):
                want = 1 if name == "port" else meta.ge
                assert prop["minimum"] == want, name
            if hasattr(meta, "le"):
                assert prop["maximum"] == meta.le, name


# ---- the rendered env ----------------------------------------------------------------------


def service_container(docs: list[Doc], service: str) -> dict[str, Any]:
    """The container of a service's one workload (the stores: the one StatefulSet of the
    unreplicated layout; replicated groups have one each, service_containers)."""
    (w,) = service_workloads(docs, service)
    return container(w, service)


def service_containers(docs: list[Doc], service: str) -> list[dict[str, Any]]:
    """The service's container in each of its workloads (each store group's)."""
    return [container(w, service) for w in service_workloads(docs, service)]


@chart.needs_helm
@pytest.mark.parametrize("service", SERVICES)
def test_rendered_env_names_are_the_settings_fields(service: str, default_docs: list[Doc]) -> None:
    for c in service_containers(default_docs, service):
        names = [e["name"] for e in env_list(c)]
        txmq_names = [n for n in names if n.startswith("TXMQ_")]
        prefix = f"TXMQ_{service.upper()}_"
        assert sorted(txmq_names) == sorted(prefix + f.upper() for f in fields(service))
        assert len(txmq_names) == len(set(txmq_names))


@chart.needs_helm
def test_secret_settings_are_rendered_from_the_secret_only() -> None:
    """With gateway.auth.existingSecret, auth.existingSecret and auth.acceptedSecret (a key
    roll) every setting has its env var, the secret ones from a secretKeyRef (never a
    literal value). auth_etcd_password is given only where auth_etcd_username is set
    (here: everywhere)."""
    book = {"auth_etcd_username": "txmq-auth"}
    docs = chart.render(
        {
            "auth": {
                **SERVICES_AUTH,
                "acceptedSecret": ACCEPTED_AUTH["existingSecret"],
                "acceptedSecretKey": ACCEPTED_AUTH["existingSecretKey"],
            },
            "etcd": {"auth": {"existingSecret": ETCD_AUTH}},
            "store": {"settings": book},
            "pull": {"settings": book},
            "txcheck": {"settings": book},
            "gateway": {"auth": GATEWAY_AUTH, "settings": {"access_key": "ak", **book}},
        }
    )
    for service in SERVICES:
        for c in service_containers(docs, service):
            prefix = f"TXMQ_{service.upper()}_"
            names = [e["name"] for e in env_list(c) if e["name"].startswith("TXMQ_")]
            assert sorted(names) == sorted(prefix + f.upper() for f in SERVICES[service].model_fields)
            for name in settings_schema.secret_settings(service):
                (var,) = [e for e in env_list(c) if e["name"] == prefix + name.upper()]
                assert "value" not in var
                ref = var["valueFrom"]["secretKeyRef"]
                source = secret_source(service, name)
                assert (ref["name"], ref["key"]) == (source["existingSecret"], source["existingSecretKey"])


def resolve_env(
    c: dict[str, Any],
    *,
    pod_name: str,
    namespace: str = chart.NAMESPACE,
    pod_ip: str = "10.1.2.3",
    secrets: dict[tuple[str, str], str] = SECRETS,
) -> dict[str, str]:
    """The environment Kubernetes would give the container: downward-API values, Secret
    keys (``secrets``: (secret name, key) -> value) and $(VAR) expansion of variables
    defined earlier in the list."""
    memory_limit = parse_quantity(c["resources"]["limits"]["memory"])
    fields_ = {"metadata.name": pod_name, "metadata.namespace": namespace, "status.podIP": pod_ip}
    env: dict[str, str] = {}
    for e in env_list(c):
        if "value" in e:
            value = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        elif "fieldRef" in e["valueFrom"]:
            value = fields_[e["valueFrom"]["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            value = secrets[(ref["name"], ref["key"])]
        else:
            ref = e["valueFrom"]["resourceFieldRef"]
            assert ref["resource"] == "limits.memory"
            value = str(memory_limit // parse_quantity(ref.get("divisor", "1")))
        env[e["name"]] = value
    return env


def parse_quantity(q: str | int) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    text = str(q)
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


@pytest.fixture
def clean_txmq_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TXMQ_"):
            monkeypatch.delenv(name)


UNREPLICATED = yaml.safe_load(chart.UNREPLICATED_STORES.read_text())


@chart.needs_helm
@pytest.mark.parametrize(
    ("service", "layout"),
    [*((service, "default") for service in SERVICES), ("store", "unreplicated")],
)
def test_settings_classes_read_the_rendered_env(
    service: str, layout: str, default_docs: list[Doc], monkeypatch: pytest.MonkeyPatch, clean_txmq_env: None
) -> None:
    """Every setting as values.yaml has it, the computed ones per pod. The stores: by
    default a replica of a group (store_id the group's StatefulSet, replica_id the pod);
    in the unreplicated layout (examples/unreplicated-stores.yaml) a store of its own."""
    pod = {
        "store": "txmq-store-g1-2" if layout == "default" else "txmq-store-1",
        "pull": "txmq-pull-5d8f-x2x4z",
        "txcheck": "txmq-txcheck-77c9-k8m2p",
        "gateway": "txmq-gateway-6f4d-q9w7e",
    }[service]
    docs = default_docs if layout == "default" else chart.render(None, chart.UNREPLICATED_STORES)
    (w,) = [w for w in service_workloads(docs, service) if pod.startswith(w["metadata"]["name"] + "-")]
    for name, value in resolve_env(container(w, service), pod_name=pod).items():
        monkeypatch.setenv(name, value)
    settings = load_settings(SERVICES[service], [])
    values = {**VALUES[service]["settings"], **(UNREPLICATED["store"]["settings"] if layout != "default" else {})}
    # A group's replica_id: computed too (below).
    computed = settings_schema.COMPUTED_WHEN_EMPTY[service] | ({"replica_id"} if service == "store" else set())
    for name in fields(service):
        if name in computed or name == "physical_memory_bytes":
            continue
        assert getattr(settings, name) == values[name], name
    assert settings.instance_id == pod
    assert settings.etcd_prefix == VALUES["etcd"]["prefix"]
    assert settings.etcd_endpoints == f"txmq-etcd.{chart.NAMESPACE}.svc.cluster.local:2379"
    if service == "store":
        if layout == "default":
            assert (settings.store_id, settings.replica_id) == ("txmq-store-g1", pod)
            assert settings.min_in_sync == 2
        else:
            assert (settings.store_id, settings.replica_id) == (pod, "")
            assert settings.min_in_sync == 1
        assert settings.advertised_address == f"{pod}.txmq-store-headless.{chart.NAMESPACE}.svc.cluster.local:10911"
        assert settings.physical_memory_bytes == parse_quantity(VALUES["store"]["resources"]["limits"]["memory"])
    else:
        assert settings.advertised_address == f"10.1.2.3:{values['port']}"
    if service == "gateway":
        # TLS off: no TLS port, no files (the service's defaults).
        assert (settings.tls_port, settings.tls_cert_file, settings.tls_key_file) == (-1, "", "")


@chart.needs_helm
@pytest.mark.parametrize("mount_path", ["/etc/txmq/tls", "/run/txmq-certs/"])
def test_gateway_settings_read_the_rendered_tls_env(
    mount_path: str, monkeypatch: pytest.MonkeyPatch, clean_txmq_env: None
) -> None:
    """tls.enabled + gateway.settings.tls_port: GatewaySettings (whose validator refuses a
    TLS port without both files) reads the port and the files of the mounted Secret."""
    docs = chart.render({"tls": {**TLS, "mountPath": mount_path}, "gateway": {"settings": {"tls_port": 8082}}})
    for name, value in resolve_env(service_container(docs, "gateway"), pod_name="txmq-gateway-6f4d-q9w7e").items():
        monkeypatch.setenv(name, value)
    settings = load_settings(SERVICES["gateway"], [])
    directory = mount_path.rstrip("/")
    assert settings.tls_port == 8082
    assert (settings.tls_cert_file, settings.tls_key_file) == (f"{directory}/tls.crt", f"{directory}/tls.key")
    assert settings.port == VALUES["gateway"]["settings"]["port"]
    assert settings.advertised_address == f"10.1.2.3:{settings.port}"


@chart.needs_helm
def test_every_setting_reaches_the_service_when_changed(monkeypatch: pytest.MonkeyPatch, clean_txmq_env: None) -> None:
    """Each setting set to another valid value in values.yaml comes out of the settings
    class with that value (so no field is dropped or mangled on the way)."""
    changed: dict[str, dict[str, Any]] = {}
    for service in SERVICES:
        changed[service] = {}
        for name in fields(service):
            field = SERVICES[service].model_fields[name]
            changed[service][name] = other_value(name, field, VALUES[service]["settings"][name])
    changed["store"]["data_dir"] = "/var/lib/txmq/data/elsewhere"  # still on the PVC
    values: dict[str, Any] = {service: {"settings": dict(s)} for service, s in changed.items()}
    # store_id and replica_id can be values only in the unreplicated layout (replicated
    # groups refuse them: the chart names each group and replica), so that layout here.
    values["store"]["groups"] = {"replicas": 1}
    # A TLS port needs the TLS Secret mounted (the changed tls_* values are kept).
    values["tls"] = TLS
    # Secret settings are not values: they come from the Secrets gateway.auth (which a
    # changed access_key needs anyway) and auth name.
    values["auth"] = {
        **SERVICES_AUTH,
        "acceptedSecret": ACCEPTED_AUTH["existingSecret"],
        "acceptedSecretKey": ACCEPTED_AUTH["existingSecretKey"],
    }
    values["etcd"] = {"auth": {"existingSecret": ETCD_AUTH}}
    for service in SERVICES:
        for name in settings_schema.secret_settings(service):
            source = secret_source(service, name)
            if source is GATEWAY_AUTH:
                values[service]["auth"] = GATEWAY_AUTH
            changed[service][name] = SECRETS[(source["existingSecret"], source["existingSecretKey"])]
    docs = chart.render(values)
    for service, cls in SERVICES.items():
        with monkeypatch.context() as m:
            for name, value in resolve_env(service_container(docs, service), pod_name="p-0").items():
                m.setenv(name, value)
            settings = load_settings(cls, [])
        assert set(changed[service]) == set(cls.model_fields)
        for name, want in changed[service].items():
            got = getattr(settings, name)
            got = got.get_secret_value() if hasattr(got, "get_secret_value") else got
            assert got == want, (service, name)


def other_value(name: str, field: Any, current: Any) -> Any:
    annotation = field.annotation
    if annotation is bool:
        return not current
    if annotation is int:
        low = next((m.ge for m in field.metadata if hasattr(m, "ge")), 0)
        high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
        # Ports: one of their own (not 0, which the chart refuses for declared ports).
        current = 0 if current == "" else current  # computed by the chart from ""
        value = max(current, low) + 1 if not name.endswith("port") else 20000 + sum(map(ord, name))
        return value if high is None or value <= high else high - 1
    if annotation is str:
        return {
            "host": "::",
            "log_level": "DEBUG",
            "etcd_endpoints": "10.0.0.1:2379",
            "etcd_prefix": "/other",
            "message_delay_levels": "2s 3m",
        }.get(name, f"{name}-x")
    # TLS settings the chart computes ("" in values.yaml): other than what tls.enabled would
    # give, and consistent with the rest (permissive serves the changed plaintext_port).
    if name in ("tls_mode", "tls_client_auth"):
        return {"tls_mode": "permissive", "tls_client_auth": "none"}[name]
    choices = getattr(annotation, "__args__", ())
    assert choices, f"unhandled setting type {annotation} of {name}"
    return next(c for c in choices if c != current)


# ---- the rendered env starts the real services ---------------------------------------------------


def _channel(address: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    return grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)


def _health(
    address: str,
    timeout_s: float,
    proc: subprocess.Popen[bytes],
    log: Path,
    credentials: grpc.ChannelCredentials | None = None,
    service: str = "",
) -> None:
    deadline = time.monotonic() + timeout_s
    with _channel(address, credentials) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{address} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=0.5, wait_for_ready=True)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{address} not SERVING after {timeout_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)


def _query_route(
    address: str,
    *,
    access_key: str | None,
    secret_key: str,
    topic: str = "HelmAuthCheck",
    credentials: grpc.ChannelCredentials | None = None,
) -> Any:
    """The gateway's QueryRouteResponse for ``topic``, signed with these keys (unsigned:
    access_key None), in plaintext or over TLS (``credentials``)."""
    import datetime
    import hashlib
    import hmac

    from txmq_gateway.servicer import endpoints_of
    from txmq_gateway.v2 import pb, svc, svc_grpc

    metadata: list[tuple[str, str]] = []
    if access_key is not None:
        date = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        signature = hmac.new(secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
        metadata = [
            ("x-mq-date-time", date),
            (
                "authorization",
                f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature}",
            ),
        ]
    with _channel(address, credentials) as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        # The access point the client dialled, as RocketMQ's clients send it.
        request = svc.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=endpoints_of(address))
        return stub.QueryRoute(request, metadata=metadata, timeout=10)


def _gateway_auth_refuses(
    address: str, *, access_key: str | None, secret_key: str, credentials: grpc.ChannelCredentials | None = None
) -> bool:
    """Whether the gateway answers a QueryRoute signed with these keys (unsigned: None)
    with UNAUTHORIZED."""
    from txmq_gateway.v2 import Code

    reply = _query_route(address, access_key=access_key, secret_key=secret_key, credentials=credentials)
    return reply.status.code == Code.UNAUTHORIZED


#: The name the chart's services check each other's certificates against (tls_server_name).
SERVER_NAME = f"txmq-bootstrap.{chart.NAMESPACE}.svc.cluster.local"


def write_tls_secret(directory: Path) -> Path:
    """What kubelet mounts from the TLS Secret: tls.crt, tls.key and ca.crt, here from the
    tests' CA (support.certs), for 127.0.0.1, localhost and the chart's server name.
    Returns the directory."""
    from support.certs import write_certificates

    write_certificates(directory, hosts=["localhost", "127.0.0.1", SERVER_NAME], days=1)
    return directory


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[list[tuple[str, subprocess.Popen[bytes]]]]:
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    yield started
    for _, proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@chart.needs_helm
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["groups", "unreplicated"])
def test_rendered_pods_start_and_stop_within_their_grace(etcd: Any, tmp_path: Path, pods: list, layout: str) -> None:
    """store, pull, txcheck and the gateway started the way the pods start them: the
    image's entrypoint (`txmq`) with the container's args and only the rendered env
    (pointed at a test etcd and loopback ports; the gateway with authentication on, its
    secret key resolved from the secretKeyRef; TLS on, so every service serves mutual TLS
    with the tls.crt / tls.key / ca.crt written where tls.mountPath says the Secret is
    mounted, and the gateway also its v2 TLS port). Each reports SERVING on its probe port,
    registers under its pod name, and on SIGTERM stops within terminationGracePeriodSeconds
    minus the preStop sleep.

    The store: the first replica of the first replicated group (the chart's layout; it
    registers the group's name once it leads it), or a store of one pod
    (examples/unreplicated-stores.yaml). Every replica renders the same port, so only one
    runs beside the others on loopback: with min_in_sync 1 it accepts writes alone."""
    from support import free_port

    from txmq import Admin, ServiceKind, TlsConfig
    from txmq_gateway.v2 import pb

    ports = {service: free_port() for service in SERVICES}
    metrics = {service: free_port() for service in SERVICES}  # one host here, one pod each there
    probes = {service: free_port() for service in SERVICES}
    mount = tmp_path / "pvc"
    tls_dir = write_tls_secret(tmp_path / "tls")
    tls_port = free_port()
    values = {
        "tls": {**TLS, "mountPath": str(tls_dir)},
        "etcd": {
            "enabled": False,
            "prefix": f"/txmq-helm-{uuid.uuid4().hex[:8]}",
            "external": {"endpoints": etcd.endpoint},
        },
        "store": {
            "settings": {
                "host": "127.0.0.1",
                "port": ports["store"],
                # The default is the pod's DNS name, which only cluster DNS resolves.
                "advertised_address": f"127.0.0.1:{ports['store']}",
                "data_dir": str(mount / "store"),
                "metrics_port": metrics["store"],
                "probe_port": probes["store"],
            },
            "persistence": {"mountPath": str(mount)},
        },
        **{
            service: {
                "settings": {
                    "host": "127.0.0.1",
                    "port": ports[service],
                    "metrics_port": metrics[service],
                    "probe_port": probes[service],
                }
            }
            for service in ("pull", "txcheck")
        },
        "gateway": {
            "settings": {
                "host": "127.0.0.1",
                "port": ports["gateway"],
                "metrics_port": metrics["gateway"],
                "probe_port": probes["gateway"],
                "access_key": "helm-test-ak",
                "tls_port": tls_port,
            },
            "auth": GATEWAY_AUTH,
        },
    }
    if layout == "groups":
        values["store"]["settings"]["min_in_sync"] = 1
        docs = chart.render(values)
        store_pod, store_id = "txmq-store-g0-0", "txmq-store-g0"
    else:
        docs = chart.render(values, chart.UNREPLICATED_STORES)
        store_pod = store_id = "txmq-store-0"
    entrypoint = str(Path(sys.executable).parent / "txmq")
    pod_names = {
        "store": store_pod,
        "pull": "txmq-pull-6b7c-abcde",
        "txcheck": "txmq-txcheck-6b7c-fghij",
        "gateway": "txmq-gateway-6b7c-klmno",
    }
    graces: dict[str, int] = {}
    for service in SERVICES:
        w = service_workloads(docs, service)[0]
        assert pod_names[service].startswith(w["metadata"]["name"] + "-")
        c = container(w, service)
        env = resolve_env(c, pod_name=pod_names[service], pod_ip="127.0.0.1")
        env.update(PATH=os.environ["PATH"], PYTHONUNBUFFERED="1")
        pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
        graces[service] = pod_spec(w)["terminationGracePeriodSeconds"] - pre_stop
        log = tmp_path / f"{service}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [entrypoint, *c["args"]], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path
            )
        pods.append((service, proc))
        # Where the probes ask: the probe port, plaintext (the service port is mutual TLS).
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"]["port"] == probes[service]
        _health(f"127.0.0.1:{probes[service]}", 60, proc, log)
        # The readiness probe's service name (the store's txmq.ready) is answered too.
        _health(f"127.0.0.1:{probes[service]}", 30, proc, log, service=c["readinessProbe"]["grpc"].get("service", ""))

    files = {name: (tls_dir / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    mutual = grpc.ssl_channel_credentials(files["ca.crt"], files["tls.key"], files["tls.crt"])
    for service in SERVICES:  # the service ports: mutual TLS, plaintext refused
        _health(f"127.0.0.1:{ports[service]}", 10, dict(pods)[service], tmp_path / f"{service}.log", mutual)
        with grpc.insecure_channel(f"127.0.0.1:{ports[service]}") as channel, pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    tls = TlsConfig(ca=files["ca.crt"], cert=files["tls.crt"], key=files["tls.key"])
    with Admin(f"127.0.0.1:{ports['pull']}", tls=tls) as admin:
        deadline = time.monotonic() + 10
        while True:
            live = {(e.kind, e.instance_id, e.address) for e in admin.endpoints()}
            want = {
                (ServiceKind.STORE, store_id, f"127.0.0.1:{ports['store']}"),
                (ServiceKind.PULL, pod_names["pull"], f"127.0.0.1:{ports['pull']}"),
                (ServiceKind.TXCHECK, pod_names["txcheck"], f"127.0.0.1:{ports['txcheck']}"),
                (ServiceKind.GATEWAY, pod_names["gateway"], f"127.0.0.1:{ports['gateway']}"),
            }
            if want <= live or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert want <= live
    assert (mount / "store").is_dir() and any((mount / "store").iterdir())
    # The gateway's secret key came from the secretKeyRef: unsigned calls are refused,
    # calls signed with that key are let through.
    secret = SECRETS[(GATEWAY_AUTH["existingSecret"], GATEWAY_AUTH["existingSecretKey"])]
    gateway = f"127.0.0.1:{ports['gateway']}"
    assert _gateway_auth_refuses(gateway, access_key=None, secret_key="", credentials=mutual)
    assert _gateway_auth_refuses(gateway, access_key="helm-test-ak", secret_key="not-the-secret", credentials=mutual)
    assert not _gateway_auth_refuses(gateway, access_key="helm-test-ak", secret_key=secret, credentials=mutual)
    # The v2 TLS port: the same protocol with the certificate from the mount and no client
    # certificate; routes name the address each client dialled (route_client_endpoints).
    credentials = grpc.ssl_channel_credentials(root_certificates=files["ca.crt"])
    gateway_tls = f"127.0.0.1:{tls_port}"
    gateway_log = tmp_path / "gateway.log"
    _health(gateway_tls, 10, dict(pods)["gateway"], gateway_log, credentials)
    assert _gateway_auth_refuses(gateway_tls, access_key=None, secret_key="", credentials=credentials)
    assert not _gateway_auth_refuses(gateway_tls, access_key="helm-test-ak", secret_key=secret, credentials=credentials)
    with Admin(f"127.0.0.1:{ports['store']}", tls=tls) as admin:
        admin.create_topic("HelmTlsTopic", read_queue_nums=1, write_queue_nums=1)
    for address, creds, port in ((gateway_tls, credentials, tls_port), (gateway, mutual, ports["gateway"])):
        reply = _query_route(
            address, access_key="helm-test-ak", secret_key=secret, topic="HelmTlsTopic", credentials=creds
        )
        assert reply.status.code == pb.OK, (address, reply.status)
        endpoints = {(a.host, a.port) for q in reply.message_queues for a in q.broker.endpoints.addresses}
        assert endpoints == {("127.0.0.1", port)}, address
    for service in SERVICES:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics[service]}/metrics", timeout=5) as reply:
            assert reply.status == 200, service

    for service, proc in reversed(pods):
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=graces[service] + 5)
        took = time.monotonic() - started
        assert code == 0, (service, code, (tmp_path / f"{service}.log").read_text()[-2000:])
        assert took < graces[service], (service, took, graces[service])
