"""etcd access shared by every service: the client, the retry policy, and a watched
local copy of a key prefix.

The client is ``aetcd`` (asyncio, current protobuf). ``etcd3`` is not an option: its last
release (0.12.0, 2020) ships stubs that fail to import with protobuf >= 4, and its
workarounds (pure-Python protobuf, ~22x slower, or pinning protobuf 3.x) break the code
that current grpcio-tools generates for our own protos.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Iterable
from typing import Protocol

import aetcd
from tenacity import AsyncRetrying, retry_if_exception_type, retry_if_result, stop_after_delay, stop_never
from tenacity.retry import retry_base

from txmq_runtime import keepalive
from txmq_runtime.backoff import BackoffPolicy
from txmq_runtime.backoff import retrying as backoff_retrying
from txmq_runtime.etcd_access import EtcdAccess, EtcdClient
from txmq_runtime.net import join_host_port, split_host_port

log = logging.getLogger("txmq.etcd")

#: How long closing a mirror waits for its watch to stop.
MIRROR_CLOSE_TIMEOUT_S = 3.0

#: Failures worth retrying: etcd unreachable, slow, restarting, or a compacted watch.
RETRYABLE = (aetcd.ClientError, TimeoutError)

_CALL_TIMEOUT_S = 5.0
#: Between attempts of an etcd call: 100 ms doubling to 2 s, plus up to 100 ms of jitter.
ETCD_BACKOFF = BackoffPolicy(first_ms=100, max_ms=2_000, jitter_ms=100)
# Reconnect quickly after an etcd restart instead of gRPC's default (up to 120 s).
_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1_000,
}


def etcd_client(endpoints: str, access: EtcdAccess | None = None) -> aetcd.Client:
    """A client for ``endpoints`` (comma-separated ``host:port``; ``http://`` and
    ``https://`` allowed), through etcd's checks with ``access`` (TLS, client certificate,
    user: ``txmq_runtime.etcd_access``; None: plaintext, no user).

    One endpoint may be any host name. Several must be IP addresses: they become one
    gRPC ``ipv4:``/``ipv6:`` target, so the channel itself fails over between members.
    (For host names, use one DNS name that resolves to every member.)
    """
    access = access or EtcdAccess()
    hosts = [split_host_port(_bare(e)) for e in endpoints.split(",") if e.strip()]
    if not hosts:
        raise ValueError("no etcd endpoint given")
    if access.ca is None and any(e.strip().startswith("https://") for e in endpoints.split(",")):
        raise ValueError(f"etcd endpoints {endpoints!r} are https:// but no etcd_tls_ca_file is given")
    if len(hosts) == 1:
        host, port = hosts[0]
        host = f"[{host}]" if ":" in host else host  # aetcd dials f"{host}:{port}"
        return EtcdClient(host=host, port=port, access=access, timeout=_CALL_TIMEOUT_S, options=_channel_options())
    try:
        versions = {ipaddress.ip_address(host).version for host, _ in hosts}
    except ValueError:
        raise ValueError(
            f"several etcd endpoints must be IP addresses, got {endpoints!r}; "
            "for host names give one DNS name that resolves to every member"
        ) from None
    if len(versions) != 1:
        raise ValueError(f"etcd endpoints mix IPv4 and IPv6: {endpoints!r}")
    scheme = f"ipv{versions.pop()}"
    target = f"{scheme}:" + ",".join(join_host_port(h, p) for h, p in hosts)
    # aetcd dials f"{host}:{port}": hand it the target split at its last colon.
    head, _, last_port = target.rpartition(":")
    return EtcdClient(
        host=head, port=int(last_port), access=access, timeout=_CALL_TIMEOUT_S, options=_channel_options()
    )


def _bare(endpoint: str) -> str:
    return endpoint.strip().removeprefix("http://").removeprefix("https://")


def _channel_options() -> dict[str, int]:
    """Quick reconnects, and the process's keepalive towards etcd (txmq_runtime.keepalive)."""
    return {**_CHANNEL_OPTIONS, **dict(keepalive.current().etcd_options())}


def retrying(*, give_up_after_s: float | None = None, again_on_return: bool = False) -> AsyncRetrying:
    """The policy for etcd calls: ``ETCD_BACKOFF`` (exponential with jitter, capped at 2 s);
    forever unless ``give_up_after_s`` is given. ``again_on_return``: also run the call
    again when it returns (for loops that should never end). Cancellation is never
    retried."""
    retry: retry_base = retry_if_exception_type(RETRYABLE)
    if again_on_return:
        retry = retry | retry_if_result(lambda _: True)
    return backoff_retrying(
        ETCD_BACKOFF,
        retry=retry,
        stop=stop_never if give_up_after_s is None else stop_after_delay(give_up_after_s),
        logger=log,
    )


class MirrorSink(Protocol):
    """Receives a prefix's contents: a full snapshot, then every change after it."""

    def reset(self, items: Iterable[tuple[str, bytes]]) -> None: ...

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...


async def close_client(client: aetcd.Client) -> None:
    """Close an etcd client, bounded: aetcd's close shuts its watcher down under the
    watcher's lock, which a watch cancelled mid-creation can hold for ever."""
    try:
        await asyncio.wait_for(client.close(), 2 * MIRROR_CLOSE_TIMEOUT_S)
    except TimeoutError:
        log.warning("closing the etcd client took over %s s; left behind", 2 * MIRROR_CLOSE_TIMEOUT_S)


class EtcdMirror:
    """Keeps ``sink`` equal to everything under ``prefix``: read the prefix, then watch it
    from the next revision; on any failure (etcd gone, compaction) read it again.
    While etcd is unreachable the sink keeps its last contents.

    ``range_end``: mirror the key range [prefix, range_end) instead (several neighbouring
    prefixes in one read and one watch, and nothing between or beyond them, which an etcd
    role may keep from this service)."""

    def __init__(self, client: aetcd.Client, *, prefix: str, sink: MirrorSink, range_end: str | None = None) -> None:
        self._client = client
        self._prefix = prefix.encode()
        self._range_end = None if range_end is None else range_end.encode()
        self._sink = sink
        self._loaded = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The last failure worth retrying: the cause of start's TimeoutError.
        self._last_error: BaseException | None = None

    async def start(self, *, timeout_s: float) -> None:
        """Start mirroring; return once the first snapshot is in the sink."""
        self._task = asyncio.create_task(retrying(again_on_return=True)(self._attempt), name="etcd-mirror")
        loaded = asyncio.create_task(self._loaded.wait())
        await asyncio.wait({loaded, self._task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if loaded.done():
            return
        loaded.cancel()
        task, self._task = self._task, None
        if task.done():
            task.result()  # a failure that is not worth retrying: raise it
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise TimeoutError(f"could not read {self._prefix.decode()!r} from etcd within {timeout_s} s") from (
            self._last_error
        )

    async def close(self) -> None:
        """Stop mirroring. Bounded: a watch cancelled while aetcd's watcher is busy (a watch
        being created, a cancel in flight) can wait on aetcd's internal lock for ever; after
        MIRROR_CLOSE_TIMEOUT_S the task is left to the client's close, which ends it."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # The watch's own cancel is bounded by the timeout (below); twice that is the last resort.
        done, _ = await asyncio.wait({task}, timeout=2 * MIRROR_CLOSE_TIMEOUT_S)
        if not done:
            log.warning(
                "etcd watch on %s did not stop within %s s; left to the client's close",
                self._prefix.decode(), 2 * MIRROR_CLOSE_TIMEOUT_S,
            )  # fmt: skip

    async def _attempt(self) -> None:
        try:
            await self._sync_then_watch()
        except RETRYABLE as exc:
            self._last_error = exc
            raise

    async def _sync_then_watch(self) -> None:
        if self._range_end is None:
            snapshot = await self._client.get_prefix(self._prefix)
        else:
            snapshot = await self._client.get_range(self._prefix, self._range_end)
        self._sink.reset((kv.key.decode(), kv.value) for kv in snapshot)
        self._loaded.set()
        start_revision = snapshot.header.revision + 1
        if self._range_end is None:
            watch = await self._client.watch_prefix(self._prefix, start_revision=start_revision)
        else:
            watch = await self._client.watch(self._prefix, range_end=self._range_end, start_revision=start_revision)
        try:
            async for event in watch:
                key = event.kv.key.decode()
                if event.kind == aetcd.EventKind.PUT:
                    self._sink.put(key, event.kv.value)
                else:
                    self._sink.delete(key)
        finally:
            try:  # bounded, as close() is (the watch may be cancelled mid-creation)
                await asyncio.wait_for(watch.cancel(), MIRROR_CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("cancelling the etcd watch on %s timed out", self._prefix.decode())
        log.info("etcd watch on %s ended; reading it again", self._prefix.decode())
