"""The push consumer's membership of its group (docs/consumers.md "Membership" and
"Consistent subscriptions").

Every heartbeat goes to every pull instance named in the routes of the subscribed
topics (membership is per pull instance and in memory) and carries the subscriptions;
the union of the live ids they answer is the membership the rebalance splits the queues
over (``txmq._rebalance.MembershipView``). A consumer no instance heard for a while, or
whose subscription the group refuses, gives every queue up: the rest of the group takes
them.
"""

from __future__ import annotations

import logging

from txmq._push_context import PushContext, retry_topic_absent
from txmq.errors import TxmqError
from txmq.v1 import errors_pb2

log = logging.getLogger("txmq.consumer")

# Heartbeat intervals without any answer after which a consumer gives its queues up
# (the pull service forgets a consumer after 3 of the default 10 s intervals).
_SILENT_HEARTBEATS = 3


class GroupMembership:
    def __init__(self, consumer: PushContext) -> None:
        self._c = consumer
        self._conflict: TxmqError | None = None

    def pull_addresses(self, topics: list[str]) -> list[str]:
        """The pull instances serving ``topics`` (membership is kept per instance)."""
        c = self._c
        assert c._client is not None
        addresses: set[str] = set()
        for topic in topics:
            what = f"finding the pull instances of topic {topic}"
            try:
                addresses.update(c._client.pull_addresses(topic))
            except TxmqError as err:
                if not retry_topic_absent(c._config, topic, err):
                    c._handle(("pull-addresses", topic), what, err)
            else:
                c._failures.recovered(("pull-addresses", topic), f"consumer {c.client_id}: {what}")
        return sorted(addresses)

    def heartbeat(self, now: float) -> bool | None:
        """Heartbeat every pull instance of the subscribed topics; whether the
        membership changed, or None when no instance answered."""
        c = self._c
        assert c._client is not None
        with c._lock:
            topics = sorted(c._subs)
            subs = [c._subs[topic] for topic in topics]
        addresses = self.pull_addresses(topics)
        if not addresses:
            return None
        try:
            members = c._client.heartbeat(addresses, c.client_id, topics, subscriptions=subs)
        except TxmqError as err:
            if err.code != errors_pb2.CODE_SUBSCRIPTION_CONFLICT:
                raise
            self.set_conflict(err)
            return None
        if members is None:
            return None
        self.set_conflict(None)
        changed = c._view.update(members, now)
        if changed:
            log.info("consumer %s: group %s is now %s", c.client_id, c.group, members)
        return changed

    def unheard(self, silent_s: float) -> None:
        """No pull instance heard a heartbeat for ``silent_s``: past a few intervals the
        group has probably given our queues to others by now, so stop until a heartbeat
        gets through again (then the hand-over rule applies)."""
        c = self._c
        if silent_s <= _SILENT_HEARTBEATS * c._config.heartbeat_interval_s or not c._view.members:
            return
        log.warning(
            "consumer %s: no pull instance heard a heartbeat for %.1fs; releasing every queue", c.client_id, silent_s
        )
        self._release_all()

    # -- a subscription the group refuses (docs/consumers.md "Consistent subscriptions") -----

    @property
    def conflict(self) -> TxmqError | None:
        """The pull service's last CODE_SUBSCRIPTION_CONFLICT refusal of this consumer's
        heartbeat (it holds no queue meanwhile); None once a heartbeat is accepted."""
        return self._conflict

    def set_conflict(self, err: TxmqError | None) -> None:
        """Record a refusal (or its end): one log line per change; a refused consumer
        releases every queue and forgets the membership, so it takes none."""
        c = self._c
        with c._lock:
            before, self._conflict = self._conflict, err
        if err is not None:
            if before is None or before.message != err.message:
                log.error(
                    "consumer %s: the group refuses its subscription, so it consumes nothing: %s",
                    c.client_id,
                    err.message,
                )
            self._release_all()
        elif before is not None:
            log.info("consumer %s: the group accepts its subscription again", c.client_id)

    def _release_all(self) -> None:
        """Forget the membership (no queue is taken until a heartbeat answers) and
        release every queue."""
        c = self._c
        c._view.forget()
        with c._lock:
            owned = sorted(c._queues)
        for mq in owned:
            c._release(mq)
