"""The etcd access settings (ServiceSettings: etcd_tls_*, etcd_username, etcd_password)
are checked together, each problem in one line naming the settings; an https:// etcd
endpoint needs a CA."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from txmq_pull.settings import PullSettings
from txmq_runtime.etcd import etcd_client
from txmq_runtime.etcd_access import EtcdAccess
from txmq_runtime.settings import load_settings


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--etcd-tls-cert-file", "c.pem", "--etcd-tls-ca-file", "ca.pem"], "etcd_tls_cert_file and etcd_tls_key_file"),
        (["--etcd-tls-key-file", "k.pem", "--etcd-tls-ca-file", "ca.pem"], "etcd_tls_cert_file and etcd_tls_key_file"),
        (["--etcd-tls-cert-file", "c.pem", "--etcd-tls-key-file", "k.pem"], "needs etcd_tls_ca_file"),
        (["--etcd-username", "svc"], "etcd_username and etcd_password go together"),
        (["--etcd-password", "secret"], "etcd_username and etcd_password go together"),
    ],
)
def test_incomplete_etcd_access_is_refused(args: list[str], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        load_settings(PullSettings, args)


def test_complete_etcd_access_is_taken_and_the_password_stays_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMQ_PULL_ETCD_PASSWORD", "from-the-environment")
    settings = load_settings(
        PullSettings,
        [
            "--etcd-tls-ca-file",
            "ca.pem",
            "--etcd-tls-cert-file",
            "c.pem",
            "--etcd-tls-key-file",
            "k.pem",
            "--etcd-username",
            "svc",
        ],
    )
    assert settings.etcd_password.get_secret_value() == "from-the-environment"
    assert "from-the-environment" not in repr(settings)


def test_an_https_endpoint_needs_a_ca() -> None:
    with pytest.raises(ValueError, match="https:// but no etcd_tls_ca_file"):
        etcd_client("https://127.0.0.1:2379")
    assert etcd_client("https://127.0.0.1:2379", EtcdAccess(ca=b"pem")) is not None
