"""Administration: topics, subscription groups, messages, offsets, store status
(RocketMQ's MQAdminExt, in Python style)."""

from __future__ import annotations

from txmq._admin_auth import AuthAdmin
from txmq._admin_cluster import ClusterAdmin
from txmq._admin_groups import GroupAdmin
from txmq._admin_messages import DeadLetter, MessageAdmin, ResentDeadLetter
from txmq._admin_topics import TopicAdmin

__all__ = ["Admin", "DeadLetter", "ResentDeadLetter"]


class Admin(TopicAdmin, GroupAdmin, MessageAdmin, AuthAdmin, ClusterAdmin):
    """Administers a txmq cluster found through ``endpoint`` (any service, ``host:port``).

    Topics and subscription groups are configured per store node, as in RocketMQ:
    calls that change them apply to every live store unless ``store_id`` names one;
    reads answer from the first store that has the object. Thread-safe. ``tls``: TLS
    (and a client certificate) for every channel (``txmq.TlsConfig``).
    ``credentials``: the user every call is signed as (``txmq.Credentials``).

    The calls come in groups, one class each (``txmq._admin_base``): topics and their
    queue offsets, subscription groups and their consume offsets, messages and dead
    letters, users and ACLs, stores and store groups.
    """
