"""Rendering helm/txmq with the real helm binary, and small accessors for the manifests.

helm comes from $TXMQ_HELM, scripts/install_helm_tools.sh (.venv/bin/helm) or PATH;
``helm_binary()`` is None when none has it, and the tests skip saying so.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "txmq"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
#: The store layout of releases installed before replicated store groups became the
#: chart's default: store.groups.replicas 1 (one StatefulSet <release>-store of
#: independent stores), store.settings.min_in_sync 1, analytics.exports.source store.
UNREPLICATED_STORES = CHART / "examples" / "unreplicated-stores.yaml"
RELEASE = "txmq"
NAMESPACE = "mq"

Doc = dict[str, Any]


@functools.cache
def helm_binary() -> str | None:
    """$TXMQ_HELM, else .venv/bin/helm, else helm on PATH: the first that runs."""
    venv_helm = Path(sys.executable).parent / "helm"
    for candidate in (os.environ.get("TXMQ_HELM"), str(venv_helm), shutil.which("helm")):
        if candidate and os.access(candidate, os.X_OK):
            try:
                subprocess.run([candidate, "version", "--short"], check=True, capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            return candidate
    return None


needs_helm = pytest.mark.skipif(
    helm_binary() is None,
    reason="helm is not installed (no .venv/bin/helm, none on PATH): run scripts/install_helm_tools.sh",
)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = helm_binary()
    assert binary is not None
    # A private HOME-like config: helm must not read or write the user's repositories.
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": f"{tmp}/cache",
            "HELM_CONFIG_HOME": f"{tmp}/config",
            "HELM_DATA_HOME": f"{tmp}/data",
        }
        return subprocess.run([binary, *args], capture_output=True, text=True, env=env, check=check, timeout=120)


def _values_args(values: Mapping[str, Any] | None, files: tuple[Path, ...], tmp: str) -> list[str]:
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    if values:
        path = Path(tmp) / "values.yaml"
        path.write_text(yaml.safe_dump(json.loads(json.dumps(values))))
        args += ["-f", str(path)]
    return args


def template(
    values: Mapping[str, Any] | None = None,
    *files: Path,
    release: str = RELEASE,
    check: bool = True,
    chart: Path = CHART,
) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as tmp:
        return helm(
            "template", release, str(chart), "--namespace", NAMESPACE, *_values_args(values, files, tmp), check=check
        )


def render(
    values: Mapping[str, Any] | None = None, *files: Path, release: str = RELEASE, chart: Path = CHART
) -> list[Doc]:
    """Every manifest `helm template` produces (helm test hooks included); ``chart``: another
    copy of the chart (an earlier version's)."""
    result = template(values, *files, release=release, check=False, chart=chart)
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    out = result.stdout
    return [d for d in yaml.safe_load_all(out) if d]


def notes(values: Mapping[str, Any] | None = None, *files: Path, release: str = RELEASE) -> str:
    """templates/NOTES.txt as `helm install` would print it. `helm template` never renders
    NOTES.txt and `helm install --dry-run` needs a cluster, so a copy of the chart gets one
    more template that renders the same text into a manifest."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "chart"
        shutil.copytree(CHART, copy)
        text = (copy / "templates" / "NOTES.txt").read_text()
        (copy / "templates" / "zz-notes.yaml").write_text(
            '{{- define "txmq.test.notes" }}' + text + "{{- end }}\n"
            "kind: Notes\n"
            'text: {{ include "txmq.test.notes" . | toJson }}\n'
        )
        result = helm(
            "template",
            release,
            str(copy),
            "--namespace",
            NAMESPACE,
            "--show-only",
            "templates/zz-notes.yaml",
            *_values_args(values, files, tmp),
            check=False,
        )
    if result.returncode != 0:
        raise AssertionError(f"helm template (NOTES.txt) failed:\n{result.stderr}")
    return str(yaml.safe_load(result.stdout)["text"])


def lint(values: Mapping[str, Any] | None = None, *files: Path) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as tmp:
        return helm("lint", "--strict", str(CHART), *_values_args(values, files, tmp), check=False)


# ---- accessors --------------------------------------------------------------------------


def find(docs: list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, got {[d['metadata']['name'] for d in find(docs, kind)]}"
    return found[0]


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "CronJob", "Pod", "Job", "DaemonSet")


def pod_spec(doc: Doc) -> dict[str, Any]:
    if doc["kind"] == "Pod":
        return doc["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def pod_labels(doc: Doc) -> dict[str, str]:
    if doc["kind"] == "Pod":
        return doc["metadata"]["labels"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return doc["spec"]["template"]["metadata"]["labels"]


def workloads(docs: list[Doc]) -> Iterator[Doc]:
    return (d for d in docs if d["kind"] in WORKLOAD_KINDS)


def component_of(doc: Doc) -> str | None:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def store_statefulsets(docs: list[Doc]) -> list[Doc]:
    """The stores' StatefulSets, in render order: <release>-store in the unreplicated
    layout (store.groups.replicas 1), else one <release>-store-g<i> per replicated group."""
    return [d for d in find(docs, "StatefulSet") if component_of(d) == "store"]


def service_workloads(docs: list[Doc], service: str) -> list[Doc]:
    """The workloads that run a service: its one Deployment, or every store StatefulSet
    (store_statefulsets). Fails the test when there is none."""
    found = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet") and component_of(d) == service]
    assert found, f"no workload of {service}"
    assert service == "store" or len(found) == 1, [d["metadata"]["name"] for d in found]
    return found


def container(doc: Doc, name: str | None = None) -> dict[str, Any]:
    containers = pod_spec(doc)["containers"]
    if name is None:
        assert len(containers) == 1
        return containers[0]
    (found,) = [c for c in containers if c["name"] == name]
    return found


def env_list(c: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(c.get("env", []))


def env_values(c: Mapping[str, Any]) -> dict[str, str | None]:
    """name -> literal value (None for valueFrom)."""
    return {e["name"]: e.get("value") for e in env_list(c)}


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against a label set."""
    for k, v in selector.get("matchLabels", {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
