"""The fault suite's checker finds what it looks for (a check that cannot fail is a defect)."""

from __future__ import annotations

from .group import Acked, check


def test_the_checker_counts_lost_duplicated_and_moved_messages():
    acked = [Acked(b"a", 0, 0), Acked(b"b", 0, 1), Acked(b"c", 1, 0), Acked(b"d", 1, 1)]
    stored = {0: [(0, b"a"), (1, b"b"), (2, b"b")], 1: [(0, b"d"), (1, b"x")]}
    assert check(acked, stored) == {"acked": 4, "lost": 1, "duplicated": 1, "moved": 1}
    assert check(acked[:2], {0: [(0, b"a"), (1, b"b")]}) == {"acked": 2, "lost": 0, "duplicated": 0, "moved": 0}


def test_the_checker_refuses_a_queue_with_a_gap():
    try:
        check([], {0: [(0, b"a"), (2, b"b")]})
    except AssertionError as exc:
        assert "not contiguous" in str(exc)
    else:
        raise AssertionError("a gap went unnoticed")


def test_the_checker_sees_a_rolled_back_body():
    verdict = check([Acked(b"a", 0, 0)], {0: [(0, b"a"), (1, b"r")]}, [b"r", b"q"])
    assert verdict["rolled_back_visible"] == 1
