"""SQL92 filter evaluation: RocketMQ's three-valued results, coercions and errors.

Every expectation in CASES was checked against RocketMQ's own filter module
(SelectorParser + expression classes, convert-string mode as the broker uses it) while
writing this file: T = TRUE, F = FALSE, N = NULL (no match), E = evaluation throws (the
broker logs it and treats the message as not matching).
"""

from __future__ import annotations

import threading

import pytest

from txmq_runtime.sql92 import (
    Sql92EvaluationError,
    Sql92Filter,
    compile_sql92,
    compile_sql92_uncached,
)

T, F, N, E = "TRUE", "FALSE", "NULL", "ERROR"


def outcome(f: Sql92Filter, props: dict[str, str]) -> str:
    try:
        r = f.evaluate(props)
    except Sql92EvaluationError:
        return E
    return {True: T, False: F, None: N}[r]


CASES: list[tuple[str, dict[str, str], str]] = [
    # --- property vs integer literal: Integer.valueOf(property)
    ("a > 5", {"a": "10"}, T),
    ("a > 5", {"a": "5"}, F),
    ("a > 5", {}, N),
    ("a > 5", {"a": "abc"}, E),
    ("a > 5", {"a": "10.5"}, E),
    ("a > 5", {"a": " 10"}, E),  # no trimming for integers
    ("a > 5", {"a": "1_0"}, E),
    ("a > 5", {"a": "+10"}, T),
    ("a > 5", {"a": "\u0661\u0660"}, T),  # Arabic-Indic "10": Character.digit accepts it
    ("a > 5", {"a": "3000000000"}, E),  # out of int range for an int literal
    ("a > 5L", {"a": "3000000000"}, E),  # 5L is still an int (fits in 32 bits)
    ("a > 3000000000", {"a": "3000000001"}, T),  # long literal: Long.valueOf
    ("a > 3000000000", {"a": "5"}, F),
    ("a > 3000000000", {"a": "9223372036854775808"}, E),
    ("a = 5", {"a": "5"}, T),
    ("a = 5", {"a": "05"}, T),
    ("a = 5", {"a": "+5"}, T),
    ("a = 5", {"a": "\u0665"}, T),
    ("a = 5", {"a": "5.0"}, E),
    ("a = 5", {"a": "abc"}, E),  # not FALSE: the conversion throws
    ("a <> 5", {"a": "abc"}, E),
    ("a <> 5", {"a": "6"}, T),
    ("a = -5", {"a": "-5"}, T),
    ("a = -2147483648", {"a": "-2147483648"}, T),
    ("a = 2147483648", {"a": "2147483648"}, T),
    ("a = 9223372036854775807", {"a": "9223372036854775807"}, T),
    ("5 < a", {"a": "6"}, T),
    ("5 < a", {"a": "x"}, E),
    # --- property vs double literal: Double.valueOf(property)
    ("a > 5.0", {"a": "10.5"}, T),
    ("a > 5.0", {"a": " 10 "}, T),  # Double.valueOf trims
    ("a > 5.0", {"a": "1e3"}, T),
    ("a > 5.0", {"a": "10d"}, T),  # Java float suffixes
    ("a > 5.0", {"a": "0x1p3"}, T),  # hex float = 8.0
    ("a > 5.0", {"a": "Infinity"}, T),
    ("a > 5.0", {"a": "NaN"}, T),  # Double.compare puts NaN above everything
    ("a > 5.0", {"a": "abc"}, E),
    ("a > 5.0", {"a": "inf"}, E),
    ("a > 5.0", {"a": "\u0661\u0660"}, E),  # ASCII digits only for doubles
    ("a < 1.0", {"a": "-Infinity"}, T),
    ("a = 5.0", {"a": "5"}, T),
    ("a = 5.0", {"a": "5.00"}, T),
    ("a = 5.0", {"a": "abc"}, E),
    ("a > 3.1E10", {"a": "3.1415E10"}, T),
    ("a > 3.14", {"a": "3.1415"}, T),
    ("a > 1E-2", {"a": "0.02"}, T),
    ("a > 2.5e+1", {"a": "26"}, T),
    ("a = 4.9e-324", {"a": "4.9e-324"}, T),
    ("5.5 < a", {"a": "6"}, T),
    # --- two properties: = compares strings, > < compare as doubles
    ("a = b", {"a": "3.14", "b": "3.14"}, T),
    ("a <> b", {"a": "3.14", "b": "3.141"}, T),
    ("a = b", {"a": "1", "b": "1.0"}, F),
    ("a > b", {"a": "10", "b": "9"}, T),  # numeric, not lexicographic
    ("a > b", {"a": "20", "b": "10"}, T),
    ("a > b", {"a": "10", "b": "20"}, F),
    ("a > b", {"a": "abc", "b": "9"}, E),
    ("a > b", {"a": "0", "b": "-0.0"}, T),  # Double.compare: -0.0 < 0.0
    ("a >= b", {"a": "NaN", "b": "NaN"}, T),
    # --- booleans: Boolean.valueOf(property), i.e. equalsIgnoreCase("true")
    ("a = TRUE", {"a": "true"}, T),
    ("a = TRUE", {"a": "TRUE"}, T),
    ("a = TRUE", {"a": "yes"}, F),
    ("a = TRUE", {}, N),
    ("a = FALSE", {"a": "abc"}, T),  # anything but "true" is false
    ("a <> TRUE", {"a": "false"}, T),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, T),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, F),
    ("TRUE = a", {"a": "true"}, E),  # boolean on the left of a string: ClassCastException
    ("TRUE = a", {}, F),
    ("TRUE <> a", {}, T),
    ("1 = TRUE", {}, F),
    # --- NULL handling of = and <>: the left side decides
    ("a = b", {}, T),  # NULL = NULL is TRUE
    ("a = b", {"a": "1"}, F),  # x = NULL is FALSE
    ("a = b", {"b": "1"}, N),  # NULL = x is NULL
    ("a <> b", {"a": "1"}, T),
    ("'x' = a", {}, F),
    ("'x' <> a", {}, T),
    ("a <> 'x'", {}, N),
    ("a <> 'x'", {"a": "y"}, T),
    # --- constants
    ("1 = 1.0", {}, T),
    ("3000000000 = 3000000000.0", {}, T),
    ("9007199254740993 = 9007199254740992.0", {}, T),  # long -> double first
    ("'a' = 'a'", {}, T),
    ("'5' = 5", {}, T),
    ("'x' = 5", {}, E),
    ("TRUE", {}, T),
    ("FALSE", {}, F),
    ("NULL", {}, N),
    ("NOT NULL", {}, N),
    # --- IN
    ("a IN ('x', 'y')", {"a": "x"}, T),
    ("a IN ('x', 'y')", {"a": "z"}, F),
    ("a IN ('x', 'y')", {}, N),
    ("a NOT IN ('x', 'y')", {"a": "z"}, T),
    ("a NOT IN ('x', 'y')", {"a": "x"}, F),
    ("a NOT IN ('x', 'y')", {}, N),
    ("a in ('3', '4', '5')", {"a": "4"}, T),
    ("a not in ('3', '4', '5')", {"a": "8"}, T),
    ("(a) IN ('x')", {"a": "x"}, T),
    # --- IS [NOT] NULL never yields NULL
    ("a IS NULL", {}, T),
    ("a IS NULL", {"a": ""}, F),
    ("a IS NOT NULL", {"a": "2"}, T),
    ("a IS NOT NULL", {"abc": "2"}, F),
    ("(a = 1) IS NULL", {}, T),
    ("5 IS NULL", {}, F),
    ("NULL IS NULL", {}, T),
    ("NULL IS NOT NULL", {}, F),
    # --- a bare property is a boolean cast: a string is never TRUE
    ("a", {"a": "true"}, F),
    ("a", {}, N),
    ("NOT a", {"a": "x"}, T),
    ("NOT a", {}, N),
    ("(NOT a) = TRUE", {"a": "x"}, T),
    ("(NOT a) = 'x'", {"a": "x"}, E),
    ("(NOT a) = 'x'", {}, N),
    # --- CONTAINS / STARTSWITH / ENDSWITH: FALSE (not NULL) for NULL, '' or non-strings
    ("value contains 'x'", {"value": "axb"}, T),
    ("value startswith 'ax'", {"value": "axb"}, T),
    ("value endswith 'xb'", {"value": "axb"}, T),
    ("value not contains 'x'", {"value": "axb"}, F),
    ("value not startswith 'ax'", {"value": "axb"}, F),
    ("value not endswith 'xb'", {"value": "axb"}, F),
    ("value contains 'x'", {"value": "abb"}, F),
    ("value not contains 'x'", {"value": "abb"}, T),
    ("value not startswith 'x'", {"value": "abb"}, T),
    ("value not endswith 'x'", {"value": "abb"}, T),
    ("value contains ''", {"value": "axb"}, F),
    ("value startswith ''", {"value": "axb"}, F),
    ("value endswith ''", {"value": "axb"}, F),
    ("value not contains ''", {"value": "axb"}, F),
    ("value not startswith ''", {"value": "axb"}, F),
    ("value contains 'x'", {}, F),
    ("value not contains 'x'", {}, F),
    ("value not startswith 'x'", {}, F),
    ("value not endswith 'x'", {}, F),
    ("NOT (value CONTAINS 'x')", {}, T),
    ("'axb' contains 'x'", {}, T),
    ("'axb' not endswith 'u'", {}, T),
    ("'axb' contains '.'", {}, F),
    ("' ' startswith ' '", {}, T),
    ("' ' not contains ' '", {}, F),
    ("'s' contains '\\'", {}, F),
    ("5 CONTAINS '5'", {}, F),
    ("(a > 5) CONTAINS 'x'", {"a": "x"}, E),  # the operand is still evaluated
    # --- BETWEEN = (>= low AND <= high); NOT BETWEEN = (< low OR > high)
    ("a between 2 and 10", {"a": "2"}, T),
    ("a between 2 and 10", {"a": "10"}, T),
    ("a between 2 and 10", {"a": "3"}, T),
    ("a between 2 and 10", {"a": "1"}, F),
    ("a between 2 and 10", {"a": "11"}, F),
    ("a between 2 and 10", {"a": "5.5"}, E),
    ("a between 2 and 10", {}, N),
    ("a not between 2 and 10", {"a": "1"}, T),
    ("a not between 2 and 10", {"a": "11"}, T),
    ("a not between 2 and 10", {"a": "5"}, F),
    ("a not between 2 and 10", {}, N),
    ("a BETWEEN 2.0 AND 10", {"a": "5.5"}, E),  # the "<= 10" half converts to int
    ("a BETWEEN 2 AND 10.0", {"a": "5.5"}, E),
    ("a BETWEEN 2.0 AND 10.0", {"a": "5.5"}, T),
    ("a BETWEEN 5 AND 5", {"a": "5"}, T),
    ("a BETWEEN -5 AND 5", {"a": "-3"}, T),
    ("a BETWEEN 1 AND 3000000000", {"a": "2"}, T),
    ("a BETWEEN 3000000000 AND 4000000000", {"a": "3500000000"}, T),
    ("a BETWEEN b AND c", {"a": "5.5", "b": "1", "c": "1e1"}, T),
    ("a BETWEEN b AND c", {"a": "3.14"}, N),
    ("a BETWEEN b AND c", {"a": "3.14", "b": "up", "c": "low"}, E),
    ("key is not null and key between 0 and 100", {"key": "con"}, E),
    # --- chained comparisons (left-associative, booleans compared with numbers)
    ("a = 1 = 2", {"a": "1"}, F),
    ("a = 1 = 2", {}, N),
    ("a = 1 <> 2", {"a": "1"}, T),
    ("a > 1 = TRUE", {"a": "2"}, T),
    ("a = 'x' = 'y'", {"a": "x"}, E),
    ("a = 'x' = 'y'", {}, N),
    # --- AND / OR: three-valued, left to right, errors propagate where RocketMQ evaluates
    ("a = '1' AND b = '2'", {"b": "3"}, F),
    ("a = '1' AND b = '2'", {"b": "2"}, N),
    ("a = '1' OR b = '2'", {"b": "3"}, N),
    ("a = '1' OR b = '2'", {"b": "2"}, T),
    ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, E),  # left throws before OR can succeed
    ("b = 'x' OR a > 5", {"a": "abc", "b": "x"}, T),  # short-circuit: never converted
    ("a > 5 AND b = 'x'", {"a": "abc", "b": "y"}, E),
    ("b = 'x' AND a > 5", {"a": "abc", "b": "y"}, F),
    ("b = 'x' AND a > 5", {"a": "abc"}, E),  # NULL does not stop AND: a > 5 still runs
    ("NOT (a = '1' AND b > 5)", {"b": "x"}, E),
    ("NOT (a = '1' AND b = '2')", {"b": "3"}, T),
    ("a is null OR a='hello'", {}, T),
    ("a is null OR a='hello'", {"a": "hello"}, T),
    ("a is null OR a='hello'", {"a": "abc"}, F),
    ("a is not null and a='hello'", {"a": "hello"}, T),
    ("a is not null and a='hello'", {}, F),
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "1"}, T),
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "4", "b": "5", "c": "6", "d": "1"}, F),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "3"}, T),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "5"}, T),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "6"}, T),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "2"}, T),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "10"}, F),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        T,
    ),
    (
        "a not in ('4', '4', '5') and b between 3 and 10 and c not startswith 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        T,
    ),
    # --- strings, identifiers, lexing
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, T),
    ("a = 'it''s'", {"a": "it's"}, T),
    ("a = ''", {"a": ""}, T),
    ("a = 'multi\nline'", {"a": "multi\nline"}, T),
    ("$x = '1' AND _y = '2' AND A1 = '3'", {"$x": "1", "_y": "2", "A1": "3"}, T),
    ("a = '1' and B = '2'", {"a": "1", "b": "2"}, N),  # property names are case-sensitive
    ("a <= now", {"a": "1", "now": "2"}, T),  # "now" is an ordinary identifier
    ("a = 5 /* c */ AND b = 1 -- x\n", {"a": "5", "b": "1"}, T),
    ("a=5and b=1", {"a": "5", "b": "1"}, T),  # tokens need no separator
    ("a = +5", {"a": "5"}, T),
    ("a = - -5", {"a": "5"}, T),
    ("a = -(5)", {"a": "-5"}, T),
    ("a = 5.", {"a": "5"}, T),
    ("a = .5", {"a": "0.5"}, T),
    ("a = 5e0", {"a": "5"}, T),
    ("a = +'x'", {"a": "x"}, T),
]


@pytest.mark.parametrize(("expression", "props", "expected"), CASES)
def test_rocketmq_outcome(expression: str, props: dict[str, str], expected: str) -> None:
    f = compile_sql92(expression)
    assert outcome(f, props) == expected
    assert f.matches(props) is (expected == T)


@pytest.mark.parametrize(("expression", "props", "expected"), CASES)
def test_not_of_each_case(expression: str, props: dict[str, str], expected: str) -> None:
    """NOT (x) exercises the compiled "is FALSE" paths: TRUE<->FALSE, NULL and errors stay."""
    f = compile_sql92(f"NOT ({expression})")
    flipped = {T: F, F: T, N: N, E: E}[expected]
    assert outcome(f, props) == flipped
    assert f.matches(props) is (flipped == T)


def test_matches_swallows_evaluation_errors_evaluate_raises() -> None:
    f = compile_sql92("a > 5")
    assert f.matches({"a": "abc"}) is False
    with pytest.raises(Sql92EvaluationError, match="'abc'"):
        f.evaluate({"a": "abc"})
    with pytest.raises(ValueError):  # Sql92EvaluationError is a ValueError
        f.evaluate({"a": "abc"})


def test_none_properties_mean_no_properties() -> None:
    assert compile_sql92("a IS NULL").matches(None) is True
    assert compile_sql92("a = 'x'").matches(None) is False
    assert compile_sql92("a = 'x'").evaluate(None) is None


def test_a_property_mapped_to_none_is_absent() -> None:
    props: dict[str, str | None] = {"a": None}
    assert compile_sql92("a IS NULL").matches(props) is True  # type: ignore[arg-type]


def test_in_list_with_many_values() -> None:
    values = [f"v{i}" for i in range(200)]
    f = compile_sql92("a IN (" + ", ".join(f"'{v}'" for v in values) + ")")
    assert all(f.matches({"a": v}) for v in values)
    assert not f.matches({"a": "v200"})


def test_long_flat_chains_do_not_recurse() -> None:
    f = compile_sql92(" AND ".join(f"p{i} = '{i}'" for i in range(2000)))
    props = {f"p{i}": str(i) for i in range(2000)}
    assert f.matches(props)
    props["p1999"] = "x"
    assert not f.matches(props)
    g = compile_sql92(" OR ".join(f"p{i} > {i}" for i in range(2000)))
    assert g.matches({"p1999": "2000"})
    assert not g.matches({"p0": "0"})
    assert not g.matches({"p0": "x", "p1999": "2000"})  # p0 > 0 throws first


def test_many_operands_with_late_errors() -> None:
    # AND must keep evaluating past NULL operands while a later one may throw
    f = compile_sql92("a = '1' AND b = '2' AND c = '3' AND d > 5")
    with pytest.raises(Sql92EvaluationError):  # NULL, NULL, NULL, then d > 5 throws
        f.evaluate({"d": "x"})
    assert not f.matches({"a": "1", "b": "2", "c": "3", "d": "x"})
    assert f.evaluate({"c": "4", "d": "x"}) is False  # c = '3' is FALSE: stops before d
    assert not compile_sql92("NOT (a = '1' AND b = '2' AND d > 5)").matches({"d": "x"})
    g = compile_sql92("a = '1' OR b = '2' OR c = '3' OR d > 5")
    with pytest.raises(Sql92EvaluationError):
        g.evaluate({"d": "x"})
    assert g.evaluate({"b": "2", "d": "x"}) is True
    assert not compile_sql92("NOT (a = '1' OR b = '2' OR d > 5)").matches({"d": "x"})
    assert compile_sql92("NOT (a = '1' OR b = '2' OR d > 5)").matches({"a": "0", "b": "0", "d": "1"})


def test_filters_are_cached_and_shareable_across_threads() -> None:
    f = compile_sql92("region IN ('eu', 'us') AND price BETWEEN 10 AND 200")
    assert compile_sql92("region IN ('eu', 'us') AND price BETWEEN 10 AND 200") is f
    assert f.property_names == frozenset({"region", "price"})
    errors: list[Exception] = []

    def work() -> None:
        try:
            for i in range(2000):
                expected = 10 <= i <= 200
                assert f.matches({"region": "eu", "price": str(i)}) is expected
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_filter_value_semantics() -> None:
    f = compile_sql92("a = '1'")
    assert f.expression == "a = '1'"
    assert f == compile_sql92_uncached("a = '1'")
    assert hash(f) == hash("a = '1'")
    assert "a = '1'" in repr(f)
    assert f({"a": "1"}) is True  # callable as a predicate
