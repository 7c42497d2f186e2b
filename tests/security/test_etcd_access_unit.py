"""The etcd access settings (ServiceSettings: etcd_tls_*, etcd_username, etcd_password,
auth_etcd_username, auth_etcd_password) are checked together, each problem in one line
naming the settings; an https:// etcd endpoint needs a CA. Who writes the user book
follows from them."""

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
        (["--auth-etcd-username", "txmq-auth"], "auth_etcd_username and auth_etcd_password go together"),
        (
            ["--auth-etcd-username", "txmq-auth", "--auth-etcd-password", "secret"],
            "auth_etcd_username needs etcd_username",
        ),
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


def test_the_book_writes_follow_the_etcd_users(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the book's etcd user a service writes the book itself, as that user; with an
    etcd user of its own alone it forwards; with no etcd user it writes through its own
    client (docs/etcd.md "Who writes the user book")."""
    from txmq_runtime.auth_service import WRITES_BOOK, WRITES_BOOK_LABEL, BookWrites

    monkeypatch.setenv("TXMQ_PULL_ETCD_PASSWORD", "pull-password")
    monkeypatch.setenv("TXMQ_PULL_AUTH_ETCD_PASSWORD", "book-password")
    own = ["--etcd-username", "txmq-pull"]
    writer = BookWrites.of(load_settings(PullSettings, [*own, "--auth-etcd-username", "txmq-auth"]))
    assert writer.access is not None and (writer.access.username, writer.access.password) == (
        "txmq-auth",
        "book-password",
    )
    assert not writer.forward and writer.labels() == {WRITES_BOOK_LABEL: WRITES_BOOK}
    monkeypatch.delenv("TXMQ_PULL_AUTH_ETCD_PASSWORD")
    forwarder = BookWrites.of(load_settings(PullSettings, own))
    assert forwarder.forward and forwarder.access is None and forwarder.labels() == {}
    monkeypatch.delenv("TXMQ_PULL_ETCD_PASSWORD")
    plain = BookWrites.of(load_settings(PullSettings, []))
    assert not plain.forward and plain.access is None


def test_an_https_endpoint_needs_a_ca() -> None:
    with pytest.raises(ValueError, match="https:// but no etcd_tls_ca_file"):
        etcd_client("https://127.0.0.1:2379")
    assert etcd_client("https://127.0.0.1:2379", EtcdAccess(ca=b"pem")) is not None
