"""txmq under test: a real etcd and a real store process; the topic is created through
StoreAdmin.CreateTopic; messages go through the Python SDK (``txmq.Producer``) when it is
available, else through the raw gRPC stubs (grpc.aio, one channel)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from bench import procs
from bench.targets import Target
from txmq import signing
from txmq.ids import new_unique_id
from txmq.v1 import auth_pb2, auth_pb2_grpc, common_pb2, store_pb2, store_pb2_grpc

TOPIC = "BenchTopic"
PRODUCER_GROUP = "bench_producer"
#: The auth scenarios (txmqauth-*): the store's own identity and the user the producer is.
BENCH_SERVICE_KEY = "bench-service"
BENCH_SERVICE_SECRET = "bench-service-secret-0123456789"
BENCH_USER = "bench-producer"
BENCH_USER_SECRET = "bench-producer-secret"
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


def sdk_available() -> bool:
    try:
        import txmq
    except ImportError:
        return False
    return hasattr(txmq, "Producer")


def store_available() -> bool:
    return (procs.ROOT / "services" / "store" / "txmq_store" / "__main__.py").exists()


class Etcd:
    """One etcd for every txmq scenario of a run (the store only registers itself there)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.child: procs.Child | None = None

    def start(self) -> int:
        if self.child is None or self.child.proc.poll() is not None:
            self.child = procs.start_etcd(self.workdir)
        return self.child.port

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None


async def wait_serving(channel: grpc.aio.Channel, child: procs.Child, timeout_s: float) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise RuntimeError(f"store exited with {child.proc.returncode} during start-up:\n{child.log_tail()}")
        try:
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
            if resp.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
        except grpc.aio.AioRpcError as e:
            last = f"{e.code().name}: {e.details()}"
        await asyncio.sleep(0.05)
    raise TimeoutError(f"store not SERVING after {timeout_s}s ({last}):\n{child.log_tail()}")


class TxmqTarget(Target):
    probe_messages = 0  # messages stored before the warm-up (the SDK probe)

    def __init__(
        self,
        workdir: Path,
        *,
        flush_mode: str,
        etcd: Etcd,
        client: str,
        concurrency: int,
        store_args: list[str] | None = None,
        store_module: str | None = None,
        sdk_options: dict[str, object] | None = None,
        replicas: int = 1,
        auth: bool = False,
    ) -> None:
        super().__init__(workdir)
        #: auth_enabled on the store; the producer signs every call as BENCH_USER, a
        #: normal user whose ACL allows Pub on the topic and group (docs/security.md).
        self.auth = auth
        #: > 1: a replicated store group (docs/replication.md) of this many replicas,
        #: min_in_sync 2; the producer talks to its leader, the followers copy.
        self.replicas = replicas
        self.followers: list[procs.Child] = []
        self.flush_mode = flush_mode
        self.etcd = etcd
        self.client = client  # "sdk" | "stubs"
        self.sdk_options = dict(sdk_options or {})
        self.store_args = list(store_args or [])
        if auth:
            import os

            os.environ["TXMQ_STORE_AUTH_SECRET_KEY"] = BENCH_SERVICE_SECRET  # inherited, not a flag
            self.store_args += ["--auth_enabled=true", "--auth_access_key", BENCH_SERVICE_KEY]
            self.sdk_options["credentials"] = signing.Credentials(BENCH_USER, BENCH_USER_SECRET)
        self.store_module = store_module
        self.channel: grpc.aio.Channel | None = None
        self.producer = None
        self._pool: ThreadPoolExecutor | None = None
        self.concurrency = concurrency
        self.fallback_note = ""

    @property
    def client_info(self) -> str:
        if self.client == "sdk":
            options = "".join(f", {k}={v!r}" for k, v in self.sdk_options.items())
            threads = f"called from {self.concurrency} threads{options}"
            return f"txmq SDK (sync txmq.Producer, {threads}), grpcio {grpc.__version__}"
        return f"raw stubs, grpc.aio {grpc.__version__}, one channel{self.fallback_note}"

    @property
    def client_path(self) -> str:
        return f"{self.client}@{self.concurrency}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.child.port}"

    def server_pids(self) -> list[int]:
        return super().server_pids() + [f.pid for f in self.followers if f.proc is not None]

    async def start(self) -> None:
        etcd_port = await asyncio.to_thread(self.etcd.start)
        if self.replicas > 1:
            await self._start_group(etcd_port)
        else:
            self.child = procs.start_store(
                self.workdir,
                flush_mode=self.flush_mode,
                etcd_port=etcd_port,
                extra_args=self.store_args,
                module=self.store_module,
            )
            self.channel = grpc.aio.insecure_channel(self.endpoint, options=GRPC_OPTIONS, interceptors=self._signing())
            await wait_serving(self.channel, self.child, timeout_s=30)
        if self.auth:
            await self._create_bench_user()
        admin = store_pb2_grpc.StoreAdminStub(self.channel)
        deadline = time.monotonic() + 30
        while True:  # a group takes writes once min_in_sync replicas are in sync
            try:
                await admin.CreateTopic(
                    store_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(name=TOPIC)), timeout=10
                )
                break
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        status = await admin.GetStoreStatus(store_pb2.GetStoreStatusRequest(), timeout=10)
        if status.flush_mode and status.flush_mode.lower() != self.flush_mode:
            raise RuntimeError(f"store reports flush_mode={status.flush_mode!r}, wanted {self.flush_mode}")
        self.store = store_pb2_grpc.StoreStub(self.channel)
        if self.client == "auto":
            self.client = "sdk" if sdk_available() else "stubs"
            if self.client == "sdk":
                # The SDK needs the Route service (QueryRoute) on its bootstrap endpoint;
                # fall back to the stubs when this store cannot answer it.
                try:
                    self.producer = await self._open_sdk()
                    await self._sdk_one(b"probe")
                    self.probe_messages = 1
                except Exception as e:  # noqa: BLE001
                    await self._close_sdk()
                    self.client = "stubs"
                    self.fallback_note = f" (SDK failed: {type(e).__name__}: {str(e)[:120]})"
        elif self.client == "sdk":
            self.producer = await self._open_sdk()

    def _signing(self) -> list[grpc.aio.ClientInterceptor]:
        """Set-up calls (topic, status) and the raw-stub client sign as the super user;
        the SDK producer signs as BENCH_USER."""
        return signing.async_interceptors(
            signing.Credentials(BENCH_SERVICE_KEY, BENCH_SERVICE_SECRET) if self.auth else None
        )

    async def _create_bench_user(self) -> None:
        auth = auth_pb2_grpc.AuthStub(self.channel)
        try:  # the scenarios share one etcd: the user may be there from the previous one
            await auth.CreateUser(
                auth_pb2.CreateUserRequest(user=auth_pb2.User(username=BENCH_USER, secret_key=BENCH_USER_SECRET)),
                timeout=10,
            )
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
        policies = [
            auth_pb2.Policy(
                resource=f"Topic:{TOPIC}", actions=[auth_pb2.ACTION_PUB], decision=auth_pb2.Policy.DECISION_ALLOW
            ),
            auth_pb2.Policy(
                resource=f"Group:{PRODUCER_GROUP}",
                actions=[auth_pb2.ACTION_PUB],
                decision=auth_pb2.Policy.DECISION_ALLOW,
            ),
        ]
        await auth.PutAcl(auth_pb2.PutAclRequest(acl=auth_pb2.Acl(username=BENCH_USER, policies=policies)), timeout=10)

    async def _start_group(self, etcd_port: int) -> None:
        prefix = f"/bench-{new_unique_id()[:12]}"
        children = []
        for i in range(self.replicas):
            sub = self.workdir / f"r{i}"
            sub.mkdir(parents=True, exist_ok=True)
            args = ["--store_id", "bench-group", "--replica_id", f"r{i}", "--min_in_sync", "2"]
            args += ["--etcd_prefix", prefix, *self.store_args]
            children.append(procs.start_store(sub, flush_mode=self.flush_mode, etcd_port=etcd_port, extra_args=args))
        deadline = time.monotonic() + 30
        leader = None
        while leader is None:
            for child in children:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{child.port}") as ch:
                    try:
                        st = await store_pb2_grpc.StoreReplicationStub(ch).GetReplicaStatus(
                            store_pb2.GetReplicaStatusRequest(), timeout=1
                        )
                    except grpc.aio.AioRpcError:
                        continue
                if st.role == "leader":
                    leader = child
            if leader is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("no leader in the bench store group after 30 s")
                await asyncio.sleep(0.1)
        self.child = leader
        self.followers = [c for c in children if c is not leader]
        self.channel = grpc.aio.insecure_channel(self.endpoint, options=GRPC_OPTIONS)
        await wait_serving(self.channel, self.child, timeout_s=30)

    # --- raw stubs ------------------------------------------------------------------

    def _msg(self, body: bytes) -> common_pb2.Message:
        # What a producer fills in: unique id and born time (the SDK does the same).
        return common_pb2.Message(
            topic=TOPIC,
            body=body,
            unique_id=new_unique_id(),
            born_timestamp_ms=int(time.time() * 1000),
        )

    async def _stub_one(self, body: bytes) -> None:
        resp = await self.store.SendMessage(
            store_pb2.SendMessageRequest(message=self._msg(body), producer_group=PRODUCER_GROUP),
            timeout=30,
        )
        if resp.result.status != store_pb2.SEND_STATUS_OK:
            raise RuntimeError(f"send status {store_pb2.SendStatus.Name(resp.result.status)}")

    async def _stub_batch(self, bodies: list[bytes]) -> None:
        resp = await self.store.SendBatch(
            store_pb2.SendBatchRequest(messages=[self._msg(b) for b in bodies], producer_group=PRODUCER_GROUP),
            timeout=30,
        )
        if len(resp.results) != len(bodies):
            raise RuntimeError(f"{len(resp.results)} results for {len(bodies)} messages")
        ok = store_pb2.SEND_STATUS_OK
        for r in resp.results:
            if r.status != ok:
                raise RuntimeError(f"send status {store_pb2.SendStatus.Name(r.status)}")

    # --- SDK --------------------------------------------------------------------------
    # txmq.Producer is synchronous (blocking gRPC); ``concurrency`` worker threads give the
    # same number of requests in flight as the asyncio clients of the peers.

    async def _open_sdk(self):
        import txmq

        prod = txmq.Producer(group=PRODUCER_GROUP, endpoint=self.endpoint, send_timeout=30.0, **self.sdk_options)
        prod.start()
        self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="txmq-sdk")
        self._txmq = txmq
        return prod

    @property
    def blocking(self) -> bool:  # type: ignore[override]
        return self.client == "sdk" and self.producer is not None

    def blocking_send_one(self, body: bytes) -> None:
        self._sdk_send_one(body)

    def blocking_send_batch(self, bodies: list[bytes]) -> None:
        self._sdk_send_batch(bodies)

    def _sdk_send_one(self, body: bytes) -> None:
        r = self.producer.send(self._txmq.Message(TOPIC, body))
        if r.status is not self._txmq.SendStatus.OK:
            raise RuntimeError(f"send status {r.status}")

    def _sdk_send_batch(self, bodies: list[bytes]) -> None:
        Message, ok = self._txmq.Message, self._txmq.SendStatus.OK
        rs = self.producer.send_batch([Message(TOPIC, b) for b in bodies])
        if len(rs) != len(bodies):
            raise RuntimeError(f"{len(rs)} results for {len(bodies)} messages")
        for r in rs:
            if r.status is not ok:
                raise RuntimeError(f"send status {r.status}")

    async def _sdk_one(self, body: bytes) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, self._sdk_send_one, body)

    async def _sdk_batch(self, bodies: list[bytes]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, self._sdk_send_batch, bodies)

    # --- the interface ------------------------------------------------------------------

    async def send_one(self, body: bytes) -> None:
        if self.client == "sdk":
            await self._sdk_one(body)
        else:
            await self._stub_one(body)

    async def send_batch(self, bodies: list[bytes]) -> None:
        if self.client == "sdk":
            await self._sdk_batch(bodies)
        else:
            await self._stub_batch(bodies)

    async def stored_count(self) -> int:
        resp = await self.store.GetQueueOffsets(store_pb2.GetQueueOffsetsRequest(topic=TOPIC), timeout=10)
        return sum(q.max_offset - q.min_offset for q in resp.queues)

    async def _close_sdk(self) -> None:
        if self.producer is not None:
            try:
                await asyncio.to_thread(self.producer.shutdown)
            except Exception:  # noqa: BLE001
                pass
            self.producer = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def stop(self) -> None:
        await self._close_sdk()
        if self.channel is not None:
            await self.channel.close()
        await super().stop()
        for follower in self.followers:
            await asyncio.to_thread(follower.stop)
