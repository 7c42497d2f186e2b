"""The store status -> pull status table (RocketMQ's PullMessageProcessor switch,
with the client's ResponseCode -> PullStatus mapping folded in)."""

from __future__ import annotations

import pytest

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, store_pb2
from txmq_pull.processor import STATUS_MAP, pull_status, to_pull_response

G = store_pb2
P = pull_pb2

# (store status, request offset) -> pull status
TABLE = [
    (G.GET_MESSAGE_STATUS_FOUND, 0, P.PULL_STATUS_FOUND),
    (G.GET_MESSAGE_STATUS_FOUND, 7, P.PULL_STATUS_FOUND),
    # retry at once
    (G.GET_MESSAGE_STATUS_MESSAGE_WAS_REMOVING, 3, P.PULL_STATUS_NO_MATCHED_MSG),
    (G.GET_MESSAGE_STATUS_NO_MATCHED_MESSAGE, 3, P.PULL_STATUS_NO_MATCHED_MSG),
    (G.GET_MESSAGE_STATUS_NO_MATCHED_MESSAGE, 0, P.PULL_STATUS_NO_MATCHED_MSG),
    # empty / unknown queue: offset 0 is "nothing yet", any other offset moved
    (G.GET_MESSAGE_STATUS_NO_MATCHED_LOGIC_QUEUE, 0, P.PULL_STATUS_NO_NEW_MSG),
    (G.GET_MESSAGE_STATUS_NO_MATCHED_LOGIC_QUEUE, 5, P.PULL_STATUS_OFFSET_ILLEGAL),
    (G.GET_MESSAGE_STATUS_NO_MESSAGE_IN_QUEUE, 0, P.PULL_STATUS_NO_NEW_MSG),
    (G.GET_MESSAGE_STATUS_NO_MESSAGE_IN_QUEUE, 1, P.PULL_STATUS_OFFSET_ILLEGAL),
    # retry later (long poll)
    (G.GET_MESSAGE_STATUS_OFFSET_FOUND_NULL, 4, P.PULL_STATUS_NO_NEW_MSG),
    (G.GET_MESSAGE_STATUS_OFFSET_OVERFLOW_ONE, 9, P.PULL_STATUS_NO_NEW_MSG),
    (G.GET_MESSAGE_STATUS_OFFSET_OVERFLOW_ONE, 0, P.PULL_STATUS_NO_NEW_MSG),
    # offset moved
    (G.GET_MESSAGE_STATUS_OFFSET_OVERFLOW_BADLY, 99, P.PULL_STATUS_OFFSET_ILLEGAL),
    (G.GET_MESSAGE_STATUS_OFFSET_TOO_SMALL, 0, P.PULL_STATUS_OFFSET_ILLEGAL),
    (G.GET_MESSAGE_STATUS_OFFSET_TOO_SMALL, 2, P.PULL_STATUS_OFFSET_ILLEGAL),
]


@pytest.mark.parametrize(("store_status", "offset", "expected"), TABLE)
def test_status_table(store_status: int, offset: int, expected: int) -> None:
    assert pull_status(store_status, offset) == expected


def test_every_store_status_is_mapped() -> None:
    statuses = set(G.GetMessageStatus.values()) - {G.GET_MESSAGE_STATUS_UNSPECIFIED}
    assert set(STATUS_MAP) == statuses
    assert {s for s, _, _ in TABLE} == statuses


def test_unspecified_status_is_an_internal_error() -> None:
    with pytest.raises(TxmqError) as info:
        pull_status(G.GET_MESSAGE_STATUS_UNSPECIFIED, 0)
    assert info.value.code == errors_pb2.CODE_INTERNAL_ERROR


def test_response_carries_the_store_offsets_and_messages() -> None:
    view = common_pb2.MessageView(message=common_pb2.Message(topic="T", body=b"x"), queue_offset=4)
    reply = store_pb2.GetMessageResponse(
        status=G.GET_MESSAGE_STATUS_FOUND, next_begin_offset=5, min_offset=1, max_offset=9, messages=[view]
    )
    resp = to_pull_response(reply, 4)
    assert (resp.status, resp.next_begin_offset, resp.min_offset, resp.max_offset) == (P.PULL_STATUS_FOUND, 5, 1, 9)
    assert list(resp.messages) == [view]


def test_offset_moved_keeps_the_corrected_next_offset() -> None:
    reply = store_pb2.GetMessageResponse(
        status=G.GET_MESSAGE_STATUS_OFFSET_TOO_SMALL, next_begin_offset=10, min_offset=10, max_offset=20
    )
    resp = to_pull_response(reply, 3)
    assert (resp.status, resp.next_begin_offset) == (P.PULL_STATUS_OFFSET_ILLEGAL, 10)
    assert not resp.messages
