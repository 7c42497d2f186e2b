"""`txmq up --tls`: a throwaway CA and certificate in <data-dir>/tls, every service (the
gateway too) on enforcing mutual TLS, and the paths the SDK needs printed; the SDK works
with them, a plaintext client does not."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import free_port

from txmq import Admin, Message, Producer, TlsConfig, TxmqError


def test_txmq_up_tls(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ports = ["--store-port", "0", "--pull-port", "0", "--txcheck-port", "0", "--gateway-port", "0"]
    etcd = ["--etcd-client-port", str(free_port()), "--etcd-peer-port", str(free_port())]
    out = tmp_path / "up.out"
    with open(out, "wb") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "txmq_cli.main", "up", "--tls", "--data-dir", str(data_dir), *ports, *etcd],
            stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while "(Ctrl-C to stop)" not in out.read_text():
            assert up.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.2)
        text = out.read_text()
        sdk = re.search(r"TlsConfig\(ca_file='([^']+)', cert_file='([^']+)', key_file='([^']+)'\)", text)
        assert sdk, text
        ca, cert, key = (Path(p) for p in sdk.groups())
        assert (ca.parent, cert.name, key.name) == (data_dir.resolve() / "tls", "tls.crt", "tls.key")
        assert key.stat().st_mode & 0o077 == 0  # the key is its owner's alone
        bootstrap = re.search(r"bootstrap address: (\S+)", text)[1]  # type: ignore[index]
        logs = "".join(p.read_text() for p in (data_dir / "logs").glob("*.log") if p.name != "etcd.log")
        assert logs.count("tls enforcing") == 4, logs  # store, txcheck, pull, gateway

        tls = TlsConfig(ca_file=ca, cert_file=cert, key_file=key)
        with Admin(bootstrap, tls=tls) as admin:
            admin.create_topic("UpTls", read_queue_nums=1, write_queue_nums=1)
        with Producer("up-tls", bootstrap, tls=tls) as producer:
            assert producer.send(Message("UpTls", b"hello")).queue_offset == 0
        with Admin(bootstrap, timeout=2) as admin, pytest.raises(TxmqError) as info:
            admin.list_topics()
        assert info.value.unreachable
    finally:
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0, out.read_text()
