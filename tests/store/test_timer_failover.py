"""Delayed messages in a replicated store group, in one process (docs/store.md,
"Delayed messages", replication and failover): the follower holds the timer records and
the delivered copies but never delivers; promoted, it delivers what is left, once."""

from __future__ import annotations

import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2 as E
from txmq_store.message_store import MessageStore
from txmq_store.replication import Leadership, ship_span

from .conftest import T0_MS, StoreFactory, msg

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def ship(leader: MessageStore, follower: MessageStore, lead: Leadership) -> None:
    """What Follow does, in-process: ship everything, report, pass the high watermark."""
    view = lead.followers.get("b") or lead.attach("b")
    pos = follower.commitlog.write_offset
    while pos < leader.commitlog.write_offset:
        seg_end = leader.commitlog.roll_next_file(pos)
        data = leader.commitlog.read(pos, min(seg_end, leader.commitlog.write_offset) - pos)
        assert data is not None
        n = ship_span(data, pos, seg_end)
        follower.replica.copy_shipment(pos, data[:n])
        pos += n
    assert follower.replica.epochs is not None and leader.replica.epochs is not None
    follower.replica.epochs.adopt(leader.replica.epochs.entries, follower.commitlog.write_offset)
    lead.reported(view, follower.replica.local_log_end)
    follower.replica.set_follower_high_watermark(lead.high_watermark)


def bodies(store: MessageStore) -> list[bytes]:
    got = store.reader.get_message(topic="T", queue_id=0, offset=0, max_messages=100)
    return sorted(m.body for m in got.messages)


async def test_only_the_leader_delivers_and_a_promoted_follower_delivers_the_rest_once(
    stores: StoreFactory, clock: ManualClock
) -> None:
    leader = await stores.open("leader", replica_id="a")
    follower = await stores.open("follower", replica_id="b")
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("a"), min_in_sync=1)
    leader.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    early = [msg(b"e%d" % i, topic="T", properties={"TIMER_DELAY_SEC": "5"}) for i in range(3)]
    results = await leader.send([*early, msg(b"late", topic="T", properties={"TIMER_DELAY_SEC": "50"})])
    assert [r.deliver_at_ms for r in results] == [T0_MS + 5_000] * 3 + [T0_MS + 50_000]
    await ship(leader, follower, lead)
    if not leader.timers.timer.active:
        leader.timers.timer.activate()
    clock.advance(5_000)
    assert await follower.timers.timer.tick() == 0 and not follower.timers.timer.active  # a follower never delivers
    await leader.timers.timer.tick()
    assert bodies(leader) == [b"e0", b"e1", b"e2"]
    await ship(leader, follower, lead)
    assert bodies(follower) == [b"e0", b"e1", b"e2"]  # the copies are replicated like any message
    leader.replica.end_leadership("handing over")
    follower.replica.become_leader(epoch=2, in_sync=frozenset("b"), min_in_sync=1)
    if not follower.timers.timer.active:
        follower.timers.timer.activate()  # no checkpoint of its own: every timer filed, each checked
    await follower.timers.timer.tick()
    assert bodies(follower) == [b"e0", b"e1", b"e2"]  # the delivered ones are not delivered again
    clock.advance(45_000)
    await follower.timers.timer.tick()
    assert bodies(follower) == [b"e0", b"e1", b"e2", b"late"]


async def test_a_recall_holds_across_a_failover_and_a_delivery_cannot_be_recalled_after_one(
    stores: StoreFactory, clock: ManualClock
) -> None:
    leader = await stores.open("leader", replica_id="a")
    follower = await stores.open("follower", replica_id="b")
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("a"), min_in_sync=1)
    leader.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    soon, recalled, _ = await leader.send(
        [msg(b"soon", topic="T", properties={"TIMER_DELAY_SEC": "5"})]
        + [msg(b, topic="T", properties={"TIMER_DELAY_SEC": "50"}) for b in (b"recalled", b"later")]
    )
    if not leader.timers.timer.active:
        leader.timers.timer.activate()
    status, _ = await leader.recall(topic="T", commit_log_offset=recalled.commit_log_offset, unique_id=recalled.msg_id)
    assert status.name == "OK"
    clock.advance(5_000)
    await leader.timers.timer.tick()
    await ship(leader, follower, lead)

    # The recall record is indexed alike on the leader (as appended) and on the follower
    # (as dispatched from its sysflag): a query by unique id finds the same records.
    def found(store: MessageStore) -> list[tuple[str, int]]:
        return [(m.topic, m.queue_id) for m in store.query_messages(unique_id=recalled.msg_id)]

    assert found(leader) == found(follower) == [("rmq_sys_wheel_timer", 0), ("rmq_sys_wheel_timer", 1)]
    leader.replica.end_leadership("handing over")
    follower.replica.become_leader(epoch=2, in_sync=frozenset("b"), min_in_sync=1)
    if not follower.timers.timer.active:
        follower.timers.timer.activate()
    assert follower.timers.timer.recalled == {1}
    with pytest.raises(TxmqError) as caught:  # delivered by the old leader: its copy is found
        await follower.recall(topic="T", commit_log_offset=soon.commit_log_offset, unique_id=soon.msg_id)
    assert caught.value.code == E.CODE_MESSAGE_ALREADY_DELIVERED
    again, _ = await follower.recall(topic="T", commit_log_offset=recalled.commit_log_offset, unique_id=recalled.msg_id)
    assert again.name == "OK"
    clock.advance(45_000)
    await follower.timers.timer.tick()
    assert bodies(follower) == [b"later", b"soon"]
