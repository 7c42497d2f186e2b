"""etcdctl (beside the etcd binary) against a TLS etcd, for tests that look at etcd the
way an operator, or an attacker on its port, would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from txmq_cli.certs import TlsFiles
from txmq_cli.cluster import etcd_binary


def etcdctl(
    endpoint: str, files: TlsFiles | None, *args: str, user: str = "", client_cert: bool = True
) -> subprocess.CompletedProcess[str]:
    """``etcdctl <args>`` at ``https://endpoint`` (CA from ``files``; their certificate as
    client certificate unless not ``client_cert``), as ``user`` (``name:password``; the
    environment, not the command line) when given."""
    env = {**os.environ, "ETCDCTL_API": "3", "ETCDCTL_DIAL_TIMEOUT": "1s", "ETCDCTL_COMMAND_TIMEOUT": "5s"}
    if user:
        env["ETCDCTL_USER"] = user
    tls = [] if files is None else [f"--cacert={files.ca}"]
    if files is not None and client_cert:
        tls += [f"--cert={files.cert}", f"--key={files.key}"]
    return subprocess.run(
        [str(Path(etcd_binary()).parent / "etcdctl"), f"--endpoints=https://{endpoint}", *tls, *args],
        env=env,
        capture_output=True,
        encoding="utf-8",
        errors="replace",  # values may be binary
        timeout=30,
    )
