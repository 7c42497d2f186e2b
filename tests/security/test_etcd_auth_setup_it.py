"""`txmq etcd-auth-setup` (what the chart's set-up Job runs) against a real etcd with
client-certificate TLS and no auth yet, with a service already started as its etcd
user: the service waits for etcd's auth instead of giving up (in Kubernetes the Job runs
beside the services), and is ready once the set-up has turned auth on. Running the
set-up again changes nothing and succeeds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support import ServiceFactory
from support.certs import tls_files
from support.etcdctl import etcdctl
from support.processes import new_etcd

from txmq_cli.cluster import etcd_tls_client_args


def test_a_service_waits_for_the_set_up_then_starts(tmp_path: Path) -> None:
    files = tls_files(tmp_path / "tls")
    etcd = new_etcd(tmp_path, tls=files)
    etcd.start()
    factory = ServiceFactory(etcd_endpoints=etcd.endpoint, base_dir=tmp_path)
    passwords = tmp_path / "passwords"
    passwords.mkdir()
    for name in ("root", "store", "pull", "txcheck", "gateway"):
        (passwords / name).write_text(f"{name}-password-0123")
    try:
        pull = factory.start(
            "pull",
            *etcd_tls_client_args(files),
            "--etcd_username",
            "txmq-pull",
            "--etcd_password",
            "pull-password-0123",
            wait=False,
        )
        setup = [
            str(Path(sys.executable).parent / "txmq"),
            "etcd-auth-setup",
            "--etcd-endpoint",
            etcd.endpoint,
            "--etcd-prefix",
            factory.etcd_prefix,
            "--ca-file",
            str(files.ca),
            "--cert-file",
            str(files.cert),
            "--key-file",
            str(files.key),
            "--passwords-dir",
            str(passwords),
        ]
        pull.process.wait_log_line(re.compile("etcd's auth is not on"), timeout_s=30)
        for _ in range(2):  # the second run finds everything in place
            done = subprocess.run(setup, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert "auth on, users root and txmq-store" in done.stdout
        pull.wait_serving(timeout_s=60)
        assert etcdctl(etcd.endpoint, files, "get", "--prefix", "/").returncode != 0
        mine = etcdctl(
            etcd.endpoint,
            files,
            "get",
            "--prefix",
            "--keys-only",
            f"{factory.etcd_prefix}/services/",
            user="txmq-pull:pull-password-0123",
        )
        assert f"{factory.etcd_prefix}/services/pull/" in mine.stdout, mine.stderr
    finally:
        factory.close()
        etcd.stop()
