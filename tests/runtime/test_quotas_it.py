"""Per-user byte-rate quotas on real processes with auth on (docs/security.md "Quotas"):
a user over its produce quota is refused on every send RPC with the typed, retriable
CODE_QUOTA_EXCEEDED and a retry_after_ms, and gets through once it has waited that long;
the same for fetch on the pull service. A user without a quota and a super user (whatever
its fields say) are never refused. Nothing here measures throughput: the assertions are
on the refusals and their metadata, and the waits are the ones the refusals ask for."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from support.processes import ServiceFactory
from support.waiting import wait_until

from txmq import Admin, signing
from txmq.access import Policy
from txmq.errors import ERROR_DETAIL_KEY, TooManyRequestsError, TxmqError
from txmq.ids import new_unique_ids
from txmq.records import encode_for_send
from txmq.v1 import auth_pb2, auth_pb2_grpc, common_pb2, errors_pb2, pull_pb2, pull_pb2_grpc, store_pb2, store_pb2_grpc

SERVICE_KEY = "txmq-service"
SERVICE_SECRET = "service-secret-0123456789"
AUTH_FLAGS = ("--auth_enabled=true", "--auth_access_key", SERVICE_KEY, "--auth_secret_key", SERVICE_SECRET)
TOPIC, GROUP = "QuotaT1", "QuotaG1"
ROOT = signing.Credentials(SERVICE_KEY, SERVICE_SECRET)
#: 2000 bytes a second: one 12 kB send passes (the burst is 2000) and leaves about 5 s
#: of debt, ample for the refusals that follow even on a loaded machine.
SLOW = signing.Credentials("slow", "slow-secret-1")
FREE = signing.Credentials("free", "free-secret-1")  # no quota
BOSS = signing.Credentials("boss", "boss-secret-1")  # a super user with quota fields set
RATE = 2000
BODY = b"q" * 12_000


@dataclass
class Cluster:
    store: str
    pull: str


def send_message(stub: store_pb2_grpc.StoreStub, who: signing.Credentials) -> store_pb2.SendMessageResponse:
    request = store_pb2.SendMessageRequest(message=common_pb2.Message(topic=TOPIC, body=BODY))
    return stub.SendMessage(request, metadata=signing.auth_metadata(who), timeout=10)


def refusal(call) -> TxmqError:  # type: ignore[no-untyped-def]
    """The typed error of a call that must fail."""
    with pytest.raises(grpc.RpcError) as exc:
        call()
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc.value
    assert dict(exc.value.trailing_metadata() or ()).get(ERROR_DETAIL_KEY)
    return TxmqError.from_rpc_error(exc.value)


def assert_over_quota(err: TxmqError, user: str, quota: str) -> float:
    """The refusal is the quota's; the wait (seconds) it asks for."""
    assert isinstance(err, TooManyRequestsError) and err.retriable, err
    assert err.code == errors_pb2.CODE_QUOTA_EXCEEDED, err
    assert err.metadata["user"] == user and err.metadata["quota"] == quota, err.metadata
    assert err.metadata["bytes_per_second"] == str(RATE)
    assert user in err.message and f"{quota} quota" in err.message
    wait_ms = int(err.metadata["retry_after_ms"])
    assert 0 < wait_ms <= 6_000
    return wait_ms / 1000


@pytest.fixture
def cluster(service_factory: ServiceFactory) -> Iterator[Cluster]:
    store = service_factory.store(*AUTH_FLAGS)
    pull = service_factory.start("pull", *AUTH_FLAGS)
    c = Cluster(store.address, pull.address)
    with Admin(c.store, credentials=ROOT) as admin:
        admin.create_user("slow", SLOW.secret_key, produce_bytes_per_second=RATE, fetch_bytes_per_second=RATE)
        admin.create_user("free", FREE.secret_key)
        admin.create_user(
            "boss", BOSS.secret_key, super_user=True, produce_bytes_per_second=1, fetch_bytes_per_second=1
        )
        for name in ("slow", "free"):
            admin.put_acl(name, [Policy(f"Topic:{TOPIC}", ("All",)), Policy(f"Group:{GROUP}", ("All",))])
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    for address in (c.store, c.pull):  # each service's copy of the book follows etcd's watch
        wait_until(lambda a=address: _knows_slow(a), what=f"{address} knows the user slow")
    yield c


def _knows_slow(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        request = auth_pb2.GetUserRequest(username="slow")
        try:
            user = auth_pb2_grpc.AuthStub(channel).GetUser(request, metadata=signing.auth_metadata(ROOT), timeout=5)
        except grpc.RpcError:
            return False
    return user.user.produce_bytes_per_second == RATE


def test_the_admin_api_and_the_cli_set_and_show_quotas(cluster: Cluster) -> None:
    from click.testing import CliRunner

    from txmq_cli.main import cli

    with Admin(cluster.pull, credentials=ROOT) as admin:
        slow = admin.get_user("slow")
        assert (slow.produce_bytes_per_second, slow.fetch_bytes_per_second) == (RATE, RATE)
        updated = admin.update_user("free", fetch_bytes_per_second=5000)
        assert (updated.produce_bytes_per_second, updated.fetch_bytes_per_second) == (0, 5000)
        assert admin.update_user("free", disabled=False).fetch_bytes_per_second == 5000  # kept
        with pytest.raises(TxmqError) as err:
            admin.update_user("free", produce_bytes_per_second=-1)
        assert err.value.code == errors_pb2.CODE_ILLEGAL_ARGUMENT
    env = {"TXMQ_ACCESS_KEY": SERVICE_KEY, "TXMQ_SECRET_KEY": SERVICE_SECRET, "TXMQ_ENDPOINT": cluster.store}
    runner = CliRunner()

    def txmq(*args: str) -> str:
        result = runner.invoke(cli, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    txmq("user", "create", "erin", "--secret-key", "erin-secret-1", "--produce-bytes-per-second", "1000")
    txmq("user", "update", "free", "--produce-bytes-per-second", "7000", "--fetch-bytes-per-second", "0")
    listed = txmq("user", "list").splitlines()
    assert "erin  (produce quota 1000 B/s)" in listed
    assert "free  (produce quota 7000 B/s)" in listed
    assert "slow  (produce quota 2000 B/s, fetch quota 2000 B/s)" in listed
    assert "boss  (super, produce quota 1 B/s, fetch quota 1 B/s)" in listed


def test_a_user_over_its_produce_quota_is_refused_until_it_waits(cluster: Cluster) -> None:
    with grpc.insecure_channel(cluster.store) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        assert send_message(stub, SLOW).result.msg_id  # more than the burst: admitted, once
        assert_over_quota(refusal(lambda: send_message(stub, SLOW)), "slow", "produce")
        # Every send path is refused while in debt: SendBatch, SendRecords (an error ack).
        batch = store_pb2.SendBatchRequest(messages=[common_pb2.Message(topic=TOPIC, body=b"b")])
        err = refusal(lambda: stub.SendBatch(batch, metadata=signing.auth_metadata(SLOW), timeout=10))
        assert_over_quota(err, "slow", "produce")
        frame = store_pb2.RecordFrame(sequence=1, records=encode_for_send(TOPIC, 0, b"r", new_unique_ids(1)[0]))
        ack = stub.SendRecords(frame, metadata=signing.auth_metadata(SLOW), timeout=10)
        wait_s = assert_over_quota(TxmqError.from_detail(ack.error), "slow", "produce")
        # A user without a quota and a super user with one set are never refused.
        for _ in range(5):
            assert send_message(stub, FREE).result.msg_id
            assert send_message(stub, BOSS).result.msg_id
        time.sleep(wait_s)  # what the refusal asked for: the debt is paid
        assert send_message(stub, SLOW).result.msg_id


def test_a_refused_stream_frame_gets_its_own_error_ack_and_the_stream_lives_on(cluster: Cluster) -> None:
    frames: queue.Queue[store_pb2.RecordFrame | None] = queue.Queue()
    ids = iter(new_unique_ids(3))
    with grpc.insecure_channel(cluster.store) as channel:
        stub = store_pb2_grpc.StoreStub(channel)
        acks = stub.SendStream(iter(frames.get, None), metadata=signing.auth_metadata(SLOW), timeout=30)
        frames.put(store_pb2.RecordFrame(sequence=1, records=encode_for_send(TOPIC, 0, BODY, next(ids))))
        first = next(acks)
        assert not first.HasField("error") and len(first.commit_log_offsets) == 1  # past the burst, once
        frames.put(store_pb2.RecordFrame(sequence=2, records=encode_for_send(TOPIC, 0, b"x", next(ids))))
        second = next(acks)
        assert second.sequence == 2
        wait_s = assert_over_quota(TxmqError.from_detail(second.error), "slow", "produce")
        time.sleep(wait_s)
        frames.put(store_pb2.RecordFrame(sequence=3, records=encode_for_send(TOPIC, 0, b"y", next(ids))))
        third = next(acks)  # the same stream
        assert third.sequence == 3 and not third.HasField("error"), third
        frames.put(None)
        assert next(acks, None) is None


def pull(stub: pull_pb2_grpc.PullStub, who: signing.Credentials, offset: int) -> pull_pb2.PullMessageResponse:
    request = pull_pb2.PullMessageRequest(
        consumer_group=GROUP,
        queue=common_pb2.MessageQueue(topic=TOPIC, queue_id=0),
        queue_offset=offset,
        max_messages=1,
    )
    return stub.PullMessage(request, metadata=signing.auth_metadata(who), timeout=10)


def test_a_user_over_its_fetch_quota_is_refused_until_it_waits(cluster: Cluster) -> None:
    with grpc.insecure_channel(cluster.store) as channel:
        store = store_pb2_grpc.StoreStub(channel)
        for _ in range(2):
            send_message(store, ROOT)
    with grpc.insecure_channel(cluster.pull) as channel:
        stub = pull_pb2_grpc.PullStub(channel)
        first = pull(stub, SLOW, 0)  # 12 kB for a 2 kB/s quota: admitted, charged into debt
        assert len(first.messages) == 1
        wait_s = assert_over_quota(refusal(lambda: pull(stub, SLOW, 0)), "slow", "fetch")
        for _ in range(3):
            assert len(pull(stub, FREE, 0).messages) == 1
            assert len(pull(stub, BOSS, 0).messages) == 1
        time.sleep(wait_s)
        assert len(pull(stub, SLOW, 1).messages) == 1


def test_the_sdk_producer_waits_out_its_quota_within_its_timeout(cluster: Cluster) -> None:
    """The SDK takes a CODE_QUOTA_EXCEEDED refusal as a wait, not a failure: it sleeps the
    retry_after_ms the store names (not counted against retry_times) and the sends go
    through within their timeout, slower."""
    from txmq import Message, Producer

    with Producer(GROUP, cluster.store, credentials=SLOW, send_timeout=20.0, retry_times=0) as producer:
        sent = [producer.send(Message(TOPIC, b"s" * 1_500)) for _ in range(4)]  # 6 kB at 2 kB/s: throttled
    assert all(r.msg_id for r in sent)
    with grpc.insecure_channel(cluster.store) as channel:  # the store did refuse on the way
        stub = store_pb2_grpc.StoreStub(channel)
        assert_over_quota(refusal(lambda: send_message(stub, SLOW)), "slow", "produce")


def test_a_pull_on_the_stream_over_the_fetch_quota_gets_its_own_error_answer(cluster: Cluster) -> None:
    """PullStream (the SDK's long polls) is held to the same fetch quota as PullMessage: the
    refused pull is answered with CODE_QUOTA_EXCEEDED on the stream, which lives on."""
    with grpc.insecure_channel(cluster.store) as channel:
        send_message(store_pb2_grpc.StoreStub(channel), ROOT)  # 12 kB: more than one second's quota
    requests: queue.Queue[pull_pb2.PullStreamRequest | None] = queue.Queue()

    def outgoing() -> Iterator[pull_pb2.PullStreamRequest]:
        while (item := requests.get()) is not None:
            yield item

    def ask(request_id: int) -> pull_pb2.PullStreamRequest:
        pull_request = pull_pb2.PullMessageRequest(
            consumer_group=GROUP, queue=common_pb2.MessageQueue(topic=TOPIC, queue_id=0), max_messages=1
        )
        return pull_pb2.PullStreamRequest(request_id=request_id, pull=pull_request)

    with grpc.insecure_channel(cluster.pull) as channel:
        answers = pull_pb2_grpc.PullStub(channel).PullStream(
            outgoing(), metadata=signing.auth_metadata(SLOW), timeout=30
        )
        requests.put(ask(1))
        first = next(answers)
        assert first.request_id == 1 and first.WhichOneof("result") == "pull" and len(first.pull.messages) == 1
        requests.put(ask(2))
        second = next(answers)
        assert second.request_id == 2 and second.WhichOneof("result") == "error"
        assert_over_quota(TxmqError.from_detail(second.error), "slow", "fetch")
        requests.put(None)
        assert list(answers) == []  # closed by the client after every answer: the stream ends cleanly
