"""A replicated store group on real processes: election, copying, the high watermark,
follower reads and refusals (docs/replication.md)."""

from __future__ import annotations

import grpc
from click.testing import CliRunner
from support.waiting import wait_until

from txmq import Admin
from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_cli.main import cli

from .group import TOPIC, StoreGroupProcesses, Workload, check, read_all


def test_three_replicas_elect_a_leader_and_every_replica_holds_every_acknowledged_send(service_factory, tmp_path):
    group = StoreGroupProcesses(service_factory, tmp_path)
    leader = group.leader()
    followers = [r for r in group.replicas if r != leader]
    wait_until(lambda: len(group.in_sync(leader)) == 3, what="all three in sync")

    work = Workload(group)
    work.start()
    wait_until(lambda: work.acked_count() >= 400, what="400 acknowledged sends")
    work.finish()
    assert not work.unexpected

    # A follower refuses writes, naming the leader.
    try:
        store_pb2_grpc.StoreStub(group.channel(followers[0])).SendMessage(
            store_pb2.SendMessageRequest(message=common_pb2.Message(topic=TOPIC, body=b"x")), timeout=5
        )
        raise AssertionError("a follower took a write")
    except grpc.RpcError as err:
        refusal = TxmqError.from_rpc_error(err)
        assert err.code() == grpc.StatusCode.UNAVAILABLE
        assert not refusal.transport and refusal.code == errors_pb2.CODE_NOT_LEADER
        assert refusal.metadata["leader"] == leader

    leader_end = group.status(leader).log_end
    for rid in followers:
        wait_until(lambda rid=rid: group.status(rid).high_watermark >= leader_end, what=f"{rid} caught up")
    for rid in group.replicas:  # every replica serves every acknowledged message, at its offset
        verdict = check(work.acked, read_all(group, rid))
        assert verdict == {"acked": len(work.acked), "lost": 0, "duplicated": 0, "moved": 0}, (rid, verdict)


def test_store_group_status_shows_leader_epoch_in_sync_set_and_lag(service_factory, tmp_path):
    group = StoreGroupProcesses(service_factory, tmp_path)
    leader = group.leader()
    wait_until(lambda: len(group.in_sync(leader)) == 3, what="all three in sync")
    endpoint = group.replicas[leader].address
    with Admin(endpoint) as admin:
        [status] = admin.store_group_status()
    assert status.store_id == "grp" and status.leader == leader and status.epoch >= 1
    assert set(status.in_sync) == {"r0", "r1", "r2"} and status.min_in_sync == 2
    assert {r.replica_id: r.role for r in status.replicas} == {
        rid: "leader" if rid == leader else "follower" for rid in group.replicas
    }
    assert all(r.lag_bytes == 0 and r.in_sync for r in status.replicas)

    killed = next(r for r in group.replicas if r != leader)
    group.replicas[killed].kill()  # still registered (its etcd lease lives 10 s): unreachable
    result = CliRunner().invoke(cli, ["store-group", "status", "--endpoint", endpoint], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"store group grp: leader {leader}, epoch {status.epoch}" in result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines()[2:]}
    assert sorted(lines) == ["r0", "r1", "r2"], result.output
    assert lines[leader][1] == "leader" and lines[killed][1] == "unreachable", result.output


def _messages_out(address: str, topic: str) -> float:
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = re.compile(r'^rocketmq_messages_out_total\{topic="' + re.escape(topic) + r'"\} (\S+)$', re.M)
    return sum(float(v) for v in pattern.findall(text))


def test_a_consumer_far_behind_is_read_from_a_follower_and_back_from_the_leader(service_factory, tmp_path):
    """Seed 004's suggestPullingFromSlave: the leader's memory is made tiny (10 KB), so a
    consumer reading from offset 0 is sent to a follower by the pull service; once it
    has caught up, it reads from the leader again."""
    from txmq import ServiceKind
    from txmq.v1 import pull_pb2, pull_pb2_grpc

    small_memory = ["--physical_memory_bytes", "1000000", "--access_message_in_memory_max_ratio_percent", "1"]
    group = StoreGroupProcesses(service_factory, tmp_path, extra=[*small_memory, "--metrics_port", "0"])
    leader = group.leader()
    wait_until(lambda: len(group.in_sync(leader)) == 3, what="all three in sync")
    work = Workload(group, transaction_every=1_000_000)
    work.start()
    wait_until(lambda: work.acked_count() >= 800, what="800 acknowledged sends")
    work.finish()
    pull = service_factory.start("pull")
    with Admin(pull.address) as admin:
        metrics = {e.instance_id: e.labels["metrics"] for e in admin.endpoints(ServiceKind.STORE_REPLICA)}
    followers = [f"grp.{r}" for r in group.replicas if r != leader]
    before = {rid: _messages_out(metrics[rid], TOPIC) for rid in metrics}
    stub = pull_pb2_grpc.PullStub(grpc.insecure_channel(pull.address))
    queue = common_pb2.MessageQueue(topic=TOPIC, store_id="grp", queue_id=0)
    offset, served = 0, 0
    while True:
        r = stub.PullMessage(
            pull_pb2.PullMessageRequest(consumer_group="lagging", queue=queue, queue_offset=offset, max_messages=32),
            timeout=10,
        )
        if r.status != pull_pb2.PULL_STATUS_FOUND:
            break
        served += len(r.messages)
        offset = r.next_begin_offset
    assert served == sum(1 for a in work.acked if a.queue_id == 0)
    after = {rid: _messages_out(metrics[rid], TOPIC) for rid in metrics}
    from_followers = sum(after[f] - before[f] for f in followers)
    from_leader = after[f"grp.{leader}"] - before[f"grp.{leader}"]
    assert from_followers > 0, (before, after)  # the lagging part came from a follower
    assert from_leader > 0, (before, after)  # the first read, and the tail once caught up


def test_unclean_election_lets_an_out_of_sync_replica_lead_only_when_asked(service_factory, tmp_path):
    """With unclean_leader_election, a replica outside the in-sync set takes over once no
    in-sync replica is registered; without it (every other test), such a group waits."""
    import signal

    group = StoreGroupProcesses(
        service_factory, tmp_path, min_in_sync=1,
        extra=["--unclean_leader_election", "true", "--registration_ttl_ms", "2000"],
    )  # fmt: skip
    leader = group.leader()
    wait_until(lambda: len(group.in_sync(leader)) == 3, what="all three in sync")
    lagger = next(r for r in group.replicas if r != leader)
    group.replicas[lagger].process.signal(signal.SIGSTOP)
    wait_until(lambda: lagger not in group.in_sync(leader), what=f"{lagger} out of sync")
    for rid in group.replicas:
        if rid != lagger:
            group.replicas[rid].kill()
    group.replicas[lagger].process.signal(signal.SIGCONT)
    assert group.leader(timeout_s=30) == lagger
    with Admin(group.replicas[lagger].address) as admin:
        [status] = admin.store_group_status()
    assert status.leader == lagger and list(status.in_sync) == [lagger]
    assert "unclean_leader_election" in group.replicas[lagger].process.log_path.read_text()
