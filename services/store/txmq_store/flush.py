"""Commit-log flushing.

- Async mode (``PeriodicFlusher``): a background thread fsyncs whatever was appended,
  every ``interval_s``. Sends are acknowledged once written (page cache).
- Sync mode (``GroupCommit``): a send waits until an fsync covers its bytes. One fsync
  runs at a time in a worker thread, so the event loop keeps appending while it runs;
  everything appended meanwhile is covered by the next fsync (group commit). After each
  fsync, ``on_durable(offset)`` runs on the loop: the store dispatches the now-durable
  records, so consumers only ever see durable messages.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .commitlog import CommitLog

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
                self._commitlog.flush(self._commitlog.write_offset)
            except OSError:
                log.exception("commit log flush failed; retrying in %.3fs", self._interval_s)

    async def stop(self) -> None:
        """Stop the thread and flush what is left."""
        self._stop.set()
        await asyncio.to_thread(self._thread.join)
        self._commitlog.flush(self._commitlog.write_offset)


class GroupCommit:
    def __init__(self, commitlog: CommitLog, *, on_durable: Callable[[int], None]) -> None:
        self._commitlog = commitlog
        self._on_durable = on_durable
        # (end offset, future); ends ascend because appends happen in loop order.
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="txmq-fsync")
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="txmq-group-commit")

    def request(self, end_offset: int) -> asyncio.Future[None]:
        """A future resolved once ``[0, end_offset)`` is durable (and dispatched)."""
        # Always queued, even when already flushed: the records are dispatched by
        # on_durable, which must run before the send is acknowledged.
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end_offset, fut))
        self._wakeup.set()
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not self._waiters:
                if self._stopping:
                    return
                continue
            target = self._commitlog.write_offset
            try:
                await loop.run_in_executor(self._executor, self._commitlog.flush, target)
                self._on_durable(target)
            except Exception as exc:  # noqa: BLE001 - handed to the waiting sends
                log.exception("commit log flush/dispatch failed")
                self._fail_upto(target, exc)
                continue
            waiters = self._waiters
            while waiters and waiters[0][0] <= target:
                fut = waiters.popleft()[1]
                if not fut.done():
                    fut.set_result(None)
            if waiters or self._stopping:
                self._wakeup.set()

    def _fail_upto(self, target: int, exc: BaseException) -> None:
        while self._waiters and self._waiters[0][0] <= target:
            fut = self._waiters.popleft()[1]
            if not fut.done():
                fut.set_exception(exc)
        if self._waiters:
            self._wakeup.set()

    async def stop(self) -> None:
        """Let pending flushes finish, then flush and dispatch what is left."""
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        self._executor.shutdown(wait=True)
        end = self._commitlog.write_offset
        self._commitlog.flush(end)
        self._on_durable(end)
