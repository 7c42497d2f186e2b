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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import EtcdServer, LocalCluster, ServiceFactory, ServiceProcess, new_etcd, new_local_cluster


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
