"""The image and the chart, run for real: the images built from Debian packages and PyPI,
the chart rendered with the project's helm, every pod started as podman containers in
network namespaces of their own (tests/deploy/cluster.py), then used as a user would:
a topic created from inside a store pod, the SDK sending and receiving, transactions
committed and rolled back, the official RocketMQ client through the gateway, the chart's
`helm test` pod, the analytics CronJob's pod, every probe of the chart; then the store
group's leader killed (kill -9) under a running producer, and the pull and txcheck
containers stopped and started under running clients.

Each step and its time are printed. Needs root and podman (CI has both:
scripts/install_deploy_deps.sh); elsewhere the module skips with one line saying why.
Images are cached by what makes them (tests/deploy/engine.py): the first run on a
machine builds everything, later ones reuse the base and the layers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.scratch import scoped_dir

from tests.deploy import engine, kube
from tests.deploy.cluster import Release
from tests.helm import chart

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

NS = chart.NAMESPACE
DOMAIN = "cluster.local"
BOOTSTRAP = f"{chart.RELEASE}-bootstrap.{NS}.svc.{DOMAIN}:10911"
GATEWAY = f"{chart.RELEASE}-gateway.{NS}.svc.{DOMAIN}:8081"
STORE_GROUP = f"{chart.RELEASE}-store-g0"
TOPIC = "DeployOrders"
SCENARIOS = [sys.executable, "-m", "tests.deploy.scenarios"]
RMQ = Path(__file__).resolve().parents[1] / "gateway" / "rmq_scenarios"

_t0 = time.monotonic()
_say: Any = print


def say(text: str) -> None:
    _say(f"[deploy {time.monotonic() - _t0:6.1f} s] {text}")


def values(images: dict[str, str]) -> dict[str, Any]:
    """The chart's defaults, except: images built here (never pulled), one store group
    (of the default three replicas) and one pod of each stateless service, so that
    stopping one is an outage the clients must ride out (and two cores can run it all),
    and the analytics job's remote export taking 2 snapshots 5 s apart (not 6, 10 s)."""
    etcd_repo, etcd_tag = images["etcd"].rsplit(":", 1)
    repo, tag = images["txmq"].rsplit(":", 1)
    return {
        "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"},
        "etcd": {"image": {"repository": etcd_repo, "tag": etcd_tag, "pullPolicy": "Never"}},
        "store": {"groups": {"count": 1}, "settings": {"commitlog_segment_bytes": 32 * 1024 * 1024}},
        "pull": {"replicas": 1},
        "txcheck": {"replicas": 1},
        "gateway": {"replicas": 1},
        "analytics": {"exports": {"remote": {"count": 2, "intervalSeconds": 5}}},
    }


@pytest.fixture(scope="module")
def release(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    global _say, _t0
    _t0 = time.monotonic()
    reason = engine.unavailable()
    if reason:
        pytest.skip(f"deployment test: {reason}")
    if chart.helm_binary() is None:
        pytest.skip("deployment test: no helm (scripts/install_helm_tools.sh)")
    # Each step is printed as it happens, past pytest's capture (the suite's output shows
    # the deployment's progress and times).
    capture = request.config.pluginmanager.getplugin("capturemanager")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if capture is not None and reporter is not None:

        def live(text: str) -> None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(text)

        _say = live
    podman = engine.Podman(engine.cache_dir(), log=say)
    started = time.monotonic()
    base = podman.base_image()
    images = {"etcd": podman.etcd_image(base)}
    images["txmq"], images["analytics"] = podman.txmq_images(base, "deploy")
    say(f"images ready in {time.monotonic() - started:.0f} s")
    work = kube.workload(chart.render(values(images)))
    say(f"rendered: {len(work.pods)} pods ({', '.join(p.name for p in work.pods)}); "
        f"not run here: {', '.join(f'{k} {len(v)}' for k, v in sorted(work.not_run.items()))}")  # fmt: skip
    rel = Release(
        podman, work, namespace=NS, domain=DOMAIN, state=scoped_dir(request, tmp_path_factory, "deploy"), log=say
    )
    try:
        rel.start()
        say(f"every pod ready in {rel.wait_ready(timeout_s=240):.1f} s")
        yield rel
    finally:
        for pod in work.pods:
            if rel.restarts(pod) if pod.name in rel.ips else 0:
                say(f"{pod.name} restarted {rel.restarts(pod)} time(s); its last lines:\n{rel.logs(pod, tail=15)}")
        rel.close()


def scenario(rel: Release, *args: str, timeout: float = 180) -> dict[str, Any]:
    out = rel.client([*SCENARIOS, *args], timeout=timeout)
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["ok"], answer
    return answer


def events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def group_status(rel: Release) -> dict[str, Any]:
    pull = rel.pods_of(f"{chart.RELEASE}-pull")[0]
    done = rel.exec(pull, ["txmq", "store-group", "status", "--endpoint", "127.0.0.1:10912", "-o", "json"])
    assert done.returncode == 0, done.stderr
    (status,) = [s for s in json.loads(done.stdout) if s["store_id"] == STORE_GROUP]
    return status


def test_every_probe_answers_as_kubernetes_expects(release: Release) -> None:
    started = time.monotonic()
    results = release.probes()
    failing = [r for r in results if not r.ok]
    kinds = sorted({f"{r.probe}:{r.kind}" for r in results})
    say(f"{len(results)} probes ({', '.join(kinds)}) in {time.monotonic() - started:.1f} s, {len(failing)} failing")
    assert not failing, failing
    # Every long-running container has all three probes.
    for pod in release.work.pods:
        for container in pod.containers():
            assert all(container.get(p) for p in kube.PROBES), (pod.name, container["name"])


def test_a_topic_is_created_from_inside_a_store_pod(release: Release) -> None:
    # The README's way: kubectl exec txmq-store-0 -- txmq topic create ...
    create = ["txmq", "topic", "create", TOPIC, "--read-queues", "4", "--write-queues", "4"]
    store = release.pods_of(STORE_GROUP)[0]
    done = release.exec(store, [*create, "--endpoint", "127.0.0.1:10911"])
    if done.returncode != 0 and "NOT_LEADER" in done.stdout + done.stderr:
        leader = release.work.pod(group_status(release)["leader"])
        done = release.exec(leader, [*create, "--endpoint", "127.0.0.1:10911"])
    assert done.returncode == 0, done.stdout + done.stderr
    say("topic created from a store pod")


def test_the_sdk_sends_and_receives(release: Release) -> None:
    answer = scenario(release, "send-receive", "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--group", "deploy-sdk",
                      "--count", "200", "--tag", "sdk")  # fmt: skip
    say(f"SDK: {answer['sent']} sent and received through {BOOTSTRAP}")


def test_transactions_commit_and_roll_back(release: Release) -> None:
    answer = scenario(release, "transactions", "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--group", "deploy-tx")
    say(f"transactions: {answer['states']}, the rolled-back one never delivered")


def test_the_official_rocketmq_client_through_the_gateway(release: Release) -> None:
    common = ["--endpoint", GATEWAY, "--topic", TOPIC]
    sent = events(release.client([sys.executable, str(RMQ / "transactional.py"), *common,
                                  "--actions", "commit,rollback", "--body-prefix", "rmq"], timeout=120))  # fmt: skip
    assert [e["event"] for e in sent if e["event"] in ("committed", "rolled_back")] == ["committed", "rolled_back"], (
        sent
    )
    produced = events(release.client([sys.executable, str(RMQ / "produce.py"), *common, "--count", "3",
                                      "--tag", "rmq"], timeout=120))  # fmt: skip
    assert sum(e["event"] == "sent" for e in produced) == 3, produced
    got = events(release.client([sys.executable, str(RMQ / "consume.py"), *common, "--group", "deploy-rmq",
                                 "--expression", "rmq", "--until-acked", "3"], timeout=120))  # fmt: skip
    assert sum(e["event"] == "acked" for e in got) >= 3, got
    assert not [e for e in [*sent, *produced, *got] if e["event"] == "error"]
    say("official RocketMQ client: transactional commit + rollback, 3 sent, 3 received and acked via the gateway")


def test_the_charts_helm_test_pod_passes(release: Release) -> None:
    (pod,) = release.work.test_pods
    code, out = release.run_to_completion(pod)
    assert code == 0, out
    say(f"helm test pod {pod.name}: exit 0 ({len(out.splitlines())} Services SERVING)")


def test_the_analytics_cronjob_writes_its_report(release: Release) -> None:
    (pod,) = release.work.job_pods
    started = time.monotonic()
    code, out = release.run_to_completion(pod)
    assert code == 0, out[-4000:]
    claim = pod.volumes()["shared"]["persistentVolumeClaim"]["claimName"]
    reports = sorted((release.state / "pvc" / claim).glob("reports/*/report.html"))
    assert reports, sorted(p.relative_to(release.state) for p in (release.state / "pvc" / claim).rglob("*"))[:40]
    html = reports[-1].read_text()
    assert "deploy-sdk" in html and TOPIC in html, html[:2000]
    say(f"analytics CronJob pod: report {reports[-1].name} in {time.monotonic() - started:.0f} s, names the group")


def test_the_store_leader_killed_sends_go_on_and_nothing_acknowledged_is_lost(release: Release, tmp_path: Path) -> None:
    before = group_status(release)
    old = before["leader"]
    assert len(before["in_sync"]) == 3, before
    acked = tmp_path / "acked"
    producer = _background(release, "keep-producing", "--bootstrap", BOOTSTRAP, "--topic", TOPIC,
                           "--group", "deploy-failover", "--tag", "failover", "--acked", str(acked))  # fmt: skip
    try:
        _wait_lines(acked, 50)
        killed = release.kill_9(release.work.pod(old))
        at = time.monotonic()
        say(f"kill -9 of leader {old} (pid {killed}) under a running producer")
        count = len(acked.read_text().splitlines())
        _wait_lines(acked, count + 100, timeout_s=60)
        say(f"sends go on: 100 more acknowledged {time.monotonic() - at:.1f} s after the kill")
        # A new term, and all three in sync again: the killed replica restarted (as the
        # kubelet would restart it) and caught up. It may even lead the new term: it held
        # everything acknowledged, so it is as eligible as the others.
        after = _until(
            lambda: (s := group_status(release))["epoch"] > before["epoch"] and len(s["in_sync"]) == 3 and s,
            timeout_s=120,
        )
        say(f"epoch {before['epoch']} -> {after['epoch']}, leader {old} -> {after['leader']}, "
            f"{old} restarted {release.restarts(release.work.pod(old))} time(s) and back in sync")  # fmt: skip
    finally:
        result = _stop(producer)
    say(f"producer: {result}")
    drained = scenario(release, "drain", "--bootstrap", BOOTSTRAP, "--topic", TOPIC, "--group", "deploy-failover-check",
                       "--acked", str(acked))  # fmt: skip
    assert drained["missing"] == 0 and drained["duplicated"] == 0, drained
    say(f"every acknowledged message is there once: {drained['acked']} acknowledged, 0 lost, 0 duplicated")


def test_pull_and_txcheck_restarts_are_ridden_out_by_clients(release: Release, tmp_path: Path) -> None:
    received = tmp_path / "received"
    acked = tmp_path / "acked"
    consumer = _background(release, "keep-consuming", "--bootstrap", BOOTSTRAP, "--topic", TOPIC,
                           "--group", "deploy-restarts", "--out", str(received))  # fmt: skip
    transactor = _background(release, "keep-transacting", "--bootstrap", BOOTSTRAP, "--topic", TOPIC,
                             "--group", "deploy-restarts", "--tag", "restarts", "--acked", str(acked),
                             "--interval-s", "0.1")  # fmt: skip
    try:
        _wait_lines(acked, 10)
        for owner in (f"{chart.RELEASE}-pull", f"{chart.RELEASE}-txcheck"):
            (pod,) = release.pods_of(owner)
            release.stop(pod)
            say(f"{pod.name} stopped")
            time.sleep(5)
            release.start_again(pod)
            waited = release.wait_ready([pod], timeout_s=120)
            say(f"{pod.name} started again, ready in {waited:.1f} s")
            count = len(acked.read_text().splitlines())
            _wait_lines(acked, count + 10, timeout_s=90)
        # Everything committed so far reaches the consumer that lived through both restarts.
        _until(lambda: set(acked.read_text().splitlines()) <= set(received.read_text().splitlines()), timeout_s=120)
        say(
            f"the consumer received all {len(acked.read_text().splitlines())} committed transactions "
            "across both restarts"
        )
    finally:
        t = _stop(transactor)
        c = _stop(consumer)
    say(f"transactions: {t}; consumer: {c}")


# -- helpers ---------------------------------------------------------------------------


def _background(rel: Release, *args: str) -> subprocess.Popen[str]:
    return rel.net.client_start([*SCENARIOS, *args])


def _stop(process: subprocess.Popen[str]) -> dict[str, Any]:
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"exit {process.returncode}: {err[-3000:]}"
    answer: dict[str, Any] = json.loads(lines[-1])
    if err.strip():
        answer["stderr_tail"] = err.strip().splitlines()[-3:]
    return answer


def _wait_lines(path: Path, count: int, *, timeout_s: float = 60) -> None:
    _until(lambda: path.exists() and len(path.read_text().splitlines()) >= count, timeout_s=timeout_s)


def _until(condition: Any, *, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s} s: {condition}")
