"""Property-based tests of the SQL92 filter (hypothesis).

The compiled filter has three evaluation paths per node (value, "is TRUE", "is FALSE"),
with short-circuits chosen statically; these properties check that they agree with each
other and with RocketMQ's three-valued AND/OR/NOT tables, errors included."""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import given, settings
from hypothesis import strategies as st

from txmq_runtime.sql92 import (
    Sql92EvaluationError,
    Sql92SyntaxError,
    compile_sql92,
)

SETTINGS = settings(database=None, deadline=None, max_examples=200)

T, F, N, E = "TRUE", "FALSE", "NULL", "ERROR"

PROPS = ("a", "b", "c")
VALUES = ("1", "5", "9", "-3", "5.5", "abc", "", "true", "x", "NaN", " 5")

ATOMS = st.sampled_from(
    [
        "a > 5",
        "a >= 5.0",
        "b = 'x'",
        "b <> 'x'",
        "c IS NULL",
        "c IS NOT NULL",
        "a = 5",
        "a BETWEEN 1 AND 7",
        "a NOT BETWEEN 1 AND 7",
        "b IN ('x', 'abc')",
        "b NOT IN ('x')",
        "c CONTAINS 'a'",
        "c NOT STARTSWITH 'x'",
        "a",
        "TRUE",
        "FALSE",
        "NULL",
        "a > b",
        "a = b",
        "5 < a",
        "b = TRUE",
        "(a = 1) = FALSE",
    ]
)


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        children.map(lambda x: f"NOT ({x})"),
        st.tuples(st.sampled_from([" AND ", " OR "]), st.lists(children, min_size=2, max_size=4)).map(
            lambda t: "(" + t[0].join(t[1]) + ")"
        ),
    )


EXPRESSIONS = st.recursive(ATOMS, _combine, max_leaves=12)
PROPERTIES = st.dictionaries(st.sampled_from(PROPS), st.sampled_from(VALUES))


def outcome(expression: str, props: dict[str, str]) -> str:
    f = compile_sql92(expression)
    try:
        r = f.evaluate(props)
    except Sql92EvaluationError:
        result = E
    else:
        result = {True: T, False: F, None: N}[r]
    assert f.matches(props) is (result == T), (expression, props, result)
    return result


def rocketmq_and(x: str, y: str) -> str:
    if x == E:
        return E
    if x == F:
        return F
    if y in (E, F):
        return y
    return N if N in (x, y) else T


def rocketmq_or(x: str, y: str) -> str:
    if x == E:
        return E
    if x == T:
        return T
    if y in (E, T):
        return y
    return N if N in (x, y) else F


@SETTINGS
@given(EXPRESSIONS, PROPERTIES)
def test_matches_agrees_with_three_valued_evaluation(expression: str, props: dict) -> None:
    outcome(expression, props)


@SETTINGS
@given(EXPRESSIONS, PROPERTIES)
def test_not_flips_true_and_false_only(expression: str, props: dict) -> None:
    x = outcome(expression, props)
    assert outcome(f"NOT ({expression})", props) == {T: F, F: T, N: N, E: E}[x]


@SETTINGS
@given(EXPRESSIONS, EXPRESSIONS, PROPERTIES)
def test_and_or_follow_rocketmq_tables(left: str, right: str, props: dict) -> None:
    x, y = outcome(left, props), outcome(right, props)
    assert outcome(f"({left}) AND ({right})", props) == rocketmq_and(x, y)
    assert outcome(f"({left}) OR ({right})", props) == rocketmq_or(x, y)
    # De Morgan holds exactly, errors included (same evaluation order)
    assert outcome(f"NOT (({left}) AND ({right}))", props) == outcome(f"NOT ({left}) OR NOT ({right})", props)


@SETTINGS
@given(EXPRESSIONS, PROPERTIES)
def test_canonical_form_round_trips(expression: str, props: dict) -> None:
    canonical = compile_sql92(expression).canonical
    assert compile_sql92(canonical).canonical == canonical
    assert outcome(canonical, props) == outcome(expression, props)


@SETTINGS
@given(
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.sampled_from([">", ">=", "<", "<=", "=", "<>"]),
)
def test_integer_comparisons_are_numeric(value: int, literal: int, op: str) -> None:
    expected = {
        ">": value > literal,
        ">=": value >= literal,
        "<": value < literal,
        "<=": value <= literal,
        "=": value == literal,
        "<>": value != literal,
    }[op]
    assert compile_sql92(f"a {op} {literal}").matches({"a": str(value)}) is expected
    assert compile_sql92(f"a {op} b").matches({"a": str(value), "b": str(literal)}) is (
        expected if op not in ("=", "<>") else (str(value) == str(literal)) is (op == "=")
    )


@SETTINGS
@given(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
    st.floats(allow_nan=False, allow_infinity=False, min_value=1e-300, max_value=1e300),
    st.booleans(),
)
def test_double_comparisons_are_numeric(value: float, literal: float, negate: bool) -> None:
    lit = -literal if negate else literal
    f = compile_sql92(f"a > {'-' if negate else ''}{literal!r}")
    assert f.matches({"a": repr(value)}) is (value > lit)
    assert compile_sql92(f"a BETWEEN {min(value, literal)!r} AND {max(value, literal)!r}").matches({"a": repr(value)})


PIECES = st.sampled_from(
    [
        "a",
        "b1",
        "$x",
        "5",
        "5L",
        "0",
        "1.5",
        ".5",
        "1e3",
        "'x'",
        "''",
        "'it''s'",
        "=",
        "<>",
        ">",
        ">=",
        "<",
        "<=",
        "(",
        ")",
        ",",
        "+",
        "-",
        "AND",
        "or",
        "NOT",
        "BETWEEN",
        "IN",
        "IS",
        "NULL",
        "TRUE",
        "false",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
        " ",
        " ",
        "\n",
        "/*c*/",
        "--c\n",
        "'",
        "!",
        "é",
        ".",
        "007",
        "1e400",
        "9223372036854775808",
    ]
)


@settings(database=None, deadline=None, max_examples=500)
@given(st.lists(PIECES, max_size=12).map("".join), PROPERTIES)
def test_any_text_compiles_or_raises_a_located_syntax_error(text: str, props: dict) -> None:
    try:
        compile_sql92(text)
    except Sql92SyntaxError as err:
        assert 0 <= err.position <= len(text)
        assert err.message
        return
    outcome(text, props)
