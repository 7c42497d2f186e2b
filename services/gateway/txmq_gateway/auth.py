"""Authentication of the v2 protocol: ``authorization: MQv2-HMAC-SHA1 Credential=<ak>,
SignedHeaders=x-mq-date-time, Signature=<hex>``, the signature being HMAC-SHA1 of the
``x-mq-date-time`` header's value keyed by the access key's secret. Clients differ in hex
case (Java: upper, Python: lower), so it is compared case-insensitively.

The signature covers the date alone, so the date must be recent: within
``auth_clock_skew_ms`` (15 min) of the gateway's clock either way, else a captured request
could be replayed for ever. RocketMQ's proxy checks no window at all. The date is
``yyyyMMdd'T'HHmmss'Z'`` in UTC (what the clients write); RFC 3339 with an offset
(``2024-01-01T12:00:00.123+08:00``, the Rust client's) is read too. Several official
clients (Java, Python, Go, C#) write their *local* time followed by ``Z``: outside UTC
they are refused, with a message that says so, unless they run with ``TZ=UTC``.

Where secrets come from is a ``SecretLookup``: access key -> secret, None when unknown.
``SingleKey`` is the one configured pair of the settings (``access_key``/``secret_key``);
with ``auth_enabled`` it is the cluster's user book instead (``service.authentication``).
``Authenticator.check`` returns the access key it authenticated."""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta, timezone

from txmq.signing import ALGORITHM, AUTHORIZATION_HEADER, DATE_HEADER, parse_authorization, sign
from txmq_gateway.settings import GatewaySettings
from txmq_gateway.status import GatewayError, shorten
from txmq_gateway.v2 import Code
from txmq_runtime.clock import WallClock, wall_clock_ms

BAD_CREDENTIALS = "unknown access key or a signature that does not match"


#: The date format of ``x-mq-date-time`` (Java notation, as RocketMQ's clients name it).
DATE_FORMAT = "yyyyMMdd'T'HHmmss'Z'"
#: How far a signed date may be from the gateway's clock, either way (the default of the
#: ``auth_clock_skew_ms`` setting every service has).
DEFAULT_CLOCK_SKEW_MS = 15 * 60_000

Metadata = Iterable[tuple[str, str | bytes]]
#: Access key -> its secret key, None when the access key is unknown.
SecretLookup = Callable[[str], bytes | None]

_COMPACT_DATE = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})Z")
_RFC3339_DATE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})"
)
# Header values the gateway reads are printable ASCII (gRPC's rule for text headers).
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")
# A client this far off (or less) may be writing local time as UTC: say so.
_LOCAL_TIME_HINT_MS = 14 * 3_600_000


class SingleKey:
    """The ``SecretLookup`` of one configured access key."""

    def __init__(self, access_key: str, secret_key: str) -> None:
        if not (access_key and secret_key):
            raise ValueError("an access key and its secret key are both required")
        self.access_key = access_key
        self._secret = secret_key.encode()

    def __call__(self, access_key: str) -> bytes | None:
        return self._secret if access_key == self.access_key else None


class Authenticator:
    """Checks a call's metadata: signed by a known access key at a recent date. Off when
    ``secret_for`` is None. ``clock_skew_ms`` 0 checks no window."""

    def __init__(
        self,
        secret_for: SecretLookup | None,
        *,
        clock_skew_ms: int = DEFAULT_CLOCK_SKEW_MS,
        clock: WallClock = wall_clock_ms,
    ) -> None:
        self.secret_for = secret_for
        self.clock_skew_ms = clock_skew_ms
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: GatewaySettings, *, clock: WallClock = wall_clock_ms) -> Authenticator:
        """The settings' one access key (off when it or its secret is empty)."""
        lookup = (
            SingleKey(settings.access_key, settings.secret_key) if settings.access_key and settings.secret_key else None
        )
        return cls(lookup, clock_skew_ms=settings.auth_clock_skew_ms, clock=clock)

    @property
    def enabled(self) -> bool:
        return self.secret_for is not None

    def check(self, metadata: Metadata | None, *, certificate_user: str | None = None) -> str | None:
        """The access key that signed the call (None when authentication is off); raise
        GatewayError(UNAUTHORIZED) saying why when it is not signed as it must be. A call
        that is not signed but came with a verified client certificate is taken as the
        user ``certificate_user`` (its common name) names, when that user exists and is
        enabled; a signature, when there is one, wins."""
        if self.secret_for is None:
            return None
        header = header_text(metadata, AUTHORIZATION_HEADER, Code.UNAUTHORIZED)
        if not header and certificate_user is not None:
            if self.secret_for(certificate_user) is None:
                raise GatewayError(Code.UNAUTHORIZED, "the client certificate names no enabled user")
            return certificate_user
        if not header:
            raise GatewayError(Code.UNAUTHORIZED, "authorization header is required")
        fields = parse_authorization(header)
        if fields.get("algorithm") != ALGORITHM:
            raise GatewayError(Code.UNAUTHORIZED, f"unsupported authorization algorithm; expected {ALGORITHM}")
        access_key = fields.get("Credential", "")
        if not access_key:
            raise GatewayError(Code.UNAUTHORIZED, "the authorization header names no Credential (access key)")
        signed = [h.strip().lower() for h in fields.get("SignedHeaders", "").split(";") if h.strip()]
        if signed != [DATE_HEADER]:
            raise GatewayError(Code.UNAUTHORIZED, f"SignedHeaders must be {DATE_HEADER}")
        date = header_text(metadata, DATE_HEADER, Code.UNAUTHORIZED)
        if not date:
            raise GatewayError(Code.UNAUTHORIZED, f"{DATE_HEADER} header is required")
        try:
            date_ms = parse_date_time(date)
        except ValueError:
            raise GatewayError(
                Code.UNAUTHORIZED,
                f"{DATE_HEADER} {shorten(date)} is not a UTC date {DATE_FORMAT}, e.g. 20240101T120000Z",
            ) from None
        # One answer for an unknown user and a wrong signature: which user names exist is
        # not for an unauthenticated caller to learn.
        secret = self.secret_for(access_key)
        expected = sign(secret or b"\0", date).encode()
        if secret is None or not hmac.compare_digest(expected, fields.get("Signature", "").lower().encode()):
            raise GatewayError(Code.UNAUTHORIZED, BAD_CREDENTIALS)
        self._check_window(date, date_ms)
        return access_key

    def _check_window(self, date: str, date_ms: int) -> None:
        if self.clock_skew_ms <= 0:
            return
        now_ms = self._clock()
        off_ms = date_ms - now_ms
        if abs(off_ms) <= self.clock_skew_ms:
            return
        message = (
            f"{DATE_HEADER} {shorten(date)} is {_span(abs(off_ms))} {'ahead of' if off_ms > 0 else 'behind'} "
            f"the gateway's clock ({format_date_time(now_ms)}); at most {_span(self.clock_skew_ms)} either way "
            "is accepted (auth_clock_skew_ms)"
        )
        if abs(off_ms) <= _LOCAL_TIME_HINT_MS + self.clock_skew_ms:
            message += (
                "; a client that writes its local time as UTC (RocketMQ's Java, Python, Go, C# clients) "
                "must run with TZ=UTC"
            )
        raise GatewayError(Code.UNAUTHORIZED, message)


def header_text(metadata: Metadata | None, name: str, code: int) -> str:
    """The value of header ``name`` (the first; "" when absent) as text. A value that is
    not printable ASCII (gRPC's rule for text headers: never the case for a header the
    official clients send), or binary and not UTF-8, raises GatewayError(``code``).
    Other headers are not looked at."""
    for key, value in metadata or ():
        if key.lower() != name:
            continue
        if isinstance(value, bytes):
            try:
                value = value.decode("ascii")
            except UnicodeDecodeError:
                raise GatewayError(code, f"the {name} header is not ASCII text") from None
        if not _PRINTABLE_ASCII.fullmatch(value):
            raise GatewayError(code, f"the {name} header is not printable ASCII text")
        return value
    return ""


def parse_date_time(text: str) -> int:
    """Milliseconds since the epoch of ``yyyyMMdd'T'HHmmss'Z'`` (UTC), or of an RFC 3339
    date with a fraction of a second and an offset; ValueError for anything else."""
    compact = _COMPACT_DATE.fullmatch(text)
    if compact:
        y, mo, d, h, mi, s = (int(g) for g in compact.groups())
        return _epoch_ms(datetime(y, mo, d, h, mi, s, tzinfo=UTC))
    rfc = _RFC3339_DATE.fullmatch(text)
    if rfc is None:
        raise ValueError(f"not a date: {text!r}")
    y, mo, d, h, mi, s = (int(g) for g in rfc.groups()[:6])
    fraction, zone = rfc.group(7) or "", rfc.group(8)
    tz = UTC
    if zone != "Z":
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[4:6])
        if zone_hours > 23 or zone_minutes > 59:
            raise ValueError(f"not a time zone offset: {zone!r}")
        offset = timedelta(hours=zone_hours, minutes=zone_minutes)
        tz = timezone(-offset if zone[0] == "-" else offset)
    micros = int((fraction + "000000")[:6])
    return _epoch_ms(datetime(y, mo, d, h, mi, s, micros, tzinfo=tz))


def format_date_time(epoch_ms: int) -> str:
    """``yyyyMMdd'T'HHmmss'Z'`` of ``epoch_ms`` (UTC)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch_ms // 1000))


def _epoch_ms(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return delta // timedelta(milliseconds=1)


def _span(ms: int) -> str:
    """``ms`` for a person: 15m, 8h00m, 2d3h, 999ms."""
    if ms < 1_000:
        return f"{ms}ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m" if seconds % 60 == 0 else f"{minutes}m{seconds % 60:02d}s"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h{minutes % 60:02d}m"
    return f"{hours // 24}d{hours % 24}h"
