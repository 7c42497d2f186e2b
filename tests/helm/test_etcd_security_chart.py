"""security.enabled locks the chart's own etcd down as `txmq up --tls` does: client and
peer TLS with the release's certificate (which now names etcd's Service and members),
client certificates required, and etcd's auth turned on by a set-up Job (`txmq
etcd-auth-setup`) with a user per kind of service and txmq-auth, the user book's, whose
passwords the chart generates (Secret <release>-etcd-auth, reused on upgrade) or takes
from etcd.auth.existingSecret. Each service gets its etcd user, password (from the
Secret only) and TLS files; only txcheck gets the user book's etcd user and password.

Without security.enabled (or with an external etcd) etcd is as before. The last test
runs what the chart renders for real: the Job's arguments against a local etcd started
with the rendered etcd's TLS flags and the generated certificate, then a service with
its rendered env, which reaches that etcd as its own etcd user (after a txcheck, which
makes the services' identity in the user book through txmq-auth)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from helm import chart
from helm.chart import Doc, container, env_list, env_values, find, one, pod_labels, pod_spec, service_workloads

pytestmark = chart.needs_helm

SERVICES = ("store", "pull", "txcheck", "gateway")
NS = chart.NAMESPACE
SECURITY: dict[str, Any] = {"security": {"enabled": True}}


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return chart.render(SECURITY)


def etcd_args(docs: list[Doc]) -> list[str]:
    (sts,) = [d for d in find(docs, "StatefulSet") if d["metadata"]["name"] == "txmq-etcd"]
    return list(container(sts, "etcd")["args"])


def secret_data(doc: Doc) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in doc["data"].items()}


def test_etcd_serves_tls_only_and_requires_client_certificates(docs: list[Doc]) -> None:
    args = etcd_args(docs)
    for flag in (
        "--listen-client-urls",
        "--advertise-client-urls",
        "--listen-peer-urls",
        "--initial-advertise-peer-urls",
    ):
        (value,) = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
        assert value.startswith("https://"), (flag, value)
    (initial,) = [a for a in args if a.startswith("--initial-cluster=")]
    assert "http://" not in initial and initial.count("https://") == 3
    for flag in (
        "--cert-file=/etc/etcd/tls/tls.crt",
        "--key-file=/etc/etcd/tls/tls.key",
        "--trusted-ca-file=/etc/etcd/tls/ca.crt",
        "--client-cert-auth",
        "--peer-cert-file=/etc/etcd/tls/tls.crt",
        "--peer-key-file=/etc/etcd/tls/tls.key",
        "--peer-trusted-ca-file=/etc/etcd/tls/ca.crt",
        "--peer-client-cert-auth",
    ):
        assert flag in args
    (sts,) = [d for d in find(docs, "StatefulSet") if d["metadata"]["name"] == "txmq-etcd"]
    assert {v["name"]: v for v in pod_spec(sts)["volumes"]}["tls"]["secret"]["secretName"] == "txmq-tls"
    assert {"name": "tls", "mountPath": "/etc/etcd/tls", "readOnly": True} in container(sts, "etcd")["volumeMounts"]


def test_the_certificate_names_etcd(docs: list[Doc]) -> None:
    cert = x509.load_pem_x509_certificate(secret_data(one(docs, "Secret", "txmq-tls"))["tls.crt"].encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"txmq-etcd.{NS}.svc.cluster.local" in names
    assert f"*.txmq-etcd-headless.{NS}.svc.cluster.local" in names


def test_passwords_are_generated_kept_and_given_to_each_service(docs: list[Doc]) -> None:
    secret = one(docs, "Secret", "txmq-etcd-auth")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    passwords = secret_data(secret)
    assert set(passwords) == {"root", "auth", *SERVICES}
    assert all(len(p) == 32 for p in passwords.values()) and len(set(passwords.values())) == 6
    for service in SERVICES:
        for w in service_workloads(docs, service):
            c = container(w, service)
            env = env_values(c)
            p = f"TXMQ_{service.upper()}_"
            assert env[p + "ETCD_USERNAME"] == f"txmq-{service}"
            assert (env[p + "ETCD_TLS_CA_FILE"], env[p + "ETCD_TLS_CERT_FILE"], env[p + "ETCD_TLS_KEY_FILE"]) == (
                "/etc/txmq/tls/ca.crt",
                "/etc/txmq/tls/tls.crt",
                "/etc/txmq/tls/tls.key",
            )
            (var,) = [e for e in env_list(c) if e["name"] == p + "ETCD_PASSWORD"]
            assert "value" not in var
            assert var["valueFrom"]["secretKeyRef"] == {"name": "txmq-etcd-auth", "key": service}
            # The user book's etcd user: txcheck's alone (docs/etcd.md "Who writes the user book").
            book = [e for e in env_list(c) if e["name"] == p + "AUTH_ETCD_PASSWORD"]
            if service == "txcheck":
                assert env[p + "AUTH_ETCD_USERNAME"] == "txmq-auth"
                assert "value" not in book[0]
                assert book[0]["valueFrom"]["secretKeyRef"] == {"name": "txmq-etcd-auth", "key": "auth"}
            else:
                assert env[p + "AUTH_ETCD_USERNAME"] == "" and not book


def test_the_set_up_job_reaches_etcd(docs: list[Doc]) -> None:
    (job,) = find(docs, "Job")
    assert job["metadata"]["name"].startswith("txmq-etcd-auth-")
    c = container(job, "etcd-auth")
    assert c["args"][0] == "etcd-auth-setup"
    assert f"--etcd-endpoint=txmq-etcd.{NS}.svc.cluster.local:2379" in c["args"]
    volumes = {v["name"]: v for v in pod_spec(job)["volumes"]}
    assert volumes["etcd-auth"]["secret"]["secretName"] == "txmq-etcd-auth"
    assert volumes["tls"]["secret"]["secretName"] == "txmq-tls"
    # etcd's NetworkPolicy lets the Job's pods in.
    policy = one(docs, "NetworkPolicy", "txmq-etcd")
    (expr,) = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"]
    assert pod_labels(job)["app.kubernetes.io/component"] in expr["values"]


def test_notes_tell_where_the_etcd_passwords_are() -> None:
    notes = chart.notes(SECURITY)
    assert "etcd is locked down" in notes
    assert "get secret txmq-etcd-auth -o jsonpath='{.data.root}' | base64 -d" in notes
    assert "etcd is locked down" not in chart.notes({"tls": {"enabled": True}, "auth": {"enabled": True}})


def test_your_own_etcd_passwords_win() -> None:
    docs = chart.render({**SECURITY, "etcd": {"auth": {"existingSecret": "my-etcd"}}})
    assert not find(docs, "Secret", "txmq-etcd-auth")
    (job,) = find(docs, "Job")
    assert {v["name"]: v for v in pod_spec(job)["volumes"]}["etcd-auth"]["secret"]["secretName"] == "my-etcd"


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"tls": {"enabled": True}, "auth": {"enabled": True}},
        {**SECURITY, "etcd": {"enabled": False, "external": {"endpoints": "10.0.0.1:2379"}}},
    ],
    ids=["default", "tls-and-auth-alone", "external-etcd"],
)
def test_etcd_is_as_before_without_security_or_with_an_external_etcd(values: dict[str, Any] | None) -> None:
    docs = chart.render(values)
    assert not find(docs, "Job") and not find(docs, "Secret", "txmq-etcd-auth")
    if values is None or values.get("etcd", {}).get("enabled", True):
        args = etcd_args(docs)
        assert "--client-cert-auth" not in args and not any("https://" in a for a in args)
    for service in SERVICES:
        for w in service_workloads(docs, service):
            env = env_values(container(w, service))
            assert env[f"TXMQ_{service.upper()}_ETCD_USERNAME"] == ""
            assert f"TXMQ_{service.upper()}_ETCD_PASSWORD" not in env
            assert env[f"TXMQ_{service.upper()}_AUTH_ETCD_USERNAME"] == ""
            assert f"TXMQ_{service.upper()}_AUTH_ETCD_PASSWORD" not in env


def test_the_rendered_job_and_service_work_against_a_real_locked_down_etcd(tmp_path: Path) -> None:
    from support.processes import free_port, new_etcd, private_prefix

    from helm.test_settings import _health, resolve_env
    from txmq_cli.certs import TlsFiles

    tls_dir, passwords_dir = tmp_path / "tls", tmp_path / "etcd-auth"
    prefix = private_prefix()
    probes = {"txcheck": free_port(), "pull": free_port()}
    values = {
        **SECURITY,
        "tls": {"mountPath": str(tls_dir)},
        "etcd": {"prefix": prefix},
        **{
            s: {"settings": {"host": "127.0.0.1", "port": free_port(), "metrics_port": -1, "probe_port": probe}}
            for s, probe in probes.items()
        },
    }
    docs = chart.render(values)
    # What kubelet would mount: the TLS Secret and the etcd passwords' Secret.
    tls_dir.mkdir()
    for name, content in secret_data(one(docs, "Secret", "txmq-tls")).items():
        (tls_dir / name).write_text(content)
    passwords_dir.mkdir()
    passwords = secret_data(one(docs, "Secret", "txmq-etcd-auth"))
    for name, content in passwords.items():
        (passwords_dir / name).write_text(content)
    files = TlsFiles(tls_dir / "ca.crt", tls_dir / "tls.crt", tls_dir / "tls.key")
    etcd = new_etcd(tmp_path, tls=files)
    etcd.start()
    try:
        entrypoint = str(Path(sys.executable).parent / "txmq")
        (job,) = find(docs, "Job")
        args = [
            f"--etcd-endpoint={etcd.endpoint}"
            if a.startswith("--etcd-endpoint=")
            else a.replace("/etc/txmq/etcd-auth", str(passwords_dir))
            for a in container(job, "etcd-auth")["args"]
        ]
        done = subprocess.run([entrypoint, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        secrets = {("txmq-etcd-auth", k): v for k, v in passwords.items()}
        secrets |= {("txmq-auth", "auth-secret-key"): secret_data(one(docs, "Secret", "txmq-auth"))["auth-secret-key"]}
        procs = []
        try:
            for service, probe in probes.items():  # txcheck first: it makes the services' identity
                (w,) = service_workloads(docs, service)
                c = container(w, service)
                env = resolve_env(c, pod_name=f"txmq-{service}-0", pod_ip="127.0.0.1", secrets=secrets)
                env[f"TXMQ_{service.upper()}_ETCD_ENDPOINTS"] = etcd.endpoint
                env.update(PATH=os.environ["PATH"], PYTHONUNBUFFERED="1")
                log = tmp_path / f"{service}.log"
                with open(log, "wb") as out:
                    proc = subprocess.Popen([entrypoint, *c["args"]], env=env, stdout=out, stderr=subprocess.STDOUT)
                procs.append(proc)
                _health(f"127.0.0.1:{probe}", 60, proc, log)
                assert "ready on" in log.read_text()
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)
    finally:
        etcd.stop()
