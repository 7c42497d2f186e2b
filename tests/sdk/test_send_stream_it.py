"""The Producer's coalesced sends over Store.SendStream, against the real session cluster:
many threads, singles and batches in shared frames, each with its own result or error."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from txmq import Admin, ForbiddenError, Message, Perm, Producer, SendResult, SendStatus
from txmq.v1 import errors_pb2

THREADS = 12


def test_concurrent_sends_and_batches_are_each_stored_once(bootstrap: str, admin: Admin, topic: str) -> None:
    # One frame in flight: senders pile up behind it and share the next frames.
    with Producer("sdk-stream-producer", bootstrap, max_in_flight_frames=1) as producer:

        def work(worker: int) -> list[tuple[bytes, SendResult]]:
            out: list[tuple[bytes, SendResult]] = []
            for i in range(20):
                if i % 5 == 4:
                    msgs = [Message(topic, b"%d-%d-%d" % (worker, i, j), tags="b") for j in range(8)]
                    out += zip([m.body for m in msgs], producer.send_batch(msgs), strict=True)
                else:
                    body = b"%d-%d" % (worker, i)
                    out.append((body, producer.send(Message(topic, body, keys=(f"k{worker}",)))))
            return out

        with ThreadPoolExecutor(THREADS) as pool:
            sent = [pair for part in pool.map(work, range(THREADS)) for pair in part]

    assert len(sent) == THREADS * (16 + 4 * 8)
    assert all(r.status is SendStatus.OK for _, r in sent)
    assert len({r.commit_log_offset for _, r in sent}) == len(sent)
    assert len({r.msg_id for _, r in sent}) == len(sent)
    # Per queue, the queue offsets handed out are exactly 0..n-1: no gap, no reuse.
    per_queue: dict[int, list[int]] = defaultdict(list)
    for _, r in sent:
        per_queue[r.message_queue.queue_id].append(r.queue_offset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_queue.values())
    for body, r in sent[:60]:
        viewed = admin.view_message(r.offset_msg_id)
        assert (viewed.body, viewed.msg_id, viewed.queue_offset) == (body, r.msg_id, r.queue_offset)
    assert len(admin.query_messages_by_key(topic, "k3")) == 16


def test_a_record_the_store_refuses_fails_only_its_sender(
    bootstrap: str, admin: Admin, new_topic: Callable[..., str]
) -> None:
    open_topic, closed_topic = new_topic(), new_topic()
    with Producer("sdk-stream-producer", bootstrap, linger_ms=200, max_in_flight_frames=1) as producer:
        producer.send(Message(closed_topic, b"route cached"))
        admin.update_topic(closed_topic, perm=Perm.READ)  # the producer's cached route still says writable
        with ThreadPoolExecutor(4) as pool:
            ok = [pool.submit(producer.send, Message(open_topic, b"ok-%d" % i)) for i in range(3)]
            refused = pool.submit(producer.send, Message(closed_topic, b"refused"))
            results = [f.result(timeout=30) for f in ok]
            with pytest.raises(ForbiddenError) as info:
                refused.result(timeout=30)
    assert info.value.code == errors_pb2.CODE_TOPIC_NOT_WRITABLE
    assert sorted(admin.view_message(r.offset_msg_id).body for r in results) == [b"ok-0", b"ok-1", b"ok-2"]
