"""Upgrading a release installed with the chart from before replicated store groups became
its default. Such a release has one StatefulSet <release>-store of unreplicated stores on
PVCs data-<release>-store-<i>, exporting into the volume the analytics job reads. The
current chart's defaults render store groups instead (<release>-store-g<i>, new PVCs), so
`helm upgrade ... -f examples/unreplicated-stores.yaml` must render the stores an upgrade
keeps: the same StatefulSets with the same fields Kubernetes refuses to change, the same
claim templates (so the same PVCs), pod count and store identities, and the same
analytics exports volume.

The earlier chart is the one of commit EARLIER, the last before the defaults changed,
taken from git history (`git archive`); those tests are skipped when there is no git, no
checkout, a shallow clone (CI's: the commit may not be there) or no such commit. Both are
rendered with the same release name and namespace."""

from __future__ import annotations

import io
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm import chart
from helm.chart import Doc, container, env_list, find, one, pod_spec, store_statefulsets

pytestmark = chart.needs_helm

#: The last commit whose chart installs unreplicated stores by default.
EARLIER = "3c27dc3"
#: The store settings that make a store the same store on the same data.
IDENTITY = ("STORE_ID", "REPLICA_ID", "DATA_DIR", "MIN_IN_SYNC", "EXPORT_DIR")
#: StatefulSet fields Kubernetes refuses to change on an update (besides replicas,
#: template, updateStrategy, persistentVolumeClaimRetentionPolicy, minReadySeconds).
IMMUTABLE = ("selector", "serviceName", "podManagementPolicy", "volumeClaimTemplates")


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    git = shutil.which("git")
    if git is None:
        pytest.skip(f"git is not installed: the chart of commit {EARLIER} comes from the repository's history")
    return subprocess.run([git, "-C", str(chart.ROOT), *args], capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def earlier_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """helm/txmq as of EARLIER, extracted into a temporary directory."""
    shallow = _git("rev-parse", "--is-shallow-repository")
    if shallow.returncode != 0:
        pytest.skip(f"{chart.ROOT} is not a git checkout: no history to take the chart of commit {EARLIER} from")
    if shallow.stdout.strip() == b"true":
        pytest.skip(f"a shallow clone (as CI's): commit {EARLIER}, the earlier chart, may not be in it")
    if _git("cat-file", "-e", f"{EARLIER}^{{commit}}").returncode != 0:
        pytest.skip(f"commit {EARLIER} (the earlier chart) is not in this repository")
    archive = _git("archive", "--format=tar", EARLIER, "helm/txmq")
    assert archive.returncode == 0, archive.stderr.decode()
    target = tmp_path_factory.mktemp("earlier")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    earlier = target / "helm" / "txmq"
    # It is the chart this is about: unreplicated stores exporting into the shared volume.
    values = yaml.safe_load((earlier / "values.yaml").read_text())
    assert values["store"]["groups"]["replicas"] == 1 and values["store"]["settings"]["min_in_sync"] == 1
    assert values["analytics"]["exports"]["source"] == "store"
    return earlier


@pytest.fixture(scope="module")
def earlier_docs(earlier_chart: Path) -> list[Doc]:
    """The release as the earlier chart installed it, with its defaults."""
    return chart.render(chart=earlier_chart)


@pytest.fixture(scope="module")
def upgraded_docs() -> list[Doc]:
    """The same release upgraded with the current chart and examples/unreplicated-stores.yaml."""
    return chart.render(None, chart.UNREPLICATED_STORES)


def names(docs: list[Doc]) -> list[str]:
    return [d["metadata"]["name"] for d in docs]


def identity_env(sts: Doc) -> dict[str, dict[str, Any]]:
    """The store container's TXMQ_STORE_<IDENTITY> entries (value or valueFrom) by name."""
    wanted = {f"TXMQ_STORE_{name}" for name in IDENTITY}
    found = {e["name"]: e for e in env_list(container(sts, "store")) if e["name"] in wanted}
    assert set(found) == wanted, sorted(wanted - set(found))
    return found


def mount(c: dict[str, Any], spec: dict[str, Any], name: str) -> tuple[str, dict[str, Any] | None]:
    """(mountPath, the pod volume) of a container's mount of volume ``name`` (no pod volume:
    a claim template's)."""
    (m,) = [m for m in c["volumeMounts"] if m["name"] == name]
    volumes = [v for v in spec.get("volumes", []) if v["name"] == name]
    return m["mountPath"], (volumes[0] if volumes else None)


def test_upgrade_keeps_the_store_statefulsets_and_their_pvcs(earlier_docs: list[Doc], upgraded_docs: list[Doc]) -> None:
    before, after = store_statefulsets(earlier_docs), store_statefulsets(upgraded_docs)
    assert names(before) == names(after) == [f"{chart.RELEASE}-store"]
    for old, new in zip(before, after, strict=True):
        # Claim templates named alike give the pods their PVCs data-<sts>-<i> back.
        claims = [t["metadata"]["name"] for t in new["spec"]["volumeClaimTemplates"]]
        assert claims == [t["metadata"]["name"] for t in old["spec"]["volumeClaimTemplates"]] == ["data"]
        assert new["spec"]["replicas"] == old["spec"]["replicas"] == 2
        # Otherwise Kubernetes refuses the upgrade of the StatefulSet.
        for field in IMMUTABLE:
            assert new["spec"][field] == old["spec"][field], field
        # The data directory on the same path of the claim.
        assert mount(container(new, "store"), pod_spec(new), "data") == (
            mount(container(old, "store"), pod_spec(old), "data")
        )
        assert mount(container(new, "store"), pod_spec(new), "data")[1] is None


def test_upgrade_keeps_each_stores_identity_and_data_dir(earlier_docs: list[Doc], upgraded_docs: list[Doc]) -> None:
    """store_id (the pod name, the broker name clients and consumer offsets know), no
    replica_id, data_dir, min_in_sync and export_dir as the earlier chart rendered them."""
    for old, new in zip(store_statefulsets(earlier_docs), store_statefulsets(upgraded_docs), strict=True):
        assert identity_env(new) == identity_env(old)
        env = {name: e.get("value") for name, e in identity_env(new).items()}
        assert (env["TXMQ_STORE_STORE_ID"], env["TXMQ_STORE_REPLICA_ID"]) == ("$(POD_NAME)", "")
        assert env["TXMQ_STORE_MIN_IN_SYNC"] == "1"


def test_upgrade_keeps_the_analytics_exports(earlier_docs: list[Doc], upgraded_docs: list[Doc]) -> None:
    """The stores keep exporting into the claim the analytics job reads, at the same path;
    the claim is the same (a PVC's spec cannot shrink or change class)."""
    claim = f"{chart.RELEASE}-exports"
    assert (
        one(upgraded_docs, "PersistentVolumeClaim", claim)["spec"]
        == (one(earlier_docs, "PersistentVolumeClaim", claim)["spec"])
    )
    for old, new in zip(store_statefulsets(earlier_docs), store_statefulsets(upgraded_docs), strict=True):
        path, volume = mount(container(new, "store"), pod_spec(new), "exports")
        assert (path, volume) == mount(container(old, "store"), pod_spec(old), "exports")
        assert volume is not None and volume["persistentVolumeClaim"]["claimName"] == claim
    jobs = [one(docs, "CronJob", f"{chart.RELEASE}-analytics") for docs in (earlier_docs, upgraded_docs)]
    old_job, new_job = ((container(j, "analytics"), pod_spec(j)) for j in jobs)
    path, volume = mount(*new_job, "shared")
    assert (path, volume) == mount(*old_job, "shared")
    assert volume is not None and volume["persistentVolumeClaim"]["claimName"] == claim
    args = [container(j, "analytics")["args"] for j in jobs]
    assert args[1][args[1].index("--input") + 1] == args[0][args[0].index("--input") + 1]
    # The stores export; the job does not snapshot them itself.
    assert not any(pod_spec(j).get("initContainers") for j in jobs)


def test_the_defaults_are_replicated_store_groups() -> None:
    """Without the file, the current chart renders other stores: two groups of three
    replicas on new claims (txmq-store-g<i>), acks from 2, the analytics job snapshotting
    the groups over gRPC. What an upgrade of an earlier release must not get unasked."""
    docs = chart.render()
    sets = store_statefulsets(docs)
    assert [(s["metadata"]["name"], s["spec"]["replicas"]) for s in sets] == [
        (f"{chart.RELEASE}-store-g0", 3),
        (f"{chart.RELEASE}-store-g1", 3),
    ]
    assert not find(docs, "StatefulSet", f"{chart.RELEASE}-store")
    for sts in sets:
        env = {name: e.get("value") for name, e in identity_env(sts).items()}
        assert env["TXMQ_STORE_MIN_IN_SYNC"] == "2"
        assert env["TXMQ_STORE_STORE_ID"] == sts["metadata"]["name"]
        assert "exports" not in {m["name"] for m in container(sts, "store")["volumeMounts"]}
    (export,) = pod_spec(one(docs, "CronJob", f"{chart.RELEASE}-analytics"))["initContainers"]
    assert export["name"] == "export" and export["args"][:2] == ["analytics", "export"]


def commands(example: Path) -> list[list[str]]:
    """The `helm install` / `helm upgrade` commands an example's comment gives."""
    lines = [line.lstrip("#").strip() for line in example.read_text().splitlines() if line.startswith("#")]
    return [shlex.split(line) for line in lines if line.startswith(("helm install ", "helm upgrade "))]


@pytest.mark.parametrize("example", chart.EXAMPLES, ids=lambda p: p.stem)
def test_example_commands_name_files_that_exist(example: Path) -> None:
    """Run from the repository root, each command names the chart and an example that exist;
    examples/unreplicated-stores.yaml's is the upgrade, with itself."""
    found = commands(example)
    assert found, f"{example.name} gives no helm install/upgrade command"
    for argv in found:
        _release, chart_path = [a for a in argv[2:] if not a.startswith("-")][:2]
        assert (chart.ROOT / chart_path / "Chart.yaml").is_file(), argv
        files = [argv[i + 1] for i, a in enumerate(argv) if a in ("-f", "--values")]
        assert files, argv
        for f in files:
            assert (chart.ROOT / f).is_file(), f"{example.name}: {' '.join(argv)}: no {f}"
        assert (chart.ROOT / files[-1]).resolve() == example.resolve(), argv
        if example == chart.UNREPLICATED_STORES:
            assert argv[1] == "upgrade", argv
