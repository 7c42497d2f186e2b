"""A local TLS cluster (LocalCluster with ``tls``, as ``txmq up --tls`` runs it) locks its
etcd down: client and peer TLS with certificates of the cluster's CA, etcd auth on, and
one etcd user per kind of service (txmq_cli.etcd_auth).

Checked from outside, as someone on etcd's port: without a client certificate nothing
connects; with the cluster's certificate but no etcd user nothing of txmq's can be read
or written; with a service's user only that kind's part (pull cannot touch the stores'
routes, the gateway's secrets or another kind's endpoints; the gateway reads its
secrets). The cluster itself works: a topic is created and a message sent over TLS. A
second start on the same data (auth already on) signs in as root and starts again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import LocalCluster
from support.certs import tls_files
from support.etcdctl import etcdctl
from support.processes import new_local_cluster
from support.scratch import scoped_dir

from txmq import Admin, Message, Producer, TlsConfig
from txmq_cli.etcd_auth import service_user

PREFIX = "/txmq"


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = scoped_dir(request, tmp_path_factory, "etcdroles")
    local = new_local_cluster(base, tls=tls_files(base / "tls"))
    local.start()
    try:
        yield local
    finally:
        local.stop()


def user(cluster: LocalCluster, name: str) -> str:
    return f"{name}:{(cluster.etcd_auth_dir / name).read_text().strip()}"


def ctl(cluster: LocalCluster, *args: str, as_user: str = "", client_cert: bool = True):  # type: ignore[no-untyped-def]
    return etcdctl(cluster.etcd_endpoints, cluster.tls, *args, user=as_user, client_cert=client_cert)


def test_the_cluster_works_on_its_locked_down_etcd(cluster: LocalCluster) -> None:
    assert cluster.tls is not None
    tls = TlsConfig(ca_file=cluster.tls.ca, cert_file=cluster.tls.cert, key_file=cluster.tls.key)
    with Admin(cluster.bootstrap, tls=tls) as admin:
        admin.create_topic("EtcdRoles", read_queue_nums=1, write_queue_nums=1)
    with Producer("etcd-roles", cluster.bootstrap, tls=tls) as producer:
        assert producer.send(Message("EtcdRoles", b"hello")).queue_offset == 0
    keys = ctl(cluster, "get", "--prefix", "--keys-only", f"{PREFIX}/", as_user=user(cluster, "root"))
    assert keys.returncode == 0, keys.stderr
    for part in ("services/store/", "services/pull/", "services/txcheck/", "services/gateway/", "stores/", "secrets/"):
        assert f"{PREFIX}/{part}" in keys.stdout, keys.stdout
    assert "/auth/" not in keys.stdout  # auth is off in this cluster: no user book


def test_without_a_client_certificate_nothing_connects(cluster: LocalCluster) -> None:
    done = ctl(cluster, "get", "--prefix", "/", client_cert=False)
    assert done.returncode != 0 and not done.stdout


def test_without_an_etcd_user_nothing_is_read_or_written(cluster: LocalCluster) -> None:
    for args in (("get", "--prefix", "/"), ("get", "--prefix", f"{PREFIX}/"), ("put", f"{PREFIX}/auth/acls/x", "y")):
        done = ctl(cluster, *args)
        assert done.returncode != 0 and not done.stdout, (args, done.stdout)


@pytest.mark.parametrize(
    ("service", "allowed", "refused"),
    [
        (
            "pull",
            [("get", "--prefix", f"{PREFIX}/services/"), ("put", f"{PREFIX}/services/pull/probe", "x")],
            [
                ("get", "--prefix", "/"),
                ("get", "--prefix", f"{PREFIX}/secrets/"),
                ("put", f"{PREFIX}/stores/store-0/topics/Evil", "{}"),
                ("put", f"{PREFIX}/services/store/evil", "{}"),
                ("put", f"{PREFIX}/txcheck/leaders/store-0", "evil"),
                ("put", "/elsewhere", "x"),
            ],
        ),
        (
            "gateway",
            [("get", "--prefix", f"{PREFIX}/secrets/"), ("put", f"{PREFIX}/gateway/groups/probe", "x")],
            [("put", f"{PREFIX}/store-groups/store-0/state", "{}"), ("get", "--prefix", f"{PREFIX}/txcheck/")],
        ),
        (
            "store",
            [("put", f"{PREFIX}/stores/store-9/topics/Probe", "{}"), ("get", "--prefix", f"{PREFIX}/store-groups/")],
            [("get", "--prefix", f"{PREFIX}/secrets/"), ("put", f"{PREFIX}/services/gateway/evil", "{}")],
        ),
    ],
)
def test_a_service_user_reaches_only_its_part(
    cluster: LocalCluster, service: str, allowed: list[tuple[str, ...]], refused: list[tuple[str, ...]]
) -> None:
    identity = user(cluster, service_user(service))
    for args in allowed:
        done = ctl(cluster, *args, as_user=identity)
        assert done.returncode == 0, (args, done.stderr)
        if args[0] == "put":
            ctl(cluster, "del", args[1], as_user=identity)
    for args in refused:
        done = ctl(cluster, *args, as_user=identity)
        assert done.returncode != 0 and "permission denied" in done.stderr, (args, done.stdout, done.stderr)


def test_passwords_are_kept_private(cluster: LocalCluster) -> None:
    for path in Path(cluster.etcd_auth_dir).iterdir():
        assert path.stat().st_mode & 0o077 == 0, path


def test_a_second_start_on_the_same_data_signs_in_as_root(cluster: LocalCluster) -> None:
    cluster.stop()
    cluster.start()  # auth already on: set-up signs in as root; every service starts again
    assert all(service.process.running() for service in cluster.services.values())
    assert ctl(cluster, "get", "--prefix", "/").returncode != 0
