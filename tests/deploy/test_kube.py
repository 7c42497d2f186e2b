"""The converter from rendered manifests to pods (tests/deploy/kube.py), on hand-written
manifests and on the chart as rendered by the project's helm: what the deployment test
runs must be what Kubernetes would run."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.deploy import kube
from tests.helm import chart

NS, DOMAIN = "mq", "cluster.local"


def statefulset(name: str = "db", replicas: int = 2) -> dict[str, Any]:
    return {
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": f"{name}-headless",
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
        },
    }


def test_a_statefulset_is_its_numbered_pods_each_with_its_claim() -> None:
    work = kube.workload([statefulset(), None])
    assert [p.name for p in work.pods] == ["db-0", "db-1"]
    first = work.pods[0]
    assert (first.hostname, first.subdomain) == ("db-0", "db-headless")
    assert first.volumes()["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}
    assert first.labels == {"app": "db", "statefulset.kubernetes.io/pod-name": "db-0"}
    assert work.claims == ["data-db-0", "data-db-1"]
    assert first.fqdn(NS, DOMAIN) == "db-0.db-headless.mq.svc.cluster.local"
    assert first.restart_policy == "Always"


def test_deployments_cronjobs_and_test_hooks() -> None:
    template = {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    job_template = {"spec": {"containers": [{"name": "j", "image": "i"}], "restartPolicy": "Never"}}
    work = kube.workload([
        {"kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 3, "template": template}},
        {"kind": "CronJob", "metadata": {"name": "nightly"},
         "spec": {"jobTemplate": {"spec": {"template": job_template}}}},
        {"kind": "Pod", "metadata": {"name": "t", "annotations": {"helm.sh/hook": "test"}}, "spec": template["spec"]},
        {"kind": "PodDisruptionBudget", "metadata": {"name": "web"}},
    ])  # fmt: skip
    assert [p.name for p in work.pods] == ["web-0", "web-1", "web-2"]
    assert work.owned_by("web") == work.pods
    (job,) = work.job_pods
    assert (job.name, job.labels["job-name"], job.restart_policy) == ("nightly-manual-0", "nightly-manual", "Never")
    assert [p.name for p in work.test_pods] == ["t"]
    assert work.not_run == {"PodDisruptionBudget": ["web"]}


def test_a_kind_it_cannot_run_is_refused_not_skipped() -> None:
    with pytest.raises(kube.Unsupported, match="DaemonSet agent"):
        kube.workload([{"kind": "DaemonSet", "metadata": {"name": "agent"}}])


def test_service_names_resolve_to_the_pods_they_select() -> None:
    work = kube.workload([
        statefulset(),
        {"kind": "Service", "metadata": {"name": "db"}, "spec": {"selector": {"app": "db"}}},
        {"kind": "Service", "metadata": {"name": "none"}, "spec": {"selector": {"app": "nothing"}}},
    ])  # fmt: skip
    records = kube.dns_records(work, {"db-0": "10.0.0.2", "db-1": "10.0.0.3"}, namespace=NS, domain=DOMAIN)
    assert records == {
        "db.mq.svc.cluster.local": ["10.0.0.2", "10.0.0.3"],
        "db-0.db-headless.mq.svc.cluster.local": ["10.0.0.2"],
        "db-1.db-headless.mq.svc.cluster.local": ["10.0.0.3"],
    }


def test_references_are_expanded_as_the_kubelet_does() -> None:
    env = {"A": "1", "B": "x"}
    assert kube.expand("$(A)-$(B)-$(C)-$$(A)", env) == "1-x-$(C)-$(A)"


def test_the_environment_is_built_in_order_from_every_source() -> None:
    pod = kube.workload([statefulset()]).pods[1]
    container = {
        "name": "c",
        "resources": {"limits": {"memory": "2Gi", "cpu": "500m"}},
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "ADDR", "value": "$(POD_NAME).db-headless.$(POD_NAMESPACE):1"},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nope", "optional": True}}},
            {"name": "CONF", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x"}}},
            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1"}}},
        ],
    }
    pod.spec["containers"] = [container]
    env = kube.container_env(container, pod, namespace=NS, pod_ip="10.0.0.9", config_maps={"cm": {"x": "y"}},
                             secrets={"s": {"k": b"v"}})  # fmt: skip
    assert env == {
        "POD_NAME": "db-1",
        # POD_NAMESPACE is defined after ADDR: left as written, as the kubelet leaves it.
        "ADDR": "db-1.db-headless.$(POD_NAMESPACE):1",
        "POD_NAMESPACE": NS,
        "IP": "10.0.0.9",
        "APP": "db",
        "SECRET": "v",
        "CONF": "y",
        "MEM": "2048",
        "CPU": "1",  # 0.5 rounded up
    }
    with pytest.raises(kube.Unsupported, match="needs secret s key gone"):
        container["env"] = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "gone"}}}]
        kube.container_env(container, pod, namespace=NS, pod_ip="", config_maps={}, secrets={"s": {}})


def test_probes_name_their_port() -> None:
    container = {"ports": [{"name": "metrics", "containerPort": 2381}]}
    assert kube.probe_target({"httpGet": {"path": "/health", "port": "metrics"}}, container) == (
        "httpGet", {"path": "/health", "port": 2381},
    )  # fmt: skip
    assert kube.probe_target({"grpc": {"port": 9091, "service": "x"}}, container) == (
        "grpc", {"port": 9091, "service": "x"},
    )  # fmt: skip


# ---- the chart itself ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> kube.Workload:
    if chart.helm_binary() is None:
        pytest.skip("helm is not installed: run scripts/install_helm_tools.sh")
    return kube.workload(chart.render({}))


def test_the_default_chart_converts_whole(rendered: kube.Workload) -> None:
    owners = sorted({p.owner for p in rendered.pods})
    assert owners == ["txmq-etcd", "txmq-gateway", "txmq-pull", "txmq-store-g0", "txmq-store-g1", "txmq-txcheck"]
    assert len(rendered.owned_by("txmq-store-g0")) == 3
    assert [p.name for p in rendered.test_pods] == ["txmq-health-check"]
    assert [p.name for p in rendered.job_pods] == ["txmq-analytics-manual-0"]


def test_every_name_the_chart_dials_is_a_name_the_cluster_resolves(rendered: kube.Workload) -> None:
    """The advertised store addresses, etcd's endpoints and peer URLs, the helm test's and
    the analytics export's targets: each host is a Service or pod name of the release."""
    ips = {p.name: f"10.0.{i // 250}.{i % 250 + 2}" for i, p in enumerate(rendered.pods)}
    records = kube.dns_records(rendered, ips, namespace=chart.NAMESPACE, domain=DOMAIN)
    dialled: set[str] = set()
    for pod in [*rendered.pods, *rendered.test_pods, *rendered.job_pods]:
        for container in [*pod.init_containers(), *pod.containers()]:
            env = kube.container_env(container, pod, namespace=chart.NAMESPACE, pod_ip=ips.get(pod.name, "10.9.9.9"),
                                     config_maps=rendered.config_maps, secrets=rendered.secrets)  # fmt: skip
            words = [*env.values(), *(kube.expand(a, env) for a in [*container.get("command", []),
                                                                     *container.get("args", [])])]  # fmt: skip
            for word in words:
                for part in word.replace(",", " ").split():
                    host = part.split("//")[-1].rsplit(":", 1)[0]
                    if host.endswith(f".svc.{DOMAIN}"):
                        dialled.add(host)
    assert dialled, "the chart names no cluster address at all?"
    assert not dialled - records.keys(), sorted(dialled - records.keys())


def test_secrets_are_decoded() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": base64.b64encode(b"v").decode()},
              "stringData": {"t": "w"}}  # fmt: skip
    assert kube.workload([secret]).secrets == {"s": {"k": b"v", "t": b"w"}}
