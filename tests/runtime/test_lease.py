"""The fenced lease (txmq_runtime/lease.py, docs/leases.md) against a real etcd.

- With a manual clock (no sleeping for the margin logic): campaign and exclusivity,
  validity lapsing at ``VALID_FRACTION`` of the TTL (by check and by timer, losses
  reported once), adoption after a lapse with the same epoch, clean release and close
  handing the key over at once, epochs growing across holders, ``confirm`` noticing a
  deleted or taken key, take-over of a previous incarnation's key.
- Real lease expiry in etcd (a TTL of 1 s): the refresh finds the lease gone, loses
  every holding and takes a new lease at once; the key is campaigned for again.
- A paused holder: a child process holding the key is SIGSTOPped past its TTL while
  this process takes the key over, then SIGCONTed: it detects the loss and never acts
  again (its journal of actions is the evidence).
- etcd restarts (SIGTERM and SIGKILL, same data): holders lose validity while etcd is
  away and recover or re-campaign; at no sampled moment do two holders hold the key.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support import EtcdServer, new_etcd
from support.clock import ManualClock
from support.processes import private_prefix

from txmq_runtime.clock import SYSTEM_CLOCK
from txmq_runtime.etcd import RETRYABLE, etcd_client
from txmq_runtime.lease import VALID_FRACTION, Campaign, FencedLease, Holding, LeaseLapsed

TTL_MS = 10_000  # real seconds only matter to etcd; the margin logic runs on a manual clock
VALID_MS = int(TTL_MS * VALID_FRACTION)
HOLDER = Path(__file__).with_name("lease_holder.py")


@pytest.fixture
async def client(etcd: EtcdServer) -> AsyncIterator[Any]:
    async with etcd_client(etcd.endpoint) as c:
        yield c


class Losses(list[tuple[str, int, str]]):
    """An ``on_lost`` that notes (key, epoch, reason)."""

    def __call__(self, holding: Holding, reason: str) -> None:
        self.append((holding.key, holding.epoch, reason))


async def started(
    client: Any, name: str, clock: Any, losses: Losses | None = None, ttl_ms: int = TTL_MS
) -> FencedLease:
    lease = FencedLease(client, name=name, ttl_ms=ttl_ms, on_lost=losses, clock=clock)
    assert await lease.keep_alive()
    return lease


async def eventually(what: str, predicate: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# -- manual clock ----------------------------------------------------------------------


async def test_one_holder_at_a_time_and_the_epoch_is_the_writing_revision(client: Any) -> None:
    key, clock = private_prefix() + "/k", ManualClock()
    a, b = await started(client, "a", clock), await started(client, "b", clock)
    try:
        won = await a.campaign(key, b"a")
        assert won.holding is not None and won.holding.value == b"a" and won.holding.lease_id == a.lease_id
        kv = await client.get(key.encode())
        assert won.holding.epoch == kv.create_revision == kv.mod_revision and kv.lease == a.lease_id
        assert a.holds(key) == won.holding and a.holdings == {key: won.holding}

        lost = await b.campaign(key, b"b")
        assert lost == Campaign(None, b"a") and b.holds(key) is None  # names the holder
        assert (await client.get(key.encode())).value == b"a"  # untouched
        again = await a.campaign(key, b"a")
        assert again.holding == won.holding  # campaigning for what we hold changes nothing
    finally:
        await a.close()
        await b.close()


async def test_validity_lapses_before_the_lease_can_expire_and_the_key_is_adopted_again(client: Any) -> None:
    key, clock, losses = private_prefix() + "/k", ManualClock(), Losses()
    a = await started(client, "a", clock, losses)
    try:
        held = (await a.campaign(key, b"a")).holding
        assert held is not None
        clock.advance(VALID_MS - 1)
        assert a.holds(key) == held and a.valid()
        clock.advance(1)  # etcd keeps the lease a third of the TTL longer
        assert a.holds(key) is None and not a.valid()
        assert losses == [(key, held.epoch, "the lease was not refreshed in time")]
        with pytest.raises(LeaseLapsed):
            await a.campaign(key, b"a")  # cannot claim on a lease it cannot vouch for

        assert await a.keep_alive()  # refreshed: the key is still under this lease
        again = (await a.campaign(key, b"a")).holding
        assert again == held  # adopted, same epoch: nobody else can have held it
        # The timer loses the holdings by itself, without any check, once.
        clock.advance(VALID_MS)
        await eventually("the timer", lambda: len(losses) == 2)
        assert a.holdings == {} and a.check() is False and len(losses) == 2
    finally:
        await a.close()


async def test_loss_handlers_may_be_coroutines_and_finish_before_the_next_step(client: Any) -> None:
    key, clock, order = private_prefix() + "/k", ManualClock(), []

    async def on_lost(holding: Holding, reason: str) -> None:
        await asyncio.sleep(0)
        order.append(("lost", holding.key))

    a = FencedLease(client, name="a", ttl_ms=TTL_MS, on_lost=on_lost, clock=clock)
    try:
        await a.keep_alive()
        await a.campaign(key, b"a")
        clock.advance(VALID_MS)
        assert not a.check()
        await a.keep_alive()  # waits for the handler before it goes on
        assert order == [("lost", key)]
        await a.campaign(key, b"a")
        assert a.holds(key) is not None
    finally:
        await a.close()


async def test_release_and_close_hand_the_key_over_at_once_with_growing_epochs(client: Any) -> None:
    key, clock, losses = private_prefix() + "/k", ManualClock(), Losses()
    a, b, c = [await started(client, n, clock, losses) for n in "abc"]
    try:
        first = (await a.campaign(key, b"a")).holding
        assert first is not None and (await b.campaign(key, b"b")).holding is None
        await a.release(key)
        assert a.holds(key) is None and await client.get(key.encode()) is None
        second = (await b.campaign(key, b"b")).holding
        assert second is not None and second.epoch > first.epoch
        await a.release(key)  # not held: nothing happens (b's key stays)
        assert (await client.get(key.encode())).value == b"b"

        await b.close()  # revoked: the key goes with the lease
        assert await client.get(key.encode()) is None
        third = (await c.campaign(key, b"c")).holding
        assert third is not None and third.epoch > second.epoch
        assert losses == []  # giving a key up is not losing it
        with pytest.raises(LeaseLapsed):
            await b.campaign(key, b"b")
    finally:
        for lease in (a, b, c):
            await lease.close()


async def test_confirm_loses_a_key_that_was_deleted_or_taken(client: Any) -> None:
    prefix, clock, losses = private_prefix(), ManualClock(), Losses()
    a = await started(client, "a", clock, losses)
    other = await client.lease(30)
    try:
        gone, taken, kept = f"{prefix}/gone", f"{prefix}/taken", f"{prefix}/kept"
        held = {k: (await a.campaign(k, b"a")).holding for k in (gone, taken, kept)}
        await client.delete(gone.encode())
        await client.put(taken.encode(), b"x", lease=other.id)
        await a.confirm()
        assert set(a.holdings) == {kept}
        assert sorted(losses) == [
            (gone, held[gone].epoch, "its key was deleted"),  # type: ignore[union-attr]
            (taken, held[taken].epoch, "its key was taken or rewritten"),  # type: ignore[union-attr]
        ]
    finally:
        await a.close()
        await client.revoke_lease(other.id)


async def test_a_previous_incarnations_key_is_taken_over_with_a_new_epoch(client: Any) -> None:
    key, clock = private_prefix() + "/k", ManualClock()
    old = await client.lease(30)
    try:
        await client.put(key.encode(), b"me@old", lease=old.id)
        old_revision = (await client.get(key.encode())).mod_revision
        a = await started(client, "a", clock)
        try:
            refused = await a.campaign(key, b"me@new")
            assert refused.holding is None and refused.holder == b"me@old"
            won = await a.campaign(key, b"me@new", take_over=lambda v: v.startswith(b"me@"))
            assert won.holding is not None and won.holding.epoch > old_revision
            kv = await client.get(key.encode())
            assert kv.value == b"me@new" and kv.lease == a.lease_id and kv.mod_revision == won.holding.epoch
        finally:
            await a.close()
    finally:
        await client.revoke_lease(old.id)


# -- real expiry -------------------------------------------------------------------------


async def test_an_expired_lease_loses_everything_and_is_replaced_at_once(client: Any) -> None:
    key, losses = private_prefix() + "/k", Losses()
    # A frozen manual clock: only the refresh can tell this holder its lease is gone.
    a = await started(client, "a", ManualClock(), losses, ttl_ms=1_000)
    b = await started(client, "b", ManualClock())
    try:
        first = (await a.campaign(key, b"a")).holding
        assert first is not None
        old_lease = a.lease_id
        # Not refreshed: etcd expires the lease (real time) and deletes the key.
        gone = asyncio.Event()
        while not gone.is_set():
            if await client.get(key.encode()) is None:
                gone.set()
            else:
                await asyncio.sleep(0.05)
        assert await a.keep_alive()  # finds it expired: loses, and takes a new lease now
        assert a.lease_id not in (None, old_lease) and a.holdings == {}
        assert losses == [(key, first.epoch, "the lease expired")]

        # Re-campaign: a wins again on its new lease, with a greater epoch.
        second = (await a.campaign(key, b"a")).holding
        assert second is not None and second.epoch > first.epoch and second.lease_id == a.lease_id
        await a.close()
        third = (await b.campaign(key, b"b")).holding
        assert third is not None and third.epoch > second.epoch
    finally:
        await a.close()
        await b.close()


# -- a paused holder ---------------------------------------------------------------------


def journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


async def campaign_until_won(lease: FencedLease, key: str, value: bytes, timeout_s: float = 20.0) -> Holding:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        won = await lease.campaign(key, value)
        if won.holding is not None:
            return won.holding
        await asyncio.sleep(0.05)
    raise AssertionError(f"{lease.name} did not win {key} within {timeout_s} s")


def spawn_holder(endpoint: str, key: str, ttl_ms: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log.with_suffix(".log"), "wb") as child_log:  # its own log lines (warnings)
        return subprocess.Popen(
            [sys.executable, str(HOLDER), endpoint, key, str(ttl_ms), str(log)], stdout=child_log, stderr=child_log
        )


@pytest.mark.slow
async def test_a_paused_holder_wakes_detects_the_loss_and_does_not_act(
    etcd: EtcdServer, client: Any, tmp_path: Path
) -> None:
    # 5 s: the child must still hold the key when it is stopped; a loaded machine once
    # starved it past a 2 s lease before the SIGSTOP (it had lost the key and gone idle).
    key, ttl_ms, log = private_prefix() + "/k", 5_000, tmp_path / "journal.jsonl"
    child = spawn_holder(etcd.endpoint, key, ttl_ms, log)
    b = FencedLease(client, name="b", ttl_ms=ttl_ms)  # the system clock, as in production
    try:
        await eventually("the child to hold the key and act", lambda: any(r["kind"] == "acted" for r in journal(log)))
        b.start()
        await eventually("b's lease", b.valid)
        assert (await b.campaign(key, b"b")).holding is None  # the child holds it

        os.kill(child.pid, signal.SIGSTOP)
        # The child refreshes its lease no more: b campaigns until etcd expired it.
        won = await campaign_until_won(b, key, b"b")
        assert b.holds(key) == won  # b may act from here on
        before = journal(log)  # complete: the child is stopped
        assert before[-1]["kind"] == "acted", before[-3:]  # it was holding, and acting, when paused
        epoch_a = before[-1]["epoch"]
        assert won.epoch > epoch_a

        woke_ms = SYSTEM_CLOCK.now_ms()
        os.kill(child.pid, signal.SIGCONT)
        # The child runs its loop again (it looked at least once after waking) ...
        await eventually(
            "the child to look again after waking",
            lambda: any(r["kind"] == "idle" and r["checked_ms"] > woke_ms for r in journal(log)),
        )
        after = journal(log)[len(before) :]
        # ... it noticed the loss, and neither acted nor got the key back.
        assert any(r["kind"] == "lost" and r["epoch"] == epoch_a for r in after), after[:5]
        assert not [r for r in after if r["kind"] in ("acted", "held")], after[:5]
        assert b.holds(key) is not None and (await client.get(key.encode())).value == b"b"
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait()
        await b.close()


# -- etcd restarts -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["terminate", "kill"])
async def test_holders_survive_etcd_restarts_and_never_hold_together(tmp_path: Path, how: str) -> None:
    server = new_etcd(tmp_path)
    server.start()
    key, ttl_ms = "/lease-test/k", 2_000
    clients = [etcd_client(server.endpoint) for _ in range(2)]
    losses = [Losses(), Losses()]
    leases = [
        FencedLease(c, name=n, ttl_ms=ttl_ms, on_lost=lost) for c, n, lost in zip(clients, "ab", losses, strict=True)
    ]
    both_held: list[float] = []
    stop = asyncio.Event()

    async def campaigner(lease: FencedLease, value: bytes) -> None:
        while not stop.is_set():
            if lease.valid() and lease.holds(key) is None:
                try:
                    await lease.campaign(key, value)
                except (LeaseLapsed, *RETRYABLE):
                    pass
            await asyncio.sleep(0.05)

    async def sampler() -> None:
        while not stop.is_set():
            if all(lease.holds(key) is not None for lease in leases):
                both_held.append(time.monotonic())
            await asyncio.sleep(0.005)

    def holder() -> int | None:
        held = [i for i, lease in enumerate(leases) if lease.holds(key) is not None]
        return held[0] if held else None

    a, b = leases
    tasks: list[asyncio.Task[None]] = []
    try:
        for lease in leases:
            lease.start()
        await eventually("both leases", lambda: a.valid() and b.valid())
        assert (await a.campaign(key, b"a")).holding is not None
        tasks += [asyncio.create_task(campaigner(lease, v)) for lease, v in zip(leases, (b"a", b"b"), strict=True)]
        tasks.append(asyncio.create_task(sampler()))
        epochs = [a.holds(key).epoch]  # type: ignore[union-attr]
        for _ in range(2):
            current = holder()
            assert current is not None
            (server.stop if how == "terminate" else server.kill)()
            # Nobody can refresh: the holder stops holding within 2/3 of the TTL.
            await eventually("the holder to lose validity", lambda: holder() is None)
            assert losses[current] and losses[current][-1][2] == "the lease was not refreshed in time", losses
            server.start()
            await eventually("a holder again", lambda: holder() is not None, timeout_s=30)
            now = holder()
            assert now is not None
            held = leases[now].holds(key)
            assert held is not None
            kv = await clients[now].get(key.encode())  # the holder's client: connected again
            assert kv is not None and kv.value == b"ab"[now : now + 1] and kv.mod_revision == held.epoch
            # The same holder with the same epoch (its lease survived the restart: the key
            # was adopted again) or, had its lease expired meanwhile, a new campaign's
            # winner (either of them) with a greater epoch.
            assert held.epoch > epochs[-1] or (held.epoch == epochs[-1] and now == current), (epochs, now, losses)
            epochs.append(held.epoch)
        assert both_held == []
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for lease in leases:
            await lease.close()
        for c in clients:
            await c.close()
        server.stop()
