"""TLS on txmq's gRPC links, server and client side, in one place.

A service's ``tls_mode`` (ServiceSettings) decides its own port:

- ``disabled`` (the default): plaintext, as before;
- ``enforcing``: the service port serves TLS only;
- ``permissive``: the service port serves TLS and ``plaintext_port`` serves the same
  services in plaintext (a migration step: clients move over, then the mode becomes
  enforcing).

``tls_client_auth = "require"`` makes it mutual: a client must present a certificate
signed by ``tls_ca_file``. Whenever the mode is not ``disabled``, the calls this process
makes to other txmq services (``txmq_runtime.calls.internal_channel``) use TLS too: they
verify the callee against ``tls_ca_file`` and present the service's own certificate as
their client certificate; ``tls_server_name`` (if set) is the name they check the
callee's certificate against instead of the host dialled (pods advertised by IP address,
one certificate naming the cluster). ``run_service`` loads the files once at start-up
(``TlsMaterial.load``: an unreadable or non-PEM file is one clear line) and calls
``configure``, as it does for keepalive. Rotating a certificate means restarting the
service: the files are not read again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

DISABLED = "disabled"
PERMISSIVE = "permissive"
ENFORCING = "enforcing"
REQUIRE = "require"


class TlsError(Exception):
    """TLS cannot be set up (a file unreadable or not PEM): one line says why."""


class TlsSettings(Protocol):
    """The TLS fields of ServiceSettings (read-only here)."""

    @property
    def tls_mode(self) -> str: ...
    @property
    def tls_cert_file(self) -> str: ...
    @property
    def tls_key_file(self) -> str: ...
    @property
    def tls_ca_file(self) -> str: ...
    @property
    def tls_client_auth(self) -> str: ...
    @property
    def tls_server_name(self) -> str: ...


def read_pem(path: str, *, setting: str, kind: str) -> bytes:
    """The bytes of a PEM file holding at least one ``kind`` block ("CERTIFICATE",
    "PRIVATE KEY"); TlsError naming ``setting`` when it cannot be read or is not one."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"{setting} {path!r} cannot be read: {exc.strerror or exc}") from None
    # "-----BEGIN PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----", "-----BEGIN CERTIFICATE-----"
    if b"-----BEGIN " not in data or f"{kind}-----".encode() not in data:
        raise TlsError(f"{setting} {path!r} is not a PEM file with a {kind.lower()}")
    return data


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """A service's certificate chain, its key and the CA bundle it trusts (None: the
    system's roots for the servers it dials, and no client certificates accepted)."""

    cert: bytes
    key: bytes
    ca: bytes | None
    client_auth: bool = False
    #: The name the services this process dials are checked against ("": the host dialled).
    server_name: str = ""

    @classmethod
    def load(cls, settings: TlsSettings) -> TlsMaterial | None:
        """The files the settings name, read now; None when ``tls_mode`` is disabled."""
        if settings.tls_mode == DISABLED:
            return None
        return cls(
            cert=read_pem(settings.tls_cert_file, setting="tls_cert_file", kind="CERTIFICATE"),
            key=read_pem(settings.tls_key_file, setting="tls_key_file", kind="PRIVATE KEY"),
            ca=read_pem(settings.tls_ca_file, setting="tls_ca_file", kind="CERTIFICATE")
            if settings.tls_ca_file
            else None,
            client_auth=settings.tls_client_auth == REQUIRE,
            server_name=settings.tls_server_name,
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials of the service port: this certificate; with client auth, client
        certificates signed by the CA are required."""
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.ca if self.client_auth else None,
            require_client_auth=self.client_auth,
        )

    def channel_options(self) -> tuple[tuple[str, str], ...]:
        """Extra options of a channel to another txmq service: the server name, if set."""
        return (("grpc.ssl_target_name_override", self.server_name),) if self.server_name else ()

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials of a channel to another txmq service: the CA verifies it, and this
        certificate is the client certificate (mutual TLS)."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )


_current: TlsMaterial | None = None


def configure(material: TlsMaterial | None) -> None:
    """Set this process's TLS for the channels it dials (``run_service`` does, from the
    service's settings; None: plaintext)."""
    global _current
    _current = material


def current() -> TlsMaterial | None:
    return _current
