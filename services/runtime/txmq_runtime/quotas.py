"""Per-user byte-rate quotas (docs/security.md "Quotas"): Kafka's produce and fetch quotas.

A user with a quota (``User.produce_bytes_per_second``, ``fetch_bytes_per_second``) has,
per direction and per service process, a token bucket filling at R bytes a second and
holding at most one second's worth. As in Kafka, a request is refused while the bucket is
in debt (``CODE_QUOTA_EXCEEDED``, retriable, ``retry_after_ms`` = debt / R); otherwise it
is admitted and charged its bytes, which may take the bucket into debt: a request larger
than the burst still passes, once, and the user then waits it off.

Rates follow the user book (``UserBook``), read again whenever it changes, so a change
is seen at the next request. Super users (the services' own identity included) have no quota whatever
their fields say; without auth nobody has one. The buckets live in the process, as
Kafka's live in a broker: a user spread over three stores may send three times its rate.

The hooks (the store's send RPCs, the pull service's PullMessage) call ``charge_produce``
/ ``admit_fetch`` + ``charge_fetch``; they find the caller, and its book's ``Quotas``, in
the context the auth interceptor set. A user without a quota costs them a context-variable
read and a dictionary look-up.
"""

from __future__ import annotations

import math
import weakref

from google.protobuf.message import Message
from prometheus_client import Counter

from txmq.errors import error
from txmq.v1 import errors_pb2, pull_pb2, store_pb2
from txmq_runtime.auth import Principal, UserBook, current_caller
from txmq_runtime.clock import SYSTEM_CLOCK, Clock

PRODUCE = "produce"
FETCH = "fetch"

THROTTLED = Counter(
    "txmq_quota_throttled", "Requests refused because their user was over its byte-rate quota.", ["user", "direction"]
)
CHARGED = Counter("txmq_quota_bytes", "Bytes charged to users' byte-rate quotas.", ["user", "direction"])


class TokenBucket:
    """One user's bucket in one direction: R bytes a second, at most R held; ``tokens``
    below 0 is debt."""

    __slots__ = ("_charged", "_throttled", "at_ms", "direction", "rate", "tokens", "user")

    def __init__(self, user: str, direction: str, rate: int, now_ms: int) -> None:
        self.user = user
        self.direction = direction
        self.rate = rate
        self.tokens = float(rate)  # a new bucket starts full: one second's worth
        self.at_ms = now_ms
        self._charged = CHARGED.labels(user, direction)
        self._throttled = THROTTLED.labels(user, direction)

    def refill(self, rate: int, now_ms: int) -> None:
        """Add what the rate earned since the last refill, up to one second's worth (a
        changed rate applies from now; a lowered one also lowers what is held)."""
        elapsed = now_ms - self.at_ms
        if elapsed > 0:
            self.tokens += elapsed * self.rate / 1000
            self.at_ms = now_ms
        self.rate = rate
        if self.tokens > rate:
            self.tokens = float(rate)

    def wait_ms(self) -> int:
        """0 unless in debt; else how long until the debt is paid."""
        return math.ceil(-self.tokens * 1000 / self.rate) if self.tokens < 0 else 0

    def admit(self) -> None:
        """Raise ``CODE_QUOTA_EXCEEDED`` while in debt (counted in txmq_quota_throttled)."""
        wait_ms = self.wait_ms()
        if wait_ms:
            self._throttled.inc()
            raise error(
                errors_pb2.CODE_QUOTA_EXCEEDED,
                f"user {self.user} is over its {self.direction} quota of {self.rate} bytes/s: retry in {wait_ms} ms",
                user=self.user,
                quota=self.direction,
                bytes_per_second=str(self.rate),
                retry_after_ms=str(wait_ms),
            )

    def charge(self, nbytes: int) -> None:
        """Take ``nbytes`` (into debt if need be)."""
        self.tokens -= nbytes
        self._charged.inc(nbytes)


class Quotas:
    """The buckets of one service process, following its user book."""

    def __init__(self, book: UserBook, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._book = book
        self._clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        #: (produce, fetch) rates of the users with a quota, as of the book's ``_version``.
        self._rates: dict[str, tuple[int, int]] = {}
        self._version = -1

    def bucket(self, principal: Principal, direction: str) -> TokenBucket | None:
        """``principal``'s bucket, refilled to now; None when it has no quota (none set,
        or a super user)."""
        if principal.super_user:
            return None
        if self._version != self._book.version:
            self._reload()
        username = principal.username
        rates = self._rates.get(username)
        if rates is None:
            return None
        rate = rates[0] if direction == PRODUCE else rates[1]
        if rate <= 0:
            return None
        now_ms = self._clock.now_ms()
        key = (username, direction)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(username, direction, rate, now_ms)
        else:
            bucket.refill(rate, now_ms)
        return bucket

    def _reload(self) -> None:
        """The book changed: read the rates again (a user's fields once, not on every
        request) and forget the buckets of quotas removed."""
        book = self._book
        self._version = book.version
        self._rates = {
            name: (known.user.produce_bytes_per_second, known.user.fetch_bytes_per_second)
            for name, known in book.users.items()
            if not known.user.super_user
            and (known.user.produce_bytes_per_second > 0 or known.user.fetch_bytes_per_second > 0)
        }
        self._buckets = {
            (name, direction): bucket
            for (name, direction), bucket in self._buckets.items()
            if self._rates.get(name, (0, 0))[0 if direction == PRODUCE else 1] > 0
        }


_BY_BOOK: weakref.WeakKeyDictionary[UserBook, Quotas] = weakref.WeakKeyDictionary()
#: The last book asked for and its Quotas: a service process has one book, and a weak
#: dictionary look-up costs more than the rest of a charge.
_last: tuple[UserBook | None, Quotas | None] = (None, None)


def quotas_of(book: UserBook) -> Quotas:
    """The one ``Quotas`` of a user book (of a service process)."""
    global _last
    last_book, quotas = _last
    if last_book is book and quotas is not None:
        return quotas
    quotas = _BY_BOOK.get(book)
    if quotas is None:
        quotas = _BY_BOOK[book] = Quotas(book)
    _last = (book, quotas)
    return quotas


def _bucket(direction: str) -> TokenBucket | None:
    caller = current_caller()
    if caller is None:  # auth off
        return None
    principal, book = caller
    return quotas_of(book).bucket(principal, direction)


_RECORDS = (store_pb2.RecordFrame, pull_pb2.PullMessageResponse)


def charged_bytes(message: Message) -> int:
    """What a request or an answer is charged: the records of a frame or of a raw pull
    answer (a few bytes short of its size on the wire, for half the cost: upb's
    ``ByteSize`` serialises the message, copying every record twice), else its size on
    the wire."""
    if type(message) in _RECORDS:  # an isinstance() on upb's classes costs more than the rest
        records = len(message.records)
        if records:
            return records
    return message.ByteSize()


def charge_produce(request: Message) -> None:
    """A send by the current caller: refused (``CODE_QUOTA_EXCEEDED``) while its produce
    quota is in debt, else charged (``charged_bytes``)."""
    bucket = _bucket(PRODUCE)
    if bucket is not None:
        bucket.admit()
        bucket.charge(charged_bytes(request))


def admit_fetch() -> None:
    """A pull by the current caller: refused while its fetch quota is in debt (charged
    with ``charge_fetch`` once the answer is known)."""
    bucket = _bucket(FETCH)
    if bucket is not None:
        bucket.admit()


def charge_fetch(response: Message) -> None:
    """Charge the current caller's fetch quota the answer's size (it may go into debt:
    the next pull is then refused until it is paid)."""
    bucket = _bucket(FETCH)
    if bucket is not None:
        bucket.charge(charged_bytes(response))
