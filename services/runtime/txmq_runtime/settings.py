"""Settings: one frozen object per service, declared once.

Each service declares a ``pydantic_settings.BaseSettings`` subclass with
``model_config = service_config("store")``; every field has a default and a description,
and carries its unit in its name (``_ms``, ``_bytes``). The same field name is the
command-line flag (``--flush-mode``, kebab-case as every ``txmq`` flag; ``--flush_mode``
is accepted too), the env var (``TXMQ_STORE_FLUSH_MODE``) and the Helm value
(``store.flush_mode``). Precedence: flag > env var > default. A boolean is a flag pair
(``--auth-enabled`` / ``--no-auth-enabled``); ``--auth-enabled true`` and
``--auth-enabled=false`` work too. ``--help`` shows each flag's type, default and env var.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

from pydantic import BaseModel
from pydantic_settings import BaseSettings, CliApp, SettingsConfigDict

S = TypeVar("S", bound=BaseSettings)


def service_config(service: str) -> SettingsConfigDict:
    return SettingsConfigDict(
        env_prefix=f"TXMQ_{service.upper()}_",
        frozen=True,
        extra="forbid",
        cli_prog_name=f"txmq-{service}",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_show_env_vars=True,
    )


def load_settings(cls: type[S], argv: Sequence[str] | None = None) -> S:
    """Build settings from flags (``argv``; [] for none), env vars and defaults. A flag
    may be spelled ``--flush-mode`` (documented) or ``--flush_mode`` (the field name)."""
    return CliApp.run(cls, cli_args=_bool_flags(cls, [_kebab_flag(a) for a in argv or []]))


def _kebab_flag(arg: str) -> str:
    """``--flush_mode[=v]`` -> ``--flush-mode[=v]``; values and other args unchanged."""
    if not arg.startswith("--"):
        return arg
    name, eq, value = arg.partition("=")
    return name.replace("_", "-") + eq + value


_TRUE = frozenset({"true", "1", "yes", "on", "t", "y"})
_FALSE = frozenset({"false", "0", "no", "off", "f", "n"})


def _bool_flags(cls: type[BaseSettings], args: Sequence[str]) -> list[str]:
    """``--auth-enabled true`` / ``--auth-enabled=false``, booleans with a value as they
    were given before they became flags (scripts, tests), -> ``--auth-enabled`` /
    ``--no-auth-enabled``. Other args unchanged (a value that is not a boolean is left to
    the parser's error)."""
    flags = {"--" + name.replace("_", "-") for name, field in cls.model_fields.items() if field.annotation is bool}
    out: list[str] = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in flags and not eq and i + 1 < len(args) and args[i + 1].lower() in _TRUE | _FALSE:
            value, eq = args[i + 1], "="
            i += 1
        if name in flags and eq and value.lower() in _TRUE | _FALSE:
            out.append(name if value.lower() in _TRUE else "--no-" + name[2:])
        else:
            out.append(args[i])
        i += 1
    return out


def describe(settings: BaseModel) -> dict[str, str]:
    """Flat name -> value strings, for status RPCs and logs."""
    return {k: str(v) for k, v in settings.model_dump().items()}


from typing import Self  # noqa: E402

from pydantic import Field, SecretStr, model_validator  # noqa: E402

from txmq_runtime.keepalive import KEEPALIVE_PERMIT_TIME_MS, KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS  # noqa: E402


class ServiceSettings(BaseSettings):
    """Fields every service has (network, etcd registration). Subclass and set
    ``model_config = service_config("<name>")``."""

    host: str = Field("127.0.0.1", description="Address to bind the gRPC server to.")
    port: int = Field(0, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    advertised_address: str = Field("", description="host:port clients dial; empty: host:bound port.")
    instance_id: str = Field("", description="Unique instance id; empty: generated (kind-hostname-pid).")
    etcd_endpoints: str = Field("127.0.0.1:2379", description="Comma-separated host:port list of the etcd cluster.")
    etcd_prefix: str = Field("/txmq", description="Key prefix for everything txmq keeps in etcd.")
    registration_ttl_ms: int = Field(10_000, ge=1_000, description="Lease TTL of the instance's etcd registration.")
    shutdown_grace_ms: int = Field(5_000, ge=0, description="How long in-flight RPCs may run on stop.")
    log_level: str = Field("INFO", description="Python logging level.")
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop", description="The event loop the service runs on: uvloop (less CPU per call) or asyncio's own."
    )
    metrics_port: int = Field(
        -1, ge=-1, le=65535, description="Prometheus /metrics HTTP port on host; 0 picks a free port, -1 turns it off."
    )
    metrics_host: str = Field("", description="Address the /metrics HTTP server binds to; empty: host.")
    etcd_startup_timeout_ms: int = Field(
        30_000, ge=100, description="How long start-up waits for etcd before the service exits with an error."
    )
    keepalive_time_ms: int = Field(
        KEEPALIVE_TIME_MS,
        ge=100,
        description="Keepalive ping interval on links to and from other services, idle ones included.",
    )
    keepalive_timeout_ms: int = Field(
        KEEPALIVE_TIMEOUT_MS,
        ge=100,
        description="How long a keepalive ping waits for its ack before the link is closed.",
    )
    keepalive_permit_time_ms: int = Field(
        KEEPALIVE_PERMIT_TIME_MS,
        ge=0,
        description="Shortest interval between a client's pings the server accepts (GOAWAY too_many_pings below it); "
        "at most half keepalive_time_ms.",
    )

    tls_mode: Literal["disabled", "permissive", "enforcing"] = Field(
        "disabled",
        description="TLS of the service port: disabled (plaintext), enforcing (TLS only) or permissive (TLS, and "
        "plaintext on plaintext_port). Unless disabled, the calls this service makes to other txmq services use TLS.",
    )
    tls_cert_file: str = Field(
        "",
        description="PEM certificate chain the service port serves, also the client certificate of this "
        "service's internal calls; required unless tls_mode is disabled.",
    )
    tls_key_file: str = Field("", description="PEM private key of tls_cert_file; required unless tls_mode is disabled.")
    tls_ca_file: str = Field(
        "",
        description="PEM CA bundle verifying the services this one dials and, with tls_client_auth require, the "
        "client certificates it accepts; empty: the system's roots.",
    )
    tls_client_auth: Literal["none", "require"] = Field(
        "none",
        description="require: clients of the TLS port must present a certificate signed by tls_ca_file (mutual TLS).",
    )
    tls_server_name: str = Field(
        "",
        description="Name the certificates of the services this one dials are checked against instead of the host "
        "dialled (for addresses such as pod IPs that no certificate names); empty: the host dialled.",
    )
    plaintext_port: int = Field(
        -1,
        ge=-1,
        le=65535,
        description="With tls_mode permissive, also serve plaintext gRPC on this port on host (0 picks a free port); "
        "-1: off. Only for permissive.",
    )
    probe_port: int = Field(
        -1,
        ge=-1,
        le=65535,
        description="Plaintext port on host serving only the gRPC health service, for probes that cannot speak TLS "
        "(Kubernetes'); 0 picks a free port, -1 turns it off.",
    )

    @model_validator(mode="after")
    def _tls_is_complete(self) -> Self:
        if self.tls_mode != "disabled" and not (self.tls_cert_file and self.tls_key_file):
            raise ValueError(f"tls_mode {self.tls_mode} needs tls_cert_file and tls_key_file")
        if self.tls_client_auth == "require":
            if self.tls_mode == "disabled":
                raise ValueError("tls_client_auth require needs tls_mode enforcing or permissive")
            if not self.tls_ca_file:
                raise ValueError(
                    "tls_client_auth require needs tls_ca_file (the CA client certificates are checked with)"
                )
        if self.tls_mode == "permissive" and self.plaintext_port < 0:
            raise ValueError("tls_mode permissive needs plaintext_port (the port serving plaintext beside TLS)")
        if self.tls_mode != "permissive" and self.plaintext_port >= 0:
            raise ValueError(f"plaintext_port is only served with tls_mode permissive (tls_mode is {self.tls_mode})")
        ports = {"port": self.port, "plaintext_port": self.plaintext_port, "probe_port": self.probe_port}
        if self.metrics_port > 0 and not self.metrics_host:
            ports["metrics_port"] = self.metrics_port
        taken: dict[int, str] = {}
        for name, value in ports.items():
            if value > 0 and value in taken:
                raise ValueError(f"{name} ({value}) must differ from {taken[value]}")
            taken.setdefault(value, name)
        return self

    etcd_tls_ca_file: str = Field(
        "",
        description="PEM CA bundle etcd's certificate is checked with; set: the links to etcd use TLS "
        "(etcd's --cert-file), else plaintext.",
    )
    etcd_tls_cert_file: str = Field(
        "",
        description="PEM client certificate presented to etcd (for etcd's --client-cert-auth); needs "
        "etcd_tls_ca_file and etcd_tls_key_file.",
    )
    etcd_tls_key_file: str = Field("", description="PEM private key of etcd_tls_cert_file.")
    etcd_username: str = Field(
        "", description="etcd user this service acts as (etcd's auth enabled); needs etcd_password."
    )
    etcd_password: SecretStr = Field(
        SecretStr(""),
        description="Password of etcd_username (from a Secret or env var, never a flag in production).",
    )

    @model_validator(mode="after")
    def _etcd_access_is_complete(self) -> Self:
        if bool(self.etcd_tls_cert_file) != bool(self.etcd_tls_key_file):
            raise ValueError("etcd_tls_cert_file and etcd_tls_key_file go together (a client certificate and its key)")
        if self.etcd_tls_cert_file and not self.etcd_tls_ca_file:
            raise ValueError("etcd_tls_cert_file needs etcd_tls_ca_file (TLS to etcd is on only with a CA)")
        if bool(self.etcd_username) != bool(self.etcd_password.get_secret_value()):
            raise ValueError("etcd_username and etcd_password go together")
        return self

    auth_enabled: bool = Field(
        False,
        description="Authenticate every call (signed with a user's access key + secret key, or a client certificate "
        "naming a user) and check it against the user's ACL; deny by default (docs/security.md).",
    )
    auth_access_key: str = Field(
        "",
        description="The services' own identity: a super user, created in etcd on first start, that signs the calls "
        "services make to each other. The same in every service of a cluster; required with auth_enabled.",
    )
    auth_secret_key: SecretStr = Field(
        SecretStr(""),
        description="Secret key of auth_access_key (at least 16 characters; from a Secret, never a flag in "
        "production). It also seals users' secrets in etcd. Required with auth_enabled.",
    )
    auth_accepted_secret_key: SecretStr = Field(
        SecretStr(""),
        description="During a roll of auth_secret_key only: the other key (the new one before the switch, the old "
        "one after it). Values sealed with it still open, and the services' identity signed with it is still "
        "taken; auth_secret_key alone signs and seals (docs/security.md, rotating auth_secret_key).",
    )
    auth_etcd_username: str = Field(
        "",
        description="The etcd user that may write the user book (<prefix>/auth/), when etcd's auth is on: set, this "
        "service writes the book (Auth writes, creating the services' identity) through it; empty, a service with "
        "an etcd_username of its own forwards Auth writes to one that has it (docs/etcd.md, who writes the user "
        "book). Needs auth_etcd_password and etcd_username.",
    )
    auth_etcd_password: SecretStr = Field(
        SecretStr(""),
        description="Password of auth_etcd_username (from a Secret or env var, never a flag in production).",
    )
    auth_clock_skew_ms: int = Field(
        900_000,
        ge=1_000,
        description="How far the signed date of a request (x-mq-date-time) may be from this service's clock; "
        "older or newer signatures are refused, so a captured request cannot be replayed later.",
    )

    @model_validator(mode="after")
    def _auth_is_complete(self) -> Self:
        if self.auth_enabled:
            if not self.auth_access_key:
                raise ValueError("auth_enabled needs auth_access_key (the services' own identity)")
            if len(self.auth_secret_key.get_secret_value()) < 16:
                raise ValueError("auth_enabled needs auth_secret_key of at least 16 characters")
            accepted = self.auth_accepted_secret_key.get_secret_value()
            if accepted and len(accepted) < 16:
                raise ValueError("auth_accepted_secret_key needs at least 16 characters, as auth_secret_key")
        if bool(self.auth_etcd_username) != bool(self.auth_etcd_password.get_secret_value()):
            raise ValueError("auth_etcd_username and auth_etcd_password go together")
        if self.auth_etcd_username and not self.etcd_username:
            raise ValueError(
                "auth_etcd_username needs etcd_username (the user book's etcd user is for an etcd with auth on)"
            )
        return self

    @model_validator(mode="after")
    def _server_permits_its_own_pings(self) -> Self:
        if self.keepalive_permit_time_ms * 2 > self.keepalive_time_ms:
            raise ValueError(
                f"keepalive_permit_time_ms ({self.keepalive_permit_time_ms}) must be at most half of "
                f"keepalive_time_ms ({self.keepalive_time_ms}): servers must permit the pings clients send"
            )
        return self
