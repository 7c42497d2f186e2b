"""Store.EndTransactions with auth on, in one process (a real store behind the Authorize
interceptor): the producer's own identity is checked as txcheck's EndTransaction checks
it -- Pub on the producer group (the access option) and Pub on the half message's topic
(the store, once it has read the half record) -- and a refusal is typed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from security.fuzz import error_detail
from support.clock import ManualClock

from txmq import signing
from txmq.ids import new_unique_id
from txmq.v1 import auth_pb2, errors_pb2, store_pb2, store_pb2_grpc
from txmq_runtime.auth import Authenticator, AuthKeys, Authorize, CompiledAcl, Guard, Sealer, UserBook
from txmq_runtime.registry import encode
from txmq_store.message_store import MessageStore
from txmq_store.model import OutgoingMessage
from txmq_store.servicer import add_store_servicers
from txmq_store.settings import StoreSettings

from .conftest import SMALL

TOPIC, GROUP = "Orders", "PG_AUTH"
SECRET = "secret-0123456789"
ALLOW = auth_pb2.Policy.DECISION_ALLOW
PUB = auth_pb2.Action.ACTION_PUB


def _book() -> UserBook:
    keys, sealer = AuthKeys("/t"), Sealer("service-secret-0123456789")
    book = UserBook(keys, sealer)
    grants = {
        "writer": [f"Group:{GROUP}", f"Topic:{TOPIC}"],  # may end its transactions
        "group-only": [f"Group:{GROUP}"],  # may not publish to the half message's topic
        "topic-only": [f"Topic:{TOPIC}"],  # may not act for the producer group
    }
    stored = []
    for user in grants:
        u = auth_pb2.StoredUser(user=auth_pb2.User(username=user), sealed_secret=sealer.seal(user, SECRET))
        stored.append((keys.user(user), encode(u)))
    book.reset(stored)
    for user, resources in grants.items():
        policies = [auth_pb2.Policy(resource=r, actions=[PUB], decision=ALLOW) for r in resources]
        book.acls[user] = CompiledAcl.of(auth_pb2.Acl(username=user, policies=policies))
    return book


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, grpc.aio.Channel]]:
    clock = ManualClock(wall_ms=time.time_ns() // 1_000_000)
    store = await MessageStore.open(
        StoreSettings(data_dir=str(tmp_path / "store"), **SMALL),  # type: ignore[arg-type]
        advertised_address="127.0.0.1:10911",
        clock=clock,
    )
    store.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    book = _book()
    server = grpc.aio.server(interceptors=[Authorize(Authenticator(book, clock_skew_ms=900_000), Guard(book))])
    add_store_servicers(server, store)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield store, channel
    finally:
        await channel.close()
        await server.stop(None)
        await store.close()


async def _end(channel: grpc.aio.Channel, user: str, r, group: str = GROUP) -> str:  # type: ignore[no-untyped-def]
    request = store_pb2.EndTransactionsRequest(
        decisions=[
            store_pb2.ProducerDecision(
                commit_log_offset=r.commit_log_offset,
                tran_state_table_offset=r.queue_offset,
                transaction_id=r.transaction_id,
                producer_group=group,
                decision=store_pb2.DECISION_COMMIT,
            )
        ]
    )
    metadata = signing.auth_metadata(signing.Credentials(user, SECRET))
    try:
        reply = await store_pb2_grpc.StoreStub(channel).EndTransactions(request, metadata=metadata, timeout=5)
    except grpc.aio.AioRpcError as exc:
        detail = error_detail(exc.trailing_metadata())
        return f"call {errors_pb2.Code.Name(detail.code) if detail is not None else exc.code().name}"
    [result] = reply.results
    return errors_pb2.Code.Name(result.error.code) if result.HasField("error") else "OK"


async def test_the_callers_own_rights_are_checked(secured) -> None:  # type: ignore[no-untyped-def]
    store, channel = secured
    message = OutgoingMessage(TOPIC, b"tx", "", (), {}, new_unique_id(), 0, 0, 0)
    [r] = await store.send([message], producer_group=GROUP, transaction_prepared=True)
    assert await _end(channel, "topic-only", r) == "call CODE_ACCESS_DENIED"  # no Pub on the group
    assert await _end(channel, "group-only", r) == "CODE_ACCESS_DENIED"  # no Pub on the half's topic
    assert await _end(channel, "writer", r, group="PG_ELSE") == "call CODE_ACCESS_DENIED"
    assert await _end(channel, "writer", r) == "OK"
