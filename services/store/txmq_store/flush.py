"""Commit-log flushing.

- Async mode (``PeriodicFlusher``): a background thread fsyncs whatever was appended,
  every ``interval_s``. Sends are acknowledged once written (page cache).
- Sync mode (``GroupCommit``): a send waits until an fsync covers its bytes. One fsync
  runs at a time in a dedicated thread, so the event loop keeps appending while it runs;
  everything appended meanwhile is covered by the next fsync (group commit). After each
  fsync, ``on_durable(offset)`` runs on the loop: the store dispatches the now-durable
  records, so consumers only ever see durable messages.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable

from .commitlog import CommitLog
from .metrics import timed_flush

log = logging.getLogger("txmq.store.flush")


class PeriodicFlusher:
    def __init__(self, commitlog: CommitLog, *, interval_s: float) -> None:
        self._commitlog = commitlog
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txmq-commitlog-flush", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                timed_flush(self._commitlog, self._commitlog.write_offset)
            except OSError as exc:
                log.error("commit log flush failed (%s); retrying in %.3fs", exc, self._interval_s)

    async def stop(self) -> None:
        """Stop the thread and flush what is left."""
        self._stop.set()
        await asyncio.to_thread(self._thread.join)
        self._commitlog.flush(self._commitlog.write_offset)


class GroupCommit:
    """One fsync thread; each flush covers everything appended before it started, and
    its completion reaches the loop as one ``call_soon_threadsafe`` that dispatches and
    resolves every waiter it covers (no executor future per flush)."""

    def __init__(self, commitlog: CommitLog, *, on_durable: Callable[[int], None]) -> None:
        self._commitlog = commitlog
        self._on_durable = on_durable
        # (end offset, future); ends ascend because appends happen in loop order.
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._wanted = threading.Event()  # set: a waiter came after the last flush began
        self._thread = threading.Thread(target=self._run, name="txmq-fsync", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread.start()

    def request(self, end_offset: int) -> asyncio.Future[None]:
        """A future resolved once ``[0, end_offset)`` is durable (and dispatched)."""
        # Always queued, even when already flushed: the records are dispatched by
        # on_durable, which must run before the send is acknowledged.
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append((end_offset, fut))
        self._wanted.set()
        return fut

    def _run(self) -> None:
        """The fsync thread: flush whatever is appended, report, repeat while wanted."""
        assert self._loop is not None
        loop, commitlog, wanted = self._loop, self._commitlog, self._wanted
        while True:
            wanted.wait()
            wanted.clear()  # before reading the target: a later request flushes again
            if self._stopping:
                return  # stop() flushes and resolves what is left
            target = commitlog.write_offset
            try:
                timed_flush(commitlog, target)
            except Exception as exc:  # noqa: BLE001 - handed to the waiting sends
                report: tuple[Callable[..., None], ...] = (self._failed, target, exc)
            else:
                report = (self._flushed, target)
            try:
                loop.call_soon_threadsafe(*report)
            except RuntimeError:  # the loop is closed (the store was not stopped)
                return

    def _flushed(self, target: int) -> None:
        """On the loop: ``[0, target)`` is durable."""
        try:
            self._on_durable(target)
        except Exception as exc:  # noqa: BLE001 - handed to the waiting sends
            self._failed(target, exc)
            return
        waiters = self._waiters
        while waiters and waiters[0][0] <= target:
            fut = waiters.popleft()[1]
            if not fut.done():
                fut.set_result(None)

    def _failed(self, target: int, exc: BaseException) -> None:
        if isinstance(exc, OSError):  # the disk's answer, not a bug: one line
            log.error("commit log flush failed: %s", exc)
        else:
            log.error("commit log dispatch failed", exc_info=exc)
        self._fail_upto(target, exc)

    def _fail_upto(self, target: int, exc: BaseException) -> None:
        while self._waiters and self._waiters[0][0] <= target:
            fut = self._waiters.popleft()[1]
            if not fut.done():
                fut.set_exception(exc)
        if self._waiters:
            self._wanted.set()

    async def stop(self) -> None:
        """Let a running flush finish, then flush and dispatch what is left."""
        self._stopping = True
        self._wanted.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)
        end = self._commitlog.write_offset
        self._commitlog.flush(end)
        self._on_durable(end)
        while self._waiters:
            fut = self._waiters.popleft()[1]
            if not fut.done():
                fut.set_result(None)
