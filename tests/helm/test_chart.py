"""helm/txmq rendered by helm itself: lint, Kubernetes schema validation (offline, with
kubernetes-validate) and the properties the deployment depends on."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from helm import chart
from helm.chart import (
    Doc,
    component_of,
    container,
    env_values,
    find,
    matches,
    one,
    pod_labels,
    pod_spec,
    service_workloads,
    store_statefulsets,
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
#: another name, the gateway with authentication behind a LoadBalancer, and the store
#: layout that is not the default: three unreplicated stores (examples/unreplicated-stores.yaml's
#: values, store.replicas counting the stores) exporting into the shared volume, here the
#: operator's own claim. The default layout with other values: GROUPS_NONDEFAULT.
NONDEFAULT: dict[str, Any] = {
    "fullnameOverride": "mq",
    "clusterDomain": "corp.local",
    "image": {"repository": "registry.example/txmq", "tag": "1.2.3"},
    "etcd": {"enabled": False, "prefix": "/mq", "external": {"endpoints": "etcd.infra.svc:2379"}},
    "tls": {"enabled": True, "secretName": "txmq-tls"},
    "lifecycle": {"preStopSleepSeconds": 3, "stopMarginSeconds": 20},
    "store": {
        "replicas": 3,
        "groups": {"replicas": 1},
        "settings": {
            "min_in_sync": 1,
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
        "exports": {"source": "store", "existingClaim": "txmq-exports-nfs"},
    },
}

#: Replicated store groups: 3 groups of 3 replicas, acks from 2 (min_in_sync); the analytics
#: job snapshots each group's leader over gRPC (source remote), as groups require.
GROUPS: dict[str, Any] = {
    "store": {"groups": {"count": 3, "replicas": 3}, "settings": {"min_in_sync": 2}},
    "analytics": {"exports": {"source": "remote"}},
}
#: Groups that must be on different zones, next to the operator's own affinity terms, with
#: other names, ports and a mounted TLS Secret.
GROUPS_NONDEFAULT: dict[str, Any] = {
    "fullnameOverride": "mq",
    "clusterDomain": "corp.local",
    "tls": {"enabled": True, "secretName": "txmq-tls"},
    "analytics": {"enabled": False},
    "store": {
        "groups": {
            "count": 2,
            "replicas": 5,
            "antiAffinity": "required",
            "topologyKey": "topology.kubernetes.io/zone",
            "minReadySeconds": 30,
        },
        "settings": {"min_in_sync": 3, "port": 20911},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mq"]}]}]
                }
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}
                ]
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "store"}},
            }
        ],
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
    "store-groups": (GROUPS, ()),
    "store-groups-nondefault": (GROUPS_NONDEFAULT, ()),
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
    """The one Deployment or StatefulSet of a component (the stores may have several:
    service_workloads)."""
    (found,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet") and component_of(d) == component]
    return found


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
        # Two replicated store groups (store.groups.count, .replicas 3), a budget each.
        ("StatefulSet", "txmq-store-g0"),
        ("StatefulSet", "txmq-store-g1"),
        ("PodDisruptionBudget", "txmq-store-g0"),
        ("PodDisruptionBudget", "txmq-store-g1"),
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
    # Two store groups of three replicas (acks from min_in_sync 2 of them).
    assert [(s["metadata"]["name"], s["spec"]["replicas"]) for s in store_statefulsets(default_docs)] == [
        ("txmq-store-g0", 3),
        ("txmq-store-g1", 3),
    ]
    for sts in store_statefulsets(default_docs):
        assert env_values(container(sts, "store"))["TXMQ_STORE_MIN_IN_SYNC"] == "2"
    for name in ("txmq-pull", "txmq-txcheck"):
        assert one(default_docs, "Deployment", name)["spec"]["replicas"] >= 2
    # The HPA owns pull's replica count when enabled.
    assert "replicas" not in one(nondefault_docs, "Deployment", "mq-pull")["spec"]
    hpa = one(nondefault_docs, "HorizontalPodAutoscaler", "mq-pull")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)
    assert one(nondefault_docs, "Deployment", "mq-txcheck")["spec"]["replicas"] == 4
    # store.replicas: three unreplicated stores, one StatefulSet.
    assert [(s["metadata"]["name"], s["spec"]["replicas"]) for s in store_statefulsets(nondefault_docs)] == [
        ("mq-store", 3)
    ]
    # Consumer groups are owned by one gateway pod each and forwarded to it: two pods.
    assert one(default_docs, "Deployment", "txmq-gateway")["spec"]["replicas"] == 2
    assert one(nondefault_docs, "Deployment", "mq-gateway")["spec"]["replicas"] == 2
    assert not [h for h in find(nondefault_docs, "HorizontalPodAutoscaler") if component_of(h) == "gateway"]


# ---- the store: a PVC per pod, identity from the pod name ------------------------------------


@pytest.mark.parametrize("which", ["default", "nondefault"])
def test_store_keeps_its_data_on_a_pvc_per_pod(which: str, default_docs: list[Doc], nondefault_docs: list[Doc]) -> None:
    docs = default_docs if which == "default" else nondefault_docs
    # Replicated groups (default): each replica has its own PVC too, its own copy.
    sets = service_workloads(docs, "store")
    assert len(sets) == (2 if which == "default" else 1)
    for sts in sets:
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


@pytest.mark.parametrize("which", ["default", "unreplicated", "nondefault"])
def test_store_id_and_address_come_from_the_pod(
    which: str, default_docs: list[Doc], nondefault_docs: list[Doc]
) -> None:
    """Unreplicated stores (examples/unreplicated-stores.yaml; nondefault): each pod is a
    store named after the pod. Replicated groups (default): the group's StatefulSet names
    the store, the pod the replica. Either way each pod advertises its own DNS name."""
    docs = {
        "default": default_docs,
        "unreplicated": chart.render(None, chart.UNREPLICATED_STORES),
        "nondefault": nondefault_docs,
    }[which]
    full, domain, port = ("mq", "corp.local", 20911) if which == "nondefault" else ("txmq", "cluster.local", 10911)
    sets = service_workloads(docs, "store")
    expected = [f"{full}-store-g0", f"{full}-store-g1"] if which == "default" else [f"{full}-store"]
    assert [sts["metadata"]["name"] for sts in sets] == expected
    for sts in sets:
        c = container(sts, "store")
        env = c["env"]
        names = [e["name"] for e in env]
        by_name = {e["name"]: e for e in env}
        assert by_name["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert by_name["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        # $(VAR) only expands variables defined earlier in the list.
        assert names.index("POD_NAME") < names.index("TXMQ_STORE_STORE_ID")
        assert names.index("POD_NAME") < names.index("TXMQ_STORE_ADVERTISED_ADDRESS")
        if which == "default":
            assert by_name["TXMQ_STORE_STORE_ID"]["value"] == sts["metadata"]["name"]
            assert by_name["TXMQ_STORE_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        else:
            assert by_name["TXMQ_STORE_STORE_ID"]["value"] == "$(POD_NAME)"
            assert by_name["TXMQ_STORE_REPLICA_ID"]["value"] == ""
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


# ---- replicated store groups: a StatefulSet per group -----------------------------------------

GROUP_LABEL = "txmq.io/store-group"


def pod_env(c: dict[str, Any], *, pod_name: str) -> dict[str, str]:
    """A container's literal env values and downward-API fields as the pod named
    ``pod_name`` (namespace chart.NAMESPACE) would see them, $(VAR) references expanded."""
    fields = {"metadata.name": pod_name, "metadata.namespace": chart.NAMESPACE}
    env: dict[str, str] = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\(([A-Za-z_]\w*)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        elif "fieldRef" in e["valueFrom"] and e["valueFrom"]["fieldRef"]["fieldPath"] in fields:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


@pytest.mark.parametrize("which", ["groups", "groups-nondefault"])
def test_each_store_group_is_a_statefulset_of_its_own(which: str) -> None:
    values = GROUPS if which == "groups" else GROUPS_NONDEFAULT
    full, domain, port = ("txmq", "cluster.local", 10911) if which == "groups" else ("mq", "corp.local", 20911)
    groups = values["store"]["groups"]
    docs = chart.render(values)
    sets = store_statefulsets(docs)
    names = [f"{full}-store-g{i}" for i in range(groups["count"])]
    assert [s["metadata"]["name"] for s in sets] == names
    assert not find(docs, "StatefulSet", f"{full}-store")  # no unreplicated stores besides
    headless = one(docs, "Service", f"{full}-store-headless")
    for sts in sets:
        name = sts["metadata"]["name"]
        spec = sts["spec"]
        assert spec["replicas"] == groups["replicas"]
        assert spec["minReadySeconds"] == groups.get("minReadySeconds", VALUES["store"]["groups"]["minReadySeconds"])
        assert spec["podManagementPolicy"] == "Parallel"
        assert spec["updateStrategy"] == {"type": "RollingUpdate"}
        labels = pod_labels(sts)
        assert labels[GROUP_LABEL] == name and sts["metadata"]["labels"][GROUP_LABEL] == name
        # The selector takes this group's pods and no other group's.
        assert matches(spec["selector"], labels)
        for other in sets:
            if other is not sts:
                assert not matches(spec["selector"], pod_labels(other))
        # Its own PVC per pod, on which data_dir lies.
        (claim,) = spec["volumeClaimTemplates"]
        assert claim["metadata"]["name"] == "data" and claim["metadata"]["labels"][GROUP_LABEL] == name
        assert "data" not in {v["name"] for v in pod_spec(sts)["volumes"]}
        # One headless Service names every store pod of every group; the bootstrap Service,
        # the store Service and etcd's NetworkPolicy take them as stores.
        assert spec["serviceName"] == headless["metadata"]["name"]
        assert matches({"matchLabels": headless["spec"]["selector"]}, labels)
        assert matches({"matchLabels": one(docs, "Service", f"{full}-store")["spec"]["selector"]}, labels)
        assert matches({"matchLabels": one(docs, "Service", f"{full}-bootstrap")["spec"]["selector"]}, labels)
        assert labels["app.kubernetes.io/component"] == "store"
        # Probes, resources, grace and security as the unreplicated stores have them (with
        # TLS on, the probes ask the plaintext probe port).
        c = container(sts, "store")
        probed = port if which == "groups" else VALUES["store"]["settings"]["probe_port"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"]["port"] == probed
        assert c["resources"] == VALUES["store"]["resources"]
        assert c["args"] == ["store"]
        mounts = [m["name"] for m in c["volumeMounts"]]
        assert mounts == (["data", "tmp"] if which == "groups" else ["data", "tmp", "tls"])
        env = c["env"]
        names_in_order = [e["name"] for e in env]
        assert names_in_order.index("POD_NAME") < names_in_order.index("TXMQ_STORE_ADVERTISED_ADDRESS")
        by_name = {e["name"]: e for e in env}
        assert by_name["TXMQ_STORE_STORE_ID"] == {"name": "TXMQ_STORE_STORE_ID", "value": name}
        assert by_name["TXMQ_STORE_REPLICA_ID"] == {
            "name": "TXMQ_STORE_REPLICA_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        }
        assert by_name["TXMQ_STORE_MIN_IN_SYNC"]["value"] == str(values["store"]["settings"]["min_in_sync"])
        assert (
            by_name["TXMQ_STORE_ADVERTISED_ADDRESS"]["value"]
            == f"$(POD_NAME).{full}-store-headless.$(POD_NAMESPACE).svc.{domain}:{port}"
        )


def test_store_group_replicas_read_their_identity_from_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """StoreSettings read from the rendered env of pod txmq-store-g1-2: store group
    txmq-store-g1, replica txmq-store-g1-2, advertising its own DNS name."""
    from txmq_runtime.settings import load_settings
    from txmq_store.settings import StoreSettings

    sts = one(chart.render(GROUPS), "StatefulSet", "txmq-store-g1")
    for name in list(os.environ):
        if name.startswith("TXMQ_"):
            monkeypatch.delenv(name)
    for name, value in pod_env(container(sts, "store"), pod_name="txmq-store-g1-2").items():
        monkeypatch.setenv(name, value)
    settings = load_settings(StoreSettings, [])
    assert (settings.store_id, settings.replica_id, settings.instance_id) == (
        "txmq-store-g1",
        "txmq-store-g1-2",
        "txmq-store-g1-2",
    )
    assert settings.min_in_sync == 2
    assert (
        settings.advertised_address == f"txmq-store-g1-2.txmq-store-headless.{chart.NAMESPACE}.svc.cluster.local:10911"
    )


def group_terms(sts: Doc) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(required terms, preferred weighted terms) of the pod's podAntiAffinity."""
    anti = pod_spec(sts)["affinity"].get("podAntiAffinity", {})
    return (
        anti.get("requiredDuringSchedulingIgnoredDuringExecution", []),
        anti.get("preferredDuringSchedulingIgnoredDuringExecution", []),
    )


@pytest.mark.parametrize("mode", ["required", "preferred", "none"])
def test_store_group_anti_affinity(mode: str) -> None:
    values = {**GROUPS, "store": {**GROUPS["store"], "groups": {**GROUPS["store"]["groups"], "antiAffinity": mode}}}
    sets = store_statefulsets(chart.render(values))
    for sts in sets:
        required, preferred = group_terms(sts)
        own = pod_labels(sts)
        others = [pod_labels(s) for s in sets if s is not sts]
        if mode == "none":
            # As the unreplicated stores: a soft spread of every store pod over nodes.
            assert not required
            (soft,) = preferred
            term = soft["podAffinityTerm"]
            assert term["topologyKey"] == "kubernetes.io/hostname"
            assert all(matches(term["labelSelector"], labels) for labels in [own, *others])
            continue
        (term,) = required if mode == "required" else [p["podAffinityTerm"] for p in preferred]
        assert not (preferred if mode == "required" else required)
        if mode == "preferred":
            assert preferred[0]["weight"] == 100
        assert term["topologyKey"] == "kubernetes.io/hostname"
        # Keeps apart the group's own pods, and only those.
        assert matches(term["labelSelector"], own)
        assert not any(matches(term["labelSelector"], labels) for labels in others)


def test_store_group_anti_affinity_is_added_to_the_operators_affinity() -> None:
    docs = chart.render(GROUPS_NONDEFAULT)
    sets = store_statefulsets(docs)
    assert len(sets) == 2
    for sts in sets:
        affinity = pod_spec(sts)["affinity"]
        assert affinity["nodeAffinity"] == GROUPS_NONDEFAULT["store"]["affinity"]["nodeAffinity"]
        required, preferred = group_terms(sts)
        assert not preferred
        theirs, ours = required
        assert (
            theirs
            == GROUPS_NONDEFAULT["store"]["affinity"]["podAntiAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ][0]
        )
        assert ours["topologyKey"] == "topology.kubernetes.io/zone"
        assert ours["labelSelector"]["matchLabels"][GROUP_LABEL] == sts["metadata"]["name"]
        assert pod_spec(sts)["topologySpreadConstraints"] == GROUPS_NONDEFAULT["store"]["topologySpreadConstraints"]
    # Each group got its own term: the operator's values were not changed in place.
    assert group_terms(sets[0])[0][1] != group_terms(sets[1])[0][1]


@pytest.mark.parametrize(("replicas", "min_in_sync", "max_unavailable"), [(3, 2, 1), (5, 3, 2), (3, 3, 0), (2, 1, 1)])
def test_store_group_budget_keeps_min_in_sync_replicas(replicas: int, min_in_sync: int, max_unavailable: int) -> None:
    values = {
        "store": {"groups": {"count": 2, "replicas": replicas}, "settings": {"min_in_sync": min_in_sync}},
        "analytics": {"enabled": False},
    }
    docs = chart.render(values)
    sets = store_statefulsets(docs)
    budgets = [b for b in find(docs, "PodDisruptionBudget") if component_of(b) == "store"]
    assert sorted(b["metadata"]["name"] for b in budgets) == ["txmq-store-g0", "txmq-store-g1"]
    for sts in sets:
        # Exactly one budget covers a group's pods, and it covers no other group's.
        (budget,) = [b for b in budgets if matches(b["spec"]["selector"], pod_labels(sts))]
        assert budget["metadata"]["name"] == sts["metadata"]["name"]
        assert budget["spec"]["maxUnavailable"] == max_unavailable
        assert "minAvailable" not in budget["spec"]
        # A drain leaves at least min_in_sync of the group's replicas.
        assert sts["spec"]["replicas"] - budget["spec"]["maxUnavailable"] >= min_in_sync
    off = {**values, "store": {**values["store"], "pdb": {"enabled": False}}}
    assert not [b for b in find(chart.render(off), "PodDisruptionBudget") if component_of(b) == "store"]


@pytest.mark.parametrize(("replicas", "min_in_sync"), [(2, 3), (3, 4), (3, 7)])
def test_min_in_sync_above_the_group_size_is_refused(replicas: int, min_in_sync: int) -> None:
    values = {
        "store": {"groups": {"replicas": replicas}, "settings": {"min_in_sync": min_in_sync}},
        "analytics": {"enabled": False},
    }
    result = chart.template(values, check=False)
    assert result.returncode != 0
    assert (
        f"store.settings.min_in_sync ({min_in_sync}) is more than store.groups.replicas ({replicas})" in result.stderr
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # store.replicas counts unreplicated stores: with groups it would be ambiguous.
        ({"store": {"replicas": 3, "groups": {"replicas": 3}}}, "set store.groups.count"),
        # One store_id for every group, or one replica_id for every replica, breaks them.
        ({"store": {"groups": {"replicas": 3}, "settings": {"store_id": "broker-a"}}}, "store_id must be empty"),
        ({"store": {"groups": {"replicas": 3}, "settings": {"replica_id": "r"}}}, "replica_id must be empty"),
        # Every replica would export the same data into the shared analytics volume.
        (
            {"store": {"groups": {"replicas": 3}}, "analytics": {"enabled": True, "exports": {"source": "store"}}},
            "set analytics.exports.source=remote",
        ),
        # The same, with every other value the chart's default.
        ({"analytics": {"exports": {"source": "store"}}}, "set analytics.exports.source=remote"),
    ],
)
def test_store_group_values_that_cannot_work_are_refused(values: dict[str, Any], message: str) -> None:
    values = {"analytics": {"enabled": False}, **values}
    result = chart.template(values, check=False)
    assert result.returncode != 0, f"accepted {values}"
    assert message in result.stderr


@pytest.mark.parametrize(
    "values",
    [
        {"store": {"groups": {"antiAffinity": "sometimes"}}},
        {"store": {"groups": {"count": 0}}},
        {"store": {"groups": {"replicas": 0}}},
        {"store": {"groups": {"minReadySeconds": -1}}},
        {"store": {"groups": {"size": 3}}},
    ],
)
def test_schema_refuses_bad_store_group_values(values: dict[str, Any]) -> None:
    result = chart.template(values, check=False)
    assert result.returncode != 0, f"accepted {values}"
    assert "store.groups" in result.stderr


@pytest.mark.parametrize(
    ("values", "mounts"),
    [
        # Exports off: the volume stays mounted (analytics.exports.source=store), unused.
        (
            {
                "store": {"groups": {"replicas": 3}, "settings": {"export_interval_ms": 0}},
                "analytics": {"exports": {"source": "store"}},
            },
            ["data", "tmp", "exports"],
        ),
        (
            {
                "store": {"groups": {"replicas": 3}},
                "analytics": {"exports": {"source": "none"}, "input": "s3a://b/e", "output": "s3a://b/r"},
            },
            [],
        ),
        ({"store": {"groups": {"replicas": 3}}, "analytics": {"enabled": False}}, []),
        (GROUPS, []),
        # The chart's defaults: groups of 3, analytics.exports.source remote.
        (None, []),
    ],
)
def test_store_groups_without_shared_exports_are_accepted(values: dict[str, Any] | None, mounts: list[str]) -> None:
    sets = store_statefulsets(chart.render(values))
    assert len(sets) >= 2
    for sts in sets:
        assert [m["name"] for m in container(sts, "store")["volumeMounts"]] == (mounts or ["data", "tmp"])


@pytest.mark.parametrize(
    ("values", "files", "stores"),
    [
        (None, (chart.UNREPLICATED_STORES,), 2),
        ({"store": {"groups": {"replicas": 1}}}, (), 2),
        ({"store": {"groups": {"replicas": 1, "count": 4}}}, (), 4),
        # store.replicas, when set, still counts the unreplicated stores (and wins).
        ({"store": {"replicas": 3}}, (chart.UNREPLICATED_STORES,), 3),
        ({"store": {"replicas": 3, "groups": {"replicas": 1}}}, (), 3),
        ({"store": {"replicas": 5, "groups": {"count": 4, "replicas": 1}}}, (), 5),
    ],
)
def test_one_replica_per_group_is_the_unreplicated_layout(
    values: dict[str, Any] | None, files: tuple[Path, ...], stores: int
) -> None:
    """groups.replicas 1: one StatefulSet <release>-store of independent stores, exactly
    as before store groups (store_id = pod name, no replica_id, store.pdb's budget)."""
    docs = chart.render(values, *files)
    (sts,) = store_statefulsets(docs)
    assert sts["metadata"]["name"] == "txmq-store"
    assert sts["spec"]["replicas"] == stores
    assert "minReadySeconds" not in sts["spec"]
    assert GROUP_LABEL not in pod_labels(sts) and GROUP_LABEL not in sts["spec"]["selector"]["matchLabels"]
    assert sts["spec"]["selector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "txmq",
            "app.kubernetes.io/instance": chart.RELEASE,
            "app.kubernetes.io/component": "store",
        }
    }
    env = env_values(container(sts, "store"))
    assert (env["TXMQ_STORE_STORE_ID"], env["TXMQ_STORE_REPLICA_ID"]) == ("$(POD_NAME)", "")
    (budget,) = [b for b in find(docs, "PodDisruptionBudget") if component_of(b) == "store"]
    assert budget["metadata"]["name"] == "txmq-store" and budget["spec"]["maxUnavailable"] == 1
    # The default soft spread of all store pods.
    (soft,) = group_terms(sts)[1]
    assert GROUP_LABEL not in soft["podAffinityTerm"]["labelSelector"]["matchLabels"]


def test_unreplicated_layout_renders_as_before_store_groups() -> None:
    """examples/unreplicated-stores.yaml and its values given one by one render the same
    manifests (the group-only antiAffinity changing nothing), and min_in_sync (unused by a
    store alone) is not checked against the group size. That they are the earlier chart's
    manifests for the stores: test_upgrade_path.py."""
    explicit = {
        "store": {"groups": {"replicas": 1, "count": 2, "antiAffinity": "required"}, "settings": {"min_in_sync": 1}},
        "analytics": {"exports": {"source": "store"}},
    }
    assert chart.template(explicit).stdout == chart.template(None, chart.UNREPLICATED_STORES).stdout
    assert chart.template(explicit).stdout != chart.template().stdout
    docs = chart.render({"store": {"settings": {"min_in_sync": 3}}}, chart.UNREPLICATED_STORES)
    assert env_values(container(one(docs, "StatefulSet", "txmq-store"), "store"))["TXMQ_STORE_MIN_IN_SYNC"] == "3"


def test_notes_name_every_store_group() -> None:
    notes = chart.notes(GROUPS)
    assert "3 replicated store groups of 3 replicas each (min_in_sync 2)" in notes
    for i in range(3):
        assert f"rollout status statefulset/txmq-store-g{i}\n" in notes
    assert "rollout status statefulset/txmq-store\n" not in notes
    assert "exec txmq-store-g0-0 -- txmq topic create Orders" in notes
    assert "min_in_sync is 1" not in notes and "allow no eviction" not in notes
    notes = chart.notes(GROUPS_NONDEFAULT)
    assert "must run on different topology.kubernetes.io/zone values: with fewer than 5" in notes
    # Warnings: acks from the leader alone; budgets that block every drain.
    weak = {"store": {"groups": {"replicas": 3}, "settings": {"min_in_sync": 1}}, "analytics": {"enabled": False}}
    assert "store.settings.min_in_sync is 1" in chart.notes(weak)
    strict = {"store": {"groups": {"replicas": 3}, "settings": {"min_in_sync": 3}}, "analytics": {"enabled": False}}
    assert "allow no eviction at all" in chart.notes(strict)
    notes = chart.notes(None, chart.UNREPLICATED_STORES)
    assert "rollout status statefulset/txmq-store\n" in notes and "store group" not in notes
    assert "exec txmq-store-0 -- txmq topic create Orders" in notes
    # The chart's defaults: two groups of three.
    notes = chart.notes()
    assert "2 replicated store groups of 3 replicas each (min_in_sync 2)" in notes
    assert "exec txmq-store-g0-0 -- txmq topic create Orders" in notes
    assert "store.settings.min_in_sync is 1" not in notes and "allow no eviction" not in notes


def test_store_group_names_stay_within_kubernetes_limits() -> None:
    values = {**GROUPS, "store": {**GROUPS["store"], "groups": {"count": 12, "replicas": 3}}}
    docs = chart.render(values, release="a-very-long-release-name-that-goes-on-and-on-and-on")
    sets = store_statefulsets(docs)
    assert len(sets) == 12
    for d in docs:
        name = d["metadata"]["name"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name
    for sts in sets:
        # pod name + "-<ordinal>" and the controller-revision-hash label (name-<10 chars>)
        assert len(sts["metadata"]["name"]) + 11 <= 63
        # Label values are at most 63 characters too.
        assert len(pod_labels(sts)[GROUP_LABEL]) <= 63


# ---- probes -----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "nondefault"])
@pytest.mark.parametrize("service", SERVICES)
def test_probes_ask_the_grpc_health_service_on_the_service_port(
    service: str, which: str, default_docs: list[Doc], nondefault_docs: list[Doc]
) -> None:
    """TLS off (default): on the service port. TLS on (nondefault): on the probe port,
    plaintext and health only, since Kubernetes' gRPC probes cannot speak TLS."""
    docs = default_docs if which == "default" else nondefault_docs
    for w in service_workloads(docs, service):
        c = container(w, service)
        env = env_values(c)
        port = int(env[f"TXMQ_{service.upper()}_PORT"] or 0)
        assert port == (
            VALUES[service]["settings"]["port"] if which == "default" else NONDEFAULT[service]["settings"]["port"]
        )
        assert [p["containerPort"] for p in c["ports"] if p["name"] == "grpc"] == [port]
        probe_port = int(env[f"TXMQ_{service.upper()}_PROBE_PORT"] or 0)
        assert [p["containerPort"] for p in c["ports"] if p["name"] == "probe"] == [probe_port] == [9091]
        assert env[f"TXMQ_{service.upper()}_TLS_MODE"] == ("disabled" if which == "default" else "enforcing")
        probed = port if which == "default" else probe_port
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"]["port"] == probed, probe
            assert not {"httpGet", "tcpSocket", "exec"} & c[probe].keys()
        # Every Service in front of the pods reaches that same port (the gateway's also its
        # TLS port, which the probes do not use).
        tls_port = [p["containerPort"] for p in c["ports"] if p["name"] == "grpc-tls"]
        serves_tls = (which, service) == ("nondefault", "gateway")
        assert tls_port == ([NONDEFAULT["gateway"]["settings"]["tls_port"]] if serves_tls else [])
        for svc in find(docs, "Service"):
            if matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(w)):
                assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["grpc"] + ["grpc-tls"] * len(tls_port)


@pytest.mark.parametrize("which", ["default", "groups", "groups-nondefault"])
def test_store_readiness_probe_asks_the_in_sync_health_service(which: str, default_docs: list[Doc]) -> None:
    """A store is ready only while it is an in-sync copy of its group: its readiness
    probe names txmq.protocol.READY_HEALTH_SERVICE; startup and liveness ask "" (serving
    at all, so a long catch-up does not get the pod killed); the other services ask "".
    The stores' headless Service publishes pods that are not ready (a follower copying
    the log, a new leader, are dialled by their pod names)."""
    from txmq.protocol import READY_HEALTH_SERVICE

    docs = default_docs if which == "default" else chart.render(GROUPS if which == "groups" else GROUPS_NONDEFAULT)
    sets = store_statefulsets(docs)
    assert sets
    for sts in sets:
        c = container(sts, "store")
        assert c["readinessProbe"]["grpc"]["service"] == READY_HEALTH_SERVICE
        for probe in ("startupProbe", "livenessProbe"):
            assert "service" not in c[probe]["grpc"], probe
    for service in ("pull", "txcheck", "gateway"):
        c = container(workload(docs, service), service)
        assert all("service" not in c[p]["grpc"] for p in ("startupProbe", "readinessProbe", "livenessProbe"))
    full = "mq" if which == "groups-nondefault" else "txmq"
    assert one(docs, "Service", f"{full}-store-headless")["spec"]["publishNotReadyAddresses"] is True


def test_store_start_up_allows_a_long_recovery(default_docs: list[Doc]) -> None:
    for sts in service_workloads(default_docs, "store"):
        probe = container(sts, "store")["startupProbe"]
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
        for w in service_workloads(default_docs, service):
            env = env_values(container(w, service))
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
        for w in service_workloads(default_docs, service):
            labels = pod_labels(w)
            assert admitted(labels, 2379), service
            assert not admitted(labels, 2380), service
    assert admitted(pod_labels(etcd), 2380)
    analytics = pod_labels(one(default_docs, "CronJob", "txmq-analytics"))
    assert not admitted(analytics, 2379)
    for sts in store_statefulsets(default_docs):
        other_release = {**pod_labels(sts), "app.kubernetes.io/instance": "other"}
        assert not admitted(other_release, 2379)
    assert not admitted({"app": "anything"}, 2379)


def test_external_etcd(nondefault_docs: list[Doc]) -> None:
    assert not [d for d in nondefault_docs if component_of(d) == "etcd"]
    for service in SERVICES:
        for w in service_workloads(nondefault_docs, service):
            env = env_values(container(w, service))
            assert env[f"TXMQ_{service.upper()}_ETCD_ENDPOINTS"] == "etcd.infra.svc:2379"
            assert env[f"TXMQ_{service.upper()}_ETCD_PREFIX"] == "/mq"


# ---- availability ----------------------------------------------------------------------------


@pytest.mark.parametrize("component", ["etcd", *SERVICES])
def test_each_component_has_a_disruption_budget(component: str, default_docs: list[Doc]) -> None:
    """One budget over each workload's pods, letting one go at a time (a store group of
    3 with min_in_sync 2 can lose one replica)."""
    pods = [w for w in workloads(default_docs) if component_of(w) == component]
    assert len(pods) == (VALUES["store"]["groups"]["count"] if component == "store" else 1)
    for w in pods:
        budgets = [
            p for p in find(default_docs, "PodDisruptionBudget") if matches(p["spec"]["selector"], pod_labels(w))
        ]
        assert len(budgets) == 1
        assert budgets[0]["spec"]["maxUnavailable"] == 1


def test_bootstrap_service_reaches_every_txmq_service(default_docs: list[Doc]) -> None:
    svc = one(default_docs, "Service", "txmq-bootstrap")
    selector = {"matchLabels": svc["spec"]["selector"]}
    for service in ROUTE_SERVICES:
        for w in service_workloads(default_docs, service):
            assert matches(selector, pod_labels(w))
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


#: Containers the chart gives no HOME (kind, container name): theirs is the image user's
#: home, on the read-only root filesystem. Chart gaps, listed so that this test fails once
#: they get one (then take them out).
NO_HOME_YET: set[tuple[str, str]] = set()


def writable_mounts(w: Doc, c: dict[str, Any]) -> list[PurePosixPath]:
    """Where a container can write: its mounts, not readOnly, of an emptyDir, a PVC or a
    StatefulSet's claim template."""
    volumes = {v["name"]: v for v in pod_spec(w).get("volumes", [])}
    claims = (
        {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        if w["kind"] == "StatefulSet"
        else set()
    )
    out = []
    for m in c.get("volumeMounts", []):
        volume = volumes.get(m["name"])
        writable = ("emptyDir" in volume or "persistentVolumeClaim" in volume) if volume else m["name"] in claims
        if writable and not m.get("readOnly", False):
            out.append(PurePosixPath(m["mountPath"]))
    return out


@pytest.mark.parametrize("scenario", ["default", *(f"example-{p.stem}" for p in chart.EXAMPLES)])
def test_every_container_has_a_writable_home(scenario: str) -> None:
    """The root filesystem is read-only, so HOME must be under a volume the container can
    write (the gateway's RocketMQ client package creates ~/logs at import: with HOME the
    image user's home it crashed). Every container of every pod template: Deployments,
    StatefulSets, the CronJob's job with its init containers, the helm test Pod."""
    values, files = SCENARIOS[scenario]
    checked = []
    for w in workloads(chart.render(values, *files)):
        spec = pod_spec(w)
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            where = f"{w['kind']}/{w['metadata']['name']} container {c['name']}"
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, where
            homes = [e for e in c.get("env", []) if e["name"] == "HOME"]
            if (w["kind"], c["name"]) in NO_HOME_YET:
                assert not homes, f"{where} has HOME now: take it out of NO_HOME_YET"
                continue
            assert len(homes) == 1, f"{where}: HOME {homes}"
            home = PurePosixPath(os.path.normpath(homes[0].get("value") or ""))
            assert home.is_absolute(), f"{where}: HOME {homes[0]}"
            mounts = writable_mounts(w, c)
            assert any(home == m or m in home.parents for m in mounts), f"{where}: HOME {home}, writable: {mounts}"
            checked.append((w["kind"], c["name"]))
    # Every service, the analytics job (with its export step unless the stores export).
    assert {"gateway", "pull", "txcheck", "store", "analytics"} <= {name for _, name in checked}


@pytest.mark.parametrize("which", ["default", "nondefault"])
@pytest.mark.parametrize("service", SERVICES)
def test_termination_grace_covers_the_shutdown_grace(
    service: str, which: str, default_docs: list[Doc], nondefault_docs: list[Doc]
) -> None:
    docs, lifecycle = (
        (default_docs, VALUES["lifecycle"]) if which == "default" else (nondefault_docs, NONDEFAULT["lifecycle"])
    )
    for w in service_workloads(docs, service):
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


def test_analytics_cronjob_runs_spark_locally_on_the_shared_exports() -> None:
    """analytics.exports.source store (examples/unreplicated-stores.yaml): the stores
    export into a volume they share with the job, which only analyses."""
    docs = chart.render(None, chart.UNREPLICATED_STORES)
    job = one(docs, "CronJob", "txmq-analytics")
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    c = container(job, "analytics")
    assert c["image"] == "txmq:0.1.0-analytics"
    args = c["args"]
    assert args[:2] == ["analytics", "run"]
    opts = dict(zip(args[2::2], args[3::2], strict=True))
    mount = VALUES["analytics"]["exports"]["mountPath"]
    assert opts == {"--input": f"{mount}/exports", "--output": f"{mount}/reports/$(JOB_NAME)", "--master": "local[*]"}
    env = {e["name"]: e for e in c["env"]}
    assert env["JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['job-name']"
    assert not spec.get("initContainers")
    # The job and every store mount the same claim at the same path.
    (job_mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == mount]
    (job_vol,) = [v for v in spec["volumes"] if v["name"] == job_mount["name"]]
    claim = job_vol["persistentVolumeClaim"]["claimName"]
    for store in service_workloads(docs, "store"):
        (store_mount,) = [m for m in container(store, "store")["volumeMounts"] if m["mountPath"] == mount]
        (store_vol,) = [v for v in pod_spec(store)["volumes"] if v["name"] == store_mount["name"]]
        assert store_vol["persistentVolumeClaim"]["claimName"] == claim
    pvc = one(docs, "PersistentVolumeClaim", claim)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert not find(docs, "Role")
    conf = one(docs, "ConfigMap", "txmq-analytics-spark")["data"]["spark-defaults.conf"]
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
    """analytics.exports.source store (examples/unreplicated-stores.yaml): export_dir is
    on the shared volume. The default (source remote): not computed, the stores' own."""
    from txmq_store.settings import StoreSettings

    if "export_dir" not in StoreSettings.model_fields:
        pytest.skip("StoreSettings has no export_dir yet (issue 5)")
    docs = chart.render(None, chart.UNREPLICATED_STORES)
    for store in service_workloads(docs, "store"):
        env = env_values(container(store, "store"))
        assert env["TXMQ_STORE_EXPORT_DIR"] == VALUES["analytics"]["exports"]["mountPath"] + "/exports"
    for store in service_workloads(default_docs, "store"):
        assert env_values(container(store, "store"))["TXMQ_STORE_EXPORT_DIR"] == ""


@pytest.mark.parametrize("values", [None, {"analytics": {"exports": {"source": "remote"}}}])
def test_analytics_remote_export_needs_no_shared_volume(values: dict[str, Any] | None) -> None:
    """source remote (the chart's default): the job's init container snapshots the stores
    over gRPC into the job's own volume; no store mounts it."""
    docs = chart.render(values)
    job = one(docs, "CronJob", "txmq-analytics")
    spec = pod_spec(job)
    (init,) = spec["initContainers"]
    mount = VALUES["analytics"]["exports"]["mountPath"]
    assert init["args"][:2] == ["analytics", "export"]
    opts = dict(zip(init["args"][2::2], init["args"][3::2], strict=True))
    store_port = VALUES["store"]["settings"]["port"]
    assert opts["--endpoint"] == f"txmq-store.{chart.NAMESPACE}.svc.cluster.local:{store_port}"
    assert opts["--output"] == f"{mount}/exports"
    args = container(job, "analytics")["args"]
    assert args[args.index("--input") + 1] == f"{mount}/exports"
    assert one(docs, "PersistentVolumeClaim", "txmq-exports")["spec"]["accessModes"] == ["ReadWriteOnce"]
    for sts in service_workloads(docs, "store"):
        store = container(sts, "store")
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
    for files in ((), (chart.UNREPLICATED_STORES,)):
        docs = chart.render({"analytics": {"enabled": False}}, *files)
        assert not find(docs, "CronJob") and not find(docs, "PersistentVolumeClaim")
        for sts in service_workloads(docs, "store"):
            store = container(sts, "store")
            assert [m["name"] for m in store["volumeMounts"]] == ["data", "tmp"]


# ---- TLS -------------------------------------------------------------------------------------


def test_tls_secret_is_mounted_in_every_service(nondefault_docs: list[Doc], default_docs: list[Doc]) -> None:
    for service in SERVICES:
        for w in service_workloads(nondefault_docs, service):
            vols = {v["name"]: v for v in pod_spec(w)["volumes"]}
            assert vols["tls"]["secret"]["secretName"] == "txmq-tls"
            (mount,) = [m for m in container(w, service)["volumeMounts"] if m["name"] == "tls"]
            assert mount == {"name": "tls", "mountPath": "/etc/txmq/tls", "readOnly": True}
        for w in service_workloads(default_docs, service):
            assert "tls" not in {v["name"] for v in pod_spec(w)["volumes"]}


def gateway_tls_env(c: dict[str, Any]) -> list[tuple[str, str | None]]:
    """The gateway's TXMQ_GATEWAY_TLS_* variables as (name, value), in order, repeats kept."""
    return [(e["name"], e.get("value")) for e in c["env"] if e["name"].startswith("TXMQ_GATEWAY_TLS_")]


def tls_env(service: str, directory: str = "/etc/txmq/tls", **explicit: str) -> list[tuple[str, str]]:
    """What a service's TXMQ_<SERVICE>_TLS_* variables are with tls.enabled (sorted by name,
    as the chart renders settings; the gateway's tls_port given in ``explicit``)."""
    prefix = f"TXMQ_{service.upper()}_TLS_"
    computed = {
        "ca_file": f"{directory}/ca.crt",
        "cert_file": f"{directory}/tls.crt",
        "client_auth": "require",
        "key_file": f"{directory}/tls.key",
        "mode": "enforcing",
        "server_name": f"txmq-bootstrap.{chart.NAMESPACE}.svc.cluster.local",
        # The gateway's TLS port asks for no client certificate unless a value says so.
        **({"port_client_auth": "none"} if service == "gateway" else {}),
        **{name.lower(): value for name, value in explicit.items()},
    }
    return sorted((prefix + name.upper(), value) for name, value in computed.items())


@pytest.mark.parametrize("scenario", ["default", "tls-mounted-only"])
def test_gateway_without_a_tls_port_serves_no_v2_tls_port(scenario: str) -> None:
    """TLS off (or on but no gateway.settings.tls_port): the gateway gets tls_port -1, no
    TLS container port, a Service with the service port only (plaintext, or with TLS on
    mutual TLS like every service)."""
    values, files = SCENARIOS[scenario]
    docs = chart.render(values, *files)
    gateway = workload(docs, "gateway")
    c = container(gateway, "gateway")
    mounted = scenario == "tls-mounted-only"
    if mounted:
        assert gateway_tls_env(c) == tls_env("gateway", PORT="-1")
    else:
        off = {
            "CA_FILE": "",
            "CERT_FILE": "",
            "CLIENT_AUTH": "none",
            "KEY_FILE": "",
            "MODE": "disabled",
            "PORT_CLIENT_AUTH": "none",
        }
        assert gateway_tls_env(c) == sorted(
            [(f"TXMQ_GATEWAY_TLS_{k}", v) for k, v in {**off, "PORT": "-1", "SERVER_NAME": ""}.items()]
        )
    assert [p["name"] for p in c["ports"]] == ["grpc", "metrics", "probe"]
    assert [m["name"] for m in c["volumeMounts"]] == (["tmp", "tls"] if mounted else ["tmp"])
    svc = one(docs, "Service", "txmq-gateway")
    assert svc["spec"]["ports"] == [{"name": "grpc", "port": 8081, "targetPort": "grpc", "protocol": "TCP"}]
    assert "grpc-tls" not in chart.template(values, *files).stdout


@pytest.mark.parametrize("mount_path", ["/etc/txmq/tls", "/run/txmq-certs/"])
def test_gateway_serves_tls_from_the_mounted_secret(mount_path: str) -> None:
    """tls.enabled + gateway.settings.tls_port: the gateway pod mounts the Secret, its
    tls_* settings name the files there (each variable once), the container declares the
    TLS port as grpc-tls and the Service forwards a second port to it. Probes ask the
    probe port (the service port is mutual TLS)."""
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
    assert gateway_tls_env(c) == tls_env("gateway", directory, PORT="8082")
    assert c["ports"] == [
        {"name": "grpc", "containerPort": 8081, "protocol": "TCP"},
        {"name": "grpc-tls", "containerPort": 8082, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
        {"name": "probe", "containerPort": 9091, "protocol": "TCP"},
    ]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == 9091
    svc = one(docs, "Service", "txmq-gateway")
    assert svc["spec"]["ports"] == [
        {"name": "grpc", "port": 8081, "targetPort": "grpc", "protocol": "TCP"},
        {"name": "grpc-tls", "port": 8082, "targetPort": "grpc-tls", "protocol": "TCP"},
    ]
    # Only the gateway has a second, v2 TLS port; the others serve mutual TLS on theirs.
    for service in ROUTE_SERVICES:
        for w in service_workloads(docs, service):
            other = container(w, service)
            assert "grpc-tls" not in {p["name"] for p in other["ports"]}
            prefix = f"TXMQ_{service.upper()}_TLS_"
            assert [(e["name"], e["value"]) for e in other["env"] if e["name"].startswith(prefix)] == tls_env(
                service, directory
            )
            for svc in find(docs, "Service"):
                if matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(w)):
                    assert [p["name"] for p in svc["spec"]["ports"]] == ["grpc"]


def test_gateway_tls_files_given_explicitly_are_kept() -> None:
    settings = {"tls_port": 8082, "tls_cert_file": "/etc/txmq/tls/chain.pem", "tls_key_file": "/etc/txmq/tls/key.pem"}
    docs = chart.render({**GATEWAY_TLS, "gateway": {"settings": settings}})
    assert gateway_tls_env(container(workload(docs, "gateway"), "gateway")) == tls_env(
        "gateway", CERT_FILE="/etc/txmq/tls/chain.pem", KEY_FILE="/etc/txmq/tls/key.pem", PORT="8082"
    )


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
    assert "gateway.settings.tls_port needs tls.enabled (the certificate from tls.secretName" in result.stderr


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
        ({"tls": {"enabled": True, "generate": False}}, "secretName"),
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
        ({"gateway": {"settings": {"tls_port": 8082}}, "tls": {"enabled": True, "generate": False}}, "secretName"),
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
    store = container(one(nondefault_docs, "StatefulSet", "mq-store"), "store")
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
    for w in service_workloads(default_docs, service):
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
    for sts in service_workloads(default_docs, "store"):
        store = container(sts, "store")
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
        for w in service_workloads(default_docs, service):
            assert not matches({"matchLabels": svc["spec"]["selector"]}, pod_labels(w))
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
        for w in service_workloads(nondefault_docs, service):
            env = container(w, service)["env"]
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
    assert "It serves mutual TLS" in notes and "set gateway.settings.tls_port" in notes
    assert "TLS is on: every service serves mutual TLS only (certificate from Secret txmq-tls;" in notes

    notes = chart.notes(GATEWAY_TLS)
    assert "over TLS (the\nJava client's default) on port 8082, with the certificate of Secret txmq-tls" in notes
    assert f"in the cluster, TLS:       txmq-gateway.{chart.NAMESPACE}.svc.cluster.local:8082" in notes
    assert f"in the cluster, mutual TLS: txmq-gateway.{chart.NAMESPACE}.svc.cluster.local:8081" in notes
    assert "with a client certificate of the same CA (mutual TLS)" in notes
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
