"""Rotating ``auth_secret_key`` (txmq_runtime.key_rotation, ``txmq auth rotate-key``):
the re-seal itself against the session's real etcd, and the whole roll on three real
services (store, pull, txcheck) restarted one at a time, phase after phase, while a
signed client keeps sending: no call is ever refused for its credentials, nothing
acknowledged is lost, and afterwards the old key opens nothing and signs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support import ServiceFactory, ServiceProcess
from support.processes import private_prefix
from support.waiting import wait_until

from txmq import Admin, Message, Policy, Producer, PullConsumer, TxmqError, signing
from txmq.v1 import auth_pb2, errors_pb2
from txmq_runtime import secrets
from txmq_runtime.auth import AuthKeys, Sealer
from txmq_runtime.auth_service import ensure_service_user, stored_user
from txmq_runtime.etcd import etcd_client
from txmq_runtime.key_rotation import RotationFailed, reseal

OLD = "rotation-old-secret-0123"
NEW = "rotation-new-secret-4567"
SERVICE = "txmq-service"
ALICE = signing.Credentials("alice", "alice-secret-1")
AUTH_REFUSALS = {
    errors_pb2.CODE_UNAUTHENTICATED,
    errors_pb2.CODE_INVALID_CREDENTIALS,
    errors_pb2.CODE_ACCESS_DENIED,
    errors_pb2.CODE_REQUEST_EXPIRED,
}


@pytest.fixture
async def etcd_conn(etcd: Any) -> AsyncIterator[Any]:
    async with etcd_client(etcd.endpoint) as client:
        yield client


async def test_reseal_moves_every_sealed_value_to_the_new_key_once(etcd_conn: Any) -> None:
    prefix = private_prefix()
    keys, old_sealer = AuthKeys(prefix), Sealer(OLD)
    await ensure_service_user(etcd_conn, keys, old_sealer, SERVICE, OLD)
    alice = auth_pb2.User(username="alice")
    await etcd_conn.put(keys.user("alice").encode(), stored_user(old_sealer, alice, "alice-secret-1"))
    stranger = auth_pb2.User(username="stranger")  # sealed by another cluster's key
    await etcd_conn.put(
        keys.user("stranger").encode(), stored_user(Sealer("a-third-secret-key-xyz"), stranger, "s" * 9)
    )
    handle_key = secrets.secret_key(prefix, "transaction-handle-key")
    handle = await secrets.get_or_create(etcd_conn, handle_key, box=secrets.SecretBox(OLD))

    done = await reseal(etcd_conn, prefix=prefix, old_secret=OLD, new_secret=NEW, service_access_key=SERVICE)
    assert (done.users, done.secrets, done.already) == (2, 1, 0)
    assert done.unopenable == [keys.user("stranger")]

    async def user(name: str) -> auth_pb2.StoredUser:
        from google.protobuf import json_format

        raw = (await etcd_conn.get(keys.user(name).encode())).value
        return json_format.Parse(raw, auth_pb2.StoredUser())

    assert Sealer(NEW).open("alice", (await user("alice")).sealed_secret) == "alice-secret-1"
    assert Sealer(OLD).open("alice", (await user("alice")).sealed_secret) is None
    # The services' identity: its secret is the key itself, so it is now the new one.
    assert Sealer(NEW).open(SERVICE, (await user(SERVICE)).sealed_secret) == NEW
    assert (await user(SERVICE)).user.super_user
    raw_handle = (await etcd_conn.get(handle_key.encode())).value
    assert secrets.SecretBox(NEW).open(handle_key, raw_handle) == handle  # same bytes: handles stay valid
    assert secrets.SecretBox(OLD).open(handle_key, raw_handle) is None

    again = await reseal(etcd_conn, prefix=prefix, old_secret=OLD, new_secret=NEW, service_access_key=SERVICE)
    assert (again.users, again.secrets, again.already) == (0, 0, 3)
    with pytest.raises(RotationFailed, match="is the old one"):
        await reseal(etcd_conn, prefix=prefix, old_secret=OLD, new_secret=OLD, service_access_key=SERVICE)


def test_a_process_accepting_both_keys_opens_both_and_seals_with_its_own() -> None:
    during = Sealer(OLD, (NEW,))
    assert during.open("u", Sealer(OLD).seal("u", "x-secret")) == "x-secret"
    assert during.open("u", Sealer(NEW).seal("u", "y-secret")) == "y-secret"
    assert Sealer(NEW).open("u", during.seal("u", "z-secret")) is None  # sealed with OLD, its own
    box = secrets.SecretBox(NEW, (OLD,))
    assert box.open("k", secrets.SecretBox(OLD).seal("k", b"k" * 16)) == b"k" * 16


# -- the roll on running services ---------------------------------------------------------


def auth_flags(secret: str, accepted: str | None) -> list[str]:
    flags = ["--auth_enabled=true", "--auth_access_key", SERVICE, "--auth_secret_key", secret]
    return flags + (["--auth_accepted_secret_key", accepted] if accepted else [])


def restart_with(service: ServiceProcess, secret: str, accepted: str | None) -> None:
    argv = service.process.argv
    del argv[argv.index("--auth_enabled=true") :]  # the auth flags come last
    argv.extend(auth_flags(secret, accepted))
    service.stop()
    service.restart()


class Sender(threading.Thread):
    """Sends as alice without pause; keeps what was acknowledged and every refusal."""

    def __init__(self, address: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.address, self.topic = address, topic
        self.acked: list[str] = []
        self.refusals: list[TxmqError] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with Producer("rotation-group", self.address, credentials=ALICE, retry_times=4) as producer:
            n = 0
            while not self.stopping.is_set():
                body = f"m-{n}".encode()
                try:
                    producer.send(Message(self.topic, body))
                    self.acked.append(body.decode())
                    n += 1
                    self.stopping.wait(0.01)  # a steady trickle: hundreds per phase, not thousands
                except TxmqError as exc:  # a store restarting: unavailable, tried again
                    self.refusals.append(exc)
                    self.stopping.wait(0.05)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_key_roll_keeps_serving_a_signed_client(service_factory: ServiceFactory) -> None:
    store = service_factory.store(*auth_flags(OLD, None))
    pull = service_factory.start("pull", *auth_flags(OLD, None))
    txcheck = service_factory.start("txcheck", *auth_flags(OLD, None))
    services = (store, pull, txcheck)
    topic = "RotationT"
    with Admin(store.address, credentials=signing.Credentials(SERVICE, OLD)) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        admin.create_user(ALICE.access_key, ALICE.secret_key)
        admin.put_acl(ALICE.access_key, [Policy(f"Topic:{topic}", ["All"]), Policy("Group:*", ["All"])])
    sender = Sender(store.address, topic)
    sender.start()

    def progress() -> None:
        before = len(sender.acked)
        wait_until(lambda: len(sender.acked) >= before + 20, what="20 more sends acknowledged")

    try:
        progress()
        for service in services:  # 1: every service accepts the new key too
            restart_with(service, OLD, NEW)
            progress()
        rotated = subprocess.run(
            [str(Path(sys.executable).parent / "txmq"), "auth", "rotate-key",
             "--etcd-endpoints", service_factory.etcd_endpoints,
             "--etcd-prefix", service_factory.etcd_prefix, "--service-access-key", SERVICE],
            env={**os.environ, "TXMQ_OLD_AUTH_SECRET_KEY": OLD, "TXMQ_NEW_AUTH_SECRET_KEY": NEW},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert rotated.returncode == 0, rotated.stderr
        assert "re-sealed 2 users and 0 cluster secrets" in rotated.stdout
        progress()
        for service in services:  # 2: every service signs with the new key, still takes the old
            restart_with(service, NEW, OLD)
            progress()
        for service in services:  # 3: the new key alone
            restart_with(service, NEW, None)
            progress()
    finally:
        sender.stopping.set()
        sender.join(timeout=30)
    assert not [e for e in sender.refusals if e.code in AUTH_REFUSALS], sender.refusals[:3]

    # Nothing acknowledged is lost.
    seen: set[str] = set()
    with PullConsumer("rotation-check", store.address, credentials=ALICE) as consumer:
        for mq in consumer.fetch_message_queues(topic):
            offset = 0
            while True:
                got = consumer.pull(mq, "*", offset, 32, suspend=False)
                if not got.messages:
                    break
                seen.update(m.body.decode() for m in got.messages)
                offset = got.next_begin_offset
    assert set(sender.acked) <= seen

    # The old key signs nothing any more, and a service holding only it does not start.
    with Admin(store.address, credentials=signing.Credentials(SERVICE, OLD)) as admin:
        with pytest.raises(TxmqError) as refused:
            admin.list_topics()
        assert refused.value.code == errors_pb2.CODE_INVALID_CREDENTIALS
    stale = service_factory.start("pull", *auth_flags(OLD, None), wait=False)
    wait_until(lambda: not stale.process.running(), what="a service with only the old key to give up")
    assert "is not this service's identity" in stale.process.log_tail()
