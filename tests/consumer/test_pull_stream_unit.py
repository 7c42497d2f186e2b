"""The SDK's pull stream (txmq._pull_stream) against small in-process Pull servers: pulls
share one stream and get their own answers, a broken stream is opened again and the
pulls not yet answered are sent again (each answered once), a pull service without the
stream is asked with unary calls, and a pull past its deadline fails UPSTREAM_TIMEOUT."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from txmq._pull_stream import STREAM_OPEN_KEY, PullStream
from txmq.errors import NotFoundError, TxmqError, UnavailableError, UpstreamTimeoutError
from txmq.v1 import common_pb2, errors_pb2, pull_pb2, pull_pb2_grpc

P = pull_pb2
WAIT_S = 30


def request(topic: str) -> P.PullMessageRequest:
    return P.PullMessageRequest(
        consumer_group="G", queue=common_pb2.MessageQueue(topic=topic, store_id="s"), suspend=True
    )


def found(offset: int) -> P.PullMessageResponse:
    return P.PullMessageResponse(status=P.PULL_STATUS_FOUND, next_begin_offset=offset)


class StreamServer(pull_pb2_grpc.PullServicer):
    """Each stream's requests go to ``received``; the test answers through ``answers``
    (one queue per stream, in the order streams were opened) or ends a stream with
    ``break_stream``."""

    def __init__(self) -> None:
        self.received: queue.Queue[tuple[int, P.PullStreamRequest]] = queue.Queue()
        self.streams: list[queue.Queue[P.PullStreamResponse | None]] = []
        self.opened = threading.Semaphore(0)

    def PullStream(self, request_iterator, context):  # type: ignore[no-untyped-def]
        context.send_initial_metadata(((STREAM_OPEN_KEY, "1"),))
        out: queue.Queue[P.PullStreamResponse | None] = queue.Queue()
        n = len(self.streams)
        self.streams.append(out)
        self.opened.release()

        def read() -> None:
            try:
                for r in request_iterator:
                    self.received.put((n, r))
            except grpc.RpcError:
                pass  # the stream ended

        threading.Thread(target=read, daemon=True).start()
        while (answer := out.get()) is not None:
            yield answer
        context.abort(grpc.StatusCode.UNAVAILABLE, "going away")

    def next_request(self) -> tuple[int, P.PullStreamRequest]:
        return self.received.get(timeout=WAIT_S)

    def close(self) -> None:
        """End every stream still open (their handlers would keep the server's threads)."""
        for out in self.streams:
            out.put(None)


class UnaryServer(pull_pb2_grpc.PullServicer):
    """An older pull service: PullMessage only (PullStream is UNIMPLEMENTED)."""

    def PullMessage(self, request, context):  # type: ignore[no-untyped-def]
        return found(len(request.queue.topic))


@pytest.fixture
def serve() -> Iterator:  # type: ignore[type-arg]
    servers: list[grpc.Server] = []
    channels: list[grpc.Channel] = []
    servicers: list[pull_pb2_grpc.PullServicer] = []

    def start(servicer: pull_pb2_grpc.PullServicer) -> tuple[pull_pb2_grpc.PullStub, str]:
        servicers.append(servicer)
        server = grpc.server(futures.ThreadPoolExecutor(8))
        pull_pb2_grpc.add_PullServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        return pull_pb2_grpc.PullStub(channel), f"127.0.0.1:{port}"

    yield start
    for servicer in servicers:
        if isinstance(servicer, StreamServer):
            servicer.close()
    for channel in channels:
        channel.close()
    for server in servers:
        server.stop(None)


def test_pulls_share_one_stream_and_get_their_own_answers(serve) -> None:  # type: ignore[no-untyped-def]
    server = StreamServer()
    stream = PullStream(*serve(server))
    try:
        a, b = stream.submit(request("A"), timeout=WAIT_S), stream.submit(request("B"), timeout=WAIT_S)
        got = dict((r.pull.queue.topic, r.request_id) for _, r in (server.next_request(), server.next_request()))
        assert len(server.streams) == 1 and stream.outstanding == 2
        out = server.streams[0]
        out.put(P.PullStreamResponse(request_id=got["B"], pull=found(7)))
        assert b.result(WAIT_S).next_begin_offset == 7 and not a.done()
        out.put(
            P.PullStreamResponse(
                request_id=got["A"],
                error=errors_pb2.ErrorDetail(code=errors_pb2.CODE_TOPIC_NOT_FOUND, message="no topic A"),
            )
        )
        with pytest.raises(NotFoundError) as info:
            a.result(WAIT_S)
        assert info.value.code == errors_pb2.CODE_TOPIC_NOT_FOUND
        c = stream.submit(request("C"), timeout=WAIT_S)  # the stream goes on
        _, r = server.next_request()
        out.put(P.PullStreamResponse(request_id=r.request_id, pull=found(1)))
        assert c.result(WAIT_S).status == P.PULL_STATUS_FOUND and len(server.streams) == 1
    finally:
        stream.close()


def test_a_broken_stream_is_opened_again_and_unanswered_pulls_are_sent_again(serve) -> None:  # type: ignore[no-untyped-def]
    server = StreamServer()
    stream = PullStream(*serve(server))
    try:
        a, b = stream.submit(request("A"), timeout=WAIT_S), stream.submit(request("B"), timeout=WAIT_S)
        ids = {r.pull.queue.topic: r.request_id for _, r in (server.next_request(), server.next_request())}
        server.streams[0].put(P.PullStreamResponse(request_id=ids["A"], pull=found(3)))
        assert a.result(WAIT_S).next_begin_offset == 3
        server.streams[0].put(None)  # the service goes away with B unanswered
        assert server.opened.acquire(timeout=WAIT_S) and server.opened.acquire(timeout=WAIT_S)
        n, again = server.next_request()
        assert (n, again.request_id, again.pull.queue.topic) == (1, ids["B"], "B")  # only B, with its id
        server.streams[1].put(P.PullStreamResponse(request_id=ids["B"], pull=found(4)))
        assert b.result(WAIT_S).next_begin_offset == 4
        assert server.received.empty()
    finally:
        stream.close()


def test_a_cancelled_pull_is_withdrawn_at_the_service(serve) -> None:  # type: ignore[no-untyped-def]
    server = StreamServer()
    stream = PullStream(*serve(server))
    try:
        a = stream.submit(request("A"), timeout=WAIT_S)
        _, sent = server.next_request()
        assert a.cancel() and a.cancelled()
        _, withdrawn = server.next_request()
        assert withdrawn.cancel and withdrawn.request_id == sent.request_id
        assert stream.outstanding == 0
        with pytest.raises(grpc.FutureCancelledError):
            a.result(0)
    finally:
        stream.close()


def test_a_pull_service_without_the_stream_gets_unary_calls(serve) -> None:  # type: ignore[no-untyped-def]
    stream = PullStream(*serve(UnaryServer()))
    try:
        first = stream.submit(request("AB"), timeout=WAIT_S)  # sent before the stream was found missing
        assert first.result(WAIT_S).next_begin_offset == 2
        assert stream.unsupported
        later = stream.submit(request("ABC"), timeout=WAIT_S)
        assert later.result(WAIT_S).next_begin_offset == 3
    finally:
        stream.close()


def test_an_unanswered_pull_fails_at_its_deadline(serve) -> None:  # type: ignore[no-untyped-def]
    server = StreamServer()
    stream = PullStream(*serve(server))
    try:
        pull = stream.submit(request("A"), timeout=0.2)
        _, sent = server.next_request()
        with pytest.raises(UpstreamTimeoutError):
            pull.result(WAIT_S)
        _, withdrawn = server.next_request()  # the service is told
        assert withdrawn.cancel and withdrawn.request_id == sent.request_id
    finally:
        stream.close()


def test_pulls_fail_unavailable_when_the_stream_cannot_be_opened_again() -> None:
    channel = grpc.insecure_channel("127.0.0.1:1")  # nobody listens
    stream = PullStream(pull_pb2_grpc.PullStub(channel), "127.0.0.1:1")
    try:
        with pytest.raises(UnavailableError) as info:
            stream.submit(request("A"), timeout=WAIT_S).result(WAIT_S)
        assert isinstance(info.value, TxmqError) and info.value.retriable
    finally:
        stream.close()
        channel.close()


def test_close_fails_the_pulls_waiting(serve) -> None:  # type: ignore[no-untyped-def]
    server = StreamServer()
    stream = PullStream(*serve(server))
    pull = stream.submit(request("A"), timeout=WAIT_S)
    server.next_request()
    stream.close()
    with pytest.raises(UnavailableError):
        pull.result(WAIT_S)
    with pytest.raises(RuntimeError):
        stream.submit(request("B"), timeout=WAIT_S)
