import grpc
import pytest

from txmq.errors import (
    ConflictError,
    NotFoundError,
    TxmqError,
    UnavailableError,
    error,
)
from txmq.v1 import errors_pb2
from txmq_runtime.tags import MATCH_ALL, parse_tag_expression, tag_hash_code


def test_error_classes_follow_code_ranges() -> None:
    err = error(errors_pb2.CODE_TOPIC_NOT_FOUND, "no topic t", topic="t")
    assert isinstance(err, NotFoundError)
    assert err.grpc_status == grpc.StatusCode.NOT_FOUND
    assert err.metadata == {"topic": "t"}
    assert isinstance(error(errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED, "x"), ConflictError)
    assert error(errors_pb2.CODE_TOO_MANY_REQUESTS, "x").retriable
    assert "CODE_TOPIC_NOT_FOUND" in str(err)


def test_error_detail_round_trip() -> None:
    err = error(errors_pb2.CODE_SERVICE_NOT_READY, "recovering")
    back = TxmqError.from_detail(err.to_detail())
    assert isinstance(back, UnavailableError) and back.retriable
    assert (back.code, back.message) == (err.code, err.message)


def test_java_string_hash_code() -> None:
    # Values of java.lang.String#hashCode.
    assert tag_hash_code("TagA") == 2598919
    assert tag_hash_code("") == 0
    assert tag_hash_code("hello world, this overflows") == _java_hash("hello world, this overflows")
    assert tag_hash_code("polygenelubricants") == -2147483648


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize("expr", ["", "*", "  *  "])
def test_tag_match_all(expr: str) -> None:
    assert parse_tag_expression(expr) is MATCH_ALL


def test_tag_or_expression() -> None:
    f = parse_tag_expression(" TagA ||TagB|| ")
    assert f.tags == {"TagA", "TagB"}
    assert f.match_code(tag_hash_code("TagB")) and not f.match_code(tag_hash_code("TagC"))
    with pytest.raises(ValueError):
        parse_tag_expression(" || ")
