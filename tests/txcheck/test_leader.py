"""Check-loop leadership against a real etcd, with a fake monotonic clock: when a
replica may decide (``leads``), and how leadership moves."""

from __future__ import annotations

from support.processes import private_prefix
from txmq_runtime.etcd import etcd_client
from txmq_txcheck.leader import VALID_FRACTION, LeaderDirectory, LeaderElector, leaders_prefix

TTL_S = 3


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def elector(client, prefix: str, instance_id: str, clock: Clock, events: list) -> LeaderElector:
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
        monotonic=clock,
    )


async def test_leadership_lapses_before_the_lease_can_expire_and_moves(etcd) -> None:
    prefix = private_prefix()
    key = f"{leaders_prefix(prefix)}store-0".encode()
    clock, events = Clock(), []
    async with etcd_client(etcd.endpoint) as client:
        a = elector(client, prefix, "a", clock, events)
        b = elector(client, prefix, "b", clock, events)
        try:
            await a.tick()
            await b.tick()
            assert a.leads("store-0") and not b.leads("store-0")
            assert (await client.get(key)).value == b"a"

            # No refresh for most of the TTL: a stops deciding on its own, while etcd
            # still keeps its key (another replica cannot have taken it yet).
            clock.now += TTL_S * VALID_FRACTION - 0.01
            assert a.leads("store-0")
            clock.now += 0.02
            assert not a.leads("store-0") and a.led == {"store-0"}
            await a.tick()  # refreshed: deciding again
            assert a.leads("store-0")

            # The key goes (deleted here; an expired lease does the same): b takes it
            # and a, at its next tick, finds the key is not its own and steps down.
            await client.delete(key)
            await b.tick()
            assert b.leads("store-0")
            await a.tick()
            assert not a.leads("store-0") and a.led == set()
            assert events == [("a", "elected", "store-0"), ("b", "elected", "store-0"), ("a", "lost", "store-0")]

            # A clean stop revokes the lease: the other takes over at its next tick.
            await b.close()
            assert await client.get(key) is None
            await a.tick()
            assert a.leads("store-0") and events[-2:] == [("b", "lost", "store-0"), ("a", "elected", "store-0")]
        finally:
            await a.close()
            await b.close()


def test_leader_directory_mirrors_the_prefix() -> None:
    d = LeaderDirectory("/p/txcheck/leaders/")
    d.reset([("/p/txcheck/leaders/store-0", b"a"), ("/p/txcheck/leaders/x/y", b"ignored")])
    assert d.holder("store-0") == "a" and d.holder("x") is None
    d.put("/p/txcheck/leaders/store-1", b"b")
    d.delete("/p/txcheck/leaders/store-0")
    assert d.holder("store-0") is None and d.holder("store-1") == "b"
