"""The compiled-filter cache: bounded by count and by bytes (each filter's estimated
weight, checked against what tracemalloc sees), LRU, thread-safe, failures not kept;
and compile_sql92_async, which compiles long expressions off the event loop."""

from __future__ import annotations

import asyncio
import threading
import tracemalloc

import pytest

from txmq.protocol import MAX_FILTER_EXPRESSION_BYTES
from txmq_runtime import sql92
from txmq_runtime.sql92 import (
    SQL92_CACHE,
    SQL92_CACHE_BYTES,
    SQL92_CACHE_SIZE,
    SQL92_INLINE_COMPILE_CHARS,
    Sql92Cache,
    Sql92Filter,
    Sql92SyntaxError,
    compile_sql92,
    compile_sql92_async,
    compile_sql92_uncached,
)

GUARD_S = 10  # a hang guard, not a timing claim


def fill(unit: str, sep: str, size: int) -> str:
    """``unit`` repeated, joined by ``sep``, at most ``size`` characters."""
    return sep.join([unit] * ((size + len(sep)) // (len(unit) + len(sep))))


def distinct(i: int, size: int) -> str:
    """A valid expression of about ``size`` characters, different for each ``i``."""
    return f"k = {i} OR " + fill("a <> b", " OR ", size - 20)


def held_bytes(expression: str) -> int:
    """What compiling ``expression`` leaves allocated while the filter lives."""
    compile_sql92_uncached(expression)  # warm up (interned names, regex caches)
    tracemalloc.start()
    try:
        f = compile_sql92_uncached(expression)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del f
    return held


def invariant(cache: Sql92Cache) -> None:
    stats = cache.stats()
    assert stats.entries <= stats.max_entries
    assert stats.bytes <= stats.max_bytes
    assert stats.bytes == sum(f.weight for f in cache._entries.values())


# -- the weight estimate -----------------------------------------------------------------

# The expression shapes that cost most per byte of text, plus ordinary ones.
SHAPES = [
    ("a BETWEEN b AND c", " OR "),
    ("a<>b", " OR "),
    ("a>b", " OR "),
    ("1=a", " OR "),
    ("'x'<>a", " OR "),
    ("(a<>b OR c<>d)", " AND "),
    ("a NOT BETWEEN 1.0 AND 2", " OR "),
    ("a=1", "or "),
    ("NOT (a<>b)", " OR "),
    ("a", " OR "),
    ("a IN ('x', 'y')", " OR "),
    ("a STARTSWITH 'x'", " OR "),
    ("a IS NOT NULL", " AND "),
    ("region = 'eu' AND price BETWEEN 10 AND 200", " OR "),
]


@pytest.mark.parametrize(("unit", "sep"), SHAPES)
def test_a_filters_weight_bounds_what_it_holds(unit: str, sep: str) -> None:
    expression = fill(unit, sep, 4096)
    assert held_bytes(expression) <= compile_sql92_uncached(expression).weight


def test_small_expressions_weigh_little_and_the_biggest_fit_the_budget_several_times() -> None:
    assert compile_sql92_uncached("a > 5 AND region = 'eu'").weight < 8 * 1024
    worst = max(compile_sql92_uncached(fill(u, s, MAX_FILTER_EXPRESSION_BYTES)).weight for u, s in SHAPES)
    # the default budget keeps several of the longest expressions a service accepts...
    assert 4 * worst <= SQL92_CACHE_BYTES
    # ...and the full count of ordinary ones
    assert SQL92_CACHE_SIZE * 8 * 1024 <= SQL92_CACHE_BYTES
    assert (SQL92_CACHE.max_entries, SQL92_CACHE.max_bytes) == (SQL92_CACHE_SIZE, SQL92_CACHE_BYTES)


# -- the cache -----------------------------------------------------------------------------


def test_least_recently_used_goes_first_when_full_by_count() -> None:
    cache = Sql92Cache(max_entries=3, max_bytes=1 << 30)
    a, b, c = (cache.compile(f"x = {i}") for i in range(3))
    assert cache.compile("x = 0") is a  # a hit, now the most recent
    cache.compile("x = 3")
    assert cache.get("x = 1") is None  # b was the least recent
    assert cache.get("x = 0") is a and cache.get("x = 2") is c
    assert cache.stats().entries == 3
    assert b.expression == "x = 1"
    invariant(cache)


def test_bytes_held_stay_bounded_whatever_is_compiled() -> None:
    budget = 2 * 1024 * 1024
    cache = Sql92Cache(max_entries=1024, max_bytes=budget)
    weights = []
    for i in range(40):
        f = cache.compile(distinct(i, 4096))
        weights.append(f.weight)
        invariant(cache)
    assert sum(weights) > 4 * budget  # far more was compiled than is kept
    stats = cache.stats()
    assert 0 < stats.entries < 40
    assert stats.bytes <= budget
    # the most recent ones are the ones kept
    assert cache.get(distinct(39, 4096)) is not None
    assert cache.get(distinct(0, 4096)) is None


def test_a_filter_heavier_than_the_budget_is_compiled_but_not_kept() -> None:
    cache = Sql92Cache(max_entries=10, max_bytes=64 * 1024)
    small = cache.compile("a = 1")
    big = cache.compile(distinct(1, 4096))
    assert big.weight > 64 * 1024
    assert big.matches({"k": "1"})
    assert cache.get(big.expression) is None
    assert cache.get("a = 1") is small  # and it evicted nothing
    invariant(cache)


def test_failures_are_not_kept() -> None:
    cache = Sql92Cache(max_entries=10, max_bytes=1 << 20)
    for _ in range(2):
        with pytest.raises(Sql92SyntaxError):
            cache.compile("a = ")
    with pytest.raises(TypeError):
        cache.compile(None)  # type: ignore[arg-type]
    assert cache.stats().entries == 0
    assert cache.stats().bytes == 0


def test_concurrent_compiles_keep_the_books_straight() -> None:
    cache = Sql92Cache(max_entries=16, max_bytes=256 * 1024)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(200):
                n = (i * 7 + seed) % 40
                f = cache.compile(f"p{n} > {n} AND q <> 'v{n}'")
                assert f.matches({f"p{n}": str(n + 1), "q": "w"})
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    invariant(cache)
    cache.clear()
    assert cache.stats()[:2] == (0, 0)


def test_compile_sql92_uses_the_process_cache() -> None:
    expression = "cache_probe = 'x' AND n > 3"
    f = compile_sql92(expression)
    assert compile_sql92(expression) is f
    assert SQL92_CACHE.get(expression) is f
    assert isinstance(f, Sql92Filter)
    invariant(SQL92_CACHE)


def test_a_syntax_error_quotes_at_most_the_start_of_a_long_literal() -> None:
    literal = "'" + "x" * 10_000 + "'"
    with pytest.raises(Sql92SyntaxError) as info:
        compile_sql92_uncached(f"{literal} > 1")
    assert len(str(info.value)) < 400
    assert len(info.value.message) <= 300


# -- compiling off the event loop ----------------------------------------------------------


async def test_short_and_cached_expressions_compile_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = sql92.compile_sql92_uncached

    def recording(expression: str) -> Sql92Filter:
        threads.append(threading.current_thread().name)
        return real(expression)

    monkeypatch.setattr(sql92, "compile_sql92_uncached", recording)
    short = "short_probe = 1"
    assert len(short) <= SQL92_INLINE_COMPILE_CHARS
    f = await compile_sql92_async(short)
    assert threads == [threading.current_thread().name]
    assert await compile_sql92_async(short) is f  # cached: not compiled again
    assert len(threads) == 1
    with pytest.raises(TypeError):
        await compile_sql92_async(b"x")  # type: ignore[arg-type]


async def test_a_long_expression_compiles_on_a_worker_while_the_loop_serves_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compile blocks until a coroutine on the loop lets it go: if it ran on the
    loop, that coroutine could never run (the guard would expire and the order differ)."""
    order: list[str] = []
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    release = threading.Event()
    real = sql92.compile_sql92_uncached

    def blocking(expression: str) -> Sql92Filter:
        loop.call_soon_threadsafe(started.set)
        assert release.wait(GUARD_S), "the event loop never ran while the filter compiled"
        order.append("compiled")
        return real(expression)

    monkeypatch.setattr(sql92, "compile_sql92_uncached", blocking)
    expression = distinct(10_001, 4 * SQL92_INLINE_COMPILE_CHARS)
    SQL92_CACHE.clear()
    compiling = asyncio.create_task(compile_sql92_async(expression))

    async def other_call() -> None:
        await started.wait()  # the compile is under way (and blocked)
        order.append("served another call")
        release.set()

    await asyncio.wait_for(other_call(), GUARD_S)
    f = await asyncio.wait_for(compiling, GUARD_S)
    assert order == ["served another call", "compiled"]
    assert f.matches({"k": "10001"})
    assert SQL92_CACHE.get(expression) is f  # kept for the next call
