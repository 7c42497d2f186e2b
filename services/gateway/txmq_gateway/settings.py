"""Settings of the gateway (flags --field_name, env TXMQ_GATEWAY_FIELD_NAME, Helm
``gateway.field_name``). The RocketMQ 5 proxy's defaults are kept where one exists."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from txmq_runtime.settings import ServiceSettings, service_config


class GatewaySettings(ServiceSettings):
    model_config = service_config("gateway")

    access_key: str = Field(
        "",
        description="Access key clients sign with (MQv2-HMAC-SHA1). Empty, or secret_key empty: no authentication.",
    )
    secret_key: str = Field(
        "", description="Secret key of access_key; prefer the env var TXMQ_GATEWAY_SECRET_KEY to a flag."
    )
    tls_port: int = Field(
        -1,
        ge=-1,
        le=65535,
        description="Also serve the v2 protocol over TLS on this port (0 picks a free one; -1: no TLS), with "
        "tls_cert_file and tls_key_file, client certificates as tls_port_client_auth says (RocketMQ's Java "
        "client uses TLS by default). The service port stays as tls_mode says (plaintext by default).",
    )
    tls_port_client_auth: Literal["none", "require"] = Field(
        "none",
        description="Client certificates on tls_port: none (not asked for: what RocketMQ's clients expect) or "
        "require (a connection without one that tls_ca_file verifies is refused). With auth_enabled, a call that is "
        "not signed is taken as the user its certificate's common name names, on any port that verified one.",
    )
    route_client_endpoints: bool = Field(
        False,
        description="Routes name the address the client connected to (its access point) instead of this "
        "gateway's advertised_address; for replicas behind one load-balanced address.",
    )
    max_body_size_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1,
        description="Largest message body accepted; sent to clients as publishing.max_body_size (RocketMQ: 4 MiB).",
    )
    send_dedupe_window_ms: int = Field(
        120_000,
        ge=0,
        description="A send that repeats a message_id seen this recently is answered with the first result "
        "instead of being stored again (client retries); 0 turns it off.",
    )
    send_dedupe_max_entries: int = Field(
        200_000, ge=1, description="Most message ids remembered for deduplication (oldest forgotten first)."
    )
    backend_rpc_timeout_ms: int = Field(
        5_000, ge=1, description="Deadline of each unary call to a store, pull or txcheck instance."
    )
    client_expiry_ms: int = Field(
        60_000,
        ge=1_000,
        description="A client that sent no heartbeat and holds no telemetry stream for this long is forgotten "
        "(RocketMQ clients heartbeat every 10 s).",
    )
    min_invisible_duration_ms: int = Field(
        10_000, ge=0, description="Shortest invisible duration a receive or change may ask for (RocketMQ: 10 s)."
    )
    max_invisible_duration_ms: int = Field(
        12 * 3_600_000, ge=1, description="Longest invisible duration a receive or change may ask for (RocketMQ: 12 h)."
    )
    default_invisible_duration_ms: int = Field(
        30_000, ge=1, description="Invisible duration of a receive that asks for none."
    )
    max_long_polling_timeout_ms: int = Field(
        30_000, ge=0, description="Longest a receive is held waiting for messages; longer requests are cut."
    )
    max_receive_batch_size: int = Field(32, ge=1, description="Most messages one receive returns.")
    max_delivery_attempts: int = Field(
        17,
        ge=1,
        description="After this many deliveries without an ack a message goes to %DLQ%<group> "
        "(RocketMQ: 16 retries + the first delivery).",
    )

    @model_validator(mode="after")
    def _tls_needs_files(self) -> GatewaySettings:
        if self.tls_port >= 0 and not (self.tls_cert_file and self.tls_key_file):
            raise ValueError("tls_port needs tls_cert_file and tls_key_file")
        if self.tls_port_client_auth != "none" and (self.tls_port < 0 or not self.tls_ca_file):
            raise ValueError(
                "tls_port_client_auth needs tls_port and tls_ca_file (the CA client certificates are checked with)"
            )
        for name in ("port", "plaintext_port", "probe_port"):
            if self.tls_port > 0 and getattr(self, name) == self.tls_port:
                raise ValueError(f"tls_port ({self.tls_port}) must differ from {name}")
        return self
