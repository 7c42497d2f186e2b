"""The supervisor behind `txmq up` (txmq_cli.supervise) on fake children and a manual
clock: a child that dies after it was ready is reported and restarted after a back-off
(1 s doubling to 30 s, reset once it stayed up), reported again once ready; a crash loop
or a restart that never gets ready ends the supervision with one line. No sleeps."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from support.clock import ManualClock

from txmq_cli.cluster import READY_LINE, ClusterMember, ServiceProcess
from txmq_cli.supervise import CannotStart, Died, Restarted, RestartPolicy, Supervisor, describe_exit
from txmq_runtime.backoff import BackoffPolicy


class FakeChild:
    """A process as the supervisor sees it; the test decides when it dies and logs ready."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.log_path = Path(f"/logs/{name}.log")
        self.pid: int | None = 100
        self.returncode: int | None = None
        self.logged_ready = True  # started by LocalCluster.start: running and ready
        self.spawns = 0
        self.kills = 0
        self.last_line = f"{name} did not start: something"

    def ready(self) -> bool:
        return self.logged_ready

    def respawn(self) -> None:
        assert self.returncode is not None, "respawned while running"
        self.spawns += 1
        self.pid = 100 + self.spawns
        self.returncode, self.logged_ready = None, False

    def kill(self) -> None:
        self.kills += 1
        self.returncode = -signal.SIGKILL

    def last_log_line(self) -> str:
        return self.last_line

    # what the process does
    def die(self, code: int = -signal.SIGKILL) -> None:
        self.returncode = code

    def get_ready(self) -> None:
        self.logged_ready = True


def cluster(*names: str, **policy: object) -> tuple[ManualClock, dict[str, FakeChild], Supervisor]:
    clock = ManualClock()
    children = {n: FakeChild(n) for n in names}
    return clock, children, Supervisor(children.values(), policy=RestartPolicy(**policy), clock=clock)  # type: ignore[arg-type]


def restart_after(clock: ManualClock, sup: Supervisor, child: FakeChild, ms: int) -> None:
    """The child is started again exactly ``ms`` after now, not a millisecond earlier."""
    spawns = child.spawns
    clock.advance(ms - 1)
    assert sup.tick() == [] and child.spawns == spawns
    clock.advance(1)
    assert sup.tick() == [] and child.spawns == spawns + 1


def test_a_child_that_dies_after_it_was_ready_is_reported_and_restarted_after_1_s() -> None:
    clock, kids, sup = cluster("etcd", "store", "store-r1", "pull")
    assert sup.tick() == []
    kids["store-r1"].die(-signal.SIGKILL)
    [died] = sup.tick()
    assert died == Died("store-r1", 100, "was killed by SIGKILL", Path("/logs/store-r1.log"), 1000, 0)
    assert str(died) == "store-r1 (pid 100) was killed by SIGKILL; restarting it in 1 s; log /logs/store-r1.log"

    restart_after(clock, sup, kids["store-r1"], 1000)
    assert sup.tick() == []  # running, not ready yet: nothing to say
    kids["store-r1"].get_ready()
    [back] = sup.tick()
    assert back == Restarted("store-r1", 101, 1)
    assert str(back) == "store-r1 restarted (pid 101) and is ready again"
    assert sup.tick() == []
    assert [k.spawns for k in kids.values()] == [0, 0, 1, 0]  # the rest kept running


def test_any_child_is_restarted_with_its_own_back_off_and_exit_code() -> None:
    clock, kids, sup = cluster("etcd", "pull")
    kids["etcd"].die(2)
    kids["pull"].die(-signal.SIGTERM)
    events = sup.tick()
    assert [(e.name, e.reason) for e in events] == [  # type: ignore[union-attr]
        ("etcd", "exited with code 2"),
        ("pull", "was killed by SIGTERM"),
    ]
    clock.advance(1000)
    sup.tick()
    assert kids["etcd"].spawns == kids["pull"].spawns == 1


def test_back_off_doubles_to_30_s_and_starts_again_once_the_child_stayed_up() -> None:
    clock, kids, sup = cluster("pull")
    pull = kids["pull"]
    waits = []
    for _ in range(7):  # dies 1 s after each restart: not stable
        pull.die(1)
        [died] = sup.tick()
        assert isinstance(died, Died) and died.failed_starts == 0
        waits.append(died.restart_in_ms)
        restart_after(clock, sup, pull, int(died.restart_in_ms))
        pull.get_ready()
        assert isinstance(sup.tick()[0], Restarted)
        clock.advance(1000)
        assert sup.tick() == []
    assert waits == [1000, 2000, 4000, 8000, 16000, 30000, 30000]

    clock.advance(60_000 - 1000)  # ready for stable_after_ms
    assert sup.tick() == []
    pull.die(1)
    [died] = sup.tick()
    assert died.restart_in_ms == 1000  # type: ignore[union-attr]


def test_a_crash_loop_before_the_ready_line_ends_the_supervision_with_one_line() -> None:
    clock, kids, sup = cluster("store", "store-r2", crash_loop_limit=3)
    r2 = kids["store-r2"]
    r2.die(-signal.SIGKILL)
    [died] = sup.tick()  # after it was ready: not a failed start
    for n, wait, count in ((1, 2000, "1 failed start"), (2, 4000, "2 failed starts")):
        restart_after(clock, sup, r2, int(died.restart_in_ms))  # type: ignore[union-attr]
        r2.die(1)
        [died] = sup.tick()
        assert died == Died("store-r2", 100 + n, "exited with code 1 before it was ready", r2.log_path, wait, n)
        assert f"exited with code 1 before it was ready ({count} in a row); restarting it in" in str(died)
    restart_after(clock, sup, r2, 4000)
    r2.die(1)
    with pytest.raises(CannotStart) as info:
        sup.tick()
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "store-r2 cannot start (3 failed starts in a row; the last exited with code 1 before it was ready); "
        "log /logs/store-r2.log; its last line: store-r2 did not start: something"
    )
    assert r2.spawns == 3 and kids["store"].spawns == 0


def test_getting_ready_clears_the_count_of_failed_starts() -> None:
    clock, kids, sup = cluster("gateway", crash_loop_limit=3)
    gw = kids["gateway"]
    for _round in range(3):
        gw.die(-signal.SIGKILL)
        sup.tick()
        for _ in range(2):  # two failed starts: one short of the limit
            clock.advance(30_000)
            sup.tick()
            gw.die(1)
            [died] = sup.tick()
            assert died.failed_starts in (1, 2)  # type: ignore[union-attr]
        clock.advance(30_000)
        sup.tick()
        gw.get_ready()
        assert isinstance(sup.tick()[0], Restarted)


def test_a_ready_line_logged_just_before_the_exit_counts_as_ready() -> None:
    clock, kids, sup = cluster("txcheck", crash_loop_limit=1)
    tx = kids["txcheck"]
    tx.die(1)
    sup.tick()
    clock.advance(1000)
    sup.tick()
    tx.get_ready()
    tx.die(1)  # both seen in one tick: ready first, then its death on the next tick
    assert [type(e) for e in sup.tick()] == [Restarted]
    [died] = sup.tick()
    assert isinstance(died, Died) and died.failed_starts == 0  # no crash loop with limit 1


def test_a_restart_not_ready_in_time_is_killed_and_counts_as_a_failed_start() -> None:
    clock, kids, sup = cluster("pull", ready_timeout_ms=5000, crash_loop_limit=2)
    pull = kids["pull"]
    pull.die(-signal.SIGKILL)
    sup.tick()
    clock.advance(1000)
    sup.tick()
    clock.advance(4999)
    assert sup.tick() == [] and pull.kills == 0
    clock.advance(1)
    [died] = sup.tick()
    assert pull.kills == 1
    assert died == Died("pull", 101, "was not ready within 5 s (killed)", pull.log_path, 2000, 1)
    clock.advance(2000)
    sup.tick()
    clock.advance(5000)
    with pytest.raises(CannotStart, match=r"pull cannot start \(2 failed starts in a row; the last was not ready"):
        sup.tick()


def test_exit_descriptions() -> None:
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(-200) == "was killed by signal 200"


def test_the_default_policy_is_1_s_doubling_to_30_s() -> None:
    policy = RestartPolicy()
    assert policy.backoff == BackoffPolicy(first_ms=1000, max_ms=30_000)
    assert [policy.backoff.delay_ms(n) for n in range(1, 8)] == [1000, 2000, 4000, 8000, 16000, 30000, 30000]
    with pytest.raises(ValueError):
        RestartPolicy(crash_loop_limit=0)


def test_a_service_member_reads_its_ready_line_without_waiting_and_comes_back_on_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real member, on a log written by hand (nothing is started): not ready until
    this run's whole ready line is there, found again on the next look, and a respawn
    asks for the port the last run bound."""
    log = tmp_path / "store-r1.log"
    replica = ServiceProcess("store", port=0, etcd_endpoints="127.0.0.1:1", log_path=log, name="store-r1")
    member = ClusterMember("store-r1", replica)
    assert member.name == replica.process.name == "store-r1"
    log.write_text("store s-0 ready on 127.0.0.1:5000 (bound port 5000, etcd lease 1)\n")  # an earlier run
    replica.process.log_offset = log.stat().st_size
    assert not member.ready()
    with open(log, "a") as f:
        f.write("starting\nstore s-0 ready on 127.0.0.1:40123 (bound port 40")
    assert not member.ready()  # half a line
    with open(log, "a") as f:
        f.write("123, etcd lease 2)\nmore\n")
    assert member.ready() and member.ready()
    assert replica.bound_port == 40123 and replica.address == "127.0.0.1:40123"
    assert replica.process.logged(READY_LINE) is not None
    assert member.last_log_line() == "more"

    spawned: list[list[str]] = []
    monkeypatch.setattr(replica.process, "spawn", lambda: spawned.append(list(replica.process.argv)))
    member.respawn()
    [argv] = spawned
    assert argv[argv.index("--port") + 1] == "40123"
