"""END straight to the store (docs/transactions.md, "END straight to the store"): the
SDK's commit or rollback goes to the store holding the half message (EndTransactions),
with the checks and errors of an END through txcheck, and falls back to txcheck when the
store cannot take it. Real store and txcheck processes; outcomes are waited for, never
times."""

from __future__ import annotations

import time

import grpc
import pytest
from support import ServiceFactory

from txmq import LocalTransactionState, Message, TransactionProducer
from txmq.errors import TxmqError
from txmq.protocol import PROPERTY_CHECK_IMMUNITY
from txmq.v1 import errors_pb2, store_pb2, store_pb2_grpc, txcheck_pb2, txcheck_pb2_grpc

from .helpers import FAST, Listener, new_topic, visible

COMMIT = LocalTransactionState.COMMIT


def through_txcheck(address: str, r, group: str, resolution: int) -> txcheck_pb2.EndTransactionResponse:
    """END of half ``r`` as the Node client and older SDKs send it: to txcheck."""
    with grpc.insecure_channel(address) as ch:
        return txcheck_pb2_grpc.TransactionStub(ch).EndTransaction(
            txcheck_pb2.EndTransactionRequest(
                producer_group=group,
                transaction_id=r.transaction_id,
                commit_log_offset=r.commit_log_offset,
                tran_state_table_offset=r.queue_offset,
                resolution=resolution,
                store_id=r.message_queue.store_id,
            ),
            timeout=10,
        )


def test_a_commit_is_decided_with_no_txcheck_running(service_factory: ServiceFactory) -> None:
    store = service_factory.store()  # no txcheck at all: nobody to relay an END
    topic = new_topic(store)
    with TransactionProducer(
        group="PG_DIRECT", endpoint=store.address, listener=Listener(COMMIT), end_transaction_timeout=2.0
    ) as p:
        committed = p.send_message_in_transaction(Message(topic, b"commit"))
        assert committed.local_transaction_state is COMMIT
        assert visible(store.address, topic) == [b"commit"]  # decided by the time the call returned
        p.listener.execute = LocalTransactionState.ROLLBACK
        p.send_message_in_transaction(Message(topic, b"rollback"))
        p.end_transaction(committed, COMMIT)  # a repeat is answered like the first
        with pytest.raises(TxmqError) as refused:
            p.end_transaction(committed, LocalTransactionState.ROLLBACK)
        assert refused.value.code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert visible(store.address, topic) == [b"commit"]


def test_an_end_of_another_group_is_refused_typed(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    topic = new_topic(store)
    with (
        TransactionProducer(
            group="PG_OWNER", endpoint=store.address, listener=Listener(COMMIT), end_transaction_timeout=1.0
        ) as owner,
        TransactionProducer(
            group="PG_OTHER", endpoint=store.address, listener=Listener(COMMIT), end_transaction_timeout=2.0
        ) as other,
    ):
        owner.listener.execute = LocalTransactionState.UNKNOWN
        r = owner.send_message_in_transaction(Message(topic, b"mine"))
        with pytest.raises(TxmqError) as refused:
            other.end_transaction(r, COMMIT)
        assert refused.value.code == errors_pb2.CODE_TRANSACTION_MISMATCH
        assert visible(store.address, topic) == []
        owner.end_transaction(r, COMMIT)
    assert visible(store.address, topic) == [b"mine"]


def test_a_late_end_is_refused_by_the_store_setting_on_every_path(service_factory: ServiceFactory) -> None:
    # The store's transaction timeout decides when an END is late, whoever relays it:
    # txcheck's own setting (here an hour) only ages half messages for its check loop.
    store = service_factory.store("--transaction_timeout_ms", "200")
    txcheck = service_factory.start("txcheck", *FAST[:2], "--transaction_timeout_ms", "3600000")
    topic = new_topic(store)
    with TransactionProducer(
        group="PG_LATE", endpoint=store.address, listener=Listener(LocalTransactionState.UNKNOWN)
    ) as p:
        msg = Message(topic, b"late", properties={PROPERTY_CHECK_IMMUNITY: "1"})
        r = p.send_message_in_transaction(msg)
        time.sleep(1.5)  # past the half message's own immunity (1 s, above the store's 200 ms)
        with pytest.raises(TxmqError) as direct:
            p.end_transaction(r, COMMIT)
        assert direct.value.code == errors_pb2.CODE_TRANSACTION_EXPIRED
        with pytest.raises(grpc.RpcError) as relayed:
            through_txcheck(txcheck.address, r, "PG_LATE", txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT)
        assert TxmqError.from_rpc_error(relayed.value).code == errors_pb2.CODE_TRANSACTION_EXPIRED
        p.end_transaction(r, COMMIT, from_check=True)  # an answer to a check is never late
    assert visible(store.address, topic) == [b"late"]


def test_ends_through_txcheck_and_at_the_store_decide_once(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    txcheck = service_factory.start("txcheck", *FAST)
    topic = new_topic(store)
    with TransactionProducer(
        group="PG_BOTH", endpoint=store.address, listener=Listener(LocalTransactionState.UNKNOWN)
    ) as p:
        first = p.send_message_in_transaction(Message(topic, b"relayed-first"))
        through_txcheck(txcheck.address, first, "PG_BOTH", txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT)
        p.end_transaction(first, COMMIT)  # at the store: the same decision, answered again
        second = p.send_message_in_transaction(Message(topic, b"direct-first"))
        p.end_transaction(second, COMMIT)
        again = through_txcheck(txcheck.address, second, "PG_BOTH", txcheck_pb2.TRANSACTION_RESOLUTION_COMMIT)
        assert again.committed.message.unique_id == second.transaction_id
        with pytest.raises(grpc.RpcError) as opposite:
            through_txcheck(txcheck.address, second, "PG_BOTH", txcheck_pb2.TRANSACTION_RESOLUTION_ROLLBACK)
        assert TxmqError.from_rpc_error(opposite.value).code == errors_pb2.CODE_TRANSACTION_ALREADY_RESOLVED
    assert sorted(visible(store.address, topic)) == [b"direct-first", b"relayed-first"]


def test_end_transactions_and_decide_transactions_share_one_decision(service_factory: ServiceFactory) -> None:
    """A decision taken by EndTransactions (the producer's call) is the one
    DecideTransactions (txcheck's, the gateway's) finds, and the other way round."""
    store = service_factory.store()
    topic = new_topic(store)
    with TransactionProducer(
        group="PG_RPC", endpoint=store.address, listener=Listener(LocalTransactionState.UNKNOWN)
    ) as p:
        r = p.send_message_in_transaction(Message(topic, b"rpc"))
    item = store_pb2.ProducerDecision(
        commit_log_offset=r.commit_log_offset,
        tran_state_table_offset=r.queue_offset,
        transaction_id=r.transaction_id,
        producer_group="PG_RPC",
        decision=store_pb2.DECISION_COMMIT,
    )
    with grpc.insecure_channel(store.address) as ch:
        stub = store_pb2_grpc.StoreStub(ch)
        [first] = stub.EndTransactions(store_pb2.EndTransactionsRequest(decisions=[item]), timeout=10).results
        [repeat] = stub.EndTransactions(store_pb2.EndTransactionsRequest(decisions=[item]), timeout=10).results
        relayed = store_pb2.TransactionDecision(
            commit_log_offset=item.commit_log_offset,
            tran_state_table_offset=item.tran_state_table_offset,
            transaction_id=item.transaction_id,
            producer_group=item.producer_group,
            decision=store_pb2.DECISION_COMMIT,
        )
        [third] = stub.DecideTransactions(store_pb2.DecideTransactionsRequest(decisions=[relayed]), timeout=10).results
    assert first.first and not repeat.first and not third.first
    assert first.committed.commit_log_offset == repeat.committed.commit_log_offset == third.committed.commit_log_offset
    assert visible(store.address, topic) == [b"rpc"]
