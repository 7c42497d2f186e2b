"""A no-op store for the ``grpc-null`` scenario: the same gRPC surface the benchmark uses
(health, StoreAdmin.CreateTopic/GetStoreStatus, Route.QueryRoute, Store.SendMessage/
SendBatch/GetQueueOffsets) on grpc.aio, storing nothing. Its throughput is the ceiling that
gRPC plus the Python client allow on this machine; the gap between it and the real store
is the store's own work.

    python -m bench.null_store --host 127.0.0.1 --port 0 [--flush_mode ...]  (store flags are accepted)
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import grpc
from grpc_health.v1 import _async as health_async
from grpc_health.v1 import health_pb2, health_pb2_grpc

from txmq.v1 import common_pb2, route_pb2, route_pb2_grpc, store_pb2, store_pb2_grpc

STORE_ID = "null-0"
QUEUES = 4


class _State:
    def __init__(self, address: str, flush_mode: str) -> None:
        self.address = address
        self.flush_mode = flush_mode
        self.count = 0
        self.topics: dict[str, common_pb2.TopicConfig] = {}


class Store(store_pb2_grpc.StoreServicer):
    def __init__(self, st: _State) -> None:
        self.st = st

    def _result(self, m: common_pb2.Message) -> store_pb2.SendResult:
        self.st.count += 1
        return store_pb2.SendResult(status=store_pb2.SEND_STATUS_OK, msg_id=m.unique_id)

    async def SendMessage(self, request, context):
        return store_pb2.SendMessageResponse(result=self._result(request.message))

    async def SendBatch(self, request, context):
        return store_pb2.SendBatchResponse(results=[self._result(m) for m in request.messages])

    async def GetQueueOffsets(self, request, context):
        return store_pb2.GetQueueOffsetsResponse(
            topic=request.topic, queues=[store_pb2.QueueOffsets(queue_id=0, max_offset=self.st.count)]
        )


class Admin(store_pb2_grpc.StoreAdminServicer):
    def __init__(self, st: _State) -> None:
        self.st = st

    async def CreateTopic(self, request, context):
        self.st.topics[request.topic.name] = request.topic
        return store_pb2.TopicResponse(topic=request.topic)

    async def GetStoreStatus(self, request, context):
        return store_pb2.GetStoreStatusResponse(store_id=STORE_ID, flush_mode=self.st.flush_mode)


class Route(route_pb2_grpc.RouteServicer):
    def __init__(self, st: _State) -> None:
        self.st = st

    async def QueryRoute(self, request, context):
        queues = []
        if request.topic in self.st.topics:
            queues = [
                route_pb2.QueueData(
                    store_id=STORE_ID,
                    store_address=self.st.address,
                    read_queue_nums=QUEUES,
                    write_queue_nums=QUEUES,
                    perm=6,
                )
            ]
        return route_pb2.QueryRouteResponse(topic=request.topic, queues=queues)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--flush_mode", default="async")
    args, _ = ap.parse_known_args()  # the store's other flags are accepted and ignored
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    st = _State(f"{args.host}:{port}", args.flush_mode)
    store_pb2_grpc.add_StoreServicer_to_server(Store(st), server)
    store_pb2_grpc.add_StoreAdminServicer_to_server(Admin(st), server)
    route_pb2_grpc.add_RouteServicer_to_server(Route(st), server)
    health = health_async.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    await server.start()
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


if __name__ == "__main__":
    asyncio.run(main())
