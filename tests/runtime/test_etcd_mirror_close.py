"""Closing an EtcdMirror is bounded even when aetcd's watch will not stop (seen in CI: a
view closed right after it started hung its test's teardown for 120 s). Fault injection:
a fake client whose watch never yields and whose cancel never returns, as aetcd's does
while its watcher lock is held; the real mirror against real etcd is exercised by every
service test."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from txmq_runtime import etcd as etcd_module
from txmq_runtime.etcd import EtcdMirror


class _Snapshot(list):
    header = SimpleNamespace(revision=7)


class _StuckWatch:
    def __init__(self) -> None:
        self.cancel_calls = 0

    def __aiter__(self) -> _StuckWatch:
        return self

    async def __anext__(self) -> object:
        await asyncio.Event().wait()
        raise StopAsyncIteration

    async def cancel(self) -> None:
        self.cancel_calls += 1
        await asyncio.Event().wait()


class _Client:
    def __init__(self) -> None:
        self.watch = _StuckWatch()

    async def get_prefix(self, prefix: bytes) -> _Snapshot:
        return _Snapshot()

    async def watch_prefix(self, prefix: bytes, *, start_revision: int) -> _StuckWatch:
        assert start_revision == 8
        return self.watch


class _Sink:
    def reset(self, items: object) -> None:
        list(items)  # type: ignore[call-overload]

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...


async def test_close_returns_when_the_watch_will_not_stop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(etcd_module, "MIRROR_CLOSE_TIMEOUT_S", 0.05)
    client = _Client()
    mirror = EtcdMirror(client, prefix="/txmq", sink=_Sink())  # type: ignore[arg-type]
    await mirror.start(timeout_s=5)
    await asyncio.sleep(0)  # the mirror is iterating its watch
    with caplog.at_level(logging.WARNING, logger="txmq.etcd"):
        await asyncio.wait_for(mirror.close(), 5)  # a hang guard, not a timing claim
    assert client.watch.cancel_calls == 1
    assert "cancelling the etcd watch on /txmq timed out" in caplog.text
    assert "did not stop" not in caplog.text  # the watch's bounded cancel ended the task
    await mirror.close()  # closing twice is harmless


async def test_closing_a_client_is_bounded(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(etcd_module, "MIRROR_CLOSE_TIMEOUT_S", 0.05)

    class _StuckClient:
        async def close(self) -> None:
            await asyncio.Event().wait()  # aetcd's watcher shutdown waiting on its lock

    with caplog.at_level(logging.WARNING, logger="txmq.etcd"):
        await asyncio.wait_for(etcd_module.close_client(_StuckClient()), 5)  # type: ignore[arg-type]
    assert "closing the etcd client took over" in caplog.text
