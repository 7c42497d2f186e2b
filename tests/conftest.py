"""Fixtures shared by every test directory (names are stable; other suites use them).

- ``etcd``: one real etcd for the session (``.endpoint`` is host:port).
- ``txmq_cluster``: store + pull + txcheck processes on that etcd for the session
  (a ``LocalCluster``: ``.bootstrap``, ``.store_address``, ``.pull_address``,
  ``.txcheck_address``, ``.etcd_endpoints``, ``.log_dir``). Tests share it: use topic
  and group names of their own.
- ``service_factory``: per test, start private service processes
  (``service_factory.store("--flush_mode", "sync")``, ``service_factory.start("pull")``)
  under a private etcd prefix; each store has its own data dir. Stopped after the test.
- ``private_store``: per test, a callable starting a fresh store (same as
  ``service_factory.store``), e.g. for crash tests: ``s = private_store(); s.kill();
  s.restart()``.
- SDK clients of the session cluster (a package may override ``bootstrap`` to point them
  at a cluster of its own): ``bootstrap`` (its address), ``admin`` (an ``Admin``),
  ``new_topic`` (``new_topic(queues=4)`` creates a topic of the test's own, deleted after
  it: ``support.topics.Topics``), ``producer`` (a ``Producer`` of group
  ``<package>-test-producer``).

The slow marker is set here, by rule (``pytest_collection_modifyitems``), so a new test is
marked by what it uses rather than by hand; ``-m "not slow"`` is the fast inner loop
(tests/README.md). A test is slow when it

- uses a fixture that starts service processes, Spark or a cluster, directly or through
  another fixture (``SLOW_FIXTURES``: ``txmq_cluster``, ``service_factory`` and so
  ``private_store``, ``spark``, ...);
- lives in a module named ``*_it.py`` (integration tests) or under a path listed in
  ``SLOW_PATHS`` (modules that start processes, Node or the official clients by hand);
- or is marked ``@pytest.mark.slow`` itself (a test with its own subprocess).

Tests on the one session etcd alone stay in the fast loop.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import EtcdServer, LocalCluster, ServiceFactory, ServiceProcess, new_etcd, new_local_cluster
from support.topics import Topics

from txmq import Admin, Producer


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = new_etcd(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def txmq_cluster(etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = new_local_cluster(tmp_path_factory.mktemp("cluster"), etcd_endpoints=etcd.endpoint)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def service_factory(etcd: EtcdServer, tmp_path: Path) -> Iterator[ServiceFactory]:
    factory = ServiceFactory(etcd_endpoints=etcd.endpoint, base_dir=tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def private_store(service_factory: ServiceFactory) -> Callable[..., ServiceProcess]:
    return service_factory.store


def _package(request: pytest.FixtureRequest) -> str:
    return Path(str(request.node.path)).parent.name


@pytest.fixture
def bootstrap(txmq_cluster: LocalCluster) -> str:
    return txmq_cluster.bootstrap


@pytest.fixture
def admin(bootstrap: str) -> Iterator[Admin]:
    with Admin(bootstrap) as client:
        yield client


@pytest.fixture
def new_topic(admin: Admin, request: pytest.FixtureRequest) -> Iterator[Topics]:
    topics = Topics(admin, prefix=_package(request))
    try:
        yield topics
    finally:
        topics.delete_all()


@pytest.fixture
def producer(bootstrap: str, request: pytest.FixtureRequest) -> Iterator[Producer]:
    with Producer(f"{_package(request)}-test-producer", bootstrap) as client:
        yield client


#: Fixtures that start service processes, Spark or a whole cluster: their users are slow.
SLOW_FIXTURES = frozenset(
    {
        "txmq_cluster",  # store + pull + txcheck + gateway processes
        "service_factory",  # per-test processes (private_store too)
        "fast_cluster",  # tests/consumer: a store and a pull process
        "spark",  # tests/analytics: a Spark session
        # tests/helm: every rendered manifest against the Kubernetes schemas (~1 s per
        # scenario and version, over half the fast loop's time); rendering stays fast.
        "kubernetes_validate",
    }
)
#: Paths (relative to tests/) whose tests start processes, Node or the official clients
#: without one of the fixtures above.
SLOW_PATHS = (
    "e2e/",  # services, producers and killers as processes
    "integration/",  # service processes, etcd restarts, txmq up
    "polyglot/",  # Node.js clients
    "gateway/test_official_client.py",  # the official RocketMQ client against a gateway process
    "gateway/test_ownership.py",  # several gateway processes
    "gateway/test_tls.py",  # gateway processes with certificates
)


def _slow_reason(item: pytest.Item) -> str | None:
    used = SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if used:
        return "uses " + ", ".join(sorted(used))
    path = Path(str(item.path)).resolve()
    try:
        relative = path.relative_to(Path(__file__).resolve().parent).as_posix()
    except ValueError:
        return None
    if path.name.endswith("_it.py"):
        return "an integration module (*_it.py)"
    for prefix in SLOW_PATHS:
        if relative == prefix or relative.startswith(prefix):
            return f"under {prefix}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and _slow_reason(item) is not None:
            item.add_marker(pytest.mark.slow)


class _DiskWatch:
    """Free space on the temp directories' file system, read after every test: the suite
    once filled CI's disk, and the summary says how close it came."""

    def __init__(self) -> None:
        self.start = self.lowest = 0
        self.lowest_after = ""

    def read(self, nodeid: str) -> None:
        free = shutil.disk_usage(tempfile.gettempdir()).free
        if not self.start:
            self.start = self.lowest = free
        if free < self.lowest:
            self.lowest, self.lowest_after = free, nodeid


_disk = _DiskWatch()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _disk.read(nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _disk.start:
        gib = 1 << 30
        terminalreporter.write_line(
            f"disk: {_disk.start / gib:.1f} GiB free at the start, lowest {_disk.lowest / gib:.1f} GiB"
            + (f" (after {_disk.lowest_after})" if _disk.lowest_after else "")
        )
