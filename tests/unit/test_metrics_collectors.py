"""The metrics building blocks (txmq_runtime.metrics) and each service's collectors and
counters, in-process: scrape-time collectors read on the source's loop, drop a failing
source, forget a collected one; the RPC interceptor labels by action and status; the
store's collector computes lag and half messages from a real store."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from txmq_runtime import metrics
from txmq_runtime.metrics import RpcMetrics, Sample, ScrapeCollector, TopicCounters, call_on_loop


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


# -- ScrapeCollector -------------------------------------------------------------------


class Source:
    def __init__(self, name: str, level: float, *, fail: bool = False) -> None:
        self.name, self.level, self.fail = name, level, fail
        self.read_on: int | None = None


def families() -> dict[str, Metric]:
    return {"level": GaugeMetricFamily("test_level", "A level.", labels=["source"])}


def read(source: Source) -> Iterator[Sample]:
    source.read_on = threading.get_ident()
    yield "level", [source.name], source.level
    if source.fail:
        raise RuntimeError("cannot read")


def test_scrape_collector_reads_every_live_source_and_drops_a_failing_one_whole() -> None:
    registry = CollectorRegistry()
    collector: ScrapeCollector[Source] = ScrapeCollector("test", families=families, read=read, registry=registry)
    a, b, bad = Source("a", 1.0), Source("b", 2.5), Source("bad", 9.0, fail=True)
    for s in (a, b, bad):
        collector.add(s)
    errors_before = metrics.SCRAPE_ERRORS.labels("test")._value.get()
    assert sample(registry, "test_level", source="a") == 1.0
    assert sample(registry, "test_level", source="b") == 2.5
    assert sample(registry, "test_level", source="bad") is None  # its first sample is not kept either
    assert metrics.SCRAPE_ERRORS.labels("test")._value.get() > errors_before
    collector.discard(b)
    assert sample(registry, "test_level", source="b") is None
    del a
    gc.collect()
    assert sample(registry, "test_level", source="a") is None


def test_scrape_collector_registers_without_reading() -> None:
    registry = CollectorRegistry()
    touched = Source("x", 1.0)
    collector: ScrapeCollector[Source] = ScrapeCollector("test", families=families, read=read, registry=registry)
    collector.add(touched)
    with pytest.raises(ValueError, match="Duplicated"):
        ScrapeCollector("again", families=families, read=read, registry=registry)
    assert touched.read_on is None


async def test_a_source_is_read_on_its_event_loop_when_scraped_from_another_thread() -> None:
    registry = CollectorRegistry()
    collector: ScrapeCollector[Source] = ScrapeCollector("test", families=families, read=read, registry=registry)
    source = Source("s", 4.0)
    collector.add(source)  # from the running loop: read there
    got = await asyncio.to_thread(sample, registry, "test_level", source="s")
    assert got == 4.0
    assert source.read_on == threading.get_ident()


async def test_a_blocked_loop_times_the_read_out() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        # The loop is busy awaiting this very thread, so the call cannot run in time.
        await asyncio.to_thread(lambda: _blocking_call(loop))


def _blocking_call(loop: asyncio.AbstractEventLoop) -> None:
    blocker = threading.Event()
    loop.call_soon_threadsafe(blocker.wait, 0.3)  # holds the loop for 0.3 s
    call_on_loop(loop, lambda: None, timeout_s=0.05)


# -- TopicCounters ---------------------------------------------------------------------


def test_topic_counters_count_per_label_tuple_and_forget() -> None:
    registry = CollectorRegistry()
    messages = Counter("t_messages", "m", ["topic"], registry=registry)
    size = Counter("t_bytes", "b", ["topic"], registry=registry)
    counters = TopicCounters(messages, size)
    counters.count(("A",), 2, 30)
    counters.count(("A",), 1, 5)
    counters.count(("B",), 0, 0)  # nothing: no series
    assert sample(registry, "t_messages_total", topic="A") == 3
    assert sample(registry, "t_bytes_total", topic="A") == 35
    assert sample(registry, "t_messages_total", topic="B") is None
    counters.forget(("A",))
    assert sample(registry, "t_messages_total", topic="A") is None


# -- RpcMetrics ------------------------------------------------------------------------


async def test_rpc_interceptor_labels_by_service_action_and_status() -> None:
    registry = CollectorRegistry()
    histogram = Histogram("t_rpc_latency", "ms", ["service", "action", "result"], registry=registry, buckets=(1, 10))

    async def ok(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def missing(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        raise AssertionError("unreachable")

    async def stream(request: bytes, context: grpc.aio.ServicerContext):
        for _ in range(3):
            yield request

    handler = grpc.method_handlers_generic_handler(
        "test.v1.Echo",
        {
            "Ok": grpc.unary_unary_rpc_method_handler(ok),
            "Missing": grpc.unary_unary_rpc_method_handler(missing),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
        },
    )
    server = grpc.aio.server(interceptors=[RpcMetrics(histogram)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await channel.unary_unary("/test.v1.Echo/Ok")(b"x") == b"x"
            assert await channel.unary_unary("/test.v1.Echo/Ok")(b"y") == b"y"
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await channel.unary_unary("/test.v1.Echo/Missing")(b"x")
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert [r async for r in channel.unary_stream("/test.v1.Echo/Stream")(b"z")] == [b"z"] * 3
    finally:
        await server.stop(None)
    count = "t_rpc_latency_count"
    assert sample(registry, count, service="Echo", action="Ok", result="OK") == 2
    assert sample(registry, count, service="Echo", action="Missing", result="NOT_FOUND") == 1
    assert sample(registry, count, service="Echo", action="Stream", result="OK") == 1
    assert sample(registry, count, service="Echo", action="Ok", result="NOT_FOUND") is None


def test_rocketmq_v2_responses_are_labelled_by_their_in_band_code() -> None:
    from txmq_gateway.v2 import pb, svc

    assert metrics._in_band_result(svc.QueryRouteResponse(status=pb.Status(code=pb.Code.TOPIC_NOT_FOUND))) == (
        "TOPIC_NOT_FOUND"
    )
    assert metrics._in_band_result(svc.QueryRouteResponse(status=pb.Status(code=pb.Code.OK))) == "OK"
    from txmq.v1 import store_pb2

    # txmq's own responses: a status enum, not a Status message -> the gRPC status decides.
    assert metrics._in_band_result(store_pb2.GetMessageResponse(status=1)) is None


# -- the services' counters ------------------------------------------------------------


def test_txcheck_counts_each_timeline_event_kind() -> None:
    from prometheus_client import REGISTRY

    from txmq_txcheck.timeline import Timeline

    names = {
        "check_sent": "txmq_txcheck_checks_sent_total",
        "check_answered": "txmq_txcheck_checks_answered_total",
        "committed": "rocketmq_commit_messages_total",
        "rolled_back": "rocketmq_rollback_messages_total",
        "discarded": "txmq_txcheck_discarded_total",
    }
    before = {k: REGISTRY.get_sample_value(n) or 0 for k, n in names.items()}
    timeline = Timeline()
    for kind in ("check_sent", "check_sent", "check_answered", "committed", "rolled_back", "half_stored"):
        timeline.record("tx-1", 1, kind)
    after = {k: REGISTRY.get_sample_value(n) or 0 for k, n in names.items()}
    assert {k: after[k] - before[k] for k in names} == {
        "check_sent": 2,
        "check_answered": 1,
        "committed": 1,
        "rolled_back": 1,
        "discarded": 0,
    }


def test_pull_counts_messages_per_group_and_long_poll_outcomes() -> None:
    from prometheus_client import REGISTRY

    from txmq.v1 import common_pb2, pull_pb2
    from txmq_pull import metrics as pull_metrics
    from txmq_pull.hold import WakeReason

    labels = {"consumer_group": "G-unit", "topic": "T-unit"}
    arrivals = REGISTRY.get_sample_value("txmq_pull_long_polls_total", {"outcome": "arrival"}) or 0
    request = pull_pb2.PullMessageRequest(consumer_group="G-unit", queue=common_pb2.MessageQueue(topic="T-unit"))
    views = [common_pb2.MessageView(message=common_pb2.Message(body=b"x" * n)) for n in (3, 4)]
    pull_metrics.pulled(request, pull_pb2.PullMessageResponse(messages=views))
    pull_metrics.pulled(request, pull_pb2.PullMessageResponse())
    pull_metrics.long_poll_ended(WakeReason.ARRIVAL)
    assert REGISTRY.get_sample_value("txmq_pull_messages_total", labels) == 2
    assert REGISTRY.get_sample_value("txmq_pull_bytes_total", labels) == 7
    assert REGISTRY.get_sample_value("txmq_pull_long_polls_total", {"outcome": "arrival"}) == arrivals + 1


# -- the store's collector, on a real store --------------------------------------------


async def test_store_collector_reports_lag_half_messages_and_sizes(tmp_path: Path) -> None:
    from txmq_store import metrics as store_metrics
    from txmq_store.configs import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
    from txmq_store.message_store import MessageStore
    from txmq_store.model import OutgoingMessage
    from txmq_store.settings import StoreSettings

    settings = StoreSettings(data_dir=str(tmp_path / "store"), commitlog_segment_bytes=64 * 1024, store_id="unit-store")
    store = await MessageStore.open(settings, advertised_address="127.0.0.1:10911")
    try:
        store.create_topic("Lagging", read_queue_nums=2, write_queue_nums=2)

        def read() -> dict[tuple[str, tuple[str, ...]], float]:
            return {(name, tuple(labels)): value for name, labels, value in store_metrics.read_store(store)}

        empty = read()
        assert empty[("half", ("unit-store",))] == 0
        assert not [k for k in empty if k[0] == "lag"]
        await store.send([OutgoingMessage("Lagging", b"m" * 10, queue_id=0) for _ in range(5)])
        await store.send([OutgoingMessage("Lagging", b"m", queue_id=1)])
        store.commit_consume_offset(group="CG", topic="Lagging", queue_id=0, offset=2)
        store.commit_consume_offset(group="CG", topic="Lagging", queue_id=1, offset=1)
        for _ in range(3):
            await store.send([OutgoingMessage("Lagging", b"h")], producer_group="PG", transaction_prepared=True)
        figures = read()
        assert figures[("lag", ("unit-store", "CG", "Lagging", "0"))] == 3
        assert figures[("lag", ("unit-store", "CG", "Lagging", "1"))] == 0
        assert figures[("half", ("unit-store",))] == 3  # no check progress yet: the whole half queue
        store.commit_consume_offset(group=TRANS_CHECK_GROUP, topic=TRANS_HALF_TOPIC, queue_id=0, offset=1)
        figures = read()
        assert figures[("half", ("unit-store",))] == 2
        assert figures[("commitlog", ("unit-store",))] > 6 * 10
        assert figures[("size", ("unit-store",))] == 64 * 1024 * store.status().segment_count
        assert 0 < figures[("free", ("unit-store",))] <= figures[("disk", ("unit-store",))]
        assert figures[("dispatch_behind", ("unit-store",))] == 0
    finally:
        await store.close()


LES = ("1024.0", "4096.0", "524288.0", "4.194304e+06", "+Inf")


def test_store_counts_in_by_topic_runs_and_out_per_read() -> None:
    from prometheus_client import REGISTRY

    from txmq_store import metrics as store_metrics

    class Rec:
        def __init__(self, topic: str, body: bytes) -> None:
            self.topic, self.body = topic, body

    def get(name: str, topic: str) -> float:
        return REGISTRY.get_sample_value(name, {"topic": topic}) or 0

    def sizes() -> dict[str, float]:
        out = {le: REGISTRY.get_sample_value("rocketmq_message_size_bucket", {"le": le}) or 0 for le in LES}
        return {**out, "sum": REGISTRY.get_sample_value("rocketmq_message_size_sum") or 0}

    before = {t: (get("rocketmq_messages_in_total", t), get("rocketmq_throughput_in_total", t)) for t in "XY"}
    sizes_before = sizes()
    store_metrics.count_in([Rec("X", b"ab"), Rec("X", b"c"), Rec("Y", b"defg"), Rec("X", b"")])
    store_metrics.count_in([Rec("Z", b"z" * 1024), Rec("Z", b"z" * 1025), Rec("Z", b"z" * (5 * 1024 * 1024))])
    grown = {k: v - sizes_before[k] for k, v in sizes().items()}
    # Cumulative buckets: <= 1 KiB holds 2, 1, 4, 0 and exactly 1024 bytes; 1025 is in <= 4 KiB; 5 MiB only in +Inf.
    assert grown == {
        "1024.0": 5,
        "4096.0": 6,
        "524288.0": 6,
        "4.194304e+06": 6,
        "+Inf": 7,
        "sum": 7 + 2049 + 5 * 1024 * 1024,
    }
    assert get("rocketmq_messages_in_total", "X") - before["X"][0] == 3
    assert get("rocketmq_throughput_in_total", "X") - before["X"][1] == 3
    assert get("rocketmq_messages_in_total", "Y") - before["Y"][0] == 1
    assert get("rocketmq_throughput_in_total", "Y") - before["Y"][1] == 4
    out = get("rocketmq_messages_out_total", "X")
    store_metrics.count_out("X", [Rec("X", b"12345")])
    store_metrics.count_out("X", [])
    assert get("rocketmq_messages_out_total", "X") - out == 1
