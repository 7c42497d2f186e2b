"""Check-loop leadership against a real etcd, with a manual clock: when a replica may
decide (``leads``), and how leadership moves. The lease rules themselves (expiry,
paused holders, etcd restarts) are tested once, in tests/runtime/test_lease.py."""

from __future__ import annotations

from support.clock import ManualClock
from support.processes import private_prefix

from txmq_runtime.etcd import etcd_client
from txmq_txcheck.leader import VALID_FRACTION, LeaderElector, leaders_prefix

TTL_S = 3
VALID_MS = int(TTL_S * 1000 * VALID_FRACTION)


def elector(client, prefix: str, instance_id: str, clock: ManualClock, events: list) -> LeaderElector:
    async def elected(sid: str) -> None:
        events.append((instance_id, "elected", sid))

    async def lost(sid: str) -> None:
        events.append((instance_id, "lost", sid))

    return LeaderElector(
        client,
        etcd_prefix=prefix,
        instance_id=instance_id,
        ttl_ms=TTL_S * 1000,
        stores=lambda: ["store-0"],
        on_elected=elected,
        on_lost=lost,
        clock=clock,
    )


async def test_leadership_lapses_before_the_lease_can_expire_and_moves(etcd) -> None:
    prefix = private_prefix()
    key = f"{leaders_prefix(prefix)}store-0".encode()
    clock, events = ManualClock(), []
    async with etcd_client(etcd.endpoint) as client:
        a = elector(client, prefix, "a", clock, events)
        b = elector(client, prefix, "b", clock, events)
        try:
            await a.tick()
            await b.tick()
            assert a.leads("store-0") and not b.leads("store-0")
            assert (await client.get(key)).value == b"a"
            epoch_a = a.epoch("store-0")
            assert epoch_a is not None and epoch_a == (await client.get(key)).mod_revision
            assert b.epoch("store-0") is None

            # No refresh for most of the TTL: a stops deciding on its own (and stops its
            # loop), while etcd still keeps its key (nobody else can have taken it yet).
            clock.advance(VALID_MS - 10)
            assert a.leads("store-0")
            clock.advance(20)
            assert not a.leads("store-0") and a.led == set()
            await a.tick()  # refreshed: the key is still under a's lease, adopted again
            assert a.leads("store-0") and a.epoch("store-0") == epoch_a
            assert events == [("a", "elected", "store-0"), ("a", "lost", "store-0"), ("a", "elected", "store-0")]

            # The key goes (deleted here; an expired lease does the same): b takes it
            # with a greater epoch, and a, at its next tick, finds the key is not its own
            # and steps down.
            await client.delete(key)
            await b.tick()
            epoch_b = b.epoch("store-0")
            assert b.leads("store-0") and epoch_b is not None and epoch_b > epoch_a
            await a.tick()
            assert not a.leads("store-0") and a.led == set()
            assert events[3:] == [("b", "elected", "store-0"), ("a", "lost", "store-0")]

            # A clean stop revokes the lease: the other takes over at its next tick.
            await b.close()
            assert await client.get(key) is None
            await a.tick()
            assert a.leads("store-0") and events[-2:] == [("b", "lost", "store-0"), ("a", "elected", "store-0")]
            # Won back after another leader: a new epoch, so a decision a started under its
            # first leadership fails its fence (service.py) instead of writing.
            assert a.epoch("store-0") > epoch_b > epoch_a
        finally:
            await a.close()
            await b.close()


async def test_a_store_that_goes_away_is_given_up(etcd) -> None:
    prefix, events, stores = private_prefix(), [], ["store-0", "store-1"]
    async with etcd_client(etcd.endpoint) as client:
        a = LeaderElector(
            client,
            etcd_prefix=prefix,
            instance_id="a",
            ttl_ms=TTL_S * 1000,
            stores=lambda: list(stores),
            on_elected=lambda sid: _note(events, "elected", sid),
            on_lost=lambda sid: _note(events, "lost", sid),
            clock=ManualClock(),
        )
        try:
            await a.tick()
            assert a.led == {"store-0", "store-1"}
            stores.remove("store-1")
            await a.tick()
            assert a.led == {"store-0"} and await client.get(f"{leaders_prefix(prefix)}store-1".encode()) is None
            assert events == [("elected", "store-0"), ("elected", "store-1"), ("lost", "store-1")]
        finally:
            await a.close()


async def _note(events: list, what: str, sid: str) -> None:
    events.append((what, sid))
