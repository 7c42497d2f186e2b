"""The gateway's SimpleConsumer (POP) path under faults, with the official Python client
in separate processes: RocketMQ has lost messages here (a checkpoint lost by
changeInvisibleDuration, a retry lost when a read failed during revive). Each test sends
numbered messages, injects its fault, and checks from the members' own records:

- nothing lost: every message sent is acked in the end;
- an ack that succeeded is final: the message is never delivered again after it;
- one holder at a time: a message is delivered again only once the invisibility its
  last holder was given (by the receive or by a successful change) has run out.

(Killing the gateway that owns the group is in test_ownership.py.)"""

from __future__ import annotations

import collections
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import EtcdServer
from support.scratch import scoped_dir
from support.scripts import Background, ClientEnv, Run, ScriptRunner, client_env, unique_name, wait_for

SCENARIOS = Path(__file__).resolve().parent / "rmq_scenarios"
SLACK_MS = 300  # clocks of two processes on one machine, and the gateway's timer tick

pytestmark = pytest.mark.slow


class Scenarios(ScriptRunner):
    timeout_s = 90.0

    def __init__(self, env: ClientEnv) -> None:
        super().__init__([env.cluster.log_dir / "gateway.log", env.cluster.log_dir / "store.log"])
        self.env = env

    def argv(self, script: str, args: tuple[str, ...], endpoint: str | None) -> list[str]:
        return [sys.executable, str(SCENARIOS / script), "--endpoint", endpoint or self.env.cluster.gateway_address,
                *args]  # fmt: skip

    def child_env(self) -> dict[str, str]:
        import os

        return {**os.environ, "PYTHONUNBUFFERED": "1", "HOME": str(self.env.home)}


@pytest.fixture(scope="module")
def env(
    etcd: EtcdServer, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClientEnv]:
    with client_env(etcd.endpoint, scoped_dir(request, tmp_path_factory, "pop-faults")) as e:
        yield e


@pytest.fixture
def scenarios(env: ClientEnv) -> Iterator[Scenarios]:
    runner = Scenarios(env)
    try:
        yield runner
    finally:
        runner.close()


def send(scenarios: Scenarios, topic: str, count: int) -> set[str]:
    sent = scenarios.run("produce.py", "--topic", topic, "--count", str(count), "--key-prefix", unique_name("k"))
    ids = {r["message_id"] for r in sent.events("sent")}
    assert len(ids) == count and not sent.errors(), scenarios.explain("the producer failed")
    return ids


def now(*members: Background) -> list[Run]:
    for bg in members:
        bg._sync()  # what the process printed so far
    return [bg.run for bg in members]


def acked_ids(*members: Background) -> set[str]:
    return {e["message_id"] for run in now(*members) for e in run.events("acked")}


def check_contract(runs: list[Run], sent: set[str], invisible_ms: int, changed_ms: int, explain: Any) -> dict[str, Any]:
    """The three properties of the module docstring, from client-side times only: the
    gateway delivered a batch between its receive's ``started_ms`` and ``ended_ms``, took a
    change after its ``changing`` line and an ack before its ``acked`` line. Counts for the
    test's line."""
    acked: dict[str, int] = {}
    changes: dict[str, list[int]] = collections.defaultdict(list)
    got: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for run in runs:
        changing = {}
        for e in run.records:
            mid = str(e.get("message_id"))
            if e["event"] == "acked":
                acked[mid] = min(acked.get(mid, e["t_ms"]), e["t_ms"])
            elif e["event"] == "changing":
                changing[mid] = e["t_ms"]
            elif e["event"] == "changed":
                changes[mid].append(changing[mid])
            elif e["event"] == "received":
                for m in e["messages"]:
                    got[m["message_id"]].append((e["started_ms"], e["ended_ms"]))
    assert sent <= set(acked), explain(f"lost (never acked): {sorted(sent - set(acked))[:5]}")
    for mid, found in got.items():
        found.sort()
        if mid in acked:
            late = [d for d in found if d[0] > acked[mid]]  # a receive that began after the ack
            assert not late, explain(f"{mid} delivered again after its ack at {acked[mid]}: {late}")
        for (start0, _), (start1, end1) in itertools.pairwise(found):
            held_until = start0 + invisible_ms  # at the least
            for c in changes.get(mid, ()):
                if start0 <= c < start1:
                    held_until = max(held_until, c + changed_ms)
            assert end1 + SLACK_MS >= held_until, explain(f"{mid} delivered again by {end1}, held until {held_until}")
    return {"messages": len(sent), "redelivered": sum(len(f) - 1 for f in got.values())}


def test_a_store_killed_between_receive_and_ack_loses_nothing(scenarios: Scenarios, env: ClientEnv) -> None:
    topic, group = unique_name("pop-store"), unique_name("GID-pop-store")
    env.admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    member = scenarios.start(
        "pop_member.py", "--topic", topic, "--group", group, "--invisible-seconds", "5", "--hold-seconds", "3",
    )  # fmt: skip
    sent = send(scenarios, topic, 30)
    member.wait_event("received", 30, scenarios.explain)  # a batch is held: kill the store under it
    store = env.cluster.services["store"]
    store.kill()
    store.restart()
    wait_for("every message acked", lambda: acked_ids(member) >= sent, scenarios.explain, timeout_s=60)
    run = scenarios.finish(member, close_stdin=True)
    counts = check_contract([run], sent, invisible_ms=5000, changed_ms=0, explain=scenarios.explain)
    print(f"POP, store kill -9 between receive and ack: {counts}")


def test_changing_the_invisible_time_as_it_runs_out_races_the_redelivery_safely(
    scenarios: Scenarios, env: ClientEnv
) -> None:
    """A member holds each batch for about its invisible time, then extends it: the change
    lands just before or just after the deadline. A second member takes whatever comes
    again. A change that succeeded keeps the message from everyone else; one that came too
    late is refused and the message comes again, to either member."""
    topic, group = unique_name("pop-race"), unique_name("GID-pop-race")
    env.admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    racer = scenarios.start(
        "pop_member.py", "--topic", topic, "--group", group, "--invisible-seconds", "2", "--hold-seconds", "1.95",
        "--change-to-seconds", "10", "--max-messages", "4",
    )  # fmt: skip
    other = scenarios.start("pop_member.py", "--topic", topic, "--group", group, "--invisible-seconds", "10")
    sent = send(scenarios, topic, 40)
    wait_for("every message acked", lambda: acked_ids(racer, other) >= sent, scenarios.explain, timeout_s=75)
    runs = [scenarios.finish(bg, close_stdin=True) for bg in (racer, other)]
    counts = check_contract(runs, sent, invisible_ms=2000, changed_ms=10_000, explain=scenarios.explain)
    refused = sum(1 for e in runs[0].errors() if e.get("op") == "change")
    print(f"POP, change-invisible racing the redelivery: {counts}, changes refused {refused}")
