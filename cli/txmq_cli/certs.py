"""Throwaway certificates for a local TLS cluster (``txmq up --tls``) and the tests: a CA
and certificates it signs, made with ``cryptography``.

    files = write_certificates(Path("data/tls"), hosts=["localhost", "127.0.0.1"])
    files.ca, files.cert, files.key   # ca.crt, tls.crt, tls.key (a Kubernetes TLS Secret's names)

The certificate is good for both ends of a link (server and client authentication), so
one serves every service and is also the client certificate of the SDK and the CLI.
Not for production: the CA's key is dropped once it has signed (``keep_ca_key`` keeps it,
for issuing more), and nothing here revokes or rotates.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files: the CA's certificate, a certificate it signed and that certificate's key."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA that can sign more certificates (``issue``)."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str = "txmq local CA", *, days: float = 30) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    def issue(
        self, hosts: Sequence[str], *, common_name: str = "txmq", days: float = 30
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        """A certificate for ``hosts`` (DNS names and IP addresses, as SANs), for server
        and client authentication, and its key."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in dict.fromkeys(hosts)]), False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return cert, key


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def local_hosts(*extra: str) -> list[str]:
    """The names a local cluster is dialled by: localhost, the loopback addresses, this
    machine's host name (and its fully qualified name), and ``extra`` (wildcard binds
    such as 0.0.0.0 left out)."""
    hosts = ["localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn(), *extra]
    return [h for h in dict.fromkeys(hosts) if h and h not in ("0.0.0.0", "::", "[::]")]


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def tls_files(directory: Path) -> TlsFiles:
    """Where ``write_certificates(directory)`` puts its files."""
    return TlsFiles(directory / CA_FILE, directory / CERT_FILE, directory / KEY_FILE)


def write_certificates(
    directory: Path, *, hosts: Sequence[str] | None = None, days: float = 30, keep_ca_key: bool = False
) -> TlsFiles:
    """A new CA and one certificate for ``hosts`` (default ``local_hosts()``) signed by
    it, written to ``directory`` as ca.crt, tls.crt and tls.key (0600); ca.key too with
    ``keep_ca_key``. Existing files are replaced."""
    directory.mkdir(parents=True, exist_ok=True)
    authority = Authority.create(days=days)
    cert, key = authority.issue(local_hosts() if hosts is None else hosts, days=days)
    files = tls_files(directory)
    files.ca.write_bytes(cert_pem(authority.cert))
    files.cert.write_bytes(cert_pem(cert))
    _write_private(files.key, key_pem(key))
    if keep_ca_key:
        _write_private(directory / "ca.key", key_pem(authority.key))
    return files


def _write_private(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
