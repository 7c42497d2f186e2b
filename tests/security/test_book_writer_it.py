"""The user book is written only through its own etcd user (docs/etcd.md "Who writes the
user book"), on a local cluster as `txmq up --tls --auth-enabled` runs it: mutual TLS,
etcd's auth, and txmq's auth.

As each kind of service's etcd user, with the cluster's client certificate over etcd's
TLS port (as the services connect), the book reads but a put under it is refused
(permission denied), as is a write outside the kind's own keys; txmq-auth writes the
book and nothing of the services'. An older cluster's READWRITE on the book is taken
away by the set-up. The txmq side still works from any service: users and ACLs made
with the CLI at the pull service (which forwards the writes to txcheck) and at the store
are honoured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import LocalCluster
from support.certs import tls_files
from support.etcdctl import etcdctl
from support.processes import new_local_cluster
from support.scratch import scoped_dir

from txmq import Admin, Credentials, Message, Producer, TlsConfig, TxmqError
from txmq.v1 import errors_pb2
from txmq_cli import etcd_auth
from txmq_cli.cluster_cmds import AUTH_ARGS, LOCAL_ADMIN
from txmq_cli.main import cli

PREFIX = "/txmq"
SECRET = "book-writer-services-secret"
KINDS = ("store", "pull", "txcheck", "gateway")
#: A key of another kind's part each kind may not write.
NOT_MINE = {
    "store": f"{PREFIX}/txcheck/leaders/store-0",
    "pull": f"{PREFIX}/stores/store-0/topics/Evil",
    "txcheck": f"{PREFIX}/gateway/groups/evil",
    "gateway": f"{PREFIX}/services/store/evil",
}


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = scoped_dir(request, tmp_path_factory, "bookwriter")
    local = new_local_cluster(base, tls=tls_files(base / "tls"), service_args=AUTH_ARGS)
    for service in local.services.values():
        service.process.env[f"TXMQ_{service.service.upper()}_AUTH_SECRET_KEY"] = SECRET
    local.start()
    try:
        yield local
    finally:
        local.stop()


def user(cluster: LocalCluster, name: str) -> str:
    return f"{name}:{(cluster.etcd_auth_dir / name).read_text().strip()}"


def ctl(cluster: LocalCluster, *args: str, as_user: str):  # type: ignore[no-untyped-def]
    return etcdctl(cluster.etcd_endpoints, cluster.tls, *args, user=as_user)


def refused(done) -> bool:  # type: ignore[no-untyped-def]
    return done.returncode != 0 and "permission denied" in done.stderr


def tls(cluster: LocalCluster) -> TlsConfig:
    assert cluster.tls is not None
    return TlsConfig(ca_file=cluster.tls.ca, cert_file=cluster.tls.cert, key_file=cluster.tls.key)


@pytest.mark.parametrize("kind", KINDS)
def test_a_service_user_reads_the_book_and_cannot_write_it(cluster: LocalCluster, kind: str) -> None:
    identity = user(cluster, etcd_auth.service_user(kind))
    book = ctl(cluster, "get", "--prefix", "--keys-only", f"{PREFIX}/auth/", as_user=identity)
    assert book.returncode == 0, book.stderr
    assert f"{PREFIX}/auth/users/{LOCAL_ADMIN}" in book.stdout  # made by txcheck, through txmq-auth
    for key in (f"{PREFIX}/auth/users/evil", f"{PREFIX}/auth/acls/evil", f"{PREFIX}/auth/users/{LOCAL_ADMIN}"):
        done = ctl(cluster, "put", key, "{}", as_user=identity)
        assert refused(done), (kind, key, done.stdout, done.stderr)
    done = ctl(cluster, "del", "--prefix", f"{PREFIX}/auth/", as_user=identity)
    assert refused(done), (kind, done.stdout, done.stderr)
    for key in (NOT_MINE[kind], "/elsewhere"):
        done = ctl(cluster, "put", key, "x", as_user=identity)
        assert refused(done), (kind, key, done.stdout, done.stderr)


def test_the_books_user_writes_the_book_and_nothing_of_the_services(cluster: LocalCluster) -> None:
    identity = user(cluster, etcd_auth.AUTH)
    probe = f"{PREFIX}/auth/probe"
    assert ctl(cluster, "put", probe, "x", as_user=identity).returncode == 0
    assert ctl(cluster, "del", probe, as_user=identity).returncode == 0
    for key in (f"{PREFIX}/services/store/evil", f"{PREFIX}/stores/store-0/topics/Evil", "/elsewhere"):
        assert refused(ctl(cluster, "put", key, "x", as_user=identity)), key


def test_only_txcheck_holds_the_books_user(cluster: LocalCluster) -> None:
    for service in cluster.services.values():
        argv = service.process.argv
        holds = "--auth_etcd_username" in argv
        assert holds == (service.service == "txcheck"), service.service
        assert (f"TXMQ_{service.service.upper()}_AUTH_ETCD_PASSWORD" in service.process.env) == holds


def test_set_up_takes_an_older_write_grant_on_the_book_away(cluster: LocalCluster) -> None:
    assert cluster.etcd is not None and cluster.tls is not None
    root = user(cluster, etcd_auth.ROOT)
    role = etcd_auth.service_user("pull")
    granted = ctl(cluster, "role", "grant-permission", role, "readwrite", f"{PREFIX}/auth/", "--prefix", as_user=root)
    assert granted.returncode == 0, granted.stderr
    pull = user(cluster, role)
    probe = f"{PREFIX}/auth/probe-older"
    assert ctl(cluster, "put", probe, "x", as_user=pull).returncode == 0  # as an older set-up left it
    ctl(cluster, "del", probe, as_user=root)
    users = [etcd_auth.ROOT, etcd_auth.AUTH, *(etcd_auth.service_user(k) for k in KINDS)]
    secrets = etcd_auth.passwords(cluster.etcd_auth_dir, users)
    etcd_auth.set_up(cluster.etcd.endpoint, cluster.tls, prefix=PREFIX, services=list(KINDS), secrets=secrets)
    assert refused(ctl(cluster, "put", probe, "x", as_user=pull))
    assert ctl(cluster, "get", "--prefix", f"{PREFIX}/auth/", as_user=pull).returncode == 0


def _txmq(cluster: LocalCluster, *args: str, new_secret: str = "") -> str:
    assert cluster.tls is not None
    env = {
        "TXMQ_TLS_CA_FILE": str(cluster.tls.ca),
        "TXMQ_TLS_CERT_FILE": str(cluster.tls.cert),
        "TXMQ_TLS_KEY_FILE": str(cluster.tls.key),
        "TXMQ_ACCESS_KEY": LOCAL_ADMIN,
        "TXMQ_SECRET_KEY": SECRET,
        "TXMQ_NEW_SECRET_KEY": new_secret,
    }
    done = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("at", ["pull", "store"])
def test_users_and_acls_made_with_the_cli_at_any_service_are_honoured(cluster: LocalCluster, at: str) -> None:
    endpoint = cluster.services[at].address
    name, secret, topic = f"alice-{at}", f"alice-{at}-secret", f"BookWriter{at.capitalize()}"
    with Admin(cluster.bootstrap, tls=tls(cluster), credentials=Credentials(LOCAL_ADMIN, SECRET)) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        admin.create_topic(f"Other{topic}", read_queue_nums=1, write_queue_nums=1)
    _txmq(cluster, "user", "create", name, "--endpoint", endpoint, new_secret=secret)
    _txmq(cluster, "acl", "allow", name, f"Topic:{topic}", "Pub", "--endpoint", endpoint)
    _txmq(cluster, "acl", "allow", name, "Group:*", "Pub", "--endpoint", endpoint)
    assert f"Topic:{topic}" in _txmq(cluster, "acl", "show", name, "--endpoint", endpoint)
    alice = Credentials(name, secret)
    with Producer(f"book-{at}", cluster.bootstrap, tls=tls(cluster), credentials=alice) as producer:
        assert producer.send(Message(topic, b"allowed")).queue_offset == 0
        with pytest.raises(TxmqError) as refusal:
            producer.send(Message(f"Other{topic}", b"not allowed"))
    assert refusal.value.code == errors_pb2.CODE_ACCESS_DENIED
    _txmq(cluster, "user", "update", name, "--disable", "--endpoint", endpoint)
    _txmq(cluster, "user", "delete", name, "--endpoint", endpoint)


def test_the_services_identity_was_made_once_by_txcheck(cluster: LocalCluster) -> None:
    logs = {p.name: p.read_text() for p in Path(cluster.log_dir).glob("*.log") if p.name != "etcd.log"}
    made = [name for name, text in logs.items() if "created the service user" in text]
    assert made == ["txcheck.log"], made


def test_rotate_key_works_as_the_books_user_only(cluster: LocalCluster, tmp_path: Path) -> None:
    """`txmq auth rotate-key` re-seals as txmq-auth (a kind's etcd user may not), there
    and back, so the cluster ends on the key it started with."""
    assert cluster.tls is not None
    other = "book-writer-other-secret-key"

    def rotate(etcd_user: str, old: str, new: str) -> tuple[int, str]:
        password = tmp_path / f"{etcd_user}.password"
        password.write_text((cluster.etcd_auth_dir / etcd_user).read_text())
        args = [
            "auth", "rotate-key", "--wait-s", "1",
            "--etcd-endpoints", cluster.etcd_endpoints, "--etcd-prefix", PREFIX,
            "--etcd-tls-ca-file", str(cluster.tls.ca),
            "--etcd-tls-cert-file", str(cluster.tls.cert),
            "--etcd-tls-key-file", str(cluster.tls.key),
            "--etcd-username", etcd_user, "--etcd-password-file", str(password),
            "--service-access-key", LOCAL_ADMIN,
        ]  # fmt: skip
        env = {"TXMQ_OLD_AUTH_SECRET_KEY": old, "TXMQ_NEW_AUTH_SECRET_KEY": new}
        done = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
        return done.exit_code, done.output

    code, out = rotate(etcd_auth.service_user("pull"), SECRET, other)
    assert code == 1 and "permission denied" in out, out
    for old, new in ((SECRET, other), (other, SECRET)):
        code, out = rotate(etcd_auth.AUTH, old, new)
        assert code == 0 and "re-sealed" in out, out
