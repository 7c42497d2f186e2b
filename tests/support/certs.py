"""Certificates for the TLS tests, from the one generator the CLI uses (``txmq up
--tls``: txmq_cli.certs): a CA, and certificates it signs for 127.0.0.1 / localhost that
serve as server and client certificates.

    files = tls_files(tmp_path)              # ca.crt, tls.crt, tls.key
    other = tls_files(tmp_path / "other")    # another CA: its certificates are strangers
"""

from __future__ import annotations

from pathlib import Path

from txmq_cli.certs import Authority, TlsFiles, cert_pem, key_pem, write_certificates

__all__ = ["LOOPBACK", "Authority", "TlsFiles", "cert_pem", "key_pem", "service_tls_args", "tls_files"]

#: The names the tests dial services by.
LOOPBACK = ("localhost", "127.0.0.1")


def tls_files(directory: Path) -> TlsFiles:
    """A new CA and a certificate for ``LOOPBACK`` signed by it, written to ``directory``."""
    return write_certificates(directory, hosts=LOOPBACK, days=1)


def service_tls_args(files: TlsFiles, *, mode: str = "enforcing", client_auth: str = "require") -> list[str]:
    """A service's flags for TLS from ``files`` (its certificate also its client certificate)."""
    return [
        "--tls_mode",
        mode,
        "--tls_client_auth",
        client_auth,
        "--tls_cert_file",
        str(files.cert),
        "--tls_key_file",
        str(files.key),
        "--tls_ca_file",
        str(files.ca),
    ]
