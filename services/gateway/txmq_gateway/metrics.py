"""Prometheus metrics of the gateway (served by the runtime on ``--metrics_port``).

- ``rocketmq_rpc_latency`` {service="MessagingService", action, result}: every RocketMQ v2
  call by action and in-band status code (txmq_runtime.metrics);
- ``rocketmq_consumer_inflight_messages`` {consumer_group, topic}: messages SimpleConsumers
  received and have not acked yet, in the groups this gateway owns (read on scrape).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily

from txmq_runtime.metrics import Sample, ScrapeCollector

if TYPE_CHECKING:
    from txmq_gateway.consumer import SimpleConsumerCore


def _families() -> dict[str, Any]:
    return {
        "inflight": GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages",
            "Messages received by SimpleConsumers and not acked yet, per group and topic (groups this gateway owns).",
            labels=["consumer_group", "topic"],
        )
    }


def read_consumer(core: SimpleConsumerCore) -> Iterator[Sample]:
    for group, topic, live in core.in_flight():
        yield "inflight", [group, topic], live


COLLECTOR: ScrapeCollector[SimpleConsumerCore] = ScrapeCollector("gateway", families=_families, read=read_consumer)
