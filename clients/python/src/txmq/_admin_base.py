"""What every part of ``txmq.Admin`` builds on: the client, the live stores, and one call
to one store whose errors name it.

``Admin`` is put together from one class per group of calls, each on ``AdminBase``:
``TopicAdmin`` (``txmq._admin_topics``), ``GroupAdmin`` (``txmq._admin_groups``),
``MessageAdmin`` (``txmq._admin_messages``: messages and dead letters), ``AuthAdmin``
(``txmq._admin_auth``: users and ACLs) and ``ClusterAdmin`` (``txmq._admin_cluster``:
stores and store groups).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self, TypeVar

from txmq._client import ClientCore, call
from txmq.errors import NotFoundError, TxmqError, UnavailableError
from txmq.models import Endpoint, ServiceKind, TopicRoute
from txmq.signing import Credentials
from txmq.tls import TlsConfig
from txmq.v1 import errors_pb2, store_pb2_grpc
from txmq.validation import check_topic

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True, order=True)
class Store:
    store_id: str
    address: str


class AdminBase:
    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 5.0,
        tls: TlsConfig | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.endpoint = endpoint
        self._timeout = timeout
        # Administration wants the current state: routes are looked up on every use
        # (the cache only serves as a fallback when no route server answers).
        self._core = ClientCore(endpoint, route_refresh_interval=0.0, tls=tls, credentials=credentials)

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def endpoints(self, kind: ServiceKind | None = None) -> list[Endpoint]:
        """Live service instances, optionally of one kind."""
        return self._core.routes.endpoints(kind, timeout=self._timeout)

    def topic_route(self, topic: str) -> TopicRoute:
        """Which stores serve the topic's queues (fresh, not cached)."""
        check_topic(topic)
        return self._core.routes.get(topic, timeout=self._timeout)

    # -- internals ---------------------------------------------------------------------

    def _call(self, store: Store, method: Callable[..., R], request: object) -> R:
        """``method`` of ``store``'s stub; its errors name the store (many calls fan out)."""
        try:
            return call(method, request, timeout=self._timeout)
        except TxmqError as err:
            err.metadata.setdefault("store_id", store.store_id)
            raise

    def _admin_stub(self, store: Store) -> store_pb2_grpc.StoreAdminStub:
        return self._core.stub(store.address, store_pb2_grpc.StoreAdminStub)

    def _store_stub(self, store: Store) -> store_pb2_grpc.StoreStub:
        return self._core.stub(store.address, store_pb2_grpc.StoreStub)

    def _stores(self, store_id: str | None) -> list[Store]:
        stores = sorted(Store(e.instance_id, e.address) for e in self.endpoints(ServiceKind.STORE))
        if store_id is not None:
            stores = [s for s in stores if s.store_id == store_id]
            if not stores:
                raise NotFoundError(
                    f"no live store {store_id!r}",
                    code=errors_pb2.CODE_STORE_NOT_FOUND,
                    metadata={"store_id": store_id},
                )
        if not stores:
            raise UnavailableError("no store is registered", code=errors_pb2.CODE_SERVICE_NOT_READY)
        return stores

    def _stores_of_topic(self, topic: str) -> list[Store]:
        route = self.topic_route(topic)
        if not route.queues:
            raise NotFoundError(f"topic {topic!r} does not exist", code=errors_pb2.CODE_TOPIC_NOT_FOUND)
        return sorted({Store(q.store_id, q.store_address) for q in route.queues})

    def _store_at(self, host: str, port: int) -> Store:
        """The store listening at host:port (as an offsetMsgId encodes it); store
        addresses may be host names, so they are resolved before comparing."""
        want = (ipaddress.ip_address(host), port)
        stores = self._stores(None)
        for store in stores:
            if _resolve(store.address) == want:
                return store
        raise NotFoundError(
            f"no live store at {host}:{port}",
            code=errors_pb2.CODE_STORE_NOT_FOUND,
            metadata={"address": f"{host}:{port}"},
        )

    def _first_store_having(self, store_id: str | None, fn: Callable[[Store], T]) -> T:
        missing: NotFoundError | None = None
        for store in self._stores(store_id):
            try:
                return fn(store)
            except NotFoundError as err:
                missing = err
        assert missing is not None  # _stores never returns an empty list
        raise missing

    def _on_stores_having(self, store_id: str | None, fn: Callable[[Store], T]) -> list[T]:
        """``fn`` on each store; stores without the object are skipped, unless none has it."""
        results: list[T] = []
        missing: NotFoundError | None = None
        for store in self._stores(store_id):
            try:
                results.append(fn(store))
            except NotFoundError as err:
                missing = err
        if not results:
            assert missing is not None
            raise missing
        return results


def _resolve(address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host), int(port)
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)), int(port)
    except (OSError, ValueError):
        return None
