"""SQL92 filter parsing: RocketMQ's grammar, precedence, literals, and txmq's errors."""

from __future__ import annotations

import pytest

from txmq_runtime.sql92 import (
    MAX_DEPTH,
    MAX_NESTING,
    Sql92SyntaxError,
    compile_sql92,
)


def canon(expression: str) -> str:
    return compile_sql92(expression).canonical


def syntax_error(expression: str) -> Sql92SyntaxError:
    with pytest.raises(Sql92SyntaxError) as info:
        compile_sql92(expression)
    return info.value


# --------------------------------------------------------------------------- precedence


@pytest.mark.parametrize(
    ("expression", "tree"),
    [
        # OR < AND < (= <> IS) < (> >= < <= BETWEEN IN CONTAINS ...) < unary
        ("a = 1 OR b = 2 AND c = 3", "((a = 1) OR ((b = 2) AND (c = 3)))"),
        ("a = 1 AND b = 2 OR c = 3", "(((a = 1) AND (b = 2)) OR (c = 3))"),
        ("(a = 1 OR b = 2) AND c = 3", "(((a = 1) OR (b = 2)) AND (c = 3))"),
        ("a = 1 AND b = 2 AND c = 3", "((a = 1) AND (b = 2) AND (c = 3))"),
        ("a = 1 OR (b = 2 OR c = 3)", "((a = 1) OR (b = 2) OR (c = 3))"),
        ("a > 1 = TRUE", "((a > 1) = TRUE)"),
        ("a = 1 = 2", "((a = 1) = 2)"),
        ("a = 1 IS NULL", "((a = 1) IS NULL)"),
        ("a BETWEEN 1 AND 2 AND b = 1", "((a BETWEEN 1 AND 2) AND (b = 1))"),
        ("a NOT BETWEEN -1 AND 2.5", "(a NOT BETWEEN -1 AND 2.5)"),
        ("NOT a = 1 OR b = 2".replace("NOT a = 1", "NOT (a = 1)"), "((NOT (a = 1)) OR (b = 2))"),
        ("NOT (a = 1) AND b = 2", "((NOT (a = 1)) AND (b = 2))"),
        ("(NOT a) = TRUE", "((NOT a) = TRUE)"),
        ("NOT NOT (a = 1)", "(NOT (NOT (a = 1)))"),
        ("a = NOT b", "(a = (NOT b))"),
        ("NOT a AND b = 1", "((NOT a) AND (b = 1))"),
        ("a IN ('x', 'it''s')", "(a IN ('x', 'it''s'))"),
        ("a NOT IN ('x')", "(a NOT IN ('x'))"),
        ("a NOT CONTAINS 'x'", "(a NOT CONTAINS 'x')"),
        ("a IS NOT NULL", "(a IS NOT NULL)"),
        ("a", "a"),
        ("TRUE", "TRUE"),
        ("a = +5", "(a = 5)"),
        ("a = - -5", "(a = 5)"),
        ("a = -5.5", "(a = -5.5)"),
        ("a > 3.1E10", "(a > 31000000000.0)"),
        ("a > 5L", "(a > 5)"),
    ],
)
def test_precedence_and_canonical_form(expression: str, tree: str) -> None:
    assert canon(expression) == tree
    assert canon(tree) == tree  # the canonical form parses back to itself


def test_keywords_are_case_insensitive_identifiers_are_not() -> None:
    assert canon("a = 1 and b <> 2 Or NOT (c is not null)") == canon("a = 1 AND b <> 2 OR NOT (c IS NOT NULL)")
    assert canon("a between 1 and 2") == canon("a BeTwEeN 1 AnD 2")
    assert canon("x contains 'a' and y StartsWith 'b' and z ENDSWITH 'c'") == (
        "((x CONTAINS 'a') AND (y STARTSWITH 'b') AND (z ENDSWITH 'c'))"
    )
    assert canon("a = true OR b = False OR c is Null") == ("((a = TRUE) OR (b = FALSE) OR (c IS NULL))")
    f = compile_sql92("Region = 'eu'")
    assert f.property_names == frozenset({"Region"})
    assert not f.matches({"region": "eu"})


def test_identifiers_as_rocketmq_allows_them() -> None:
    f = compile_sql92("$a = '1' AND _b1 = '2' AND now = '3' AND NOTE = '4' AND ISX = '5'")
    assert f.property_names == frozenset({"$a", "_b1", "now", "NOTE", "ISX"})
    assert f.matches({"$a": "1", "_b1": "2", "now": "3", "NOTE": "4", "ISX": "5"})


def test_whitespace_and_comments() -> None:
    assert canon("\ta\r\n=\f'1'") == "(a = '1')"
    assert canon("a = 1 /* block\n comment */ AND b = 2") == "((a = 1) AND (b = 2))"
    assert canon("a = 1 -- line comment\nAND b = 2") == "((a = 1) AND (b = 2))"
    assert canon("a = 1 -- comment running to the end") == "(a = 1)"
    assert canon("/**/a/***/=/* ** */1") == "(a = 1)"


def test_tokens_need_no_separators() -> None:
    assert canon("a=5and b<>'x'or c>=1.5e3") == "(((a = 5) AND (b <> 'x')) OR (c >= 1500.0))"
    assert canon("a=-5") == "(a = -5)"


@pytest.mark.parametrize(
    ("literal", "text"),
    [
        ("0", "0"),
        ("5", "5"),
        ("5L", "5"),
        ("5l", "5"),
        ("2147483647", "2147483647"),
        ("2147483648", "2147483648"),
        ("9223372036854775807", "9223372036854775807"),
        ("5.5", "5.5"),
        ("5.", "5.0"),
        (".5", "0.5"),
        ("5e2", "500.0"),
        ("5E+2", "500.0"),
        ("5.5e-1", "0.55"),
        (".5E1", "5.0"),
        ("012.5", "12.5"),
        ("4.9e-324", "5e-324"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("0.0", "0.0"),  # RocketMQ rejects 0.0 by accident (see docs/sql92.md)
        ("0e0", "0.0"),
        ("'it''s'", "'it''s'"),
        ("''", "''"),
    ],
)
def test_literals(literal: str, text: str) -> None:
    assert canon(f"a = {literal}") == f"(a = {text})"


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("expression", "column", "message"),
    [
        # trailing input: RocketMQ silently ignores it, txmq rejects it
        ("a = '1' xyz", 9, "expected end of input but found identifier 'xyz'"),
        ("a > 5 b", 7, "expected end of input but found identifier 'b'"),
        ("a = 1)", 6, "expected end of input but found ')'"),
        ("a = 1 +", 7, "expected end of input but found '+'"),
        ("a = 007", 6, "expected end of input but found number 0"),  # tokens 0, 0, 7
        ("a = 0L", 6, "expected end of input but found identifier 'L'"),
        ("a = 1 'x'", 7, "expected end of input but found string literal 'x'"),
        ("a = 1 2", 7, "expected end of input but found number 2"),
        ("(a = 1) (b = 2)", 9, "expected end of input but found '('"),
        # empty
        ("", 1, "empty expression"),
        ("   ", 4, "empty expression"),
        ("/* nothing */", 14, "empty expression"),
        ("-- only a comment", 18, "empty expression"),
        # lexical
        ("a = 'abc", 5, "unterminated string literal"),
        ("a = 'it''s", 5, "unterminated string literal"),
        ("a = 1 /* open", 7, "unterminated comment"),
        ("a != 1", 3, "unexpected character '!'"),
        ('a = "x"', 5, "unexpected character '\"'"),
        ("a.b = 1", 2, "unexpected character '.'"),
        ("a = é", 5, "unexpected character 'é'"),
        ("a = 1; b = 2", 6, "unexpected character ';'"),
        # grammar
        ("a == 1", 4, "expected a property name, a literal, '(', NOT, '+' or '-' but found '='"),
        ("a =", 4, "but found end of input"),
        ("a and between 2 and 10", 7, "but found BETWEEN"),
        ("NOT", 4, "but found end of input"),
        ("(a = 1", 7, "expected ')' to close the '(' at column 1 but found end of input"),
        ("((a = 1)", 9, "expected ')' to close the '(' at column 1"),
        ("a IS 5", 6, "expected NULL or NOT NULL after IS but found number 5"),
        ("a IS NOT 5", 10, "expected NULL or NOT NULL after IS"),
        ("a NOT LIKE 'x'", 7, "expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT"),
        ("a = 1 NOT b", 11, "expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT"),
        ("a BETWEEN 1", 12, "expected AND between the BETWEEN bounds but found end of input"),
        ("a BETWEEN 1 OR 2", 13, "expected AND between the BETWEEN bounds but found OR"),
        ("a IN 'x'", 6, "expected '(' after IN"),
        ("a IN ()", 7, "expected a string literal in the IN list but found ')'"),
        ("a IN ('x',)", 11, "expected a string literal after ','"),
        ("a IN ('x' 'y')", 11, "expected ',' or ')' in the IN list"),
        ("a IN (1)", 7, "expected a string literal in the IN list but found number 1"),
        ("value contains x", 16, "expected a string literal after CONTAINS"),
        ("value contains 123", 16, "expected a string literal after CONTAINS but found number"),
        ("'axb' contains ", 16, "after CONTAINS but found end of input"),
        ("a NOT STARTSWITH b", 18, "expected a string literal after STARTSWITH"),
        # literals out of range
        ("a > 9223372036854775808", 5, "integer literal 9223372036854775808 is out of range"),
        ("a > 100000000000000000000000", 5, "is out of range"),
        ("a > 1e400", 5, "out of the double range"),
        ("a > 1e-400", 5, "underflows to zero"),
        # types (RocketMQ's compile-time checks)
        ("5", 1, "5 is not a boolean expression"),
        ("'x'", 1, "'x' is not a boolean expression"),
        ("a AND 5", 7, "5 is not a boolean expression"),
        ("5 OR a = 1", 1, "5 is not a boolean expression"),
        ("NOT 'x'", 5, "'x' is not a boolean expression"),
        ("a > 'x'", 5, "'x' cannot be compared with >"),
        ("'x' < a", 1, "'x' cannot be compared with <"),
        ("a >= TRUE", 6, "TRUE cannot be compared with >="),
        ("a <= NULL", 6, "NULL cannot be compared with <="),
        ("(a = 1) > 1", 1, "(a = 1) cannot be compared with >"),
        ("a = NULL", 5, "NULL cannot be compared with '='; use IS [NOT] NULL"),
        ("NULL <> a", 1, "NULL cannot be compared with '<>'"),
        ("TRUE = 1", 8, "TRUE cannot be compared with 1"),
        ("FALSE = 'x'", 9, "FALSE cannot be compared with 'x'"),
        ("'x' IN ('x')", 1, "IN needs a property on its left, not 'x'"),
        ("(a = 1) IN ('x')", 1, "IN needs a property on its left"),
        ("a BETWEEN 10 AND 0", 11, "BETWEEN bounds out of order: 10 is greater than 0"),
        ("a BETWEEN 2.5 AND 2", 11, "BETWEEN bounds out of order"),
        ("a BETWEEN NULL AND 1", 11, "NULL cannot be compared with BETWEEN"),
        ("a BETWEEN 'a' AND 'b'", 11, "'a' cannot be compared with BETWEEN"),
        ("a BETWEEN 1 AND '5'", 17, "'5' cannot be compared with BETWEEN"),
        ("TRUE BETWEEN 1 AND 2", 1, "TRUE cannot be compared with BETWEEN"),
        # txmq is stricter than RocketMQ
        ("NOT a = 'x'", 1, "ambiguous NOT before ="),
        ("NOT a <> 'x'", 1, "ambiguous NOT before <>"),
        ("NOT a IS NULL", 1, "ambiguous NOT before IS"),
        ("NOT a CONTAINS 'x'", 1, "ambiguous NOT before CONTAINS"),
        ("NOT a NOT STARTSWITH 'x'", 1, "ambiguous NOT before STARTSWITH"),
        ("NOT a > 1", 1, "ambiguous NOT before >"),
        ("NOT a IN ('x')", 1, "ambiguous NOT before IN"),
        ("b = 1 AND NOT a = 'x'", 11, "write NOT (x = ...) or parenthesise (NOT x)"),
        ("+NOT a = 'x'", 2, "ambiguous NOT"),
        ("-a > 1", 1, "unary '-' applies to numeric literals only, not a"),
        ("a > -b", 5, "unary '-' applies to numeric literals only, not b"),
        ("a = -'x'", 5, "unary '-' applies to numeric literals only, not 'x'"),
        ("a = -TRUE", 5, "unary '-' applies to numeric literals only"),
        ("a = -NULL", 5, "unary '-' applies to numeric literals only"),
        ("a = -(b = 1)", 5, "unary '-' applies to numeric literals only"),
        ("a BETWEEN 5 AND -1", 11, "BETWEEN bounds out of order: 5 is greater than -1"),
        ("TRUE = -1", 8, "TRUE cannot be compared with -1"),
    ],
)
def test_syntax_errors_name_column_and_expectation(expression: str, column: int, message: str) -> None:
    err = syntax_error(expression)
    assert message in err.message
    assert err.column == column, (err.column, str(err))
    assert err.line == 1
    assert err.position == column - 1
    assert err.expression == expression
    assert str(err).startswith(f"SQL92 syntax error at column {column}: ")
    assert isinstance(err, ValueError)


def test_multiline_errors_name_line_and_column() -> None:
    err = syntax_error("a = 1\n  AND b = 'x' zz")
    assert (err.line, err.column) == (2, 15)
    assert str(err).startswith("SQL92 syntax error at line 2, column 15: ")
    assert err.caret() == "  AND b = 'x' zz\n              ^"
    err = syntax_error("(a = 1\nAND\n(b = 2)")
    assert (err.line, err.column) == (3, 8)
    assert "close the '(' at column 1" in err.message


def test_caret_points_at_error() -> None:
    assert syntax_error("a = '1' xyz").caret() == "a = '1' xyz\n        ^"


def test_nesting_limits() -> None:
    deep = "(" * MAX_NESTING + "a = 1" + ")" * MAX_NESTING
    assert compile_sql92(deep).matches({"a": "1"})
    err = syntax_error("(" * (MAX_NESTING + 1) + "a = 1" + ")" * (MAX_NESTING + 1))
    assert "nested too deeply" in err.message
    assert "nested too deeply" in syntax_error("NOT " * (MAX_NESTING + 1) + "a").message
    assert "nested too deeply" in syntax_error("a = " + "- " * (MAX_NESTING + 1) + "1").message
    assert "nested too deeply" in syntax_error("a" + " = a" * MAX_DEPTH).message
    chain = compile_sql92("a" + " = a" * (MAX_DEPTH - 1))
    assert chain.evaluate({}) is False


def test_errors_are_not_cached_and_non_strings_rejected() -> None:
    for _ in range(2):
        with pytest.raises(Sql92SyntaxError):
            compile_sql92("a = ")
    with pytest.raises(TypeError):
        compile_sql92(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        compile_sql92(b"a = '1'")  # type: ignore[arg-type]


def test_rocketmq_parser_test_expressions() -> None:
    for expression in [
        "a=3 and b<>4 And c>5 AND d<=4",
        "a=3  and    b<>4 And c>5 AND d<=4",
        "a=3 or b<>4 Or c>5 OR d<=4",
        "a in ('3', '4', '5')",
        "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
        "(a between 2 and 10) AND (b not between 6 and 9)",
        "a is null",
        "a is not null",
        "a <= now",
        "a=3 and b contains 'xxx' and c not contains 'xxx'",
    ]:
        compile_sql92(expression)
    assert canon("a=3 and b<>4 And c>5 AND d<=4") == canon("a=3  and    b<>4 And c>5 AND d<=4")
    assert canon("a=3 and b<>4 And c>5 AND d<=4") != canon("a=3 or b<>4 Or c>5 OR d<=4")
    huge = "1" + "1" * 4000 + "." + "1" * 4000
    assert "out of the double range" in syntax_error(f"a > {huge}").message
