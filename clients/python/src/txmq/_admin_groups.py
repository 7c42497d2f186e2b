"""``Admin``'s subscription group calls: groups are configured per store node, as in
RocketMQ; pausing a group is turning its ``consume_enable`` off."""

from __future__ import annotations

import dataclasses
from typing import Any

from txmq._admin_base import AdminBase, Store
from txmq._convert import consume_offset_from_proto, group_config_from_proto, group_config_to_proto
from txmq.errors import NotFoundError, TxmqError
from txmq.models import ConsumeOffset, SubscriptionGroupConfig
from txmq.v1 import errors_pb2, store_pb2
from txmq.validation import check_group


class GroupAdmin(AdminBase):
    def create_subscription_group(
        self,
        name: str,
        *,
        consume_enable: bool = True,
        consume_broadcast_enable: bool = False,
        retry_max_times: int = 16,
        retry_queue_nums: int = 1,
        store_id: str | None = None,
        exist_ok: bool = False,
    ) -> SubscriptionGroupConfig:
        """Create the group on every store (or on ``store_id``). A store that has it
        already raises ``CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS``; with ``exist_ok`` its
        group is left as it is and returned."""
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        config = SubscriptionGroupConfig(
            name, consume_enable, consume_broadcast_enable, retry_max_times, retry_queue_nums
        )
        request = store_pb2.CreateSubscriptionGroupRequest(group=group_config_to_proto(config))

        def create(store: Store) -> SubscriptionGroupConfig:
            try:
                answer = self._call(store, self._admin_stub(store).CreateSubscriptionGroup, request)
                return group_config_from_proto(answer.group)
            except TxmqError as err:
                if not (exist_ok and err.code == errors_pb2.CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS):
                    raise
            found = self._call(
                store,
                self._admin_stub(store).GetSubscriptionGroup,
                store_pb2.GetSubscriptionGroupRequest(group_name=name),
            )
            return group_config_from_proto(found.group)

        answers = [create(s) for s in self._stores(store_id)]  # every store, in order
        return answers[0]

    def update_subscription_group(
        self,
        name: str,
        *,
        consume_enable: bool | None = None,
        consume_broadcast_enable: bool | None = None,
        retry_max_times: int | None = None,
        retry_queue_nums: int | None = None,
        store_id: str | None = None,
    ) -> SubscriptionGroupConfig:
        """Change the given fields on every store that has the group; None keeps a field."""
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("consume_enable", consume_enable),
                ("consume_broadcast_enable", consume_broadcast_enable),
                ("retry_max_times", retry_max_times),
                ("retry_queue_nums", retry_queue_nums),
            )
            if v is not None
        }

        def update(store: Store) -> SubscriptionGroupConfig:
            request = store_pb2.GetSubscriptionGroupRequest(group_name=name)
            current = group_config_from_proto(
                self._call(store, self._admin_stub(store).GetSubscriptionGroup, request).group
            )
            wanted = group_config_to_proto(dataclasses.replace(current, **changes))
            answer = self._call(
                store,
                self._admin_stub(store).UpdateSubscriptionGroup,
                store_pb2.UpdateSubscriptionGroupRequest(group=wanted),
            )
            return group_config_from_proto(answer.group)

        return self._on_stores_having(store_id, update)[0]

    def pause_consumer_group(self, name: str, *, store_id: str | None = None) -> SubscriptionGroupConfig:
        """Pause the group: ``consume_enable`` off on every store that has it (or on
        ``store_id``); its pulls are refused with ``CODE_CONSUME_DISABLED`` until
        ``resume_consumer_group``. Offsets and members stay. A group no store has yet
        is created paused on every store (pausing ahead of the first consumer)."""
        try:
            return self.update_subscription_group(name, consume_enable=False, store_id=store_id)
        except NotFoundError as err:
            if err.code != errors_pb2.CODE_SUBSCRIPTION_GROUP_NOT_FOUND:
                raise
        return self.create_subscription_group(name, consume_enable=False, store_id=store_id, exist_ok=True)

    def resume_consumer_group(self, name: str, *, store_id: str | None = None) -> SubscriptionGroupConfig:
        """Undo ``pause_consumer_group`` on every store that has the group; a group no
        store has raises ``CODE_SUBSCRIPTION_GROUP_NOT_FOUND``."""
        return self.update_subscription_group(name, consume_enable=True, store_id=store_id)

    def consumer_group_paused(self, name: str, *, store_id: str | None = None) -> bool:
        """Whether any store that has the group (or ``store_id``) refuses its pulls."""
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        request = store_pb2.GetSubscriptionGroupRequest(group_name=name)
        configs = self._on_stores_having(
            store_id,
            lambda s: group_config_from_proto(self._call(s, self._admin_stub(s).GetSubscriptionGroup, request).group),
        )
        return any(not c.consume_enable for c in configs)

    def delete_subscription_group(self, name: str, *, store_id: str | None = None) -> None:
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        request = store_pb2.DeleteSubscriptionGroupRequest(group_name=name)
        self._on_stores_having(store_id, lambda s: self._call(s, self._admin_stub(s).DeleteSubscriptionGroup, request))

    def get_subscription_group(self, name: str, *, store_id: str | None = None) -> SubscriptionGroupConfig:
        check_group(name, code=errors_pb2.CODE_ILLEGAL_CONSUMER_GROUP)
        request = store_pb2.GetSubscriptionGroupRequest(group_name=name)
        return self._first_store_having(
            store_id,
            lambda s: group_config_from_proto(self._call(s, self._admin_stub(s).GetSubscriptionGroup, request).group),
        )

    def list_subscription_groups(self, *, store_id: str | None = None) -> list[SubscriptionGroupConfig]:
        found: dict[str, SubscriptionGroupConfig] = {}
        for store in self._stores(store_id):
            response = self._call(
                store, self._admin_stub(store).ListSubscriptionGroups, store_pb2.ListSubscriptionGroupsRequest()
            )
            for pb in response.groups:
                found.setdefault(pb.group_name, group_config_from_proto(pb))
        return sorted(found.values(), key=lambda g: g.group_name)

    def consume_offsets(self, group: str | None = None, topic: str | None = None) -> list[ConsumeOffset]:
        """Committed offsets (with each queue's range, hence lag), optionally of one
        group and/or topic, from every store."""
        request = store_pb2.ListConsumeOffsetsRequest(consumer_group=group or "", topic=topic or "")
        result: list[ConsumeOffset] = []
        for store in self._stores(None):
            response = self._call(store, self._store_stub(store).ListConsumeOffsets, request)
            result.extend(consume_offset_from_proto(store.store_id, o) for o in response.offsets)
        return sorted(result, key=lambda o: (o.group, o.queue))
