"""``Producer.recall``: a RecallMessage call to the store the handle names, retried
while that store (group) changes leader or cannot be reached, within the timeout."""

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


def recall(core: ClientCore, handle: str | RecallHandle, *, timeout: float) -> SendStatus:
    """Recall the delayed message ``handle`` names. OK: it will never be delivered;
    FLUSH_DISK_TIMEOUT / FLUSH_REPLICA_TIMEOUT: the recall is written on the store but
    not yet durable or replicated (recall again to be sure). Raises
    CODE_MESSAGE_ALREADY_DELIVERED when it is too late, CODE_MESSAGE_NOT_FOUND when the
    handle names no delayed message, CODE_ILLEGAL_ARGUMENT for a malformed handle."""
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, not {timeout}")
    named = handle if isinstance(handle, RecallHandle) else RecallHandle.decode(handle)
    request = store_pb2.RecallMessageRequest(
        topic=named.topic, commit_log_offset=named.commit_log_offset, unique_id=named.unique_id
    )
    deadline = time.monotonic() + timeout
    failures = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise UpstreamTimeoutError(f"no answer to the recall of {named.unique_id} within {timeout:.3f}s")
        try:
            route = core.routes.get(named.topic, timeout=left)
            stub = core.stub(route.store_address(named.store_id), store_pb2_grpc.StoreStub)
            resp = call(stub.RecallMessage, request, timeout=max(0.05, deadline - time.monotonic()))
            return SendStatus(resp.status)
        except TxmqError as err:
            if not err.retriable or time.monotonic() >= deadline:
                raise
            core.routes.mark_stale(named.topic)
            failures += 1
            wait = delay(failures, first=_FIRST_WAIT_S, maximum=_MAX_WAIT_S, after=err)
            log.info("recall of %s: %s; again in %.2fs", named.unique_id, err, wait)
            time.sleep(max(0.0, min(wait, deadline - time.monotonic())))
