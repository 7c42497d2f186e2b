"""tls.enabled: one value turns on enforcing mutual TLS in every service (the settings env,
the mounted Secret, the probes on the plaintext probe port, the client env of `txmq` in
the pods, the `helm test` pod and the analytics export over TLS), with the certificate
from an existing Secret or issued by cert-manager (a Certificate covering every name the
services are dialled by)."""

from __future__ import annotations

from typing import Any

import pytest

from helm import chart
from helm.chart import Doc, container, env_values, find, one, pod_spec, service_workloads

pytestmark = chart.needs_helm

SERVICES = ("store", "pull", "txcheck", "gateway")
NS = chart.NAMESPACE
SERVER_NAME = f"txmq-bootstrap.{NS}.svc.cluster.local"
ISSUER = {"name": "txmq-ca", "kind": "Issuer"}
#: cert-manager issues the certificate; the analytics job snapshots the stores over gRPC.
CERT_MANAGER: dict[str, Any] = {
    "tls": {"enabled": True, "certManager": {"issuerRef": ISSUER, "extraDnsNames": ["mq.example.com"]}},
    "analytics": {"exports": {"source": "remote"}},
}
SECRET: dict[str, Any] = {"tls": {"enabled": True, "secretName": "my-tls"}}


@pytest.fixture(scope="module")
def cert_manager_docs() -> list[Doc]:
    return chart.render(CERT_MANAGER)


@pytest.mark.parametrize(("values", "secret"), [(SECRET, "my-tls"), (CERT_MANAGER, "txmq-tls")])
def test_every_service_serves_mutual_tls_from_the_mounted_secret(values: dict[str, Any], secret: str) -> None:
    docs = chart.render(values)
    for service in SERVICES:
        for w in service_workloads(docs, service):
            c = container(w, service)
            env = env_values(c)
            prefix = f"TXMQ_{service.upper()}_"
            tls_settings = {k.removeprefix(prefix): v for k, v in env.items() if k.startswith(prefix + "TLS_")}
            tls_settings.pop("TLS_PORT", None)  # the gateway's v2 TLS port, off here
            assert tls_settings.pop("TLS_PORT_CLIENT_AUTH", "none") == "none"  # and its client certificates
            assert tls_settings == {
                "TLS_MODE": "enforcing",
                "TLS_CLIENT_AUTH": "require",
                "TLS_CERT_FILE": "/etc/txmq/tls/tls.crt",
                "TLS_KEY_FILE": "/etc/txmq/tls/tls.key",
                "TLS_CA_FILE": "/etc/txmq/tls/ca.crt",
                "TLS_SERVER_NAME": SERVER_NAME,
            }
            # `txmq` run in the pod (kubectl exec) dials with the same files.
            assert {k: v for k, v in env.items() if k.startswith("TXMQ_TLS_")} == {
                "TXMQ_TLS_CA_FILE": "/etc/txmq/tls/ca.crt",
                "TXMQ_TLS_CERT_FILE": "/etc/txmq/tls/tls.crt",
                "TXMQ_TLS_KEY_FILE": "/etc/txmq/tls/tls.key",
                "TXMQ_TLS_SERVER_NAME": SERVER_NAME,
            }
            volumes = {v["name"]: v for v in pod_spec(w)["volumes"]}
            assert volumes["tls"]["secret"]["secretName"] == secret
            assert {"name": "tls", "mountPath": "/etc/txmq/tls", "readOnly": True} in c["volumeMounts"]
            probe_port = int(env[prefix + "PROBE_PORT"])
            assert {"name": "probe", "containerPort": probe_port, "protocol": "TCP"} in c["ports"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert c[probe]["grpc"]["port"] == probe_port


def test_cert_manager_issues_one_certificate_for_every_name(cert_manager_docs: list[Doc]) -> None:
    (cert,) = find(cert_manager_docs, "Certificate")
    spec = cert["spec"]
    assert cert["apiVersion"] == "cert-manager.io/v1" and cert["metadata"]["name"] == "txmq-tls"
    assert spec["secretName"] == "txmq-tls" and spec["issuerRef"] == ISSUER
    assert {"server auth", "client auth"} <= set(spec["usages"])
    names = set(spec["dnsNames"])
    # Every Service a client or the `helm test` pod dials, in each spelling.
    for svc in ("store", "pull", "txcheck", "gateway", "bootstrap"):
        for name in (f"txmq-{svc}", f"txmq-{svc}.{NS}", f"txmq-{svc}.{NS}.svc", f"txmq-{svc}.{NS}.svc.cluster.local"):
            assert name in names
    # The store pods' advertised names, the name internal calls check, `txmq` in a pod.
    assert f"*.txmq-store-headless.{NS}.svc.cluster.local" in names
    assert {SERVER_NAME, "localhost", "mq.example.com"} <= names
    assert spec["ipAddresses"] == ["127.0.0.1"]
    assert len(spec["dnsNames"]) == len(names)
    for d in cert_manager_docs:  # every advertised store address is covered by the wildcard
        if d["kind"] == "StatefulSet" and d["metadata"]["name"].startswith("txmq-store"):
            advertised = env_values(container(d, "store"))["TXMQ_STORE_ADVERTISED_ADDRESS"]
            assert advertised.startswith("$(POD_NAME).txmq-store-headless.$(POD_NAMESPACE).svc.cluster.local:")


def test_no_certificate_unless_cert_manager_issues_it() -> None:
    assert not find(chart.render(SECRET), "Certificate")
    assert not find(chart.render({"tls": {"certManager": {"issuerRef": ISSUER}}}), "Certificate")  # TLS off


def test_manifests_are_valid_kubernetes(cert_manager_docs: list[Doc]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    errors = []
    for doc in cert_manager_docs:
        if doc["kind"] == "Certificate":  # a CRD: its shape is checked above
            continue
        try:
            kubernetes_validate.validate(doc, "1.27.0", strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    assert not errors, "\n".join(errors)
    result = chart.lint(CERT_MANAGER)
    assert result.returncode == 0, result.stdout + result.stderr


def test_helm_test_pod_and_analytics_export_dial_over_tls(cert_manager_docs: list[Doc]) -> None:
    (test_pod,) = [d for d in find(cert_manager_docs, "Pod") if d["metadata"]["name"] == "txmq-health-check"]
    c = test_pod["spec"]["containers"][0]
    assert env_values(c)["TXMQ_TLS_CA_FILE"] == "/etc/txmq/tls/ca.crt"
    assert "secure_channel" in c["args"][0]
    assert {v["name"]: v for v in test_pod["spec"]["volumes"]}["tls"]["secret"]["secretName"] == "txmq-tls"
    cronjob = one(cert_manager_docs, "CronJob", "txmq-analytics")
    job_pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (export,) = job_pod["initContainers"]
    assert env_values(export)["TXMQ_TLS_CERT_FILE"] == "/etc/txmq/tls/tls.crt"
    assert "tls" in {m["name"] for m in export["volumeMounts"]}
    assert "tls" in {v["name"] for v in job_pod["volumes"]}


def test_tls_off_changes_nothing() -> None:
    docs = chart.render()
    for service in SERVICES:
        for w in service_workloads(docs, service):
            c = container(w, service)
            env = env_values(c)
            prefix = f"TXMQ_{service.upper()}_"
            assert (env[prefix + "TLS_MODE"], env[prefix + "TLS_CLIENT_AUTH"]) == ("disabled", "none")
            assert not [k for k in env if k.startswith("TXMQ_TLS_")]
            port = int(env[prefix + "PORT"])
            assert c["readinessProbe"]["grpc"]["port"] == port
    assert "secure_channel" in one(docs, "Pod", "txmq-health-check")["spec"]["containers"][0]["args"][0]


def test_permissive_serves_a_plaintext_port_too() -> None:
    settings = {"tls_mode": "permissive", "plaintext_port": 10921}
    docs = chart.render({**SECRET, "store": {"settings": settings}})
    for sts in service_workloads(docs, "store"):
        c = container(sts, "store")
        assert env_values(c)["TXMQ_STORE_TLS_MODE"] == "permissive"
        assert {"name": "grpc-plain", "containerPort": 10921, "protocol": "TCP"} in c["ports"]
        assert c["readinessProbe"]["grpc"]["port"] == 9091
    svc = one(docs, "Service", "txmq-store")
    assert {"name": "grpc-plain", "port": 10921, "targetPort": "grpc-plain", "protocol": "TCP"} in svc["spec"]["ports"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # tls.generate false: the certificate must come from somewhere.
        ({"tls": {"enabled": True, "generate": False}}, "secretName"),
        ({**SECRET, "pull": {"settings": {"probe_port": -1}}}, "pull.settings.probe_port must be a port"),
        ({**SECRET, "txcheck": {"settings": {"probe_port": 0}}}, "probe_port"),
        ({**SECRET, "store": {"settings": {"tls_mode": "strict"}}}, "tls_mode"),
        ({**SECRET, "gateway": {"settings": {"probe_port": 9090}}}, "probe_port (9090) must differ"),
        ({"tls": {"enabled": True, "generate": False, "certManager": {"issuerRef": {"kind": "Issuer"}}}}, "secretName"),
        ({"auth": {"existingSecret": "x", "existingSecretKey": ""}}, "existingSecretKey"),
    ],
)
def test_refused(values: dict[str, Any], message: str) -> None:
    result = chart.template(values, check=False)
    assert result.returncode != 0, f"accepted {values}"
    assert message in result.stderr, result.stderr
