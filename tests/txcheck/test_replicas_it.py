"""Two txcheck replicas, with real processes (store, txcheck replicas, etcd; producers
in this process):

- a check reaches a producer whose channel the *other* replica holds (TransactionPeer);
- END_TRANSACTION at any replica is decided by the store at once, once: repeats on both
  replicas at the same time deliver nothing twice, opposite decisions at once on the two
  replicas have exactly one winner, and no leader is needed at all;
- the store restarted (sync flush) between half and commit: the decision and its
  idempotency come back from the store.

The non-leading replica runs with ``--check_loop_enable false``, so which replica leads
is fixed. Tests wait for outcomes, never for times."""

from __future__ import annotations

import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support import ServiceFactory

from txmq import LocalTransactionState, Message, TransactionProducer, TxmqError
from txmq.v1 import errors_pb2, txcheck_pb2

from .helpers import FAST, WAIT_S, Listener, end, leader_of, new_topic, query, visible, wait_for

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN
FOLLOWER = ("--instance_id", "txcheck-follower", "--check_loop_enable", "false")
LEADER = ("--instance_id", "txcheck-leader")


def leader_key(factory: ServiceFactory, store_id: str = "store-0") -> str:
    return f"{factory.etcd_prefix}/txcheck/leaders/{store_id}"


def wait_leader(factory: ServiceFactory, instance_id: str) -> None:
    wait_for(f"{instance_id} to lead", lambda: leader_of(factory.etcd_endpoints, leader_key(factory)) == instance_id)


def end_request(r, resolution: LocalTransactionState, *, group: str):
    return txcheck_pb2.EndTransactionRequest(
        producer_group=group,
        transaction_id=r.transaction_id,
        commit_log_offset=r.commit_log_offset,
        tran_state_table_offset=r.queue_offset,
        resolution=resolution.value,
        store_id=r.message_queue.store_id,
    )


def end_error(address: str, request: txcheck_pb2.EndTransactionRequest) -> TxmqError | None:
    try:
        end(address, request)
    except grpc.RpcError as exc:
        return TxmqError.from_rpc_error(exc)
    return None


def at_once(*calls) -> list:
    """Run the calls on threads released together; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i: int, fn) -> None:
        barrier.wait()
        results[i] = fn()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    return results


def test_check_reaches_a_channel_held_by_the_other_replica(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    follower = service_factory.start("txcheck", *FAST, *FOLLOWER)
    topic = new_topic(store)
    listener = Listener(UNKNOWN, [COMMIT] * 100)
    with TransactionProducer(group="PG_PEER", endpoint=store.address, listener=listener) as p:
        # The follower is the only replica now, so the producer's one channel is there.
        p.start(wait_channel=10)
        assert p.channel_open and p._channel.address == follower.address
        leader = service_factory.start("txcheck", *FAST, *LEADER)
        wait_leader(service_factory, "txcheck-leader")
        with grpc.insecure_channel(follower.address) as ch:  # the peer service is announced
            status = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service="txmq.v1.TransactionPeer"), timeout=5
            )
            assert status.status == health_pb2.HealthCheckResponse.SERVING
        pending = p.send_message_in_transaction(Message(topic, b"via-peer"))
        assert pending.local_transaction_state is UNKNOWN
        # The leader's check loop checks it; the leader holds no channel of PG_PEER, so
        # the check goes to the follower (TransactionPeer.DeliverCheck), down the
        # producer's channel; the answer comes back up it and the follower has the
        # store decide it.
        wait_for("the checked commit", lambda: visible(store.address, topic) == [b"via-peer"])
        assert pending.transaction_id in listener.checked
        assert p._channel.address == follower.address  # the channel never moved
        kinds = [e.kind for e in query(leader.address, pending.transaction_id).timeline]
        assert "check_sent" in kinds and "committed" in kinds
    assert visible(store.address, topic) == [b"via-peer"]


def test_end_transaction_at_any_replica_is_decided_once(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    follower = service_factory.start("txcheck", *FAST, *FOLLOWER)
    leader = service_factory.start("txcheck", *FAST, *LEADER)
    wait_leader(service_factory, "txcheck-leader")
    topic = new_topic(store)
    group = "PG_ANY"
    with TransactionProducer(group=group, endpoint=store.address, listener=Listener(UNKNOWN)) as p:
        first = p.send_message_in_transaction(Message(topic, b"first"))
        commit = end_request(first, COMMIT, group=group)
        # The replica that does not lead decides (the store decides): at once.
        assert end_error(follower.address, commit) is None
        assert visible(store.address, topic) == [b"first"]
        # Repeats at once on both replicas deliver nothing twice; the opposite decision
        # is refused.
        again = at_once(*[lambda a=a: end_error(a, commit) for a in (follower.address, leader.address) * 2])
        assert again == [None] * 4
        refused = end_error(follower.address, end_request(first, ROLLBACK, group=group))
        assert refused is not None and refused.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
        assert visible(store.address, topic) == [b"first"]

        # Opposite decisions at once on the two replicas: exactly one wins.
        second = p.send_message_in_transaction(Message(topic, b"second"))
        results = at_once(
            lambda: end_error(follower.address, end_request(second, COMMIT, group=group)),
            lambda: end_error(leader.address, end_request(second, ROLLBACK, group=group)),
        )
        assert sum(r is None for r in results) == 1, results
        loser = next(r for r in results if r is not None)
        assert loser.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
        committed = results[0] is None
        info = p.query_transaction(second.transaction_id)
        assert info.resolution is (COMMIT if committed else ROLLBACK)
    assert sorted(visible(store.address, topic)) == ([b"first", b"second"] if committed else [b"first"])


def test_without_a_leader_the_sdk_still_commits_at_once(service_factory: ServiceFactory) -> None:
    """No replica leads (none runs a check loop): END_TRANSACTION needs none."""
    store = service_factory.store()
    service_factory.start("txcheck", *FAST, *FOLLOWER)
    topic = new_topic(store)
    group = "PG_NOLEADER"
    with TransactionProducer(group=group, endpoint=store.address, listener=Listener(COMMIT)) as p:
        p.start(wait_channel=10)
        r = p.send_message_in_transaction(Message(topic, b"no-leader"))
        assert leader_of(service_factory.etcd_endpoints, leader_key(service_factory)) is None
        assert r.local_transaction_state is COMMIT
        assert visible(store.address, topic) == [b"no-leader"]
        assert p.query_transaction(r.transaction_id).resolution is COMMIT


def test_store_restart_between_half_and_commit(service_factory: ServiceFactory) -> None:
    store = service_factory.store("--flush_mode", "sync")
    # No check would settle it meanwhile: the transaction timeout outlasts the test.
    txcheck = service_factory.start("txcheck", *FAST, "--transaction_timeout_ms", "600000")
    topic = new_topic(store)
    with TransactionProducer(
        group="PG_RESTART", endpoint=store.address, listener=Listener(UNKNOWN), end_transaction_timeout=WAIT_S
    ) as p:
        r = p.send_message_in_transaction(Message(topic, b"survives"))
        store.kill()  # the half was fsynced before its send returned
        store.restart()
        p.end_transaction(r, COMMIT)  # retried while the replica reconnects
        assert visible(store.address, topic) == [b"survives"]
        # Nothing cached survives either: both processes crash and come back.
        store.kill()
        txcheck.kill()
        store.restart()
        txcheck.restart()
        p.end_transaction(r, COMMIT)  # the same decision again: answered, not redone
        with pytest.raises(TxmqError) as refused:
            p.end_transaction(r, ROLLBACK)
        assert refused.value.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
        info = p.query_transaction(r.transaction_id)
        assert info.resolution is COMMIT and info.committed is not None and info.committed.topic == topic
    assert visible(store.address, topic) == [b"survives"]
