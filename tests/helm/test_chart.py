"""helm/txmq rendered by helm itself: lint, Kubernetes schema validation (offline, with
kubernetes-validate) and the properties the deployment depends on."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm import chart
from helm.chart import (
    Doc,
    container,
    env_values,
    find,
    matches,
    one,
    pod_labels,
    pod_spec,
    workloads,
)

pytestmark = chart.needs_helm

SERVICES = ("store", "pull", "txcheck", "gateway")
#: The services that answer txmq's route look-ups (behind the bootstrap Service); the
#: gateway speaks RocketMQ's protocol instead.
ROUTE_SERVICES = ("store", "pull", "txcheck")
FULL = chart.RELEASE  # release "txmq": resources are txmq-store, txmq-etcd, ...
VALUES = yaml.safe_load((chart.CHART / "values.yaml").read_text())
#: The TLS Secret mounted, and the gateway serving TLS from it.
GATEWAY_TLS_SECRET: dict[str, Any] = {"enabled": True, "secretName": "txmq-tls"}
GATEWAY_TLS: dict[str, Any] = {"tls": GATEWAY_TLS_SECRET, "gateway": {"settings": {"tls_port": 8082}}}

#: Values that change everything that can change: other ports, external etcd, TLS (the
#: gateway serving it), Spark on Kubernetes, an HPA, sync flush, a longer shutdown grace,
#: another name, the gateway with authentication behind a LoadBalancer.
NONDEFAULT: dict[str, Any] = {
    "fullnameOverride": "mq",
    "clusterDomain": "corp.local",
    "image": {"repository": "registry.example/txmq", "tag": "1.2.3"},
    "etcd": {"enabled": False, "prefix": "/mq", "external": {"endpoints": "etcd.infra.svc:2379"}},
    "tls": {"enabled": True, "secretName": "txmq-tls"},
    "lifecycle": {"preStopSleepSeconds": 3, "stopMarginSeconds": 20},
    "store": {
        "replicas": 3,
        "settings": {
            "port": 20911,
            "flush_mode": "sync",
            "commitlog_segment_bytes": 1073741824,
            "shutdown_grace_ms": 30500,
            "data_dir": "/data/txmq/store",
            "physical_memory_bytes": 8589934592,
        },
        "persistence": {"mountPath": "/data/txmq", "storageClass": "fast-ssd", "size": "100Gi"},
    },
    "pull": {
        "replicas": 3,
        "settings": {"port": 20912, "long_polling_enable": False, "advertised_address": "[$(POD_IP)]:20912"},
        "autoscaling": {"enabled": True, "maxReplicas": 6},
    },
    "txcheck": {"replicas": 4, "settings": {"port": 20913, "check_loop_enable": False, "metrics_port": -1}},
    "gateway": {
        "replicas": 2,
        "settings": {
            "port": 18081,
            "tls_port": 18082,
            "access_key": "txmq-ak",
            "max_receive_batch_size": 64,
            "metrics_port": 9191,
        },
        "auth": {"existingSecret": "txmq-gateway-auth", "existingSecretKey": "sk"},
        "service": {
            "type": "LoadBalancer",
            "annotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
            "loadBalancerSourceRanges": ["10.0.0.0/8", "192.168.0.0/16"],
            "externalTrafficPolicy": "Local",
            "tlsNodePort": 30082,
        },
    },
    "analytics": {
        "spark": {
            "master": "k8s://https://kubernetes.default.svc:443",
            "kubernetes": {"executorImage": "apache/spark:4.0.1-python3"},
        },
        "exports": {"existingClaim": "txmq-exports-nfs"},
    },
}

SCENARIOS: dict[str, tuple[dict[str, Any] | None, tuple[Path, ...]]] = {
    "default": (None, ()),
    "nondefault": (NONDEFAULT, ()),
    "analytics-off": ({"analytics": {"enabled": False}, "networkPolicy": {"enabled": False}}, ()),
    "gateway-off": ({"gateway": {"enabled": False}}, ()),
    "gateway-nodeport": (
        {"gateway": {"service": {"type": "NodePort", "nodePort": 30081, "externalTrafficPolicy": "Cluster"}}},
        (),
    ),
    "gateway-tls-nodeport": (
        {
            "tls": {"enabled": True, "secretName": "txmq-tls"},
            "gateway": {"settings": {"tls_port": 8082}, "service": {"type": "NodePort", "tlsNodePort": 30082}},
        },
        (),
    ),
    # The Secret mounted, the gateway without a TLS port.
    "tls-mounted-only": ({"tls": {"enabled": True, "secretName": "txmq-tls"}}, ()),
    **{f"example-{p.stem}": (None, (p,)) for p in chart.EXAMPLES},
}


@pytest.fixture(scope="module")
def nondefault_docs() -> list[Doc]:
    return chart.render(NONDEFAULT)


@pytest.fixture(scope="module")
def kubernetes_validate() -> Any:
    try:
        import kubernetes_validate
    except ImportError:  # pragma: no cover - the setup installs it
        pytest.fail("kubernetes-validate is missing: run scripts/install_helm_tools.sh (or scripts/setup.sh --test)")
    return kubernetes_validate


def workload(docs: list[Doc], component: str) -> Doc:
    (found,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet") and component_of(d) == component]
    return found


def component_of(doc: Doc) -> str | None:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def svc_port(settings: dict[str, Any]) -> int:
    return int(settings["port"])


# ---- helm lint and the Kubernetes schemas ----------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_lint(scenario: str) -> None:
    values, files = SCENARIOS[scenario]
    result = chart.lint(values, *files)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kube_version", ["1.27.0", "latest"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_manifest_is_valid_kubernetes(scenario: str, kube_version: str, kubernetes_validate: Any) -> None:
    """Strict validation: unknown fields (a misplaced probe key, a typo) fail too. 1.27 is
    the chart's kubeVersion floor (native gRPC probes)."""
    version = kubernetes_validate.latest_version() if kube_version == "latest" else kube_version
    values, files = SCENARIOS[scenario]
    docs = chart.render(values, *files)
    assert docs
    errors = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {exc.message}")
    assert not errors, "\n".join(errors)


def test_kube_version_floor_is_enforced() -> None:
    result = chart.helm("template", "t", str(chart.CHART), "--kube-version", "1.26.0", check=False)
    assert result.returncode != 0 and "kubeVersion" in result.stderr


# ---- what gets deployed ---------------------------------------------------------------------


def test_default_release_has_every_part(default_docs: list[Doc]) -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in default_docs}
    for expected in [
        ("StatefulSet", "txmq-etcd"),
        ("StatefulSet", "txmq-store"),
        ("Deployment", "txmq-pull"),
        ("Deployment", "txmq-txcheck"),
        ("Deployment", "txmq-gateway"),
        ("Service", "txmq-gateway"),
        ("PodDisruptionBudget", "txmq-gateway"),
        ("CronJob", "txmq-analytics"),
        ("Service", "txmq-store-headless"),
        ("Service", "txmq-etcd-headless"),
        ("Service", "txmq-bootstrap"),
        ("NetworkPolicy", "txmq-etcd"),
        ("PersistentVolumeClaim", "txmq-exports"),
    ]:
        assert expected in kinds


def test_replicas(default_docs: list[Doc], nondefault_docs: list[Doc]) -> None:
    assert one(default_docs, "StatefulSet", "txmq-etcd")["spec"]["replicas"] == 3
    assert one(default_docs, "StatefulSet", "txmq-store")["spec"]["replicas"] == 2
    for name in ("txmq-pull", "txmq-txcheck"):
        assert one(default_docs, "Deployment", name)["spec"]["replicas"] >= 2
    # The HPA owns pull's replica count when enabled.
    assert "replicas" not in one(nondefault_docs, "Deployment", "mq-pull")["spec"]
    hpa = one(nondefault_docs, "HorizontalPodAutoscaler", "mq-pull")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)
    assert one(nondefault_docs, "Deployment", "mq-txcheck")["spec"]["replicas"] == 4
    assert one(nondefault_docs, "StatefulSet", "mq-store")["spec"]["replicas"] == 3
    # Consumer groups are owned by one gateway pod each and forwarded to it: two pods.
    assert one(default_docs, "Deployment", "txmq-gateway")["spec"]["replicas"] == 2
    assert one(nondefault_docs, "Deployment", "mq-gateway")["spec"]["replicas"] == 2
    assert not [h for h in find(nondefault_docs, "HorizontalPodAutoscaler") if component_of(h) == "gateway"]


# ---- the store: a PVC per pod, identity from the pod name ------------------------------------


@pytest.mark.parametrize("which", ["default", "nondefault"])
def test_store_keeps_its_data_on_a_pvc_per_pod(which: str, default_docs: list[Doc], nondefault_docs: list[Doc]) -> None:
    docs = default_docs if which == "default" else nondefault_docs
    sts = workload(docs, "store")
    assert sts["kind"] == "StatefulSet"
    (claim,) = [t for t in sts["spec"]["volumeClaimTemplates"] if t["metadata"]["name"] == "data"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # "data" comes from the claim template, not from a pod volume (emptyDir would lose it).
    assert "data" not in {v["name"] for v in pod_spec(sts).get("volumes", [])}
    c = container(sts, "store")
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "data"]
    data_dir = env_values(c)["TXMQ_STORE_DATA_DIR"]
    assert data_dir and data_dir.startswith(mount["mountPath"].rstrip("/") + "/")
    # Deleting the release or scaling down keeps the data unless asked otherwise.
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    if which == "nondefault":
        assert claim["spec"]["storageClassName"] == "fast-ssd"
        assert claim["spec"]["resources"]["requests"]["storage"] == "100Gi"


def test_store_data_dir_outside_the_pvc_is_refused() -> None:
    result = chart.template({"store": {"settings": {"data_dir": "/tmp/store"}}}, check=False)
    assert result.returncode != 0
    assert "must be under store.persistence.mountPath" in result.stderr


@pytest.mark.parametrize("which", ["default", "nondefault"])
def test_store_id_and_address_come_from_the_pod(
    which: str, default_docs: list[Doc], nondefault_docs: list[Doc]
) -> None:
    docs = default_docs if which == "default" else nondefault_docs
    full, domain, port = ("txmq", "cluster.local", 10911) if which == "default" else ("mq", "corp.local", 20911)
    sts = workload(docs, "store")
    c = container(sts, "store")
    env = c["env"]
    names = [e["name"] for e in env]
    by_name = {e["name"]: e for e in env}
    assert by_name["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert by_name["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # $(VAR) only expands variables defined earlier in the list.
    assert names.index("POD_NAME") < names.index("TXMQ_STORE_STORE_ID")
    assert by_name["TXMQ_STORE_STORE_ID"]["value"] == "$(POD_NAME)"
    headless = sts["spec"]["serviceName"]
    assert headless == f"{full}-store-headless"
    assert (
        by_name["TXMQ_STORE_ADVERTISED_ADDRESS"]["value"]
        == f"$(POD_NAME).{headless}.$(POD_NAMESPACE).svc.{domain}:{port}"
    )
    svc = one(docs, "Service", headless)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(sts))
    assert sts["spec"]["podManagementPolicy"] == "Parallel"


# ---- probes -----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "nondefault"])
@pytest.mark.parametrize("service", SERVICES)
def test_probes_ask_the_grpc_health_service_on_the_service_port(
    service: str, which: str, default_docs: list[Doc], nondefault_docs: list[Doc]
) -> None:
    docs = default_docs if which == "default" else nondefault_docs
    w = workload(docs, service)
    c = container(w, service)
    port = int(env_values(c)[f"TXMQ_{service.upper()}_PORT"] or 0)
    assert port == (
        VALUES[service]["settings"]["port"] if which == "default" else NONDEFAULT[service]["settings"]["port"]
    )
    assert [p["containerPort"] for p in c["ports"] if p["name"] == "grpc"] == [port]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"] == {"port": port}, probe
        assert not {"httpGet", "tcpSocket", "exec"} & c[probe].keys()
    # Every Service in front of the pods reaches that same port (the gateway's also its
    # TLS port, which the probes do not use).
    tls_port = [p["containerPort"] for p in c["ports"] if p["name"] == "grpc-tls"]
    serves_tls = (which, service) == ("nondefault", "gateway")
    assert tls_port == ([NONDEFAULT["gateway"]["settings"]["tls_port"]] if serves_tls else [])
    for svc in find(docs, "Service"):
        if matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(w)):
            assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["grpc"] + ["grpc-tls"] * len(tls_port)


def test_store_start_up_allows_a_long_recovery(default_docs: list[Doc]) -> None:
    probe = container(workload(default_docs, "store"), "store")["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 15 * 60


# ---- etcd -------------------------------------------------------------------------------------


def test_etcd_is_a_three_member_cluster_with_pvcs(default_docs: list[Doc]) -> None:
    sts = one(default_docs, "StatefulSet", "txmq-etcd")
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    args = container(sts, "etcd")["args"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in args)
    assert flags["name"] == "$(POD_NAME)"
    headless = sts["spec"]["serviceName"]
    assert headless == "txmq-etcd-headless"
    members = dict(m.split("=", 1) for m in flags["initial-cluster"].split(","))
    assert members == {
        f"txmq-etcd-{i}": f"http://txmq-etcd-{i}.{headless}.{chart.NAMESPACE}.svc.cluster.local:2380" for i in range(3)
    }
    assert (
        flags["initial-advertise-peer-urls"] == f"http://$(POD_NAME).{headless}.$(POD_NAMESPACE).svc.cluster.local:2380"
    )
    assert flags["initial-cluster-state"] == "new"
    assert flags["data-dir"].startswith(container(sts, "etcd")["volumeMounts"][0]["mountPath"] + "/")
    svc = one(default_docs, "Service", headless)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True


def test_services_dial_etcd_through_its_client_service(default_docs: list[Doc]) -> None:
    svc = one(default_docs, "Service", "txmq-etcd")
    endpoint = f"txmq-etcd.{chart.NAMESPACE}.svc.cluster.local:{svc['spec']['ports'][0]['port']}"
    for service in SERVICES:
        env = env_values(container(workload(default_docs, service), service))
        assert env[f"TXMQ_{service.upper()}_ETCD_ENDPOINTS"] == endpoint
        assert env[f"TXMQ_{service.upper()}_ETCD_PREFIX"] == "/txmq"


def test_etcd_is_not_exposed_outside_the_cluster(default_docs: list[Doc]) -> None:
    etcd_pods = pod_labels(one(default_docs, "StatefulSet", "txmq-etcd"))
    etcd_services = [
        s for s in find(default_docs, "Service") if matches({"matchLabels": s["spec"]["selector"]}, etcd_pods)
    ]
    assert {s["metadata"]["name"] for s in etcd_services} == {"txmq-etcd", "txmq-etcd-headless"}
    for svc in etcd_services:
        assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
        assert not svc["spec"].get("externalIPs")
        assert all("nodePort" not in p for p in svc["spec"]["ports"])


def test_network_policy_admits_only_txmq_services_to_etcd(default_docs: list[Doc]) -> None:
    etcd = one(default_docs, "StatefulSet", "txmq-etcd")
    (policy,) = [p for p in find(default_docs, "NetworkPolicy") if matches(p["spec"]["podSelector"], pod_labels(etcd))]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rules = policy["spec"]["ingress"]
    assert rules and all(r.get("from") for r in rules), "a rule without `from` admits everyone"

    def admitted(labels: dict[str, str], port: int) -> bool:
        for rule in rules:
            ports = {p["port"] for p in rule.get("ports", [])}
            if port not in ports:
                continue
            for peer in rule["from"]:
                # Only podSelectors in this namespace: no namespaceSelector, no ipBlock.
                assert set(peer) == {"podSelector"}, peer
                if matches(peer["podSelector"], labels):
                    return True
        return False

    for service in SERVICES:
        labels = pod_labels(workload(default_docs, service))
        assert admitted(labels, 2379), service
        assert not admitted(labels, 2380), service
    assert admitted(pod_labels(etcd), 2380)
    analytics = pod_labels(one(default_docs, "CronJob", "txmq-analytics"))
    assert not admitted(analytics, 2379)
    other_release = {**pod_labels(workload(default_docs, "store")), "app.kubernetes.io/instance": "other"}
    assert not admitted(other_release, 2379)
    assert not admitted({"app": "anything"}, 2379)


def test_external_etcd(nondefault_docs: list[Doc]) -> None:
    assert not [d for d in nondefault_docs if component_of(d) == "etcd"]
    for service in SERVICES:
        env = env_values(container(workload(nondefault_docs, service), service))
        assert env[f"TXMQ_{service.upper()}_ETCD_ENDPOINTS"] == "etcd.infra.svc:2379"
        assert env[f"TXMQ_{service.upper()}_ETCD_PREFIX"] == "/mq"


# ---- availability ----------------------------------------------------------------------------


@pytest.mark.parametrize("component", ["etcd", *SERVICES])
def test_each_component_has_a_disruption_budget(component: str, default_docs: list[Doc]) -> None:
    pods = [w for w in workloads(default_docs) if component_of(w) == component]
    assert len(pods) == 1
    budgets = [
        p for p in find(default_docs, "PodDisruptionBudget") if matches(p["spec"]["selector"], pod_labels(pods[0]))
    ]
    assert len(budgets) == 1
    assert budgets[0]["spec"]["maxUnavailable"] == 1


def test_bootstrap_service_reaches_every_txmq_service(default_docs: list[Doc]) -> None:
    svc = one(default_docs, "Service", "txmq-bootstrap")
    selector = {"matchLabels": svc["spec"]["selector"]}
    for service in ROUTE_SERVICES:
        assert matches(selector, pod_labels(workload(default_docs, service)))
    # The gateway answers apache.rocketmq.v2, not txmq's route look-ups.
    assert not matches(selector, pod_labels(workload(default_docs, "gateway")))
    assert not matches(selector, pod_labels(one(default_docs, "StatefulSet", "txmq-etcd")))
    assert not matches(selector, pod_labels(one(default_docs, "CronJob", "txmq-analytics")))
    assert svc["spec"]["ports"][0]["targetPort"] == "grpc"


# ---- pods: resources, security, shutdown -------------------------------------------------------


@pytest.mark.parametrize("scenario", ["default", "nondefault"])
def test_every_container_has_requests_and_limits(scenario: str) -> None:
    values, files = SCENARIOS[scenario]
    for w in workloads(chart.render(values, *files)):
        for c in pod_spec(w)["containers"]:
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= c["resources"].get(kind, {}).keys(), (w["metadata"]["name"], kind)


@pytest.mark.parametrize("scenario", ["default", "nondefault"])
def test_every_pod_is_locked_down(scenario: str) -> None:
    values, files = SCENARIOS[scenario]
    for w in workloads(chart.render(values, *files)):
        name = w["metadata"]["name"]
        spec = pod_spec(w)
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        # Service links would inject TXMQ_STORE_PORT=tcp://... next to the settings.
        assert spec["enableServiceLinks"] is False, name
        spark_driver = component_of(w) == "analytics" and scenario == "nondefault"
        assert spec["automountServiceAccountToken"] is spark_driver, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert "add" not in sc["capabilities"], name
            if c["name"] != "etcd":  # etcd writes only its data dir
                (tmp,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
                (vol,) = [v for v in spec["volumes"] if v["name"] == tmp["name"]]
                assert "emptyDir" in vol, name


@pytest.mark.parametrize("which", ["default", "nondefault"])
@pytest.mark.parametrize("service", SERVICES)
def test_termination_grace_covers_the_shutdown_grace(
    service: str, which: str, default_docs: list[Doc], nondefault_docs: list[Doc]
) -> None:
    docs, lifecycle = (
        (default_docs, VALUES["lifecycle"]) if which == "default" else (nondefault_docs, NONDEFAULT["lifecycle"])
    )
    w = workload(docs, service)
    c = container(w, service)
    grace_ms = int(env_values(c)[f"TXMQ_{service.upper()}_SHUTDOWN_GRACE_MS"] or 0)
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop == ["sleep", str(lifecycle["preStopSleepSeconds"])]
    expected = lifecycle["preStopSleepSeconds"] + math.ceil(grace_ms / 1000) + lifecycle["stopMarginSeconds"]
    assert pod_spec(w)["terminationGracePeriodSeconds"] == expected
    assert expected * 1000 > lifecycle["preStopSleepSeconds"] * 1000 + grace_ms
    if which == "nondefault" and service == "store":
        assert grace_ms == 30500 and expected == 3 + 31 + 20


# ---- analytics -------------------------------------------------------------------------------


def test_analytics_cronjob_runs_spark_locally_on_the_shared_exports(default_docs: list[Doc]) -> None:
    job = one(default_docs, "CronJob", "txmq-analytics")
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    c = container(job, "analytics")
    assert c["image"] == "txmq:0.1.0-analytics"
    args = c["args"]
    assert args[:2] == ["analytics", "run"]
    opts = dict(zip(args[2::2], args[3::2]))
    mount = VALUES["analytics"]["exports"]["mountPath"]
    assert opts == {"--input": f"{mount}/exports", "--output": f"{mount}/reports/$(JOB_NAME)", "--master": "local[*]"}
    env = {e["name"]: e for e in c["env"]}
    assert env["JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['job-name']"
    assert not spec.get("initContainers")
    # The job and every store mount the same claim at the same path.
    (job_mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == mount]
    (job_vol,) = [v for v in spec["volumes"] if v["name"] == job_mount["name"]]
    claim = job_vol["persistentVolumeClaim"]["claimName"]
    store = workload(default_docs, "store")
    (store_mount,) = [m for m in container(store, "store")["volumeMounts"] if m["mountPath"] == mount]
    (store_vol,) = [v for v in pod_spec(store)["volumes"] if v["name"] == store_mount["name"]]
    assert store_vol["persistentVolumeClaim"]["claimName"] == claim
    pvc = one(default_docs, "PersistentVolumeClaim", claim)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert not find(default_docs, "Role")
    conf = one(default_docs, "ConfigMap", "txmq-analytics-spark")["data"]["spark-defaults.conf"]
    assert "spark.driver.memory 2g" in conf.splitlines()


def test_analytics_on_spark_kubernetes_master(nondefault_docs: list[Doc]) -> None:
    job = one(nondefault_docs, "CronJob", "mq-analytics")
    spec = pod_spec(job)
    c = container(job, "analytics")
    assert c["image"] == "registry.example/txmq:1.2.3-analytics"
    args = c["args"]
    assert args[args.index("--master") + 1] == "k8s://https://kubernetes.default.svc:443"
    sa = one(nondefault_docs, "ServiceAccount", "mq-analytics")
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    binding = one(nondefault_docs, "RoleBinding", "mq-analytics")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mq-analytics", "namespace": chart.NAMESPACE}]
    role = one(nondefault_docs, "Role", binding["roleRef"]["name"])
    assert any("pods" in r["resources"] and "create" in r["verbs"] for r in role["rules"])
    conf = one(nondefault_docs, "ConfigMap", "mq-analytics-spark")["data"]["spark-defaults.conf"]
    lines = set(conf.splitlines())
    assert "spark.kubernetes.container.image apache/spark:4.0.1-python3" in lines
    assert f"spark.kubernetes.namespace {chart.NAMESPACE}" in lines
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    assert confs == ["spark.driver.host=$(POD_IP)", "spark.kubernetes.driver.pod.name=$(POD_NAME)"]
    # existingClaim: the chart creates no claim of its own.
    assert not find(nondefault_docs, "PersistentVolumeClaim")
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["shared"]["persistentVolumeClaim"]["claimName"] == "txmq-exports-nfs"


def test_stores_export_into_the_shared_volume(default_docs: list[Doc]) -> None:
    from txmq_store.settings import StoreSettings

    if "export_dir" not in StoreSettings.model_fields:
        pytest.skip("StoreSettings has no export_dir yet (issue 5)")
    env = env_values(container(workload(default_docs, "store"), "store"))
    assert env["TXMQ_STORE_EXPORT_DIR"] == VALUES["analytics"]["exports"]["mountPath"] + "/exports"


def test_analytics_remote_export_needs_no_shared_volume() -> None:
    docs = chart.render({"analytics": {"exports": {"source": "remote"}}})
    job = one(docs, "CronJob", "txmq-analytics")
    spec = pod_spec(job)
    (init,) = spec["initContainers"]
    mount = VALUES["analytics"]["exports"]["mountPath"]
    assert init["args"][:2] == ["analytics", "export"]
    opts = dict(zip(init["args"][2::2], init["args"][3::2]))
    store_port = VALUES["store"]["settings"]["port"]
    assert opts["--endpoint"] == f"txmq-store.{chart.NAMESPACE}.svc.cluster.local:{store_port}"
    assert opts["--output"] == f"{mount}/exports"
    args = container(job, "analytics")["args"]
    assert args[args.index("--input") + 1] == f"{mount}/exports"
    assert one(docs, "PersistentVolumeClaim", "txmq-exports")["spec"]["accessModes"] == ["ReadWriteOnce"]
    store = container(workload(docs, "store"), "store")
    assert [m["name"] for m in store["volumeMounts"]] == ["data", "tmp"]


def test_analytics_on_object_storage_has_no_volume() -> None:
    docs = chart.render(
        {"analytics": {"exports": {"source": "none"}, "input": "s3a://b/exports", "output": "s3a://b/reports"}}
    )
    job = one(docs, "CronJob", "txmq-analytics")
    args = container(job, "analytics")["args"]
    assert (args[args.index("--input") + 1], args[args.index("--output") + 1]) == ("s3a://b/exports", "s3a://b/reports")
    assert not find(docs, "PersistentVolumeClaim")
    assert "shared" not in {v["name"] for v in pod_spec(job)["volumes"]}


def test_analytics_can_be_turned_off() -> None:
    docs = chart.render({"analytics": {"enabled": False}})
    assert not find(docs, "CronJob") and not find(docs, "PersistentVolumeClaim")
    store = container(workload(docs, "store"), "store")
    assert [m["name"] for m in store["volumeMounts"]] == ["data", "tmp"]


# ---- TLS -------------------------------------------------------------------------------------


def test_tls_secret_is_mounted_in_every_service(nondefault_docs: list[Doc], default_docs: list[Doc]) -> None:
    for service in SERVICES:
        w = workload(nondefault_docs, service)
        vols = {v["name"]: v for v in pod_spec(w)["volumes"]}
        assert vols["tls"]["secret"]["secretName"] == "txmq-tls"
        (mount,) = [m for m in container(w, service)["volumeMounts"] if m["name"] == "tls"]
        assert mount == {"name": "tls", "mountPath": "/etc/txmq/tls", "readOnly": True}
        assert "tls" not in {v["name"] for v in pod_spec(workload(default_docs, service))["volumes"]}


def gateway_tls_env(c: dict[str, Any]) -> list[tuple[str, str | None]]:
    """The gateway's TXMQ_GATEWAY_TLS_* variables as (name, value), in order, repeats kept."""
    return [(e["name"], e.get("value")) for e in c["env"] if e["name"].startswith("TXMQ_GATEWAY_TLS_")]


@pytest.mark.parametrize("scenario", ["default", "tls-mounted-only"])
def test_gateway_without_a_tls_port_serves_plaintext_only(scenario: str) -> None:
    """TLS off (or the Secret mounted but no gateway.settings.tls_port): the gateway gets
    tls_port -1, no TLS container port, a Service with the plaintext port only."""
    values, files = SCENARIOS[scenario]
    docs = chart.render(values, *files)
    gateway = workload(docs, "gateway")
    c = container(gateway, "gateway")
    mounted = scenario == "tls-mounted-only"
    cert, key = ("/etc/txmq/tls/tls.crt", "/etc/txmq/tls/tls.key") if mounted else ("", "")
    assert gateway_tls_env(c) == [
        ("TXMQ_GATEWAY_TLS_CERT_FILE", cert),
        ("TXMQ_GATEWAY_TLS_KEY_FILE", key),
        ("TXMQ_GATEWAY_TLS_PORT", "-1"),
    ]
    assert [p["name"] for p in c["ports"]] == ["grpc", "metrics"]
    assert [m["name"] for m in c["volumeMounts"]] == (["tmp", "tls"] if mounted else ["tmp"])
    svc = one(docs, "Service", "txmq-gateway")
    assert svc["spec"]["ports"] == [{"name": "grpc", "port": 8081, "targetPort": "grpc", "protocol": "TCP"}]
    assert "grpc-tls" not in chart.template(values, *files).stdout


@pytest.mark.parametrize("mount_path", ["/etc/txmq/tls", "/run/txmq-certs/"])
def test_gateway_serves_tls_from_the_mounted_secret(mount_path: str) -> None:
    """tls.enabled + gateway.settings.tls_port: the gateway pod mounts the Secret, its
    tls_cert_file / tls_key_file name tls.crt / tls.key there (each variable once), the
    container declares the TLS port as grpc-tls and the Service forwards a second port to
    it. Probes stay on the plaintext port."""
    tls = {**GATEWAY_TLS_SECRET, "mountPath": mount_path}
    docs = chart.render({**GATEWAY_TLS, "tls": tls})
    gateway = workload(docs, "gateway")
    spec = pod_spec(gateway)
    c = container(gateway, "gateway")
    (volume,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "txmq-tls"
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    assert mount == {"name": "tls", "mountPath": mount_path, "readOnly": True}
    directory = mount_path.rstrip("/")
    assert gateway_tls_env(c) == [
        ("TXMQ_GATEWAY_TLS_CERT_FILE", f"{directory}/tls.crt"),
        ("TXMQ_GATEWAY_TLS_KEY_FILE", f"{directory}/tls.key"),
        ("TXMQ_GATEWAY_TLS_PORT", "8082"),
    ]
    assert c["ports"] == [
        {"name": "grpc", "containerPort": 8081, "protocol": "TCP"},
        {"name": "grpc-tls", "containerPort": 8082, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"] == {"port": 8081}
    svc = one(docs, "Service", "txmq-gateway")
    assert svc["spec"]["ports"] == [
        {"name": "grpc", "port": 8081, "targetPort": "grpc", "protocol": "TCP"},
        {"name": "grpc-tls", "port": 8082, "targetPort": "grpc-tls", "protocol": "TCP"},
    ]
    # Only the gateway serves TLS; the others just have the files.
    for service in ROUTE_SERVICES:
        other = container(workload(docs, service), service)
        assert "grpc-tls" not in {p["name"] for p in other["ports"]}
        assert not [e for e in other["env"] if "TLS" in e["name"]]
        for svc in find(docs, "Service"):
            if matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(workload(docs, service))):
                assert [p["name"] for p in svc["spec"]["ports"]] == ["grpc"]


def test_gateway_tls_files_given_explicitly_are_kept() -> None:
    settings = {"tls_port": 8082, "tls_cert_file": "/etc/txmq/tls/chain.pem", "tls_key_file": "/etc/txmq/tls/key.pem"}
    docs = chart.render({**GATEWAY_TLS, "gateway": {"settings": settings}})
    assert gateway_tls_env(container(workload(docs, "gateway"), "gateway")) == [
        ("TXMQ_GATEWAY_TLS_CERT_FILE", "/etc/txmq/tls/chain.pem"),
        ("TXMQ_GATEWAY_TLS_KEY_FILE", "/etc/txmq/tls/key.pem"),
        ("TXMQ_GATEWAY_TLS_PORT", "8082"),
    ]


def test_gateway_tls_node_port() -> None:
    values, files = SCENARIOS["gateway-tls-nodeport"]
    svc = one(chart.render(values, *files), "Service", "txmq-gateway")
    assert svc["spec"]["type"] == "NodePort"
    (plain, tls) = svc["spec"]["ports"]
    assert "nodePort" not in plain  # allocated by Kubernetes
    assert (tls["name"], tls["port"], tls["nodePort"]) == ("grpc-tls", 8082, 30082)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tls_port": 8081}, "gateway.settings.tls_port must differ from gateway.settings.port"),
        ({"tls_port": 9090}, "gateway.settings.tls_port must differ from gateway.settings.metrics_port"),
    ],
)
def test_gateway_tls_port_clashes_are_refused(settings: dict[str, Any], message: str) -> None:
    result = chart.template({**GATEWAY_TLS, "gateway": {"settings": settings}}, check=False)
    assert result.returncode != 0 and message in result.stderr


def test_gateway_tls_port_without_the_secret_fails_even_without_the_schema(tmp_path: Path) -> None:
    """--skip-schema-validation: the template still refuses a TLS port with no files."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"gateway": {"settings": {"tls_port": 8082}}}))
    result = chart.helm("template", "t", str(chart.CHART), "--skip-schema-validation", "-f", str(values), check=False)
    assert result.returncode != 0
    assert "gateway.settings.tls_port needs tls.enabled and tls.secretName" in result.stderr


# ---- values.schema.json refuses what the services would refuse ------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"store": {"settings": {"flush_mode": "sometimes"}}}, "flush_mode"),
        ({"store": {"settings": {"flushmode": "sync"}}}, "flushmode"),
        ({"pull": {"settings": {"suspend_timeout_max_ms": 0}}}, "suspend_timeout_max_ms"),
        ({"txcheck": {"settings": {"port": 0}}}, "port"),
        ({"pull": {"settings": {"metrics_port": 0}}}, "metrics_port"),
        ({"analytics": {"exports": {"source": "none"}}}, "input"),
        ({"analytics": {"exports": {"source": "s3"}}}, "source"),
        ({"store": {"settings": {"max_properties_bytes": 70000}}}, "max_properties_bytes"),
        ({"store": {"settings": {"auto_create_topic_enable": "yes"}}}, "auto_create_topic_enable"),
        ({"etcd": {"replicas": 2}}, "replicas"),
        ({"etcd": {"enabled": False}}, "endpoints"),
        ({"tls": {"enabled": True}}, "secretName"),
        ({"analytics": {"spark": {"master": "k8s://https://api:6443"}}}, "executorImage"),
        ({"analytics": {"spark": {"master": "localhost"}}}, "master"),
        ({"store": {"probes": {"liveness": {"grpc": {"port": 1}}}}}, "grpc"),
        ({"gateway": {"settings": {"max_receive_batch_size": 0}}}, "max_receive_batch_size"),
        ({"gateway": {"settings": {"port": 0}}}, "port"),
        # The secret key is never a value (it would be stored in the release).
        ({"gateway": {"settings": {"secret_key": "s3cr3t"}}}, "secret_key"),
        # One without the other would leave authentication silently off.
        ({"gateway": {"settings": {"access_key": "ak"}}}, "existingSecret"),
        ({"gateway": {"auth": {"existingSecret": "gw-auth"}}}, "access_key"),
        (
            {
                "gateway": {
                    "auth": {"existingSecret": "gw-auth", "existingSecretKey": ""},
                    "settings": {"access_key": "ak"},
                }
            },
            "existingSecretKey",
        ),
        ({"gateway": {"service": {"type": "Ingress"}}}, "type"),
        ({"gateway": {"service": {"externalTrafficPolicy": "Nearest"}}}, "externalTrafficPolicy"),
        ({"gateway": {"autoscaling": {"enabled": True}}}, "autoscaling"),
        # A TLS port needs the Secret with its certificate and key (tls.enabled).
        ({"gateway": {"settings": {"tls_port": 8082}}}, "tls.enabled"),
        ({"gateway": {"settings": {"tls_port": 8082}}, "tls": {**GATEWAY_TLS_SECRET, "enabled": False}}, "tls.enabled"),
        ({"gateway": {"settings": {"tls_port": 8082}}, "tls": {"enabled": True}}, "secretName"),
        # 0 (a random port) cannot be a containerPort or a Service's target.
        ({"gateway": {"settings": {"tls_port": 0}}, "tls": GATEWAY_TLS_SECRET}, "tls_port"),
        ({"gateway": {"settings": {"tls_port": 65536}}, "tls": GATEWAY_TLS_SECRET}, "tls_port"),
        ({"gateway": {"service": {"tlsNodePort": -1}}}, "tlsNodePort"),
    ],
)
def test_schema_refuses_bad_values(values: dict[str, Any], message: str) -> None:
    result = chart.template(values, check=False)
    assert result.returncode != 0, f"accepted {values}"
    assert message in result.stderr


def test_nondefault_values_reach_the_manifests(nondefault_docs: list[Doc]) -> None:
    store = container(workload(nondefault_docs, "store"), "store")
    env = env_values(store)
    assert store["image"] == "registry.example/txmq:1.2.3"
    assert env["TXMQ_STORE_FLUSH_MODE"] == "sync"
    # No float formatting of big integers (Helm reads YAML numbers as float64).
    assert env["TXMQ_STORE_COMMITLOG_SEGMENT_BYTES"] == "1073741824"
    assert env["TXMQ_STORE_PHYSICAL_MEMORY_BYTES"] == "8589934592"
    pull = env_values(container(workload(nondefault_docs, "pull"), "pull"))
    assert pull["TXMQ_PULL_LONG_POLLING_ENABLE"] == "false"
    assert pull["TXMQ_PULL_ADVERTISED_ADDRESS"] == "[$(POD_IP)]:20912"
    txcheck = env_values(container(workload(nondefault_docs, "txcheck"), "txcheck"))
    assert txcheck["TXMQ_TXCHECK_CHECK_LOOP_ENABLE"] == "false"
    assert txcheck["TXMQ_TXCHECK_ADVERTISED_ADDRESS"] == "$(POD_IP):20913"
    gateway = env_values(container(workload(nondefault_docs, "gateway"), "gateway"))
    assert gateway["TXMQ_GATEWAY_PORT"] == "18081"
    assert gateway["TXMQ_GATEWAY_ADVERTISED_ADDRESS"] == "$(POD_IP):18081"
    assert gateway["TXMQ_GATEWAY_ACCESS_KEY"] == "txmq-ak"
    assert gateway["TXMQ_GATEWAY_MAX_RECEIVE_BATCH_SIZE"] == "64"
    assert gateway["TXMQ_GATEWAY_TLS_PORT"] == "18082"
    assert gateway["TXMQ_GATEWAY_TLS_CERT_FILE"] == "/etc/txmq/tls/tls.crt"
    assert gateway["TXMQ_GATEWAY_TLS_KEY_FILE"] == "/etc/txmq/tls/tls.key"


@pytest.mark.parametrize("service", SERVICES)
def test_metrics_port_is_declared_and_annotated(
    service: str, default_docs: list[Doc], nondefault_docs: list[Doc]
) -> None:
    w = workload(default_docs, service)
    c = container(w, service)
    port = int(env_values(c)[f"TXMQ_{service.upper()}_METRICS_PORT"] or 0)
    assert port == VALUES[service]["settings"]["metrics_port"] > 0
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in c["ports"]
    annotations = w["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port) and annotations["prometheus.io/scrape"] == "true"
    # metrics_port -1: off, nothing declared
    off = workload(nondefault_docs, "txcheck")
    assert "metrics" not in {p["name"] for p in container(off, "txcheck")["ports"]}
    assert "prometheus.io/scrape" not in off["spec"]["template"]["metadata"].get("annotations", {})


def test_values_schema_is_a_valid_draft7_schema() -> None:
    import json

    import jsonschema

    schema = json.loads((chart.CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(VALUES))


def test_physical_memory_defaults_to_the_memory_limit(default_docs: list[Doc]) -> None:
    store = container(workload(default_docs, "store"), "store")
    (var,) = [e for e in store["env"] if e["name"] == "TXMQ_STORE_PHYSICAL_MEMORY_BYTES"]
    ref = var["valueFrom"]["resourceFieldRef"]
    assert ref == {"containerName": "store", "resource": "limits.memory", "divisor": "1"}


def test_helm_test_pod_checks_every_service(default_docs: list[Doc]) -> None:
    (pod,) = find(default_docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    targets = container(pod)["args"][1:]
    ports = {s: VALUES[s]["settings"]["port"] for s in SERVICES}
    assert targets == [f"txmq-{s}.{chart.NAMESPACE}.svc.cluster.local:{ports[s]}" for s in SERVICES] + [
        f"txmq-bootstrap.{chart.NAMESPACE}.svc.cluster.local:10911"
    ]
    script = container(pod)["args"][0]
    compile(script, "health-check", "exec")
    (pod,) = find(chart.render({"gateway": {"enabled": False}}), "Pod")
    assert not [t for t in container(pod)["args"][1:] if "gateway" in t]


def test_long_release_names_stay_within_kubernetes_limits() -> None:
    docs = chart.render(release="a-very-long-release-name-that-goes-on-and-on-and-on")
    for d in docs:
        name = d["metadata"]["name"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name
        if d["kind"] == "StatefulSet":
            # pod name + "-<ordinal>" and the controller-revision-hash label (name-<10 chars>)
            assert len(name) + 11 <= 63, name


def test_rendering_is_deterministic() -> None:
    assert chart.template().stdout == chart.template().stdout


# ---- the RocketMQ 5 gateway ------------------------------------------------------------------


def test_gateway_service_serves_the_rocketmq_port(default_docs: list[Doc]) -> None:
    svc = one(default_docs, "Service", "txmq-gateway")
    gateway = workload(default_docs, "gateway")
    assert gateway["kind"] == "Deployment"
    assert container(gateway, "gateway")["args"] == ["gateway"]
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [{"name": "grpc", "port": 8081, "targetPort": "grpc", "protocol": "TCP"}]
    assert matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(gateway))
    # Only the gateway's pods: RocketMQ clients must not land on a txmq service.
    for service in ROUTE_SERVICES:
        assert not matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(workload(default_docs, service)))
    assert not {"externalTrafficPolicy", "loadBalancerSourceRanges"} & svc["spec"].keys()
    # Routes name the address the client dialled (the Service), not the pod IP.
    assert env_values(container(gateway, "gateway"))["TXMQ_GATEWAY_ROUTE_CLIENT_ENDPOINTS"] == "true"


def test_gateway_can_be_exposed_outside_the_cluster(nondefault_docs: list[Doc]) -> None:
    svc = one(nondefault_docs, "Service", "mq-gateway")
    want = NONDEFAULT["gateway"]["service"]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["metadata"]["annotations"] == want["annotations"]
    assert svc["spec"]["loadBalancerSourceRanges"] == want["loadBalancerSourceRanges"]
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(18081, "grpc"), (18082, "grpc-tls")]
    assert "nodePort" not in svc["spec"]["ports"][0]
    assert svc["spec"]["ports"][1]["nodePort"] == 30082
    # The other services stay inside the cluster.
    for service in ROUTE_SERVICES:
        assert one(nondefault_docs, "Service", f"mq-{service}")["spec"]["type"] == "ClusterIP"

    values, files = SCENARIOS["gateway-nodeport"]
    svc = one(chart.render(values, *files), "Service", "txmq-gateway")
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"][0]["nodePort"] == 30081
    assert svc["spec"]["externalTrafficPolicy"] == "Cluster"
    assert "loadBalancerSourceRanges" not in svc["spec"]


def test_external_service_fields_are_left_out_of_a_cluster_ip_service() -> None:
    """Kubernetes refuses externalTrafficPolicy and nodePort on a ClusterIP Service."""
    gateway = {
        "settings": {"tls_port": 8082},
        "service": {"type": "ClusterIP", "externalTrafficPolicy": "Local", "nodePort": 30081, "tlsNodePort": 30082},
    }
    svc = one(chart.render({"gateway": gateway, "tls": GATEWAY_TLS["tls"]}), "Service", "txmq-gateway")
    assert "externalTrafficPolicy" not in svc["spec"]
    assert [p["name"] for p in svc["spec"]["ports"]] == ["grpc", "grpc-tls"]
    assert not [p for p in svc["spec"]["ports"] if "nodePort" in p]


def test_gateway_secret_key_comes_from_the_named_secret(default_docs: list[Doc], nondefault_docs: list[Doc]) -> None:
    # No Secret named: no TXMQ_GATEWAY_SECRET_KEY at all (the service's "", no auth).
    default = container(workload(default_docs, "gateway"), "gateway")
    assert "TXMQ_GATEWAY_SECRET_KEY" not in env_values(default)
    assert env_values(default)["TXMQ_GATEWAY_ACCESS_KEY"] == ""

    c = container(workload(nondefault_docs, "gateway"), "gateway")
    (var,) = [e for e in c["env"] if e["name"] == "TXMQ_GATEWAY_SECRET_KEY"]
    assert var["valueFrom"] == {"secretKeyRef": {"name": "txmq-gateway-auth", "key": "sk"}}
    assert "value" not in var
    assert env_values(c)["TXMQ_GATEWAY_ACCESS_KEY"] == "txmq-ak"
    # The chart creates no Secret and puts no key material anywhere else.
    assert not find(nondefault_docs, "Secret")
    # Only the gateway gets it.
    for service in ROUTE_SERVICES:
        env = container(workload(nondefault_docs, service), service)["env"]
        assert not [e for e in env if "secretKeyRef" in e.get("valueFrom", {})], service


def test_gateway_can_be_turned_off() -> None:
    values, files = SCENARIOS["gateway-off"]
    docs = chart.render(values, *files)
    assert not [d for d in docs if component_of(d) == "gateway"]
    assert "gateway" not in chart.notes(values, *files).lower()


def test_notes_give_rocketmq_clients_the_gateway_address() -> None:
    notes = chart.notes()
    assert f"txmq-gateway.{chart.NAMESPACE}.svc.cluster.local:8081" in notes
    assert "port-forward service/txmq-gateway 8081:8081" in notes
    assert "enableSsl(false)" in notes
    assert "Authentication is off" in notes
    assert "rollout status deployment/txmq-gateway" in notes

    notes = chart.notes(NONDEFAULT)
    assert f"mq-gateway.{chart.NAMESPACE}.svc.corp.local:18081" in notes
    assert "<the load balancer's address>:18081" in notes
    assert f"kubectl -n {chart.NAMESPACE} get service mq-gateway -o jsonpath=" in notes
    assert 'access key "txmq-ak"' in notes and "Secret txmq-gateway-auth (key sk)" in notes
    assert "Authentication is off" not in notes

    values, files = SCENARIOS["gateway-nodeport"]
    assert "<any node's address>:30081" in chart.notes(values, *files)
    assert "jsonpath='{.spec.ports[0].nodePort}'" in chart.notes({"gateway": {"service": {"type": "NodePort"}}})


def test_notes_tell_tls_clients_where_to_connect() -> None:
    # TLS off: the client must turn TLS off, and how to turn it on.
    notes = chart.notes()
    assert "gateway.settings.tls_port" in notes and "(TLS)" not in notes and "TLS:" not in notes
    notes = chart.notes(SCENARIOS["tls-mounted-only"][0])
    assert "mounted Secret txmq-tls" in notes and "set gateway.settings.tls_port" in notes

    notes = chart.notes(GATEWAY_TLS)
    assert "over TLS (the\nJava client's default) on port 8082, with the certificate of Secret txmq-tls" in notes
    assert f"in the cluster, TLS:       txmq-gateway.{chart.NAMESPACE}.svc.cluster.local:8082" in notes
    assert f"in the cluster, plaintext: txmq-gateway.{chart.NAMESPACE}.svc.cluster.local:8081" in notes
    assert "enableSsl(false)" in notes
    assert "port-forward service/txmq-gateway 8082:8082 8081:8081" in notes

    notes = chart.notes(NONDEFAULT)
    assert "from outside, TLS:         <the load balancer's address>:18082" in notes
    assert "from outside, plaintext:   <the load balancer's address>:18081" in notes

    values, files = SCENARIOS["gateway-tls-nodeport"]
    notes = chart.notes(values, *files)
    assert "from outside, TLS:         <any node's address>:30082" in notes
    assert """jsonpath='{.spec.ports[?(@.name=="grpc")].nodePort}'""" in notes
    gateway = {"settings": {"tls_port": 8082}, "service": {"type": "NodePort", "nodePort": 30081}}
    notes = chart.notes({**GATEWAY_TLS, "gateway": gateway})
    assert """jsonpath='{.spec.ports[?(@.name=="grpc-tls")].nodePort}'""" in notes
    assert "from outside, plaintext:   <any node's address>:30081" in notes
