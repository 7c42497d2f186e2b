"""Certificates for the TLS tests, from the one generator the CLI uses (``txmq up
--tls``: txmq_cli.certs): a CA, and certificates it signs for 127.0.0.1 / localhost that
serve as server and client certificates.

    files = tls_files(tmp_path)              # ca.crt, tls.crt, tls.key
    other = tls_files(tmp_path / "other")    # another CA: its certificates are strangers
    service_factory.store(*service_tls_args(files))   # enforcing, mutual TLS
"""

from __future__ import annotations

from pathlib import Path

from txmq_cli.certs import Authority, TlsFiles, cert_pem, key_pem, write_certificates
from txmq_cli.cluster import tls_args as service_tls_args

__all__ = [
    "LOOPBACK",
    "Authority",
    "TlsFiles",
    "cert_pem",
    "key_pem",
    "service_tls_args",
    "tls_files",
    "write_certificates",
]

#: The names the tests dial services by.
LOOPBACK = ("localhost", "127.0.0.1")


def tls_files(directory: Path) -> TlsFiles:
    """A new CA and a certificate for ``LOOPBACK`` signed by it, written to ``directory``."""
    return write_certificates(directory, hosts=LOOPBACK, days=1)
