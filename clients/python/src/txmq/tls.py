"""TLS for the SDK's channels: ``TlsConfig``, accepted by every client as ``tls=``.

    from txmq import Producer, TlsConfig

    tls = TlsConfig(ca_file="ca.crt", cert_file="client.crt", key_file="client.key")
    producer = Producer("my-group", "txmq.example:10911", tls=tls)

``ca_file`` verifies the services (empty: the system's roots); ``cert_file`` and
``key_file`` are the client certificate a service with ``tls_client_auth = require``
asks for (mutual TLS). ``server_name`` is the name the services' certificates are checked
against instead of the host dialled (for addresses that are IPs not in the
certificate). Each file may be given as bytes instead (``ca=``, ``cert=``, ``key=``).
The files are read when a client opens (a new certificate takes a new client).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from txmq.errors import BadRequestError
from txmq.v1 import errors_pb2

PathLike = str | os.PathLike[str]


def _bad(message: str) -> BadRequestError:
    return BadRequestError(message, code=errors_pb2.CODE_ILLEGAL_ARGUMENT)


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """How a client's channels use TLS (see the module docstring). ``TlsConfig()``: TLS
    verified against the system's roots, no client certificate."""

    ca_file: PathLike | None = None
    cert_file: PathLike | None = None
    key_file: PathLike | None = None
    server_name: str | None = None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None

    def __post_init__(self) -> None:
        for name in ("ca", "cert", "key"):
            if getattr(self, name) is not None and getattr(self, f"{name}_file") is not None:
                raise _bad(f"TlsConfig: give {name}_file or {name}, not both")
        has_cert = self.cert is not None or self.cert_file is not None
        has_key = self.key is not None or self.key_file is not None
        if has_cert != has_key:
            raise _bad("TlsConfig: a client certificate needs its key (cert_file and key_file, or cert and key)")
        if self.server_name is not None and not self.server_name:
            raise _bad("TlsConfig: server_name must not be empty")

    def _read(self, name: str) -> bytes | None:
        data: bytes | None = getattr(self, name)
        path: PathLike | None = getattr(self, f"{name}_file")
        if path is None:
            return data
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise _bad(f"TlsConfig: {name}_file {os.fspath(path)!r} cannot be read: {exc.strerror or exc}") from None

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """The channels' credentials, the files read now."""
        return grpc.ssl_channel_credentials(
            root_certificates=self._read("ca"), private_key=self._read("key"), certificate_chain=self._read("cert")
        )

    def channel_options(self) -> tuple[tuple[str, str], ...]:
        """Extra channel options: the name certificates are checked against, if given."""
        return (("grpc.ssl_target_name_override", self.server_name),) if self.server_name else ()
