"""Authentication of the v2 protocol: ``authorization: MQv2-HMAC-SHA1 Credential=<ak>,
SignedHeaders=x-mq-date-time, Signature=<hex>``, the signature being HMAC-SHA1 of the
``x-mq-date-time`` header's value keyed by the secret key. Clients differ in hex case
(Java: upper, Python: lower), so it is compared case-insensitively."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from txmq_gateway.status import GatewayError
from txmq_gateway.v2 import Code

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"


class Authenticator:
    """Checks a call's metadata against one configured access key (off when empty)."""

    def __init__(self, access_key: str, secret_key: str) -> None:
        self.enabled = bool(access_key and secret_key)
        self._access_key = access_key
        self._secret_key = secret_key.encode()

    def check(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        """Raise GatewayError(UNAUTHORIZED) unless the metadata is signed with the key."""
        if not self.enabled:
            return
        headers = {k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in (metadata or ())}
        header = headers.get("authorization", "")
        if not header:
            raise GatewayError(Code.UNAUTHORIZED, "authorization header is required")
        fields = parse_authorization(header)
        if fields.get("algorithm") != ALGORITHM:
            raise GatewayError(Code.UNAUTHORIZED, f"unsupported authorization algorithm; expected {ALGORITHM}")
        if fields.get("Credential", "") != self._access_key:
            raise GatewayError(Code.UNAUTHORIZED, "unknown access key")
        signed = [h.strip().lower() for h in fields.get("SignedHeaders", "").split(";") if h.strip()]
        if signed != [DATE_HEADER]:
            raise GatewayError(Code.UNAUTHORIZED, f"SignedHeaders must be {DATE_HEADER}")
        date = headers.get(DATE_HEADER, "")
        if not date:
            raise GatewayError(Code.UNAUTHORIZED, f"{DATE_HEADER} header is required")
        expected = sign(self._secret_key, date)
        if not hmac.compare_digest(expected, fields.get("Signature", "").lower()):
            raise GatewayError(Code.UNAUTHORIZED, "signature does not match")


def sign(secret_key: bytes, date_time: str) -> str:
    """Lower-case hex HMAC-SHA1 of ``date_time`` keyed by ``secret_key``."""
    return hmac.new(secret_key, date_time.encode(), hashlib.sha1).hexdigest()


def parse_authorization(header: str) -> dict[str, str]:
    """``ALGO K1=V1, K2=V2`` -> {"algorithm": ALGO, K1: V1, K2: V2} (malformed parts skipped)."""
    algorithm, _, rest = header.strip().partition(" ")
    fields = {"algorithm": algorithm}
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields
