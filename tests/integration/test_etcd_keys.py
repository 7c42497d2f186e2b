"""The etcd key layout and endpoint parsing (no etcd needed)."""

from __future__ import annotations

import pytest

from txmq.v1 import common_pb2
from txmq_runtime.etcd import etcd_client
from txmq_runtime.registry import EtcdKeys, ServiceKey, StoreTopicKey

STORE = common_pb2.SERVICE_KIND_STORE
PULL = common_pb2.SERVICE_KIND_PULL


def test_key_layout() -> None:
    keys = EtcdKeys("/txmq")
    assert keys.service(STORE, "store-0") == "/txmq/services/store/store-0"
    assert keys.store_topic("store-0", "Orders") == "/txmq/stores/store-0/topics/Orders"
    assert keys.parse("/txmq/services/pull/p1") == ServiceKey(PULL, "p1")
    assert keys.parse("/txmq/stores/store-0/topics/Orders") == StoreTopicKey("store-0", "Orders")
    assert keys.parse("/txmq/producers/g/c1") is None
    assert keys.parse("/txmqx/services/pull/p1") is None
    assert keys.parse("/txmq/services/nosuchkind/x") is None
    with pytest.raises(ValueError):
        keys.service(STORE, "a/b")
    with pytest.raises(ValueError):
        EtcdKeys("/txmq/")


def test_etcd_client_endpoint_forms() -> None:
    with pytest.raises(ValueError, match="IP addresses"):
        etcd_client("etcd-a:2379,etcd-b:2379")
    with pytest.raises(ValueError, match="host:port"):
        etcd_client("127.0.0.1")
    with pytest.raises(ValueError, match="no etcd endpoint"):
        etcd_client(" , ")
