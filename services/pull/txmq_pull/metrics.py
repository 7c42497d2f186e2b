"""Prometheus metrics of the pull service (served on --metrics_port)."""

from prometheus_client import Gauge

HELD_PULLS = Gauge("txmq_pull_held_requests", "Pulls parked in long polling right now.")
