"""Prometheus metrics of the pull service (served by the runtime on ``--metrics_port``).

- ``txmq_pull_held_requests``: pulls parked in long polling right now (read on scrape);
- ``txmq_pull_long_polls_total`` {outcome}: held pulls that ended, by what ended them:
  ``arrival`` (a matching message was dispatched), ``recheck`` (the backstop or a lost
  arrival stream made it read again), ``timeout`` (the hold expired: nothing came);
- ``txmq_pull_answered_from_arrivals_total``: woken pulls answered from the records the
  arrival stream carried, without reading the store again;
- ``txmq_pull_messages_total`` / ``txmq_pull_bytes_total`` {consumer_group, topic}:
  messages and body bytes handed to consumers (the store's ``rocketmq_messages_out_total``
  counts the same reads per topic, without the group).

The latency of PullMessage (its hold included) is ``rocketmq_rpc_latency``
{service="Pull", action="PullMessage"} (txmq_runtime.metrics).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge

from txmq.records import count_records
from txmq.v1 import pull_pb2
from txmq_runtime.metrics import TopicCounters

HELD_PULLS = Gauge("txmq_pull_held_requests", "Pulls parked in long polling right now.")
LONG_POLLS = Counter("txmq_pull_long_polls", "Held pulls that ended, by what ended them.", ["outcome"])
MESSAGES = Counter("txmq_pull_messages", "Messages handed to consumers.", ["consumer_group", "topic"])
BYTES = Counter("txmq_pull_bytes", "Message body bytes handed to consumers.", ["consumer_group", "topic"])

FROM_ARRIVALS = Counter(
    "txmq_pull_answered_from_arrivals", "Woken pulls answered from the arrival stream's records, without a read."
)
REPLICA_READS = Counter(
    "txmq_pull_replica_reads",
    "Reads served by a follower of a replicated store group (a consumer lagging beyond its leader's memory).",
)

_PULLED = TopicCounters(MESSAGES, BYTES)
_OUTCOMES: dict[Any, Any] = {}


def long_poll_ended(reason: Any) -> None:
    """Count a held pull's end (``reason``: a hold.WakeReason)."""
    child = _OUTCOMES.get(reason)
    if child is None:
        child = _OUTCOMES[reason] = LONG_POLLS.labels(getattr(reason, "value", str(reason)))
    child.inc()


def pulled(request: pull_pb2.PullMessageRequest, response: pull_pb2.PullMessageResponse) -> None:
    """Count what one PullMessage answer hands over."""
    messages = response.messages
    if messages:
        _PULLED.count(
            (request.consumer_group, request.queue.topic), len(messages), sum(len(v.message.body) for v in messages)
        )
    elif response.records:
        _PULLED.count((request.consumer_group, request.queue.topic), *count_records(response.records))
