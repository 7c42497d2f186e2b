"""Faults in the spirit of Jepsen, on real processes (docs/replication.md): a workload
sends unique bodies to whoever leads while a fault is injected, round after round; the
checker then reads every replica and requires each acknowledged body exactly once, at
the queue offset its acknowledgement named, with contiguous queue offsets. Each test
prints its line of the report (rounds, acknowledged, lost, duplicated, time to a new
leader, time to all in sync again); TXMQ_FAULT_ROUNDS sets the rounds (10 by default)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
from support import ServiceFactory
from support.waiting import wait_until

from .etcd_cluster import EtcdCluster
from .group import StoreGroupProcesses, Workload, check, committed_offset, damage_log, read_all

ROUNDS = int(os.environ.get("TXMQ_FAULT_ROUNDS", "10"))
LEASE_S = 2.0  # --replica_lease_ms of StoreGroupProcesses

pytestmark = pytest.mark.timeout(900)


class Run:
    """One fault test: the group, the workload, and the times measured per round."""

    def __init__(self, group: StoreGroupProcesses, name: str) -> None:
        self.group = group
        self.name = name
        self.failovers: list[float] = []
        self.resyncs: list[float] = []
        self.leader = group.leader()
        wait_until(lambda: len(group.in_sync(self.leader)) == len(group.replicas), what="every replica in sync")
        self.work = Workload(group)
        self.work.start()

    def some_sends(self, n: int = 50) -> None:
        before = self.work.acked_count()
        wait_until(lambda: self.work.acked_count() >= before + n, what=f"{n} more sends acknowledged")

    def new_leader(self, old: str) -> str:
        began = time.monotonic()
        floor = self.work.committed  # acknowledged before the new leader took over
        group = self.group
        self.leader = wait_until(
            lambda: next(
                (r for r in group.replicas if r != old and (st := group.status(r)) is not None
                 and st.role == "leader" and group.admin_ok(r)), None,
            ),
            what="a new writable leader",
        )  # fmt: skip
        self.failovers.append(time.monotonic() - began)
        # Consume offsets never go back: the new leader has every acknowledged commit.
        assert committed_offset(group, self.leader) >= floor, (self.leader, floor)
        return self.leader

    def all_in_sync(self) -> None:
        began = time.monotonic()
        group = self.group
        target = group.status(self.leader).high_watermark

        def caught_up() -> bool:
            if len(group.in_sync(self.leader)) != len(group.replicas):
                return False
            statuses = [group.status(r) for r in group.replicas]
            return all(st is not None and st.high_watermark >= target for st in statuses)

        wait_until(caught_up, what="every replica in sync and holding the leader's high watermark again")
        self.resyncs.append(time.monotonic() - began)

    def rounds(self, fault: Callable[[], None]) -> None:
        for _ in range(ROUNDS):
            self.some_sends()
            fault()
        self.finish()

    def finish(self) -> None:
        group, work = self.group, self.work
        work.finish()
        assert not work.unexpected, work.unexpected[:5]
        leader = group.leader()
        end = group.status(leader).log_end
        for rid in group.replicas:
            wait_until(
                lambda rid=rid: (st := group.status(rid)) is not None and st.high_watermark >= end,
                what=f"{rid} holding everything",
            )
        verdicts = {rid: check(work.acked, read_all(group, rid), work.rolled_back) for rid in group.replicas}
        # The consume offset never went back: every replica has at least the last
        # acknowledged commit (followers take the leader's table as it changes).
        assert work.committed > 0
        for rid in group.replicas:
            wait_until(
                lambda rid=rid: committed_offset(group, rid) >= work.committed,
                what=f"{rid}: consume offset at least the last acknowledged commit {work.committed}",
            )
        v = verdicts[leader]
        line = (
            f"fault {self.name}: rounds {ROUNDS}, acknowledged {v['acked']} (refused or unknown {work.failures}), "
            f"lost {v['lost']}, duplicated {v['duplicated']}, moved {v['moved']}; transactions {work.transactions}, "
            f"rolled-back bodies {len(work.rolled_back)}, of them visible {v.get('rolled_back_visible', 0)}"
        )
        if self.failovers:
            line += f", new leader in {min(self.failovers):.2f}-{max(self.failovers):.2f} s"
        if self.resyncs:
            line += f", all in sync again in {min(self.resyncs):.2f}-{max(self.resyncs):.2f} s"
        print(line)
        for rid, verdict in verdicts.items():
            assert verdict["lost"] == verdict["duplicated"] == verdict["moved"] == 0, (rid, verdict)
            assert verdict.get("rolled_back_visible", 0) == 0, (rid, verdict)
        assert v["acked"] > 0 and work.transactions > 0


def test_kill_9_of_the_leader(service_factory, tmp_path):
    run = Run(StoreGroupProcesses(service_factory, tmp_path), "kill -9 of the leader")

    def fault() -> None:
        old = run.leader
        run.group.replicas[old].kill()
        run.new_leader(old)
        run.group.replicas[old].restart()
        run.all_in_sync()

    run.rounds(fault)


def test_sigstop_of_the_leader_past_its_lease_then_sigcont(service_factory, tmp_path):
    run = Run(StoreGroupProcesses(service_factory, tmp_path), "SIGSTOP of the leader past its lease")

    def fault() -> None:
        old = run.leader
        proc = run.group.replicas[old].process
        proc.signal(signal.SIGSTOP)
        try:
            run.new_leader(old)
            time.sleep(LEASE_S)  # well past its lease: it wakes believing it leads
        finally:
            proc.signal(signal.SIGCONT)
        run.all_in_sync()

    run.rounds(fault)


def test_the_leader_cut_off_from_etcd_and_its_followers_but_not_its_clients(service_factory, tmp_path):
    group = StoreGroupProcesses(service_factory, tmp_path, partitionable=True)
    run = Run(group, "leader partitioned from etcd and followers (clients still reach it)")

    def fault() -> None:
        old = run.leader
        group.isolate(old)
        try:
            run.new_leader(old)
            run.some_sends(20)  # the new leader takes writes while the old one is cut off
        finally:
            group.heal(old)
        run.all_in_sync()

    try:
        run.rounds(fault)
    finally:
        group.close()


def test_follower_restarts_while_writes_continue(service_factory, tmp_path):
    run = Run(StoreGroupProcesses(service_factory, tmp_path), "kill -9 and restart of a follower")

    def fault() -> None:
        follower = next(r for r in run.group.replicas if r != run.leader)
        run.group.replicas[follower].kill()
        run.some_sends(20)
        run.group.replicas[follower].restart()
        run.all_in_sync()

    run.rounds(fault)


def test_the_in_sync_set_changing_during_writes(service_factory, tmp_path):
    run = Run(StoreGroupProcesses(service_factory, tmp_path), "in-sync set shrinking and growing during writes")

    def fault() -> None:
        group = run.group
        follower = next(r for r in group.replicas if r != run.leader)
        proc = group.replicas[follower].process
        proc.signal(signal.SIGSTOP)  # lags: leaves the in-sync set
        try:
            wait_until(lambda: follower not in group.in_sync(run.leader), what=f"{follower} out of sync")
            run.some_sends(20)  # min_in_sync 2 of 3: writes go on
        finally:
            proc.signal(signal.SIGCONT)
        run.all_in_sync()

    run.rounds(fault)


def test_a_minority_replica_with_a_damaged_or_cut_log(service_factory, tmp_path):
    run = Run(StoreGroupProcesses(service_factory, tmp_path), "a follower's segment bit-flipped or cut")
    n = 0

    def fault() -> None:
        nonlocal n
        group = run.group
        follower = next(r for r in group.replicas if r != run.leader)
        group.replicas[follower].kill()
        print(f"round {n}: {follower}: {damage_log(group.data_dirs[follower], n)}")
        n += 1
        group.replicas[follower].restart()
        run.all_in_sync()

    run.rounds(fault)


def test_kill_9_of_the_leader_together_with_etcds_leader(tmp_path):
    etcd = EtcdCluster(tmp_path)
    etcd.start()
    try:
        factory = ServiceFactory(etcd_endpoints=etcd.endpoints, base_dir=tmp_path)
        try:
            run = Run(StoreGroupProcesses(factory, tmp_path), "kill -9 of the leader and of etcd's leader")

            def fault() -> None:
                old, etcd_leader = run.leader, etcd.leader()
                etcd.kill(etcd_leader)
                run.group.replicas[old].kill()
                run.new_leader(old)
                etcd.restart(etcd_leader)
                run.group.replicas[old].restart()
                run.all_in_sync()

            run.rounds(fault)
        finally:
            factory.close()
    finally:
        etcd.stop()
