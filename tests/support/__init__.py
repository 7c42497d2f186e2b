"""Integration-test support: real etcd and real txmq service processes (services on
port 0, the bound port read from their ready line; etcd on free ports), with temp dirs,
readiness checked against our own processes, and clean teardown.

The process classes are the ones ``txmq up`` uses (txmq_cli.cluster); this package adds
what only tests need. The pytest fixtures built on it live in tests/conftest.py.
"""

from support.processes import (
    ServiceFactory,
    child_pids,
    free_port,
    new_etcd,
    new_local_cluster,
    wait_key_deleted,
)
from txmq_cli.cluster import (
    ChildProcess,
    EtcdServer,
    LocalCluster,
    ProcessExited,
    ServiceProcess,
    wait_serving,
)

__all__ = [
    "ChildProcess",
    "EtcdServer",
    "LocalCluster",
    "ProcessExited",
    "ServiceFactory",
    "ServiceProcess",
    "child_pids",
    "free_port",
    "new_etcd",
    "new_local_cluster",
    "wait_key_deleted",
    "wait_serving",
]
