"""Route look-ups for topics a real store serves, from every service's address."""

from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support import LocalCluster, ServiceFactory

from txmq.errors import TxmqError
from txmq.v1 import common_pb2, errors_pb2, route_pb2, route_pb2_grpc, store_pb2, store_pb2_grpc


def admin(address: str, method: str, request):
    with grpc.insecure_channel(address) as channel:
        return getattr(store_pb2_grpc.StoreAdminStub(channel), method)(request, timeout=10)


def query_route(address: str, topic: str) -> route_pb2.QueryRouteResponse:
    with grpc.insecure_channel(address) as channel:
        return route_pb2_grpc.RouteStub(channel).QueryRoute(route_pb2.QueryRouteRequest(topic=topic), timeout=10)


def route_or_none(address: str, topic: str) -> route_pb2.QueryRouteResponse | None:
    """The route, or None while the topic is unknown (any other error fails the test)."""
    try:
        return query_route(address, topic)
    except grpc.RpcError as err:
        if TxmqError.from_rpc_error(err).code != errors_pb2.CODE_TOPIC_NOT_FOUND:
            raise
        return None


def eventually(check, *, timeout_s: float = 20.0):
    """Changes after the first look-up reach other services through their etcd watch:
    look again until ``check`` returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)
    return result


def queues_of(response: route_pb2.QueryRouteResponse) -> list[tuple]:
    return [(q.store_id, q.store_address, q.read_queue_nums, q.write_queue_nums, q.perm) for q in response.queues]


def test_a_created_topic_is_routed_from_every_service(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    pull = service_factory.start("pull")
    txcheck = service_factory.start("txcheck")
    addresses = [store.address, pull.address, txcheck.address]
    store_id = "store-0"

    admin(
        store.address,
        "CreateTopic",
        store_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(name="RoutedTopic", read_queue_nums=4, write_queue_nums=4)
        ),
    )
    for address in addresses:
        # The store publishes topics to etcd just after CreateTopic returns: allow for it.
        response = eventually(lambda a=address: route_or_none(a, "RoutedTopic"))
        assert response.topic == "RoutedTopic"
        assert queues_of(response) == [(store_id, store.address, 4, 4, 6)]
        assert [e.address for e in response.store_endpoints] == [store.address]
        assert [e.instance_id for e in response.store_endpoints] == [store_id]
        assert [e.address for e in response.pull_endpoints] == [pull.address]
        assert [e.address for e in response.txcheck_endpoints] == [txcheck.address]

    admin(
        store.address,
        "UpdateTopic",
        store_pb2.UpdateTopicRequest(
            topic=common_pb2.TopicConfig(name="RoutedTopic", read_queue_nums=2, write_queue_nums=2, perm=4)
        ),
    )
    updated = [(store_id, store.address, 2, 2, 4)]
    for address in addresses:
        eventually(lambda a=address: queues_of(query_route(a, "RoutedTopic")) == updated)

    admin(store.address, "DeleteTopic", store_pb2.DeleteTopicRequest(name="RoutedTopic"))
    for address in addresses:
        eventually(lambda a=address: route_or_none(a, "RoutedTopic") is None)


def test_a_stopped_store_leaves_the_routes(service_factory: ServiceFactory) -> None:
    store = service_factory.store()
    pull = service_factory.start("pull")
    admin(store.address, "CreateTopic", store_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(name="Gone")))
    eventually(lambda: route_or_none(pull.address, "Gone"))

    assert store.stop() == 0
    eventually(lambda: route_or_none(pull.address, "Gone") is None)

    store.restart()  # same data: the topic is served again, under a new lease
    assert queues_of(query_route(pull.address, "Gone"))[0][:2] == ("store-0", store.address)


def test_session_cluster_fixture(txmq_cluster: LocalCluster) -> None:
    for address in (txmq_cluster.store_address, txmq_cluster.pull_address, txmq_cluster.txcheck_address):
        with grpc.insecure_channel(address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    admin(
        txmq_cluster.store_address,
        "CreateTopic",
        store_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(name="FixtureTopic", read_queue_nums=3, write_queue_nums=3)
        ),
    )
    response = eventually(lambda: route_or_none(txmq_cluster.bootstrap, "FixtureTopic"))
    assert [q.store_address for q in response.queues] == [txmq_cluster.store_address]
    assert [e.address for e in response.pull_endpoints] == [txmq_cluster.pull_address]
    assert [e.address for e in response.txcheck_endpoints] == [txmq_cluster.txcheck_address]
