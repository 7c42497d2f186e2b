"""Crash safety: kill -9 a store in sync flush mode while a client sends, restart it on
the same data, and check that every acknowledged message is there, intact, at its
offset, with contiguous queue offsets and nothing torn served."""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from support import ServiceProcess

from txmq.records import encode_for_send
from txmq.v1 import common_pb2, store_pb2, store_pb2_grpc

TOPIC = "CrashTopic"
QUEUES = 4
BATCH = 16
ACKED_BATCHES_BEFORE_KILL = 25


def body_for(batch: int, index: int) -> bytes:
    """A self-checking body of varied size: header, payload, digest of both."""
    rng = random.Random(batch * 1_000 + index)
    payload = rng.randbytes(rng.choice((10, 300, 4_000, 70_000)))
    head = f"b{batch}-m{index}|".encode()
    return head + payload + hashlib.sha256(head + payload).digest()


def intact(body: bytes) -> bool:
    return len(body) > 32 and hashlib.sha256(body[:-32]).digest() == body[-32:]


@dataclass(slots=True)
class Acked:
    queue_id: int
    queue_offset: int
    body: bytes


class Sender(threading.Thread):
    """Sends batches until the store goes away; keeps what was acknowledged."""

    def __init__(self, address: str) -> None:
        super().__init__(name="crash-sender", daemon=True)
        self.address = address
        self.acked: list[Acked] = []
        self.enough_acked = threading.Event()
        self.failure: grpc.RpcError | None = None
        self.unexpected: BaseException | None = None

    def run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = store_pb2_grpc.StoreStub(channel)
            batch = 0
            try:
                while True:
                    bodies = [body_for(batch, i) for i in range(BATCH)]
                    request = store_pb2.SendBatchRequest(
                        messages=[common_pb2.Message(topic=TOPIC, body=b, tags="crash") for b in bodies]
                    )
                    response = stub.SendBatch(request, timeout=30)
                    for body, result in zip(bodies, response.results, strict=True):
                        if result.status != store_pb2.SEND_STATUS_OK:
                            raise AssertionError(f"not stored as acknowledged: {result}")
                        self.acked.append(Acked(result.queue.queue_id, result.queue_offset, body))
                    batch += 1
                    if batch == ACKED_BATCHES_BEFORE_KILL:
                        self.enough_acked.set()
            except grpc.RpcError as err:  # the store was killed under us
                self.failure = err
            except BaseException as exc:  # reported by the test, not lost in this thread
                self.unexpected = exc
            finally:
                self.enough_acked.set()  # never leave the test waiting


def read_queue(stub: store_pb2_grpc.StoreStub, queue_id: int) -> list[common_pb2.MessageView]:
    views, offset = [], 0
    while True:
        response = stub.GetMessage(
            store_pb2.GetMessageRequest(topic=TOPIC, queue_id=queue_id, offset=offset, max_messages=32), timeout=30
        )
        if response.status != store_pb2.GET_MESSAGE_STATUS_FOUND:
            assert offset == response.max_offset, (queue_id, offset, response)
            return views
        views.extend(response.messages)
        offset = response.next_begin_offset


def sync_store_with_topic(private_store: Callable[..., ServiceProcess]) -> ServiceProcess:
    store = private_store("--flush_mode", "sync")
    with grpc.insecure_channel(store.address) as channel:
        store_pb2_grpc.StoreAdminStub(channel).CreateTopic(
            store_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            ),
            timeout=10,
        )
    return store


def kill_while_sending(store: ServiceProcess, sender: Sender | StreamSender) -> dict[int, list[common_pb2.MessageView]]:
    """Start ``sender``, kill -9 the store once enough was acknowledged, restart it on
    its data; what each queue serves then."""
    sender.start()
    assert sender.enough_acked.wait(timeout=120)
    store.kill()
    sender.join(timeout=60)
    assert not sender.is_alive()
    assert sender.unexpected is None, sender.unexpected
    assert sender.failure is not None, "the sender should have been cut off by the kill"
    assert len(sender.acked) >= ACKED_BATCHES_BEFORE_KILL * BATCH

    store.restart()
    with grpc.insecure_channel(store.address) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        status = store_pb2_grpc.StoreAdminStub(channel).GetStoreStatus(store_pb2.GetStoreStatusRequest(), timeout=10)
        assert status.recovered_from_crash
        return {q: read_queue(stub, q) for q in range(QUEUES)}


def check_served(served: dict[int, list[common_pb2.MessageView]], acked: list[Acked], *, beyond_acked: int) -> None:
    """Contiguous offsets from 0, each body whole (nothing torn or half-written served),
    every acknowledged message at its offset, at most ``beyond_acked`` stored beyond them."""
    for queue_id, views in served.items():
        assert [v.queue_offset for v in views] == list(range(len(views))), queue_id
        for view in views:
            assert intact(view.message.body), (queue_id, view.queue_offset)
            assert view.message.topic == TOPIC and view.message.tags == "crash"
    for a in acked:
        views = served[a.queue_id]
        assert a.queue_offset < len(views), f"acknowledged message lost: {a.queue_id}/{a.queue_offset}"
        assert views[a.queue_offset].message.body == a.body
    assert sum(map(len, served.values())) - len(acked) <= beyond_acked


def test_acknowledged_messages_survive_kill_9(private_store: Callable[..., ServiceProcess]) -> None:
    store = sync_store_with_topic(private_store)

    sender = Sender(store.address)
    served = kill_while_sending(store, sender)  # mid-loop: the sender is always inside a SendBatch
    # At most the batch in flight at the kill may be stored beyond what was acknowledged.
    check_served(served, sender.acked, beyond_acked=BATCH)


IN_FLIGHT_FRAMES = 4


class StreamSender(threading.Thread):
    """Sends frames of records over one SendStream, several in flight (as the SDK does),
    until the store goes away; keeps what was acknowledged."""

    def __init__(self, address: str) -> None:
        super().__init__(name="crash-stream-sender", daemon=True)
        self.address = address
        self.acked: list[Acked] = []
        self.enough_acked = threading.Event()
        self.failure: grpc.RpcError | None = None
        self.unexpected: BaseException | None = None
        self._room = threading.Semaphore(IN_FLIGHT_FRAMES)
        self._sent: dict[int, list[bytes]] = {}
        self._done = threading.Event()

    def _frames(self):  # type: ignore[no-untyped-def]
        batch = 0
        while not self._done.is_set():
            if not self._room.acquire(timeout=0.5):
                continue
            bodies = [body_for(1_000 + batch, i) for i in range(BATCH)]
            self._sent[batch] = bodies
            records = b"".join(
                encode_for_send(TOPIC, None, b, f"S{batch:08d}{i:04d}".ljust(32, "0"), tags="crash")
                for i, b in enumerate(bodies)
            )
            yield store_pb2.RecordFrame(sequence=batch, records=records)
            batch += 1

    def run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = store_pb2_grpc.StoreStub(channel)
            try:
                for ack in stub.SendStream(self._frames()):
                    if ack.HasField("error") or ack.status != store_pb2.SEND_STATUS_OK:
                        raise AssertionError(f"not stored as acknowledged: {ack}")
                    bodies = self._sent.pop(ack.sequence)
                    for body, queue_id, queue_offset in zip(bodies, ack.queue_ids, ack.queue_offsets, strict=True):
                        self.acked.append(Acked(queue_id, queue_offset, body))
                    self._room.release()
                    if ack.sequence + 1 == ACKED_BATCHES_BEFORE_KILL:
                        self.enough_acked.set()
            except grpc.RpcError as err:  # the store was killed under us
                self.failure = err
            except Exception as exc:  # noqa: BLE001 - reported by the test, not lost in this thread
                self.unexpected = exc
            finally:
                self._done.set()
                self.enough_acked.set()  # never leave the test waiting


def test_acknowledged_frames_of_a_pipelined_send_stream_survive_kill_9(
    private_store: Callable[..., ServiceProcess],
) -> None:
    """The same over SendStream with frames pipelined (appended on arrival, acknowledged
    after the group commit that covers them): every acknowledged record is there after a
    kill -9, intact, at the queue offset its ack gave; at most the frames in flight at the
    kill are stored beyond that."""
    store = sync_store_with_topic(private_store)

    sender = StreamSender(store.address)
    served = kill_while_sending(store, sender)
    check_served(served, sender.acked, beyond_acked=IN_FLIGHT_FRAMES * BATCH)
