"""The chart scrapes every service: pod annotations and a named containerPort; with
metrics.serviceMonitor.enabled, metrics Services and a ServiceMonitor that selects them;
the Grafana dashboard shipped in the chart parses, and every query in it (and every
metric docs/operations.md names) is a metric the services really export."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from support.metrics import exported_families

from helm import chart
from helm.chart import Doc, container, find, matches, pod_labels, pod_spec, service_workloads

pytestmark = chart.needs_helm

SERVICES = ("store", "pull", "txcheck", "gateway")
VALUES = yaml.safe_load((chart.CHART / "values.yaml").read_text())
DASHBOARD = chart.CHART / "dashboards" / "txmq.json"
OPERATIONS = chart.ROOT / "docs" / "operations.md"
METRICS_ON = {
    "metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}, "interval": "15s"},
        "grafanaDashboard": {"enabled": True},
    }
}
METRIC = re.compile(r"\b((?:rocketmq|txmq)_[a-z0-9_]+)\b")
#: Python packages, not metrics.
MODULES = {"txmq_store", "txmq_pull", "txmq_txcheck", "txmq_gateway", "txmq_runtime", "txmq_cli", "txmq_analytics"}


_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
    "summary": ("_count", "_sum"),
}


def exported_names() -> frozenset[str]:
    """Every sample name the services' processes can export (support.metrics)."""
    names = set()
    for name, kind in exported_families():
        names.update(name + s for s in _SUFFIXES.get(kind, ("",)))
    return frozenset(names)


@pytest.fixture(scope="module")
def metrics_docs() -> list[Doc]:
    return chart.render(METRICS_ON)


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_pod_is_annotated_and_names_its_metrics_port(default_docs: list[Doc], service: str) -> None:
    port = int(VALUES[service]["settings"]["metrics_port"])
    for w in service_workloads(default_docs, service):
        annotations = w["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port)
        assert annotations["prometheus.io/path"] == "/metrics"
        assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in container(w, service)["ports"]


def test_no_service_monitor_or_dashboard_by_default(default_docs: list[Doc]) -> None:
    assert not find(default_docs, "ServiceMonitor")
    assert not [d for d in find(default_docs, "Service") if d["metadata"]["name"].endswith("-metrics")]
    assert not [d for d in find(default_docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]


def test_service_monitor_selects_a_metrics_service_per_service(metrics_docs: list[Doc]) -> None:
    (monitor,) = find(metrics_docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": [chart.NAMESPACE]}
    assert spec["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}]
    selected = [d for d in find(metrics_docs, "Service") if matches(spec["selector"], d["metadata"]["labels"])]
    by_component = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in selected}
    assert sorted(by_component) == sorted(SERVICES)  # and nothing else (not the gRPC Services)
    label = spec["jobLabel"]
    for service, svc in by_component.items():
        assert svc["metadata"]["labels"][label] == service  # job="store" ...
        (port,) = svc["spec"]["ports"]
        assert port["name"] == "metrics" and port["targetPort"] == "metrics"
        assert port["port"] == int(VALUES[service]["settings"]["metrics_port"])
        # The Service reaches the service's pods (every store group's), whose containerPort
        # is named "metrics".
        for w in service_workloads(metrics_docs, service):
            assert matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(w))
            assert "metrics" in {p["name"] for c in pod_spec(w)["containers"] for p in c.get("ports", [])}


def test_a_service_with_metrics_off_gets_no_metrics_service() -> None:
    docs = chart.render({**METRICS_ON, "pull": {"settings": {"metrics_port": -1}}})
    names = {d["metadata"]["name"] for d in find(docs, "Service")}
    assert "txmq-pull-metrics" not in names and "txmq-store-metrics" in names


def test_metrics_manifests_are_valid_kubernetes(metrics_docs: list[Doc]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    version = kubernetes_validate.latest_version()
    for doc in metrics_docs:
        if doc["kind"] != "ServiceMonitor":  # a CRD: its shape is checked above
            kubernetes_validate.validate(doc, version, strict=True)
    assert chart.lint(METRICS_ON).returncode == 0


def test_the_dashboard_configmap_carries_the_shipped_json(metrics_docs: list[Doc]) -> None:
    (cm,) = [d for d in find(metrics_docs, "ConfigMap") if d["metadata"]["name"] == "txmq-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["txmq.json"]) == json.loads(DASHBOARD.read_text())


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        out += [(panel["title"], t["expr"]) for t in panel.get("targets", [])]
    out += [("variable " + v["name"], v["definition"]) for v in dashboard["templating"]["list"] if v.get("definition")]
    return out


def test_every_dashboard_query_names_exported_metrics() -> None:
    exported = exported_names()
    queries = dashboard_queries()
    assert len(queries) >= 20
    unknown = []
    for title, expr in queries:
        names = METRIC.findall(expr)
        assert names, f"{title}: {expr} names no txmq metric"
        unknown += [f"{title}: {n}" for n in names if n not in exported]
    assert not unknown, "not exported by any service:\n" + "\n".join(unknown)


def test_every_metric_the_operations_doc_names_is_exported() -> None:
    exported = exported_names()
    named = {n for n in METRIC.findall(OPERATIONS.read_text()) if n not in MODULES}
    assert len(named) >= 20
    # A doc may name a histogram or counter by its family name.
    bare = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exported}
    assert not sorted(n for n in named if n not in exported and n not in bare)
