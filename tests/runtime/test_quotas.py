"""Per-user byte-rate quotas without a server: the token bucket on a manual clock, the
typed refusal, rates followed live from the user book, super users and users without a
quota never refused, and the hooks' view of the caller (txmq_runtime.quotas)."""

from __future__ import annotations

import contextvars

import pytest
from support.clock import ManualClock

from txmq.errors import TooManyRequestsError, TxmqError
from txmq.v1 import auth_pb2, common_pb2, errors_pb2, pull_pb2, store_pb2
from txmq_runtime import auth
from txmq_runtime.auth import AuthKeys, Guard, Principal, Sealer, UserBook
from txmq_runtime.auth_service import stored_user
from txmq_runtime.quotas import (
    CHARGED,
    FETCH,
    PRODUCE,
    THROTTLED,
    Quotas,
    TokenBucket,
    admit_fetch,
    charge_fetch,
    charge_produce,
    charged_bytes,
    quotas_of,
)

KEYS = AuthKeys("/t")
SEALER = Sealer("service-secret-0123456789")


def put_user(book: UserBook, name: str, *, produce: int = 0, fetch: int = 0, super_user: bool = False) -> None:
    user = auth_pb2.User(
        username=name, super_user=super_user, produce_bytes_per_second=produce, fetch_bytes_per_second=fetch
    )
    book.put(KEYS.user(name), stored_user(SEALER, user, "secret-of-" + name))


def principal(name: str, *, super_user: bool = False) -> Principal:
    return Principal(name, super_user, "signature", "127.0.0.1")


def refusal(bucket: TokenBucket) -> TxmqError:
    with pytest.raises(TxmqError) as err:
        bucket.admit()
    return err.value


def test_a_bucket_admits_while_not_in_debt_and_charges_past_its_burst() -> None:
    clock = ManualClock()
    bucket = TokenBucket("alice", PRODUCE, 1000, clock.now_ms())
    bucket.admit()
    bucket.charge(1000)  # the whole burst: not in debt yet
    bucket.admit()
    bucket.charge(2500)  # bigger than the burst: still passes, once
    assert bucket.tokens == -2500
    assert bucket.wait_ms() == 2500
    clock.advance(2000)
    bucket.refill(1000, clock.now_ms())
    assert bucket.wait_ms() == 500
    clock.advance(500)
    bucket.refill(1000, clock.now_ms())
    assert bucket.wait_ms() == 0
    bucket.admit()


def test_a_bucket_holds_at_most_one_seconds_worth() -> None:
    clock = ManualClock()
    bucket = TokenBucket("alice", PRODUCE, 100, clock.now_ms())
    clock.advance(60_000)
    bucket.refill(100, clock.now_ms())
    assert bucket.tokens == 100
    bucket.refill(40, clock.now_ms())  # a lowered rate lowers what is held
    assert bucket.tokens == 40


def test_the_refusal_is_typed_retriable_and_says_how_long_to_wait() -> None:
    clock = ManualClock()
    bucket = TokenBucket("alice", FETCH, 1000, clock.now_ms())
    bucket.charge(1300)
    before = THROTTLED.labels("alice", FETCH)._value.get()
    err = refusal(bucket)
    assert isinstance(err, TooManyRequestsError)
    assert err.code == errors_pb2.CODE_QUOTA_EXCEEDED and err.retriable
    assert err.metadata == {"user": "alice", "quota": "fetch", "bytes_per_second": "1000", "retry_after_ms": "300"}
    assert "alice" in err.message and "fetch quota of 1000 bytes/s" in err.message
    assert THROTTLED.labels("alice", FETCH)._value.get() == before + 1
    # On the wire and back, as a client sees it.
    back = TxmqError.from_detail(err.to_detail())
    assert isinstance(back, TooManyRequestsError) and back.retriable and back.metadata["retry_after_ms"] == "300"


def test_quotas_follow_the_user_book_live() -> None:
    clock = ManualClock()
    book = UserBook(KEYS, SEALER)
    put_user(book, "alice", produce=100)
    quotas = Quotas(book, clock=clock)
    alice = principal("alice")
    bucket = quotas.bucket(alice, PRODUCE)
    assert bucket is not None and bucket.rate == 100
    assert quotas.bucket(alice, FETCH) is None  # no fetch quota
    bucket.charge(300)
    assert refusal(bucket).metadata["retry_after_ms"] == "2000"
    put_user(book, "alice", produce=1000)  # raised: the debt is paid at the new rate
    bucket = quotas.bucket(alice, PRODUCE)
    assert bucket is not None and refusal(bucket).metadata["retry_after_ms"] == "200"
    put_user(book, "alice")  # removed: never refused
    assert quotas.bucket(alice, PRODUCE) is None
    put_user(book, "alice", produce=1000)  # set again: a fresh, full bucket
    bucket = quotas.bucket(alice, PRODUCE)
    assert bucket is not None and bucket.tokens == 1000
    book.delete(KEYS.user("alice"))
    assert quotas.bucket(alice, PRODUCE) is None


def test_super_users_and_users_without_a_quota_have_none() -> None:
    clock = ManualClock()
    book = UserBook(KEYS, SEALER)
    put_user(book, "root", produce=1, fetch=1, super_user=True)
    put_user(book, "bob")
    quotas = Quotas(book, clock=clock)
    assert quotas.bucket(principal("root", super_user=True), PRODUCE) is None
    assert quotas.bucket(principal("root"), FETCH) is None  # the book says super user
    assert quotas.bucket(principal("bob"), PRODUCE) is None
    assert quotas.bucket(principal("nobody"), PRODUCE) is None


def as_caller(book: UserBook, who: Principal, fn, *args):  # type: ignore[no-untyped-def]
    """Run ``fn`` as the auth interceptor would: with ``who`` as the RPC's caller."""

    def run():  # type: ignore[no-untyped-def]
        auth._CALLER.set(auth._Caller(who, Guard(book)))
        return fn(*args)

    return contextvars.copy_context().run(run)


def test_the_hooks_charge_the_caller() -> None:
    book = UserBook(KEYS, SEALER)
    put_user(book, "carol", produce=100, fetch=100)
    carol = principal("carol")
    send = store_pb2.RecordFrame(sequence=1, records=b"x" * 3000)  # 30 s of debt: no refill in between
    charged = CHARGED.labels("carol", PRODUCE)._value.get()
    as_caller(book, carol, charge_produce, send)  # admitted, into debt
    assert CHARGED.labels("carol", PRODUCE)._value.get() == charged + 3000  # the records
    with pytest.raises(TxmqError) as err:
        as_caller(book, carol, charge_produce, send)
    assert err.value.code == errors_pb2.CODE_QUOTA_EXCEEDED and err.value.metadata["quota"] == "produce"
    as_caller(book, carol, admit_fetch)  # fetch has its own bucket
    as_caller(book, carol, charge_fetch, pull_pb2.PullMessageResponse(records=b"y" * 3000))
    with pytest.raises(TxmqError) as err:
        as_caller(book, carol, admit_fetch)
    assert err.value.metadata["quota"] == "fetch"
    assert quotas_of(book) is quotas_of(book)  # one per book: the buckets of the process


def test_without_auth_the_hooks_do_nothing() -> None:
    charge_produce(store_pb2.RecordFrame(records=b"x" * 10_000_000))
    admit_fetch()
    charge_fetch(pull_pb2.PullMessageResponse(records=b"y" * 10_000_000))


def test_a_negative_quota_is_refused() -> None:
    with pytest.raises(TxmqError) as err:
        auth.validate_user(auth_pb2.User(username="u", produce_bytes_per_second=-1), secret_required=False)
    assert err.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT


def test_what_a_request_or_an_answer_is_charged() -> None:
    assert charged_bytes(store_pb2.RecordFrame(sequence=7, records=b"r" * 500)) == 500
    assert charged_bytes(pull_pb2.PullMessageResponse(records=b"r" * 400, store_id="s")) == 400
    answer = pull_pb2.PullMessageResponse(messages=[common_pb2.MessageView(message=common_pb2.Message(body=b"m"))])
    assert charged_bytes(answer) == answer.ByteSize()
    send = store_pb2.SendMessageRequest(message=common_pb2.Message(topic="T", body=b"b" * 300))
    assert charged_bytes(send) == send.ByteSize() > 300
