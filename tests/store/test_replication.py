"""The replicated store group's core without processes or etcd (docs/replication.md):
where logs diverge, the epoch history, the high watermark and the in-sync set on a
manual clock, and a leader and a follower store in one process copying records."""

from __future__ import annotations

import asyncio
import os

import pytest
from support.clock import ManualClock

from txmq.errors import TxmqError
from txmq.v1 import errors_pb2
from txmq_store.codec import CorruptRecord
from txmq_store.model import SendStatus
from txmq_store.replication import (
    CONFIG,
    FENCES,
    OFFSETS,
    EpochHistory,
    Leadership,
    check_copied,
    config_document,
    divergence,
    ship_span,
)

from .conftest import StoreFactory, msg

# -- where two logs diverge --------------------------------------------------------------


@pytest.mark.parametrize(
    ("leader", "leader_end", "follower", "follower_end", "cut"),
    [
        ([(1, 0)], 500, [(1, 0)], 300, 300),  # behind in the same epoch: keep all
        ([(1, 0), (2, 100)], 500, [(1, 0)], 300, 100),  # wrote past the end of epoch 1 (a deposed leader)
        ([(1, 0), (2, 100), (4, 300)], 400, [(1, 0), (2, 100), (3, 250)], 320, 250),  # epoch 3 never reached it
        ([(1, 0)], 500, [], 0, 0),  # empty
        ([(1, 0)], 50, [], 80, 0),  # records from before any epoch the leader knows
        ([(0, 0), (1, 200)], 500, [], 150, 150),  # both held the same pre-group log (epoch 0)
        ([(1, 0), (2, 100)], 100, [(1, 0)], 100, 100),  # the new epoch has no record yet
    ],
)
def test_divergence(leader, leader_end, follower, follower_end, cut):
    assert divergence(leader, leader_end, follower, follower_end) == cut


def test_the_epoch_history_is_kept_on_disk(tmp_path):
    path = tmp_path / "epochs.json"
    h = EpochHistory.load(path)
    h.begin(1, 0)
    h.begin(3, 700)
    assert EpochHistory.load(path).entries == [(1, 0), (3, 700)]
    h.cut(700)
    assert EpochHistory.load(path).entries == [(1, 0)]
    h.adopt([(1, 0), (2, 400), (5, 900)], 901)
    assert EpochHistory.load(path).entries == [(1, 0), (2, 400), (5, 900)]
    with pytest.raises(ValueError):
        h.begin(5, 1000)
    fresh = EpochHistory.load(tmp_path / "other.json")
    fresh.begin(1, 4096)  # a store that ran alone before: its records are epoch 0
    assert fresh.entries == [(0, 0), (1, 4096)]


# -- the high watermark and the in-sync set ------------------------------------------------


def _leadership(clock: ManualClock, **kw) -> Leadership:
    args = dict(replica_id="a", epoch=1, epoch_start=0, in_sync=frozenset("abc"), min_in_sync=2, local_end=0)
    return Leadership(clock=clock, **{**args, **kw})


async def test_the_high_watermark_is_the_lowest_end_over_the_in_sync_set():
    clock = ManualClock()
    lead = _leadership(clock)
    b, c = lead.attach("b"), lead.attach("c")
    lead.local_durable(300)
    done = lead.wait_replicated(300)
    lead.reported(b, 300)
    await asyncio.sleep(0)
    assert lead.high_watermark == 0 and not done.done()  # c holds nothing yet
    lead.reported(c, 200)
    assert lead.high_watermark == 200 and not done.done()
    lead.reported(c, 300)
    assert lead.high_watermark == 300 and done.done()


async def test_a_pending_in_sync_change_counts_against_both_sets():
    lead = _leadership(ManualClock(), in_sync=frozenset("ab"))
    b, c = lead.attach("b"), lead.attach("c")
    lead.pending_in_sync = frozenset("abc")  # c joins, etcd has not answered yet
    lead.local_durable(100)
    lead.reported(b, 100)
    fut = lead.wait_replicated(100)
    assert lead.high_watermark == 0 and not fut.done()
    lead.reported(c, 100)
    assert fut.done()


async def test_acknowledgements_wait_while_fewer_than_min_in_sync_replicas_are_in_sync():
    lead = _leadership(ManualClock(), in_sync=frozenset("a"), min_in_sync=2)
    lead.local_durable(100)
    fut = lead.wait_replicated(100)
    assert lead.high_watermark == 100 and not fut.done()  # visible, not acknowledged
    with pytest.raises(TxmqError) as err:
        lead.check_writable()
    assert err.value.code == errors_pb2.CODE_NOT_ENOUGH_REPLICAS
    lead.set_in_sync(frozenset("ab"))
    lead.reported(lead.attach("b"), 100)
    assert fut.done()


async def test_a_lagging_follower_leaves_the_in_sync_set_and_a_caught_up_one_joins():
    clock = ManualClock()
    lead = _leadership(clock, in_sync=frozenset("ab"))
    b, c = lead.attach("b"), lead.attach("c")
    lead.local_durable(100)
    lead.shipped(b, 100, 100)
    lead.shipped(c, 100, 100)
    lead.reported(b, 100)
    assert lead.wanted_in_sync(lag_max_ms=1000) == frozenset("ab")  # c has not reported yet
    lead.reported(c, 100)
    assert lead.wanted_in_sync(lag_max_ms=1000) == frozenset("abc")
    lead.set_in_sync(frozenset("abc"))
    clock.advance(500)
    lead.local_durable(200)
    lead.shipped(b, 200, 200)
    lead.shipped(c, 200, 200)
    lead.reported(c, 200)  # b goes quiet: it last caught up 500 ms ago
    assert lead.wanted_in_sync(lag_max_ms=1000) == frozenset("abc")
    clock.advance(501)
    assert lead.wanted_in_sync(lag_max_ms=1000) == frozenset("ac")


async def test_a_follower_behind_while_writes_stream_in_still_counts_as_caught_up():
    """Kafka's lastCaughtUpTime: reaching what was the leader's end when shipped counts,
    even though the leader has moved on since."""
    clock = ManualClock()
    lead = _leadership(clock, in_sync=frozenset("ab"))
    b = lead.attach("b")
    for end in range(100, 2100, 100):
        lead.local_durable(end)
        lead.shipped(b, end, end)
        clock.advance(100)
        lead.reported(b, end - 100)  # always one shipment behind
    assert lead.wanted_in_sync(lag_max_ms=300) == frozenset("ab")


async def test_the_end_of_a_term_fails_every_waiting_send_with_not_leader():
    lead = _leadership(ManualClock())
    lead.local_durable(100)
    fut, offsets = lead.wait_replicated(100), lead.wait_state_replicated(OFFSETS, 1)
    lead.end()
    for f in (fut, offsets):
        with pytest.raises(TxmqError) as err:
            f.result()
        assert err.value.code == errors_pb2.CODE_NOT_LEADER


async def test_offsets_and_configuration_are_answered_once_every_in_sync_follower_took_them():
    lead = _leadership(ManualClock())
    b, c = lead.attach("b"), lead.attach("c")
    fut, config = lead.wait_state_replicated(OFFSETS, 3), lead.wait_state_replicated(CONFIG, 1)
    lead.reported(b, 0, {OFFSETS: 3, CONFIG: 1})
    assert not fut.done()
    lead.reported(c, 0, {OFFSETS: 2, CONFIG: 1})
    assert not fut.done() and config.done()
    lead.reported(c, 0, {OFFSETS: 3})
    assert fut.done()


# -- a leader and a follower store in one process ------------------------------------------


async def _pair(stores: StoreFactory, **overrides):
    leader = await stores.open("leader", replica_id="a", **overrides)
    follower = await stores.open("follower", replica_id="b", **overrides)
    return leader, follower


async def _ship(leader, follower, lead: Leadership) -> None:
    """What Follow does, in-process: ship everything, report, pass the high watermark."""
    view = lead.attach("b")
    pos = follower.commitlog.write_offset
    while pos < leader.commitlog.write_offset:
        seg_end = leader.commitlog.roll_next_file(pos)
        data = leader.commitlog.read(pos, min(seg_end, leader.commitlog.write_offset) - pos)
        n = ship_span(data, pos, seg_end)
        follower.replica.copy_shipment(pos, data[:n])
        pos += n
    follower.replica.epochs.adopt(leader.replica.epochs.entries, follower.commitlog.write_offset)
    lead.reported(view, follower.replica.local_log_end)
    follower.replica.set_follower_high_watermark(lead.high_watermark)


async def test_a_send_is_acknowledged_and_visible_only_once_the_follower_holds_it(stores: StoreFactory):
    leader, follower = await _pair(stores)
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("ab"), min_in_sync=2)
    lead.reported(lead.attach("b"), 0)
    leader.create_topic("T", read_queue_nums=2, write_queue_nums=2)
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    appended = leader.sender.append_records([msg(b"one", topic="T", queue_id=0), msg(b"two", topic="T", queue_id=0)])
    settle = asyncio.ensure_future(leader.sender.settle(appended))
    await asyncio.sleep(0)
    assert not settle.done()
    assert leader.reader.get_message(topic="T", queue_id=0, offset=0).messages == []  # beyond the high watermark
    await _ship(leader, follower, lead)
    assert await settle == SendStatus.OK
    for store in (leader, follower):
        got = store.reader.get_message(topic="T", queue_id=0, offset=0)
        assert [m.body for m in got.messages] == [b"one", b"two"]
    # A follower refuses writes, naming its leader when it knows it.
    follower.replica.leader_hint = ("a", "10.0.0.1:10911")
    with pytest.raises(TxmqError) as err:
        follower.sender.append_records([msg(b"x", topic="T")])
    assert err.value.code == errors_pb2.CODE_NOT_LEADER and err.value.metadata["leader"] == "a"


async def test_a_deposed_leader_cuts_what_it_wrote_after_the_divergence(stores: StoreFactory):
    old, new = await _pair(stores)
    lead = old.replica.become_leader(epoch=1, in_sync=frozenset("ab"), min_in_sync=1)
    old.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    new.adopt_configs(topics=old.admin.config_documents()[0])
    lead.reported(lead.attach("b"), 0)
    first = old.sender.append_records([msg(b"kept", topic="T")])
    await _ship(old, new, lead)
    await old.sender.settle(first)
    lead.set_in_sync(frozenset("a"))  # b falls out: a's next write is held by a alone
    orphan = old.sender.append_records([msg(b"orphan", topic="T")])
    await old.sender.settle(orphan)
    old.replica.end_leadership("deposed")
    # b takes over at its own end: epoch 2 starts where "kept" ends.
    new.replica.become_leader(epoch=2, in_sync=frozenset("b"), min_in_sync=1)
    cut = divergence(
        new.replica.epochs.entries, new.commitlog.write_offset, old.replica.epochs.entries, old.commitlog.write_offset
    )
    assert cut == new.commitlog.write_offset < old.commitlog.write_offset
    # It was acknowledged on a alone (min_in_sync 1): that is what min_in_sync 1 means.
    old.replica.cut_log(cut)
    assert old.commitlog.write_offset == cut


def test_copied_bytes_are_checked_before_they_are_written(tmp_path):
    data = bytearray(_records(tmp_path))
    assert len(check_copied(bytes(data), 0, 1 << 20)) == 3
    assert ship_span(bytes(data[:-5]), 0, 1 << 20) < len(data) - 5  # never ends inside a record
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(CorruptRecord):
        check_copied(bytes(data), 0, 1 << 20)


def _records(tmp_path) -> bytes:
    async def build() -> bytes:
        factory = StoreFactory(tmp_path, ManualClock())
        store = await factory.open("src")
        store.create_topic("T", read_queue_nums=1, write_queue_nums=1)
        await store.send([msg(b"a" * 10, topic="T"), msg(b"b" * 300, topic="T"), msg(b"c", topic="T")])
        data = store.commitlog.read(0, store.commitlog.write_offset)
        await factory.close_all()
        return data

    return asyncio.run(build())


async def test_a_replica_reports_its_role_and_its_leader_the_followers_lag(stores: StoreFactory):
    from txmq_store.metrics import read_store

    leader, follower = await _pair(stores)
    lead = leader.replica.become_leader(epoch=3, in_sync=frozenset("ab"), min_in_sync=1)
    leader.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    lead.reported(lead.attach("b"), 0)
    leader.sender.append_records([msg(b"x" * 100, topic="T")])
    samples = {(name, tuple(labels)): value for name, labels, value in read_store(leader)}
    end = leader.commitlog.write_offset
    assert samples[("leader", ("store-0", "a"))] == 1 and samples[("epoch", ("store-0", "a"))] == 3
    assert samples[("in_sync", ("store-0",))] == 2
    assert samples[("follower_lag", ("store-0", "b"))] == end
    assert samples[("hw_behind", ("store-0", "a"))] == end  # b holds none of it yet
    follower_samples = {(name, tuple(labels)): value for name, labels, value in read_store(follower)}
    assert follower_samples[("leader", ("store-0", "b"))] == 0
    assert ("in_sync", ("store-0",)) not in follower_samples


async def test_a_new_leader_keeps_the_check_loop_fences_and_forgets_deleted_topics(stores: StoreFactory):
    leader, follower = await _pair(stores)
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("a"), min_in_sync=1)
    leader.create_topic("Gone", read_queue_nums=1, write_queue_nums=1)
    await leader.sender.settle(leader.sender.append_records([msg(b"x", topic="Gone")]))
    leader.transactions.fences.admit(7)
    follower.adopt_configs(
        topics=leader.admin.config_documents()[0], fences=config_document(leader.transactions.fences.document())
    )
    await _ship(leader, follower, lead)
    assert follower.reader.get_message(topic="Gone", queue_id=0, offset=0).messages
    leader.admin.delete_topic("Gone")
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    assert follower._dispatcher.consume_queue("Gone", 0) is None
    leader.replica.end_leadership("handing over")
    follower.replica.become_leader(epoch=2, in_sync=frozenset("b"), min_in_sync=1)
    with pytest.raises(TxmqError) as err:
        follower.transactions.fences.admit(6)  # a check-loop leader the old store leader had fenced
    assert err.value.code == errors_pb2.CODE_FENCED


async def test_only_the_leader_of_a_group_exports_for_the_analytics(stores: StoreFactory, tmp_path):
    from txmq_store.export import StoreExporter

    leader, follower = await _pair(stores)
    leader.replica.become_leader(epoch=1, in_sync=frozenset("a"), min_in_sync=1)
    exporters = [
        StoreExporter(s, export_dir=tmp_path / name, interval_ms=1000, retention_ms=0)
        for s, name in ((leader, "a"), (follower, "b"))
    ]
    assert [e.exports() for e in exporters] == [True, False]
    leader.replica.end_leadership("gone")
    assert not exporters[0].exports()


def test_who_may_stand_for_leader():
    from txmq.v1 import store_pb2
    from txmq_store.group import may_campaign

    state = store_pb2.StoreGroupState(epoch=4, leader="a", in_sync=["a", "b"])
    clean = dict(needs_resync=False, unclean=False)
    assert may_campaign("x", None, set(), **clean)  # a new group: anyone
    assert not may_campaign("x", None, set(), needs_resync=True, unclean=False)
    assert may_campaign("b", state, {"b", "c"}, **clean)
    assert not may_campaign("b", state, {"b", "c"}, needs_resync=True, unclean=False)  # its log was cut
    assert not may_campaign("c", state, {"c"}, **clean)  # not in sync: never, by default
    assert not may_campaign("c", state, {"b", "c"}, needs_resync=False, unclean=True)  # b is still there
    assert may_campaign("c", state, {"c"}, needs_resync=False, unclean=True)  # nobody in sync is left


async def test_a_leader_whose_lease_lapsed_refuses_writes_before_it_hears_of_the_loss():
    lead = _leadership(ManualClock(), in_sync=frozenset("a"), min_in_sync=1)
    valid = [True]
    lead.lease_valid = lambda: valid[0]
    lead.check_writable()
    valid[0] = False
    with pytest.raises(TxmqError) as err:
        lead.check_writable()
    assert err.value.code == errors_pb2.CODE_NOT_LEADER


async def test_a_raised_fence_is_held_by_the_followers_before_the_fenced_write_goes_on(stores: StoreFactory):
    leader, _ = await _pair(stores)
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("ab"), min_in_sync=1)
    b = lead.attach("b")
    lead.reported(b, 0)
    admitted = asyncio.ensure_future(leader.admit_fence(9, 0))
    await asyncio.sleep(0)
    assert not admitted.done()  # b has not taken the raised mark
    lead.reported(b, 0, {FENCES: leader.transactions.fences.version})
    await admitted
    await leader.admit_fence(9, 0)  # the same epoch again: no wait, no rise
    with pytest.raises(TxmqError) as err:
        await leader.admit_fence(8, 0)
    assert err.value.code == errors_pb2.CODE_FENCED


async def test_a_deposed_leader_holds_its_undispatched_records_across_a_segment_roll(stores: StoreFactory):
    """Stepping down re-reads what was appended but not dispatched; a segment's closing
    blank marker in that range is stepped over, not taken for a damaged record."""
    leader, _ = await _pair(stores)
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("ab"), min_in_sync=1)
    lead.reported(lead.attach("b"), 0)  # b never reports more: nothing is dispatched
    leader.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    body = b"x" * 3000
    for _ in range(30):  # ~90 KB: more than one 64 KiB segment
        leader.sender.append_records([msg(body, topic="T")])
    assert leader.commitlog.segment_count == 2
    leader.replica.end_leadership("deposed")
    held = list(leader.replica._held)
    assert len(held) == 30 and [m.queue_offset for m in held] == list(range(30))


async def test_a_retry_reaching_the_new_leader_is_answered_from_the_window(stores: StoreFactory):
    """Idempotent sends across a failover: the follower indexed the record it copied, so
    a producer's retry (its acknowledgement lost with the old leader) reaching the new
    leader is answered with the first result and stored once."""
    leader, follower = await _pair(stores)
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("ab"), min_in_sync=2)
    lead.reported(lead.attach("b"), 0)
    leader.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    first = leader.sender.append_records([msg(b"once", topic="T", unique_id="U1")])
    settle = asyncio.ensure_future(leader.sender.settle(first))
    await asyncio.sleep(0)
    await _ship(leader, follower, lead)
    assert await settle == SendStatus.OK  # acknowledged; say the answer was lost
    leader.replica.end_leadership("failover")
    follower.replica.become_leader(epoch=2, in_sync=frozenset("b"), min_in_sync=1)
    [again] = await follower.send([msg(b"once", topic="T", unique_id="U1")])
    assert again.duplicate and again.commit_log_offset == first.offsets[0] and again.queue_offset == 0
    assert [m.body for m in follower.reader.get_message(topic="T", queue_id=0, offset=0).messages] == [b"once"]


# -- readiness: an in-sync copy of the group, or not ------------------------------------------


def test_a_replica_is_ready_only_while_it_is_an_in_sync_copy_of_its_group():
    from txmq.v1 import store_pb2
    from txmq_store.group import replica_ready

    state = store_pb2.StoreGroupState(epoch=4, leader="a", in_sync=["a", "b"])
    fresh = dict(state_age_ms=100, max_state_age_ms=6000)
    follower = dict(leading=False, takes_writes=False, needs_resync=False, **fresh)
    assert replica_ready("b", state, **follower)  # a follower in the in-sync set
    assert not replica_ready("c", state, **follower)  # copying the log: not in the set
    assert not replica_ready("b", state, **{**follower, "needs_resync": True})  # its log was cut
    assert not replica_ready("b", state, **{**follower, "state_age_ms": 6001})  # etcd not read for a lease
    assert not replica_ready("b", state, **{**follower, "state_age_ms": None})  # never read
    assert not replica_ready("b", None, **follower)  # no group state yet
    assert not replica_ready("a", state, **follower)  # named leader, but no longer leads
    # The leader: once it takes writes (held what it took over), whatever etcd said last.
    assert replica_ready("a", state, leading=True, takes_writes=True, needs_resync=False, state_age_ms=None,
                         max_state_age_ms=6000)  # fmt: skip
    assert not replica_ready("a", state, leading=True, takes_writes=False, needs_resync=False, **fresh)


async def test_a_replica_reports_its_readiness_when_it_changes(stores: StoreFactory):
    """StoreGroup tells the readiness health status what ``replica_ready`` says, once per
    change: out of the in-sync set, a stale read of etcd (a paused process) and a resync
    each make the replica not ready."""
    from txmq.v1 import store_pb2
    from txmq_runtime.registry import EtcdKeys
    from txmq_store.group import StoreGroup

    clock = ManualClock()
    store = await stores.open("b", replica_id="b")
    group = StoreGroup(
        store, etcd=object(), keys=EtcdKeys("/t"), settings=store.settings, address="b:1", published=None,
        clock=clock,
    )  # fmt: skip
    said: list[bool] = []
    group.watch_ready(said.append)
    assert said == [False]  # nothing read yet

    def read(in_sync: list[str]) -> None:  # what _step does with each read of etcd
        group.state = store_pb2.StoreGroupState(epoch=1, leader="a", in_sync=in_sync)
        group._read_at_ms = clock.now_ms()
        group._report_ready()

    read(["a"])
    read(["a", "b"])
    read(["a", "b"])
    assert said == [False, True]  # reported once per change
    clock.advance(store.settings.replica_lease_ms + 1)  # e.g. SIGSTOP: etcd not read since
    group._report_ready()
    read(["a"])  # the leader dropped it meanwhile
    assert said == [False, True, False]
    read(["a", "b"])
    store.replica.needs_resync = True
    group._report_ready()
    assert said == [False, True, False, True, False]


# -- reseeding: behind the leader's oldest segment -------------------------------------------


async def test_needs_resync_is_kept_across_a_restart(stores: StoreFactory):
    store = await stores.open("r", replica_id="b")
    store.replica.needs_resync = True
    await store.close()
    store = await stores.open("r", replica_id="b")
    assert store.replica.needs_resync
    store.replica.needs_resync = False
    await store.close()
    assert not (await stores.open("r", replica_id="b")).replica.needs_resync


async def test_a_follower_behind_the_leaders_oldest_segment_sets_its_log_aside_and_copies_again(
    stores: StoreFactory, clock: ManualClock, tmp_path
):
    leader, follower = await _pair(stores, file_reserved_time_ms=1000)
    lead = leader.replica.become_leader(epoch=1, in_sync=frozenset("ab"), min_in_sync=1)
    lead.reported(lead.attach("b"), 0)
    leader.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    follower.adopt_configs(topics=leader.admin.config_documents()[0])
    early = asyncio.ensure_future(
        leader.sender.settle(leader.sender.append_records([msg(b"e%d" % i, topic="T") for i in range(5)]))
    )
    await asyncio.sleep(0)
    await _ship(leader, follower, lead)
    assert await early == SendStatus.OK
    old_end = follower.commitlog.write_offset
    old_bytes = follower.commitlog.read(0, old_end)
    lead.set_in_sync(frozenset("a"))  # b is away while the leader writes on
    for i in range(40):  # ~120 KB: two 64 KiB segments and more
        await leader.sender.settle(leader.sender.append_records([msg(b"%d-" % i + b"x" * 3000, topic="T")]))
    await leader.flush()
    clock.advance(2000)
    assert await leader.clean_expired_files() > 0
    start = leader.commitlog.min_offset
    assert start > old_end
    # The leader answers CODE_REPLICA_BEHIND_LOG_START (Follow); the follower reseeds.
    assert (
        divergence(
            leader.replica.epochs.entries, leader.commitlog.write_offset, follower.replica.epochs.entries, old_end
        )
        > 0
    )
    aside = tmp_path / "aside"
    follower.replica.reseed(aside)
    assert follower.replica.needs_resync and follower.commitlog.write_offset == 0
    assert follower.reader.get_message(topic="T", queue_id=0, offset=0).messages == []
    # Its old log is kept aside, byte for byte (hard links), until it is in sync.
    [kept] = sorted((aside / "commitlog").iterdir())
    assert kept.read_bytes()[:old_end] == old_bytes and (aside / "epochs.json").exists()

    view = lead.attach("b")
    pos = start
    while pos < leader.commitlog.write_offset:  # what Follow ships: from the oldest segment on
        seg_end = leader.commitlog.roll_next_file(pos)
        data = leader.commitlog.read(pos, min(seg_end, leader.commitlog.write_offset) - pos)
        n = ship_span(data, pos, seg_end)
        follower.replica.copy_shipment(pos, data[:n])
        pos += n
    follower.replica.epochs.adopt(leader.replica.epochs.entries, follower.commitlog.write_offset)
    lead.reported(view, follower.replica.local_log_end)
    follower.replica.set_follower_high_watermark(lead.high_watermark)
    end = leader.commitlog.write_offset
    assert not follower.replica.needs_resync and follower.commitlog.min_offset == start
    assert follower.commitlog.read(start, end - start) == leader.commitlog.read(start, end - start)
    lo = leader.queue_offsets("T")[0].min_offset
    bodies = [m.body for m in leader.reader.get_message(topic="T", queue_id=0, offset=lo, max_messages=64).messages]
    assert bodies and bodies == [
        m.body for m in follower.reader.get_message(topic="T", queue_id=0, offset=lo, max_messages=64).messages
    ]


async def test_a_reseed_that_cannot_set_the_log_aside_says_so_once_and_cuts_nothing(
    stores: StoreFactory, monkeypatch, caplog
) -> None:
    """Setting the log aside needs hard links; where they fail (another file system, a
    full disk) the follower keeps its log, stays out of the in-sync set and tries again,
    with one line in the log, not a traceback every 0.2 s."""
    from txmq.errors import error
    from txmq.v1 import errors_pb2, store_pb2
    from txmq_runtime.registry import EtcdKeys
    from txmq_store.group import StoreGroup

    store = await stores.open("b", replica_id="b")
    store.replica.become_leader(epoch=1, in_sync=frozenset("b"), min_in_sync=1)  # to have a log to set aside
    store.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    await store.sender.settle(store.sender.append_records([msg(b"kept", topic="T")]))
    end = store.commitlog.write_offset
    group = StoreGroup(
        store, etcd=object(), keys=EtcdKeys("/t"), settings=store.settings, address="b:1", published=None,
        clock=ManualClock(),
    )  # fmt: skip
    group.state = store_pb2.StoreGroupState(epoch=1, leader="a", in_sync=["a"])

    def no_links(src, dst) -> None:  # type: ignore[no-untyped-def]
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr("txmq_store.replica.os.link", no_links)
    behind = error(errors_pb2.CODE_REPLICA_BEHIND_LOG_START, "behind", log_end="0", log_start="9")
    with caplog.at_level("ERROR", logger="txmq"):
        assert group._reseed("a", behind) is False
        assert group._reseed("a", behind) is False
    said = [r for r in caplog.records if "could not set its log aside" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None
    assert "Invalid cross-device link" in said[0].getMessage()
    assert store.commitlog.write_offset == end and not store.replica.needs_resync
    assert not any(name.startswith("reseeded-") for name in os.listdir(store.settings.data_dir))


async def test_stopping_a_follower_ends_even_when_its_stream_swallows_the_cancellation(monkeypatch) -> None:
    """A new leader stops following before it takes writes. A Follow stream to an old
    leader cut off by a partition once swallowed the cancellation and went on waiting:
    the take-over never finished. ``stop`` cancels again until the task ends."""
    from txmq_store.group import Follower

    swallowed = asyncio.Event()

    async def stubborn_follow(self, stub) -> None:
        try:
            await asyncio.Event().wait()  # a stream that never answers
        except asyncio.CancelledError:
            swallowed.set()  # ... and a cancellation that never gets out of it
        await asyncio.Event().wait()

    monkeypatch.setattr(Follower, "_follow", stubborn_follow)
    follower = Follower(None, leader="r0", address="127.0.0.1:9", epoch=1)  # type: ignore[arg-type]
    follower.start()
    await asyncio.sleep(0)
    await asyncio.wait_for(follower.stop(), timeout=10)
    assert swallowed.is_set()
