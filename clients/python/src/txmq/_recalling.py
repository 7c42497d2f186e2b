"""``Producer.recall`` (threaded and asyncio): a RecallMessage call to the store the
handle names, retried while that store (group) changes leader or cannot be reached,
within the timeout. Both front ends run the same steps: ``prepare``, then per failed
try ``Retry.wait`` (raises when the failure is final)."""

from __future__ import annotations

import logging
import time

from txmq._backoff import delay
from txmq._client import ClientCore, call
from txmq.errors import TxmqError, UpstreamTimeoutError
from txmq.message import SendStatus
from txmq.recall import RecallHandle
from txmq.v1 import store_pb2, store_pb2_grpc

log = logging.getLogger("txmq.producer")

_FIRST_WAIT_S = 0.1
_MAX_WAIT_S = 1.0


def prepare(handle: str | RecallHandle) -> tuple[RecallHandle, store_pb2.RecallMessageRequest]:
    """The handle (CODE_ILLEGAL_ARGUMENT when malformed) and the store's request."""
    named = handle if isinstance(handle, RecallHandle) else RecallHandle.decode(handle)
    return named, store_pb2.RecallMessageRequest(
        topic=named.topic, commit_log_offset=named.commit_log_offset, unique_id=named.unique_id
    )


class Retry:
    """The deadline and the waits of one recall."""

    def __init__(self, named: RecallHandle, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, not {timeout}")
        self.named = named
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.failures = 0

    def left(self) -> float:
        """Seconds left; raises UpstreamTimeoutError when none are."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise UpstreamTimeoutError(f"no answer to the recall of {self.named.unique_id} within {self.timeout:.3f}s")
        return left

    def wait(self, err: TxmqError) -> float:
        """The wait before the next try after ``err``; raises ``err`` when it is final."""
        if not err.retriable or time.monotonic() >= self.deadline:
            raise err
        self.failures += 1
        wait = delay(self.failures, first=_FIRST_WAIT_S, maximum=_MAX_WAIT_S, after=err)
        log.info("recall of %s: %s; again in %.2fs", self.named.unique_id, err, wait)
        return max(0.0, min(wait, self.deadline - time.monotonic()))


def recall(core: ClientCore, handle: str | RecallHandle, *, timeout: float) -> SendStatus:
    """Recall the delayed message ``handle`` names. OK: it will never be delivered;
    FLUSH_DISK_TIMEOUT / FLUSH_REPLICA_TIMEOUT: the recall is written on the store but
    not yet durable or replicated (recall again to be sure). Raises
    CODE_MESSAGE_ALREADY_DELIVERED when it is too late, CODE_MESSAGE_NOT_FOUND when the
    handle names no delayed message, CODE_ILLEGAL_ARGUMENT for a malformed handle."""
    named, request = prepare(handle)
    retry = Retry(named, timeout)
    while True:
        try:
            route = core.routes.get(named.topic, timeout=retry.left())
            stub = core.stub(route.store_address(named.store_id), store_pb2_grpc.StoreStub)
            return SendStatus(call(stub.RecallMessage, request, timeout=max(0.05, retry.left())).status)
        except TxmqError as err:
            core.routes.mark_stale(named.topic)
            time.sleep(retry.wait(err))
