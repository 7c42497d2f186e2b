"""The rendered chart, turned into what a container engine runs: the few things a
kubelet and the controllers do that `podman kube play` does not.

Pure functions on parsed manifests (no engine, no network), unit-tested in
``test_kube.py``; ``cluster.py`` runs their output with podman.

- A StatefulSet becomes its pods ``<name>-0..n-1``, each with hostname ``<name>-<i>``,
  subdomain ``spec.serviceName`` and one PVC per volumeClaimTemplate
  (``<template>-<name>-<i>``), as the StatefulSet controller names them.
- A Deployment becomes ``spec.replicas`` pods ``<name>-<i>``.
- A CronJob's job template becomes one pod of a job ``<cronjob>-manual`` (what
  ``kubectl create job --from=cronjob/...`` makes), labelled ``job-name``.
- A bare Pod with the ``helm.sh/hook: test`` annotation is a test pod (``helm test``).
- A Service names the pods its selector matches: :func:`dns_records` gives every name
  a pod resolves (Services, and ``<pod>.<subdomain>`` for StatefulSet pods) and the
  addresses behind it. There is no kube-proxy: a ClusterIP Service's name resolves to
  its pods' own addresses.
- The downward API (``fieldRef``: ``metadata.name``, ``metadata.namespace``,
  ``status.podIP``, ``metadata.labels['...']``), ``secretKeyRef``/``configMapKeyRef``
  and ``$(VAR)`` in env values, command and args are expanded as the kubelet does:
  :func:`container_env` and :func:`expand`.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Manifest = dict[str, Any]

TEST_HOOK = "test"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


class Unsupported(ValueError):
    """The manifest asks for something this runner does not do (it says so rather than
    run something else)."""


@dataclass
class Pod:
    name: str
    kind: str  # StatefulSet, Deployment, Job, Pod
    owner: str  # the workload's name (the pod's own name for a bare Pod)
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    hostname: str = ""
    subdomain: str = ""
    #: volume name -> PVC name, for volumeClaimTemplates (StatefulSet pods).
    claims: dict[str, str] = field(default_factory=dict)

    @property
    def restart_policy(self) -> str:
        return str(self.spec.get("restartPolicy", "Always"))

    def containers(self) -> list[dict[str, Any]]:
        return list(self.spec.get("containers", []))

    def init_containers(self) -> list[dict[str, Any]]:
        return list(self.spec.get("initContainers", []))

    def volumes(self) -> dict[str, dict[str, Any]]:
        """Volume name -> source; a StatefulSet's claim templates as persistentVolumeClaims."""
        out = {v["name"]: v for v in self.spec.get("volumes", [])}
        for name, claim in self.claims.items():
            out[name] = {"name": name, "persistentVolumeClaim": {"claimName": claim}}
        return out

    def fqdn(self, namespace: str, domain: str) -> str:
        """The pod's own name in DNS (StatefulSet pods: through their headless Service)."""
        if not self.subdomain:
            return ""
        return f"{self.hostname}.{self.subdomain}.{namespace}.svc.{domain}"


@dataclass
class Service:
    name: str
    selector: dict[str, str]
    headless: bool
    publish_not_ready: bool
    ports: list[dict[str, Any]]


@dataclass
class Workload:
    """Everything a release runs, with the pods already expanded."""

    pods: list[Pod]
    test_pods: list[Pod]
    job_pods: list[Pod]
    services: list[Service]
    config_maps: dict[str, dict[str, str]]
    secrets: dict[str, dict[str, bytes]]
    claims: list[str]
    #: kinds rendered but not run (PDBs, NetworkPolicies, RBAC, ...): named so a reader
    #: of the test's output sees what was not exercised.
    not_run: dict[str, list[str]]

    def pod(self, name: str) -> Pod:
        for pod in [*self.pods, *self.test_pods, *self.job_pods]:
            if pod.name == name:
                return pod
        raise KeyError(name)

    def owned_by(self, owner: str) -> list[Pod]:
        return [p for p in self.pods if p.owner == owner]


# Kinds whose objects only matter to a real control plane (scheduling, disruption,
# policy, accounts); rendered and schema-checked by tests/helm, not run here.
NOT_RUN = {
    "PodDisruptionBudget",
    "NetworkPolicy",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "HorizontalPodAutoscaler",
    "ServiceMonitor",
    "ScaledObject",
}


def _meta(doc: Manifest) -> dict[str, Any]:
    return dict(doc.get("metadata") or {})


def _template_pod(template: Mapping[str, Any], *, name: str, kind: str, owner: str) -> Pod:
    meta = dict(template.get("metadata") or {})
    return Pod(
        name=name,
        kind=kind,
        owner=owner,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        spec=dict(template["spec"]),
    )


def workload(manifests: Iterable[Manifest | None]) -> Workload:
    """The pods, Services, ConfigMaps, Secrets and PVCs of a rendered release."""
    out = Workload([], [], [], [], {}, {}, [], {})
    for doc in manifests:
        if not doc:
            continue
        kind = doc.get("kind", "")
        meta = _meta(doc)
        name = meta.get("name", "")
        spec = doc.get("spec") or {}
        if kind == "StatefulSet":
            templates = spec.get("volumeClaimTemplates") or []
            for i in range(int(spec.get("replicas", 1))):
                pod = _template_pod(spec["template"], name=f"{name}-{i}", kind=kind, owner=name)
                pod.hostname = pod.name
                pod.subdomain = str(spec.get("serviceName", ""))
                pod.claims = {t["metadata"]["name"]: f"{t['metadata']['name']}-{name}-{i}" for t in templates}
                pod.labels["statefulset.kubernetes.io/pod-name"] = pod.name
                out.claims.extend(pod.claims.values())
                out.pods.append(pod)
        elif kind == "Deployment":
            for i in range(int(spec.get("replicas", 1))):
                out.pods.append(_template_pod(spec["template"], name=f"{name}-{i}", kind=kind, owner=name))
        elif kind == "CronJob":
            job = f"{name}-manual"
            pod = _template_pod(spec["jobTemplate"]["spec"]["template"], name=f"{job}-0", kind="Job", owner=job)
            pod.labels["job-name"] = job
            out.job_pods.append(pod)
        elif kind == "Pod":
            pod = _template_pod({"metadata": meta, "spec": spec}, name=name, kind=kind, owner=name)
            if pod.annotations.get("helm.sh/hook") == TEST_HOOK:
                out.test_pods.append(pod)
            else:
                out.pods.append(pod)
        elif kind == "Service":
            out.services.append(
                Service(
                    name=name,
                    selector=dict(spec.get("selector") or {}),
                    headless=spec.get("clusterIP") == "None",
                    publish_not_ready=bool(spec.get("publishNotReadyAddresses")),
                    ports=list(spec.get("ports") or []),
                )
            )
        elif kind == "ConfigMap":
            out.config_maps[name] = {k: str(v) for k, v in (doc.get("data") or {}).items()}
        elif kind == "Secret":
            data = {k: base64.b64decode(v) for k, v in (doc.get("data") or {}).items()}
            data.update({k: str(v).encode() for k, v in (doc.get("stringData") or {}).items()})
            out.secrets[name] = data
        elif kind == "PersistentVolumeClaim":
            out.claims.append(name)
        elif kind in NOT_RUN:
            out.not_run.setdefault(kind, []).append(name)
        else:
            raise Unsupported(f"{kind} {name}: not something this runner knows how to run")
    return out


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def dns_records(work: Workload, ips: Mapping[str, str], *, namespace: str, domain: str) -> dict[str, list[str]]:
    """Every DNS name of the release -> the pod addresses behind it, sorted by pod name.

    ``ips``: pod name -> address (pods without one are left out). A Service name gets the
    addresses of every pod its selector matches (a real cluster gives a ClusterIP
    Service one virtual address in front of them, and only ready pods; here clients see
    the pods themselves, all of them). A StatefulSet pod also gets ``<pod>.<subdomain>``.
    """
    records: dict[str, list[str]] = {}
    for service in work.services:
        members = sorted((p for p in work.pods if p.name in ips and selects(service.selector, p.labels)),
                         key=lambda p: p.name)  # fmt: skip
        if members:
            records[f"{service.name}.{namespace}.svc.{domain}"] = [ips[p.name] for p in members]
    for pod in work.pods:
        fqdn = pod.fqdn(namespace, domain)
        if fqdn and pod.name in ips:
            records[fqdn] = [ips[pod.name]]
    return records


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\$")
_LABEL_REF = re.compile(r"metadata\.labels\['([^']+)'\]")


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: a defined name is replaced, an undefined one
    is left as written, ``$$`` is a literal ``$``."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(one, text)


def field_value(path: str, pod: Pod, *, namespace: str, pod_ip: str) -> str:
    """A ``fieldRef`` of the downward API."""
    if path == "metadata.name":
        return pod.name
    if path == "metadata.namespace":
        return namespace
    if path in ("status.podIP", "status.podIPs"):
        return pod_ip
    if m := _LABEL_REF.fullmatch(path):
        return pod.labels.get(m.group(1), "")
    raise Unsupported(f"fieldRef {path!r} of pod {pod.name}")


def container_env(
    container: Mapping[str, Any],
    pod: Pod,
    *,
    namespace: str,
    pod_ip: str,
    config_maps: Mapping[str, Mapping[str, str]],
    secrets: Mapping[str, Mapping[str, bytes]],
) -> dict[str, str]:
    """The container's environment as the kubelet builds it, in order, each value
    expanded against the names defined before it."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if ref := source.get("configMapRef"):
            env.update(config_maps[ref["name"]])
        elif ref := source.get("secretRef"):
            env.update({k: v.decode() for k, v in secrets[ref["name"]].items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var:
            env[name] = expand(str(var["value"]), env)
            continue
        ref = var.get("valueFrom") or {}
        if "fieldRef" in ref:
            env[name] = field_value(ref["fieldRef"]["fieldPath"], pod, namespace=namespace, pod_ip=pod_ip)
        elif "secretKeyRef" in ref:
            key = ref["secretKeyRef"]
            value = secrets.get(key["name"], {}).get(key["key"])
            if value is None:
                if key.get("optional"):
                    continue
                raise Unsupported(f"{pod.name}: env {name} needs secret {key['name']} key {key['key']}")
            env[name] = value.decode()
        elif "resourceFieldRef" in ref:
            env[name] = resource_value(ref["resourceFieldRef"], pod)
        elif "configMapKeyRef" in ref:
            key = ref["configMapKeyRef"]
            env[name] = config_maps[key["name"]][key["key"]]
        else:
            raise Unsupported(f"{pod.name}: env {name}: {ref}")
    return env


_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "m": 0.001,
}
_QUANTITY = re.compile(r"([0-9.]+)([A-Za-z]*)")


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity (``2Gi``, ``500m``, ``1``) as a number."""
    m = _QUANTITY.fullmatch(str(text))
    if m is None or (m.group(2) and m.group(2) not in _SUFFIX):
        raise Unsupported(f"quantity {text!r}")
    return float(m.group(1)) * _SUFFIX.get(m.group(2), 1)


def resource_value(ref: Mapping[str, Any], pod: Pod) -> str:
    """A ``resourceFieldRef``: the named container's limit or request, over the divisor,
    rounded up (the kubelet's rule; no limit set would be the node's capacity)."""
    container = next(c for c in pod.containers() if c["name"] == ref.get("containerName", c["name"]))
    kind, _, resource = str(ref["resource"]).partition(".")
    value = (container.get("resources") or {}).get(kind, {}).get(resource)
    if value is None:
        raise Unsupported(f"{pod.name}: resourceFieldRef {ref} has no {kind} set")
    return str(math.ceil(quantity(value) / quantity(ref.get("divisor", "1"))))


def probe_target(probe: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str, Any]:
    """A probe's kind (grpc, httpGet, tcpSocket, exec) and what it checks; a named port
    is looked up in the container's ports."""
    for kind in ("grpc", "httpGet", "tcpSocket", "exec"):
        if kind in probe:
            spec = dict(probe[kind])
            port = spec.get("port")
            if isinstance(port, str) and not port.isdigit():
                named = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
                spec["port"] = named[port]
            elif port is not None:
                spec["port"] = int(port)
            return kind, spec
    raise Unsupported(f"probe {probe}")
