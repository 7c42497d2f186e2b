"""TLS settings (ServiceSettings, every service) and the SDK's TlsConfig: what each refuses,
naming the setting, and the files read once with one line per problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from pydantic import ValidationError
from support.certs import tls_files

from txmq import TlsConfig, TxmqError
from txmq.v1 import errors_pb2
from txmq_gateway.settings import GatewaySettings
from txmq_pull.settings import PullSettings
from txmq_runtime import tls
from txmq_runtime.settings import ServiceSettings
from txmq_store.settings import StoreSettings
from txmq_txcheck.settings import TxcheckSettings

FILES = {"tls_cert_file": "c.pem", "tls_key_file": "k.pem"}


@pytest.mark.parametrize("cls", [StoreSettings, PullSettings, TxcheckSettings, GatewaySettings])
def test_every_service_has_the_tls_settings_off_by_default(cls: type[ServiceSettings]) -> None:
    settings = cls()
    assert (settings.tls_mode, settings.tls_client_auth) == ("disabled", "none")
    assert (settings.plaintext_port, settings.probe_port) == (-1, -1)
    assert tls.TlsMaterial.load(settings) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tls_mode": "enforcing"}, "tls_mode enforcing needs tls_cert_file and tls_key_file"),
        ({"tls_mode": "enforcing", "tls_cert_file": "c.pem"}, "needs tls_cert_file and tls_key_file"),
        ({"tls_client_auth": "require"}, "tls_client_auth require needs tls_mode"),
        ({"tls_mode": "enforcing", "tls_client_auth": "require", **FILES}, "tls_client_auth require needs tls_ca_file"),
        ({"tls_mode": "permissive", **FILES}, "tls_mode permissive needs plaintext_port"),
        ({"tls_mode": "enforcing", "plaintext_port": 0, **FILES}, "plaintext_port is only served with tls_mode"),
        ({"plaintext_port": 7000}, "plaintext_port is only served with tls_mode permissive"),
        ({"port": 7000, "probe_port": 7000}, "probe_port (7000) must differ from port"),
        ({"tls_mode": "permissive", "plaintext_port": 7001, "probe_port": 7001, **FILES}, "probe_port (7001)"),
        ({"metrics_port": 7002, "probe_port": 7002}, "must differ from probe_port"),
        ({"tls_mode": "strict"}, "tls_mode"),
        ({"tls_client_auth": "optional"}, "tls_client_auth"),
        ({"probe_port": -2}, "probe_port"),
    ],
)
def test_invalid_tls_settings_name_the_setting(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        PullSettings(**values)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_valid_tls_settings() -> None:
    PullSettings(tls_mode="enforcing", **FILES)
    PullSettings(tls_mode="enforcing", tls_client_auth="require", tls_ca_file="ca.pem", probe_port=0, **FILES)
    PullSettings(tls_mode="permissive", plaintext_port=0, probe_port=0, **FILES)  # two free ports
    PullSettings(probe_port=9091)  # a probe port needs no TLS


def test_gateway_tls_port_uses_the_shared_certificate_settings() -> None:
    settings = GatewaySettings(tls_port=8082, **FILES)
    assert (settings.tls_cert_file, settings.tls_mode) == ("c.pem", "disabled")
    with pytest.raises(ValidationError, match="tls_port needs tls_cert_file"):
        GatewaySettings(tls_port=8082)
    with pytest.raises(ValidationError, match=r"tls_port \(8082\) must differ from probe_port"):
        GatewaySettings(tls_port=8082, probe_port=8082, **FILES)


def test_tls_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMQ_TXCHECK_TLS_MODE", "enforcing")
    monkeypatch.setenv("TXMQ_TXCHECK_TLS_CERT_FILE", "/etc/txmq/tls/tls.crt")
    monkeypatch.setenv("TXMQ_TXCHECK_TLS_KEY_FILE", "/etc/txmq/tls/tls.key")
    monkeypatch.setenv("TXMQ_TXCHECK_TLS_CA_FILE", "/etc/txmq/tls/ca.crt")
    monkeypatch.setenv("TXMQ_TXCHECK_TLS_CLIENT_AUTH", "require")
    monkeypatch.setenv("TXMQ_TXCHECK_PROBE_PORT", "9091")
    settings = TxcheckSettings()
    assert (settings.tls_mode, settings.tls_client_auth, settings.probe_port) == ("enforcing", "require", 9091)


def test_material_is_read_once_with_one_line_per_problem(tmp_path: Path) -> None:
    files = tls_files(tmp_path)
    good = {"tls_cert_file": str(files.cert), "tls_key_file": str(files.key), "tls_ca_file": str(files.ca)}
    material = tls.TlsMaterial.load(PullSettings(tls_mode="enforcing", tls_client_auth="require", **good))
    assert material is not None and material.client_auth and material.ca == files.ca.read_bytes()
    assert isinstance(material.server_credentials(), grpc.ServerCredentials)
    assert isinstance(material.channel_credentials(), grpc.ChannelCredentials)

    missing = PullSettings(tls_mode="enforcing", **{**good, "tls_key_file": str(tmp_path / "nope.key")})
    with pytest.raises(tls.TlsError, match=r"^tls_key_file '.*nope.key' cannot be read: No such file"):
        tls.TlsMaterial.load(missing)
    swapped = PullSettings(tls_mode="enforcing", **{**good, "tls_key_file": str(files.cert)})
    with pytest.raises(tls.TlsError, match=r"tls_key_file .* is not a PEM file with a private key"):
        tls.TlsMaterial.load(swapped)
    (tmp_path / "empty.pem").write_text("")
    empty_ca = PullSettings(tls_mode="enforcing", **{**good, "tls_ca_file": str(tmp_path / "empty.pem")})
    with pytest.raises(tls.TlsError, match=r"tls_ca_file .* is not a PEM file with a certificate"):
        tls.TlsMaterial.load(empty_ca)


def test_a_service_with_invalid_settings_exits_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "txmq_pull", "--tls-mode", "enforcing"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "tls_mode enforcing needs tls_cert_file and tls_key_file" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- the SDK ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"cert_file": "c.pem"}, "a client certificate needs its key"),
        ({"key": b"k"}, "a client certificate needs its key"),
        ({"ca_file": "ca.pem", "ca": b"ca"}, "give ca_file or ca, not both"),
        ({"server_name": ""}, "server_name must not be empty"),
    ],
)
def test_sdk_tls_config_refuses(values: dict[str, object], message: str) -> None:
    with pytest.raises(TxmqError, match=message) as info:
        TlsConfig(**values)  # type: ignore[arg-type]
    assert info.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT


def test_sdk_tls_config_reads_files_or_bytes(tmp_path: Path) -> None:
    files = tls_files(tmp_path)
    assert isinstance(TlsConfig(ca_file=files.ca).channel_credentials(), grpc.ChannelCredentials)
    from_bytes = TlsConfig(ca=files.ca.read_bytes(), cert=files.cert.read_bytes(), key=files.key.read_bytes())
    assert isinstance(from_bytes.channel_credentials(), grpc.ChannelCredentials)
    assert TlsConfig(server_name="txmq.internal").channel_options() == (
        ("grpc.ssl_target_name_override", "txmq.internal"),
    )
    with pytest.raises(TxmqError, match=r"ca_file '.*missing.crt' cannot be read") as info:
        TlsConfig(ca_file=tmp_path / "missing.crt").channel_credentials()
    assert info.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT


def test_sdk_clients_take_tls(tmp_path: Path) -> None:
    """Every facade accepts tls= (nothing is dialled: the files are read when it opens)."""
    from txmq import Admin, Producer, PullConsumer, PushConsumer, TransactionProducer

    tls_config = TlsConfig(ca_file=tls_files(tmp_path).ca)
    with Admin("127.0.0.1:1", tls=tls_config):
        pass
    for client in (
        Producer("g", "127.0.0.1:1", tls=tls_config),
        TransactionProducer("g", "127.0.0.1:1", tls=tls_config),
        PullConsumer("g", "127.0.0.1:1", tls=tls_config),
    ):
        assert client._tls is tls_config  # type: ignore[union-attr]
    assert PushConsumer("g", "127.0.0.1:1", tls=tls_config)._tls is tls_config
