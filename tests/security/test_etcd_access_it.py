"""The etcd client through a locked-down etcd (txmq_runtime.etcd_access), against a real
etcd run with ``--client-cert-auth`` (client certificates from the cluster's CA), its TLS
certificate and etcd auth on (a root user, and a user ``svc`` that may read and write one
prefix).

In process: the client with the CA, a client certificate and the user reads and writes
its prefix and is refused outside it, and its watches see changes; it keeps working across an etcd restart, which
forgets every auth token (the token is fetched again). As processes: a service started
with the right certificate and user gets ready; with a wrong password, or a client
certificate of another CA, it exits with one line saying why, no traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aetcd
import pytest
from support import EtcdServer, ServiceFactory
from support.certs import TlsFiles, tls_files
from support.etcdctl import etcdctl
from support.processes import new_etcd
from support.scratch import scoped_dir

from txmq_cli.cluster import ProcessExited
from txmq_runtime.etcd import etcd_client
from txmq_runtime.etcd_access import EtcdAccess, EtcdAuthFailed

PREFIX = "/txmq-etcdsec"
PASSWORD = "svc-password-1"


@dataclass
class SecuredEtcd:
    server: EtcdServer
    files: TlsFiles
    stranger: TlsFiles  # another CA and a certificate it signed

    def access(self, *, files: TlsFiles | None = None, password: str = PASSWORD) -> EtcdAccess:
        files = files or self.files
        return EtcdAccess(
            ca=self.files.ca.read_bytes(),
            cert=files.cert.read_bytes(),
            key=files.key.read_bytes(),
            username="svc",
            password=password,
        )

    def service_args(self, *, files: TlsFiles | None = None, password: str = PASSWORD) -> list[str]:
        files = files or self.files
        return [
            "--etcd_tls_ca_file",
            str(self.files.ca),
            "--etcd_tls_cert_file",
            str(files.cert),
            "--etcd_tls_key_file",
            str(files.key),
            "--etcd_username",
            "svc",
            "--etcd_password",
            password,
        ]


@pytest.fixture(scope="module")
def secured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredEtcd]:
    base = scoped_dir(request, tmp_path_factory, "etcdsec")
    files = tls_files(base / "tls")
    server = new_etcd(base, tls=files)
    server.start()
    try:
        for args in (
            ["user", "add", "root:root-password-1"],
            ["user", "grant-role", "root", "root"],
            ["role", "add", "svc"],
            ["role", "grant-permission", "svc", "--prefix=true", "readwrite", PREFIX + "/"],
            ["user", "add", f"svc:{PASSWORD}"],
            ["user", "grant-role", "svc", "svc"],
            ["auth", "enable"],
        ):
            done = etcdctl(server.endpoint, files, *args)
            assert done.returncode == 0, done.stderr
        yield SecuredEtcd(server, files, tls_files(base / "stranger"))
    finally:
        server.stop()


async def test_the_user_reads_and_writes_its_prefix_only(secured: SecuredEtcd) -> None:
    async with etcd_client(secured.server.endpoint, secured.access()) as client:
        await client.put(f"{PREFIX}/k".encode(), b"v")
        got = await client.get(f"{PREFIX}/k".encode())
        assert got is not None and got.value == b"v"
        with pytest.raises(aetcd.ClientError, match="permission denied"):
            await client.get(b"/elsewhere")


async def test_the_users_watch_sees_its_prefix_change(secured: SecuredEtcd) -> None:
    """A watch carries the token too (etcd refuses one without it, and aetcd takes the
    refusal for a live watch that never sees an event): what the mirrors of the user book
    and of the routes rely on."""
    async with etcd_client(secured.server.endpoint, secured.access()) as client:
        start = (await client.get_prefix(f"{PREFIX}/w/".encode())).header.revision + 1
        watch = await client.watch_prefix(f"{PREFIX}/w/".encode(), start_revision=start)
        await client.put(f"{PREFIX}/w/k".encode(), b"seen")

        async def first() -> aetcd.Event:
            async for event in watch:
                return event
            raise AssertionError("the watch ended")

        event = await asyncio.wait_for(first(), 10)
        assert (event.kv.key, event.kv.value) == (f"{PREFIX}/w/k".encode(), b"seen")
        await watch.cancel()


async def test_a_wrong_password_is_refused_for_good(secured: SecuredEtcd) -> None:
    async with etcd_client(secured.server.endpoint, secured.access(password="not-it-at-all")) as client:
        with pytest.raises(EtcdAuthFailed, match="etcd refused user 'svc'"):
            await client.get(f"{PREFIX}/k".encode())


async def test_no_user_is_refused(secured: SecuredEtcd) -> None:
    """The certificate alone (its common name is no etcd user) gives nothing."""
    anonymous = EtcdAccess(
        ca=secured.files.ca.read_bytes(), cert=secured.files.cert.read_bytes(), key=secured.files.key.read_bytes()
    )
    async with etcd_client(secured.server.endpoint, anonymous) as client:
        with pytest.raises(aetcd.ClientError):
            await client.get(f"{PREFIX}/k".encode())


async def test_the_token_is_fetched_again_after_an_etcd_restart(secured: SecuredEtcd) -> None:
    """etcd's simple tokens live in its memory: a restart forgets them. aetcd alone would
    send the dead token for ever ("invalid auth token")."""
    async with etcd_client(secured.server.endpoint, secured.access()) as client:
        await client.put(f"{PREFIX}/before".encode(), b"1")
        secured.server.stop()
        secured.server.start()
        await client.put(f"{PREFIX}/after".encode(), b"2")
        got = await client.get(f"{PREFIX}/before".encode())
        assert got is not None and got.value == b"1"


def test_a_service_with_the_right_certificate_and_user_starts(secured: SecuredEtcd, tmp_path: Path) -> None:
    factory = ServiceFactory(etcd_endpoints=f"https://{secured.server.endpoint}", base_dir=tmp_path)
    factory.etcd_prefix = PREFIX
    try:
        pull = factory.start("pull", *secured.service_args())
        assert pull.process.running()
        listed = etcdctl(
            secured.server.endpoint,
            secured.files,
            "get",
            "--prefix",
            "--keys-only",
            f"{PREFIX}/services/pull/",
            user="root:root-password-1",
        )
        assert listed.returncode == 0 and f"{PREFIX}/services/pull/" in listed.stdout
    finally:
        factory.close()


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        ("password", "pull did not start: etcd refused user 'svc': etcdserver: authentication failed"),
        ("certificate", "pull did not start: etcd at https://127.0.0.1:"),
    ],
)
def test_a_service_with_a_wrong_password_or_certificate_exits_with_one_line(
    secured: SecuredEtcd, tmp_path: Path, what: str, expected: str
) -> None:
    args = (
        secured.service_args(password="not-it-at-all")
        if what == "password"
        else secured.service_args(files=secured.stranger)
    )
    factory = ServiceFactory(etcd_endpoints=f"https://{secured.server.endpoint}", base_dir=tmp_path)
    factory.etcd_prefix = PREFIX
    try:
        pull = factory.start("pull", *args, "--etcd_startup_timeout_ms", "1500", wait=False)
        with pytest.raises(ProcessExited):
            pull.wait_serving(timeout_s=30)
        log = pull.process.log_path.read_text()
        assert pull.process.returncode == 1
        assert expected in log, log
        assert "Traceback" not in log
        failure = next(line for line in log.splitlines() if "did not start" in line)
        if what == "certificate":
            assert "not reachable within 1.5 s" in failure and "last error:" in failure, failure
    finally:
        factory.close()
