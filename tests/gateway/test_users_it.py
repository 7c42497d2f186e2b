"""txmq's users and permissions through the gateway, with the OFFICIAL RocketMQ 5 Python
client (each client a process of its own, tests/gateway/rmq_scenarios/), on a cluster
whose every service runs with auth_enabled (docs/gateway.md "Users and permissions"):

- a user allowed Pub and Sub on a topic and Sub on a group sends, receives and acks, and
  commits a transaction, with the client's ordinary credentials;
- a user with Sub but no Pub on the topic finds the route, but its send is refused with
  the v2 FORBIDDEN (40300) and nothing is stored; a user with no rights gets FORBIDDEN for
  the route and OK for its producer heartbeat (authentication only);
- no credentials, an unknown user, a wrong secret or a disabled user: UNAUTHORIZED (40100).

The official Python client writes ``x-mq-date-time`` in local time with a literal Z, so
its processes run with TZ=UTC (docs/gateway.md "Clients must sign UTC").
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import EtcdServer
from support.processes import new_local_cluster, private_prefix
from support.scratch import scoped_dir
from support.scripts import (
    GATEWAY_FAST,
    STORE_FAST,
    TXCHECK_FAST,
    Run,
    ScriptRunner,
    by_key,
    script_args,
    stored_count,
    unique_name,
    wait_for,
)

from txmq import Admin, Policy, signing

SCENARIOS = Path(__file__).resolve().parent / "rmq_scenarios"
CODE_OK, CODE_UNAUTHORIZED, CODE_FORBIDDEN = 20000, 40100, 40300  # apache.rocketmq.v2.Code
SERVICE_KEY, SERVICE_SECRET = "txmq-service", "service-secret-0123456789"
AUTH_FLAGS = ("--auth_enabled=true", "--auth_access_key", SERVICE_KEY, "--auth_secret_key", SERVICE_SECRET)
ROOT = signing.Credentials(SERVICE_KEY, SERVICE_SECRET)
USERS = {
    "alice": "alice-secret-1",  # Pub + Sub on the topic, Sub on the group
    "reader": "reader-secret-1",  # Sub on the topic and the group: no Pub
    "nobody": "nobody-secret-1",  # no ACL
}
TOPIC = unique_name("users")
GROUP = unique_name("GID-users")


class Env:
    def __init__(self, cluster: Any, home: Path) -> None:
        self.cluster = cluster
        self.home = home
        self.admin: Any = None  # txmq.Admin as the services' super user (by_key, stored_count)


class Scenarios(ScriptRunner):
    timeout_s = 60.0

    def __init__(self, env: Env) -> None:
        super().__init__([env.cluster.log_dir / "gateway.log"])
        self.env = env

    def argv(self, script: str, args: tuple[str, ...], endpoint: str | None) -> list[str]:
        endpoint = endpoint or self.env.cluster.gateway_address
        return [sys.executable, str(SCENARIOS / script), "--endpoint", endpoint, *args]

    def child_env(self) -> dict[str, str]:
        # TZ=UTC: the official client signs its local time as if it were UTC.
        return {**os.environ, "PYTHONUNBUFFERED": "1", "HOME": str(self.env.home), "TZ": "UTC"}


def creds(user: str, secret: str | None = None) -> tuple[str, ...]:
    return ("--access-key", user, "--secret-key", secret if secret is not None else USERS[user])


@pytest.fixture(scope="module")
def env(etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    base = scoped_dir(request, tmp_path_factory, "users-cluster")
    cluster = new_local_cluster(
        base,
        etcd_endpoints=etcd.endpoint,
        etcd_prefix=private_prefix(),
        service_args=list(AUTH_FLAGS),
        txcheck_args=list(TXCHECK_FAST),
        store_args=list(STORE_FAST),
        gateway_args=list(GATEWAY_FAST),
    )
    cluster.start()
    home = base / "client-home"
    home.mkdir()
    try:
        with Admin(cluster.bootstrap, credentials=ROOT) as admin:
            admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
            for user, secret in USERS.items():
                admin.create_user(user, secret)
            admin.put_acl("alice", [Policy(f"Topic:{TOPIC}", ("Pub", "Sub")), Policy(f"Group:{GROUP}", ("Sub",))])
            admin.put_acl("reader", [Policy(f"Topic:{TOPIC}", ("Sub",)), Policy(f"Group:{GROUP}", ("Sub",))])
            e = Env(cluster, home)
            e.admin = admin
            yield e
    finally:
        cluster.stop()


@pytest.fixture
def scenarios(env: Env) -> Iterator[Scenarios]:
    runner = Scenarios(env)
    try:
        yield runner
    finally:
        runner.close()


def answers(run: Run) -> dict[str, dict[str, Any]]:
    return {r["op"]: r for r in run.events("answer")}


def gateway_log(env: Env) -> str:
    return (env.cluster.log_dir / "gateway.log").read_text(errors="replace")


def test_an_allowed_user_sends_receives_and_commits(scenarios: Scenarios, env: Env) -> None:
    consumer = scenarios.start(
        "consume.py",
        *script_args(TOPIC, GROUP, until_acked=2, await_seconds=5, invisible_seconds=20, deadline_seconds=45),
        *creds("alice"),
    )
    consumer.wait_event("receiving", 30, scenarios.explain)
    keys = unique_name("ok")
    sent = scenarios.run("produce.py", "--topic", TOPIC, "--key-prefix", keys, *creds("alice"))
    assert not sent.errors() and len(sent.events("sent")) == 1, scenarios.explain("alice's send failed")
    tx_keys = unique_name("tx")
    tx = scenarios.run(
        "transactional.py", "--topic", TOPIC, "--actions", "commit", "--key-prefix", tx_keys, *creds("alice")
    )
    assert not tx.errors() and len(tx.events("committed")) == 1, scenarios.explain("alice's commit failed")
    done = scenarios.finish(consumer)
    assert not done.errors(), scenarios.explain("alice's consumer reported errors")
    ids = {sent.events("sent")[0]["message_id"], tx.events("sent")[0]["message_id"]}
    assert {r["message_id"] for r in done.events("acked")} == ids, scenarios.explain("alice did not get both")
    assert len(by_key(env, TOPIC, f"{tx_keys}-0")) == 1, scenarios.explain("the committed message is not stored")


def test_a_users_orphaned_transaction_is_checked_and_committed(scenarios: Scenarios, env: Env) -> None:
    """Checks reach an official client with auth on: the gateway's producer channel to
    txcheck is a stream, signed as the services' identity (asyncio channels once signed
    unary calls only, and txcheck refused the channel)."""
    keys = unique_name("orphan")
    p1 = scenarios.run(
        "transactional.py", "--topic", TOPIC, "--actions", "none", "--key-prefix", keys, "--exit", "crash",
        *creds("alice"),
    )  # fmt: skip
    assert not p1.errors() and p1.events("left_open"), scenarios.explain("process 1 did not leave it open")
    (half,) = p1.events("sent")
    checker = scenarios.start(
        "checker.py", "--topic", TOPIC, "--answer", "commit", "--max-seconds", "50", *creds("alice")
    )
    checker.wait_event("started", 30, scenarios.explain)
    found = wait_for("the checked message on the topic", lambda: by_key(env, TOPIC, f"{keys}-0"), scenarios.explain, 40)
    done = scenarios.finish(checker, close_stdin=True)
    assert [m.unique_id for m in found] == [half["message_id"]], scenarios.explain(f"on the topic: {found}")
    assert [c["message_id"] for c in done.events("check")][:1] == [half["message_id"]], scenarios.explain("no check")
    assert "UNAUTHENTICATED" not in gateway_log(env)


def test_a_user_without_pub_is_refused_forbidden_and_nothing_is_stored(scenarios: Scenarios, env: Env) -> None:
    before = stored_count(env, TOPIC)
    # Sub is enough to find the route; a user with no rights gets FORBIDDEN for it, and its
    # producer heartbeat needs a user only.
    route = answers(scenarios.run("raw_route.py", "--topic", TOPIC, *creds("reader")))
    assert route["QueryRoute"].get("code") == CODE_OK, scenarios.explain(f"reader's route: {route}")
    route = answers(scenarios.run("raw_route.py", "--topic", TOPIC, *creds("nobody")))
    assert route["QueryRoute"].get("code") == CODE_FORBIDDEN, scenarios.explain(f"nobody's route: {route}")
    assert "user nobody may not Pub or Sub on Topic:" in route["QueryRoute"]["status_message"]
    assert route["Heartbeat"].get("code") == CODE_OK, scenarios.explain(f"nobody's heartbeat: {route}")

    keys = unique_name("refused")
    refused = scenarios.run("produce.py", "--topic", TOPIC, "--key-prefix", keys, *creds("reader"))
    assert not refused.events("sent"), scenarios.explain("a send without Pub succeeded")
    errors = refused.errors()
    assert errors and errors[-1]["code"] == CODE_FORBIDDEN, scenarios.explain(f"error of a send without Pub: {errors}")
    assert f"may not Pub on Topic:{TOPIC}" in errors[-1]["message"] + " ".join(errors[-1]["client_log"]), (
        scenarios.explain("the refusal does not say what was refused")
    )
    tx = scenarios.run("transactional.py", "--topic", TOPIC, "--actions", "commit", *creds("reader"))
    assert not tx.events("sent") and tx.errors(), scenarios.explain("a transactional send without Pub succeeded")
    assert by_key(env, TOPIC, f"{keys}-0") == [], scenarios.explain("stored despite FORBIDDEN")
    assert stored_count(env, TOPIC) == before, scenarios.explain("the topic grew")
    log = gateway_log(env)
    assert "denied /apache.rocketmq.v2.MessagingService/SendMessage user=reader" in log
    assert "Traceback" not in log


def test_no_or_unknown_credentials_are_unauthorized(scenarios: Scenarios, env: Env) -> None:
    before = stored_count(env, TOPIC)
    for label, who in (
        ("no credentials", ()),
        ("an unknown user", creds("ghost", "ghost-secret-1")),
        ("a wrong secret", creds("alice", "not-her-secret")),
        ("the services' key with a wrong secret", creds(SERVICE_KEY, "guess-guess-guess")),
    ):
        refused = answers(scenarios.run("raw_route.py", "--topic", TOPIC, *who))
        for op, answer in refused.items():
            assert answer.get("code") == CODE_UNAUTHORIZED, scenarios.explain(f"{label}, {op}: {answer}")
    keys = unique_name("anon")
    anonymous = scenarios.run("produce.py", "--topic", TOPIC, "--key-prefix", keys)
    assert not anonymous.events("sent"), scenarios.explain("an unsigned send succeeded")
    errors = anonymous.errors()
    assert errors and errors[-1]["code"] == CODE_UNAUTHORIZED, scenarios.explain(f"unsigned send: {errors}")
    assert stored_count(env, TOPIC) == before, scenarios.explain("stored without credentials")

    # A disabled user is refused at once (the gateway's copy of the book follows etcd).
    env.admin.update_user("nobody", disabled=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            beat = answers(scenarios.run("raw_route.py", "--topic", TOPIC, *creds("nobody")))["Heartbeat"]
            if beat.get("code") == CODE_UNAUTHORIZED:
                break
            assert time.monotonic() < deadline, scenarios.explain(f"a disabled user was still let in: {beat}")
            time.sleep(0.2)
    finally:
        env.admin.update_user("nobody", disabled=False)
    assert "Traceback" not in gateway_log(env)


def test_the_gateway_says_how_it_authenticates(env: Env) -> None:
    wait_for(
        "the gateway's start-up line",
        lambda: "authentication as txmq's users with their permissions (auth_enabled)" in gateway_log(env),
        lambda what: what + "\n" + gateway_log(env)[-3000:],
    )
