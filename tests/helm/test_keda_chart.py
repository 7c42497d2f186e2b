"""keda.* in helm/txmq: ScaledObjects (keda.sh/v1alpha1) scaling the user's consumer
workloads on their group's lag, off by default. kubernetes-validate has no schema for
KEDA's CRD, so their shape is checked here against KEDA's ScaledObject type (the fields
of apis/keda/v1alpha1 ScaledObjectSpec, ScaleTarget and ScaleTriggers); the external
trigger's metadata is parsed by the pull service's own scaler code and its address is the
pull Service's; the Prometheus query names the metric and labels the stores export."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator, ValidationError

from helm import chart
from helm.chart import Doc, find, one
from txmq import validation
from txmq_pull.keda import (
    ACTIVATION_LAG_THRESHOLD_KEY,
    GROUP_KEY,
    LAG_THRESHOLD_KEY,
    TOPIC_KEY,
    Trigger,
)

pytestmark = chart.needs_helm

VALUES = yaml.safe_load((chart.CHART / "values.yaml").read_text())
SCHEMA = json.loads((chart.CHART / "values.schema.json").read_text())

#: KEDA's ScaledObject (keda.sh/v1alpha1) fields.
SPEC_FIELDS = {
    "scaleTargetRef", "pollingInterval", "initialCooldownPeriod", "cooldownPeriod", "idleReplicaCount",
    "minReplicaCount", "maxReplicaCount", "advanced", "triggers", "fallback",
}  # fmt: skip
TARGET_FIELDS = {"name", "apiVersion", "kind", "envSourceContainerName"}
TRIGGER_FIELDS = {"type", "name", "useCachedMetrics", "metadata", "authenticationRef", "metricType"}

ORDERS: dict[str, Any] = {
    "name": "order-workers",
    "targetRef": {"name": "order-workers"},
    "group": "OrderWorkers",
    "topic": "Orders",
}
PAY: dict[str, Any] = {
    "name": "pay",
    "namespace": "payments",
    "targetRef": {"name": "pay", "kind": "StatefulSet"},
    "group": "%RETRY%pay_group",
    "topic": "Pay",
    "lagThreshold": 50,
    "activationLagThreshold": 5,
    "minReplicaCount": 0,
    "maxReplicaCount": 4,
    "pollingInterval": 10,
    "cooldownPeriod": 0,
}
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def keda(*scaled_objects: dict[str, Any], **values: Any) -> dict[str, Any]:
    return {"keda": {"enabled": True, "scaledObjects": list(scaled_objects), **values}}


def scaled_objects(docs: list[Doc]) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in find(docs, "ScaledObject")}


def check_shape(so: Doc) -> None:
    """What KEDA's CRD requires and allows of what the chart renders."""
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    assert so["kind"] == "ScaledObject"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", so["metadata"]["name"])
    assert so["metadata"]["namespace"]
    spec = so["spec"]
    assert set(spec) <= SPEC_FIELDS, set(spec) - SPEC_FIELDS
    target = spec["scaleTargetRef"]
    assert set(target) <= TARGET_FIELDS and target["name"]
    for field in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount"):
        assert isinstance(spec[field], int) and spec[field] >= 0, field
    assert spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert spec["triggers"], "a ScaledObject needs a trigger"
    for trigger in spec["triggers"]:
        assert set(trigger) <= TRIGGER_FIELDS, set(trigger) - TRIGGER_FIELDS
        assert trigger["type"] in ("external", "external-push", "prometheus")
        # Trigger metadata is map[string]string: a number left unquoted is refused.
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in trigger["metadata"].items())
        if "authenticationRef" in trigger:
            assert trigger["authenticationRef"]["name"]


def pull_service_address(docs: list[Doc], full: str = chart.RELEASE, domain: str = "cluster.local") -> str:
    service = one(docs, "Service", f"{full}-pull")
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"]
    return f"{service['metadata']['name']}.{chart.NAMESPACE}.svc.{domain}:{port}"


def test_off_by_default(default_docs: list[Doc]) -> None:
    assert VALUES["keda"]["enabled"] is False
    assert VALUES["keda"]["scaledObjects"] == []
    assert find(default_docs, "ScaledObject") == []
    assert VALUES["pull"]["settings"]["keda_scaler_enabled"] is True


def test_external_trigger_asks_the_pull_services_scaler() -> None:
    docs = chart.render(keda(ORDERS, PAY))
    found = scaled_objects(docs)
    assert set(found) == {"order-workers", "pay"}
    for so in found.values():
        check_shape(so)
        assert so["metadata"]["labels"]["app.kubernetes.io/instance"] == chart.RELEASE

    orders = found["order-workers"]
    assert orders["metadata"]["namespace"] == chart.NAMESPACE
    assert orders["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "order-workers"}
    assert (orders["spec"]["minReplicaCount"], orders["spec"]["maxReplicaCount"]) == (1, 10)
    assert (orders["spec"]["pollingInterval"], orders["spec"]["cooldownPeriod"]) == (30, 300)
    (trigger,) = orders["spec"]["triggers"]
    assert trigger["type"] == "external"
    meta = trigger["metadata"]
    assert meta["scalerAddress"] == pull_service_address(docs)
    assert "authenticationRef" not in trigger and "enableTLS" not in meta
    # KEDA passes the metadata to the scaler as it is: the scaler's own parser reads it.
    assert Trigger.parse(meta) == Trigger("OrderWorkers", "Orders", 100, 0)
    assert {GROUP_KEY, TOPIC_KEY, LAG_THRESHOLD_KEY, ACTIVATION_LAG_THRESHOLD_KEY} <= set(meta)

    pay = found["pay"]
    assert pay["metadata"]["namespace"] == "payments"
    assert pay["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "pay"}
    assert {k: pay["spec"][k] for k in ("minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod")} == {
        "minReplicaCount": 0,
        "maxReplicaCount": 4,
        "pollingInterval": 10,
        "cooldownPeriod": 0,
    }
    assert Trigger.parse(pay["spec"]["triggers"][0]["metadata"]) == Trigger("%RETRY%pay_group", "Pay", 50, 5)


def test_scaler_address_follows_the_release_name_port_and_domain() -> None:
    values = {
        **keda(ORDERS),
        "fullnameOverride": "mq",
        "clusterDomain": "corp.local",
        "pull": {"settings": {"port": 20912}},
    }
    docs = chart.render(values)
    meta = one(docs, "ScaledObject", "order-workers")["spec"]["triggers"][0]["metadata"]
    assert meta["scalerAddress"] == pull_service_address(docs, "mq", "corp.local") == "mq-pull.mq.svc.corp.local:20912"


def test_external_push_trigger() -> None:
    so = one(chart.render(keda(ORDERS, trigger="external-push")), "ScaledObject", "order-workers")
    check_shape(so)
    assert [t["type"] for t in so["spec"]["triggers"]] == ["external-push"]


def test_with_tls_keda_dials_a_name_the_certificate_has_with_its_client_certificate() -> None:
    tls = {"tls": {"enabled": True, "certManager": {"issuerRef": {"name": "txmq-ca", "kind": "Issuer"}}}}
    refused = chart.template({**keda(ORDERS), **tls}, check=False)
    assert refused.returncode != 0
    assert "keda.external.authenticationRef" in refused.stderr
    docs = chart.render({**keda(ORDERS, external={"authenticationRef": {"name": "txmq-keda"}}), **tls})
    so = one(docs, "ScaledObject", "order-workers")
    check_shape(so)
    (trigger,) = so["spec"]["triggers"]
    assert trigger["authenticationRef"] == {"name": "txmq-keda"}
    assert trigger["metadata"]["enableTLS"] == "true"
    host = trigger["metadata"]["scalerAddress"].rpartition(":")[0]
    certificate = one(docs, "Certificate", f"{chart.RELEASE}-tls")
    assert host in certificate["spec"]["dnsNames"]


def test_prometheus_trigger_queries_the_stores_lag_metric() -> None:
    from txmq_store.metrics import _families

    lag = _families()["lag"]  # the family the store exports, with its labels
    assert lag.name == "rocketmq_consumer_lag_messages"
    refused = chart.template(keda(ORDERS, trigger="prometheus"), check=False)
    assert refused.returncode != 0 and "keda.prometheus.serverAddress" in refused.stderr

    values = keda(
        ORDERS,
        {**PAY, "trigger": "prometheus"},
        prometheus={
            "serverAddress": PROMETHEUS,
            "authenticationRef": {"name": "prom", "kind": "TriggerAuthentication"},
        },
    )
    found = scaled_objects(chart.render(values))
    assert [t["type"] for t in found["order-workers"]["spec"]["triggers"]] == ["external"]
    pay = found["pay"]
    check_shape(pay)
    (trigger,) = pay["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["authenticationRef"] == {"name": "prom", "kind": "TriggerAuthentication"}
    meta = trigger["metadata"]
    assert meta["serverAddress"] == PROMETHEUS
    assert (meta["threshold"], meta["activationThreshold"]) == ("50", "5")
    # A replicated store group's replicas export the same queues: the max per queue, summed.
    assert meta["query"] == (
        'sum(max by (store_id, queue_id) (rocketmq_consumer_lag_messages{consumer_group="%RETRY%pay_group", '
        'topic="Pay"}))'
    )
    lag.add_metric(["store-0", "g", "t", "0"], 1)
    assert set(lag.samples[0].labels) == {"store_id", "consumer_group", "topic", "queue_id"}


def test_external_trigger_needs_the_scaler_on() -> None:
    off = {**keda(ORDERS), "pull": {"settings": {"keda_scaler_enabled": False}}}
    refused = chart.template(off, check=False)
    assert refused.returncode != 0 and "pull.settings.keda_scaler_enabled" in refused.stderr
    prometheus = {**keda(ORDERS, trigger="prometheus", prometheus={"serverAddress": PROMETHEUS})}
    prometheus["pull"] = {"settings": {"keda_scaler_enabled": False}}
    assert find(chart.render(prometheus), "ScaledObject")


@pytest.mark.parametrize(
    "bad",
    [
        {k: v for k, v in ORDERS.items() if k != "topic"},
        {**ORDERS, "group": "no spaces"},
        {**ORDERS, "lagThreshold": 0},
        {**ORDERS, "trigger": "kafka"},
        {**ORDERS, "name": "Order_Workers"},
        {**ORDERS, "targetRef": {}},
        {**ORDERS, "minReplicas": 1},  # KEDA's name is minReplicaCount
    ],
)
def test_the_schema_refuses_bad_entries(bad: dict[str, Any]) -> None:
    """values.schema.json, which helm applies before rendering (checked here directly:
    one helm run per case would cost the fast loop seconds)."""
    Draft7Validator(SCHEMA).validate({**VALUES, **keda(ORDERS)})
    with pytest.raises(ValidationError) as exc:
        Draft7Validator(SCHEMA).validate({**VALUES, **keda(bad)})
    assert list(exc.value.absolute_path)[:2] == ["keda", "scaledObjects"]


def test_helm_refuses_bad_entries() -> None:
    result = chart.template(keda({k: v for k, v in ORDERS.items() if k != "topic"}), check=False)
    assert result.returncode != 0 and "keda" in result.stderr  # the schema, through helm
    result = chart.template(keda({**ORDERS, "minReplicaCount": 5, "maxReplicaCount": 2}), check=False)
    assert result.returncode != 0
    assert "maxReplicaCount 2 is below minReplicaCount 5" in result.stderr


def test_schema_names_are_the_services_rules() -> None:
    item = SCHEMA["properties"]["keda"]["properties"]["scaledObjects"]["items"]["properties"]
    assert item["group"]["pattern"] == f"^{validation._NAME_RE.pattern}$"
    assert item["topic"]["pattern"] == f"^{validation._NAME_RE.pattern}$"
    assert (item["group"]["maxLength"], item["topic"]["maxLength"]) == (
        validation.GROUP_MAX_LENGTH,
        validation.TOPIC_MAX_LENGTH,
    )


def test_lint_passes_with_keda_on() -> None:
    values = keda(ORDERS, {**PAY, "trigger": "prometheus"}, prometheus={"serverAddress": PROMETHEUS})
    result = chart.lint(values)
    assert result.returncode == 0, result.stdout + result.stderr
