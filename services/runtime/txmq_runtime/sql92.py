"""SQL92 message filters with RocketMQ's grammar and semantics.

``compile_sql92(expr)`` parses an expression once (hand-written recursive descent over
RocketMQ's ``SelectorParser`` grammar), applies RocketMQ's compile-time checks plus a few
stricter txmq ones, and compiles the tree into Python closures specialised by operand
types. ``Sql92Filter.matches(properties)`` then runs on every scanned message.

Semantics follow RocketMQ's ``filter`` module (see docs/sql92.md for the full table):

* properties are strings; an absent property is NULL and NULL propagates through
  comparisons and three-valued ``AND``/``OR``/``NOT``; a message matches only when the
  expression is exactly TRUE;
* a property compared with a numeric literal is converted as Java would
  (``Integer.valueOf`` / ``Long.valueOf`` / ``Double.valueOf``); when the conversion fails,
  RocketMQ's evaluation throws and the broker treats the message as not matching -- here
  the whole expression evaluates to an error (``Sql92EvaluationError``) and ``matches``
  returns False, exactly where RocketMQ would have thrown (evaluation order and
  short-circuits are reproduced);
* two properties compared with ``<``/``>`` etc. are both converted to doubles.

Where txmq is deliberately stricter: trailing input is rejected; unary minus only
applies to numeric literals; ``NOT x <op> ...`` (RocketMQ parses it as ``(NOT x) <op> ...``)
must be parenthesised one way or the other; negative literals take part in the literal
checks (``BETWEEN 5 AND -1``). More lenient: ``0.0`` is a valid literal (RocketMQ rejects
it by accident) and a ``--`` comment may end at the end of input.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import operator
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = [
    "SQL92_CACHE",
    "SQL92_CACHE_BYTES",
    "SQL92_CACHE_SIZE",
    "SQL92_INLINE_COMPILE_CHARS",
    "Sql92Cache",
    "Sql92CacheStats",
    "Sql92EvaluationError",
    "Sql92Filter",
    "Sql92SyntaxError",
    "compile_sql92",
    "compile_sql92_async",
    "compile_sql92_uncached",
]

#: The compiled-filter cache: at most this many filters...
SQL92_CACHE_SIZE = 1024
#: ...holding at most this many bytes by their estimate (``Sql92Filter.weight``).
SQL92_CACHE_BYTES = 32 * 1024 * 1024
#: ``compile_sql92_async`` compiles an expression this long or shorter on the calling
#: thread (well under a millisecond); longer ones on a worker thread.
SQL92_INLINE_COMPILE_CHARS = 512
#: What one token of an expression costs once compiled, at most: the parse tree's node,
#: its closures and their cells (measured up to ~430 bytes a token on CPython 3.11, for
#: ``a BETWEEN b AND c``; tests/unit/test_sql92_cache.py checks shapes against it).
_TOKEN_WEIGHT = 512
MAX_NESTING = 64  # parentheses and stacked unary operators
MAX_DEPTH = 128  # depth of the parsed tree (e.g. chained comparisons)

#: A syntax error's description is cut to this (it may quote a literal of the expression).
_MAX_MESSAGE_CHARS = 300

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_DOUBLE_MAX = 1.7976931348623157e308


# --------------------------------------------------------------------------- errors


class Sql92SyntaxError(ValueError):
    """An SQL92 expression that does not parse or fails RocketMQ's compile-time checks.

    ``position`` is the 0-based offset into ``expression``; ``line``/``column`` are
    1-based. ``message`` is the bare description, ``str(err)`` adds the location."""

    def __init__(self, message: str, expression: str, position: int) -> None:
        if len(message) > _MAX_MESSAGE_CHARS:  # a long literal quoted in it: the start only
            message = message[: _MAX_MESSAGE_CHARS - 3] + "..."
        self.message = message
        self.expression = expression
        self.position = position
        before = expression[:position]
        self.line = before.count("\n") + 1
        self.column = position - (before.rfind("\n") + 1) + 1
        where = f"column {self.column}" if "\n" not in expression else f"line {self.line}, column {self.column}"
        super().__init__(f"SQL92 syntax error at {where}: {message}")

    def caret(self) -> str:
        """The offending line with a ``^`` under the error position."""
        lines = self.expression.split("\n")
        text = lines[self.line - 1] if self.line - 1 < len(lines) else ""
        return f"{text}\n{' ' * (self.column - 1)}^"


class Sql92EvaluationError(ValueError):
    """Raised by ``Sql92Filter.evaluate`` where RocketMQ's evaluation would throw (a
    property that does not convert to the literal's number type, a boolean compared with
    a string). ``matches`` turns it into "no match", as RocketMQ's broker does."""


# --------------------------------------------------------------------------- Java conversions

_JAVA_TRIM = "".join(map(chr, range(0x21)))  # String.trim(): every char <= ' '
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)"
)


def _java_double(s: str) -> float:
    """``Double.valueOf(s)``: trims chars <= ' ', ASCII digits only, optional f/d suffix,
    ``NaN``/``Infinity``, hex floats with a mandatory binary exponent."""
    if s.isascii() and s.isdigit():
        return float(s)
    t = s.strip(_JAVA_TRIM)
    if not _JAVA_DOUBLE.fullmatch(t):
        raise Sql92EvaluationError(f"cannot convert {_short(s)} to a double")
    if t[-1] in "fFdD":
        t = t[:-1]
    if t[-1] == "N":
        return float("nan")
    if t[-1] == "y":
        return float("-inf") if t[0] == "-" else float("inf")
    if "x" in t or "X" in t:
        return float.fromhex(t)
    return float(t)


def _java_integral(s: str, lo: int, hi: int, what: str) -> int:
    """``Integer.valueOf`` / ``Long.valueOf``: an optional sign and decimal digits
    (any Unicode Nd digit of the BMP, as ``Character.digit``), no spaces, no ``_``."""
    if 0 < len(s) <= 9 and s.isascii() and s.isdigit():
        return int(s)
    body = s[1:] if s[:1] in ("+", "-") else s
    if body.isdecimal() and (s.isascii() or max(s) <= "\uffff"):
        digits = body.lstrip("0")
        if len(digits) > 19 and not digits.isascii():  # leading non-ASCII zero digits
            digits = digits[_first_nonzero(digits) :]
        if len(digits) <= 19:
            n = int(digits) if digits else 0
            if s[0] == "-":
                n = -n
            if lo <= n <= hi:
                return n
    raise Sql92EvaluationError(f"cannot convert {_short(s)} to {what}")


def _first_nonzero(digits: str) -> int:
    for i, c in enumerate(digits):
        if unicodedata.decimal(c) != 0:
            return i
    return len(digits)


def _java_int(s: str) -> int:
    if 0 < len(s) <= 9 and s.isdigit() and s.isascii():
        return int(s)
    return _java_integral(s, _INT_MIN, _INT_MAX, "an int")


def _java_long(s: str) -> int:
    if 0 < len(s) <= 18 and s.isdigit() and s.isascii():
        return int(s)
    return _java_integral(s, _LONG_MIN, _LONG_MAX, "a long")


def _java_bool(s: str) -> bool:
    """``Boolean.valueOf(s)``: true iff ``s`` equals "true" ignoring case; never fails."""
    return len(s) == 4 and s.lower() == "true"


def _dcmp(x: float, y: float) -> int:
    """``Double.compare``: -0.0 < 0.0, NaN equals NaN and is above everything."""
    if x < y:
        return -1
    if x > y:
        return 1
    if x == y:
        if x == 0.0:  # 0.0 vs -0.0
            sx, sy = math.copysign(1.0, x), math.copysign(1.0, y)
            return 0 if sx == sy else (-1 if sx < sy else 1)
        return 0
    xn, yn = math.isnan(x), math.isnan(y)
    return 0 if xn and yn else (1 if xn else -1)


def _deq(x: float, y: float) -> bool:
    if x == y:
        return x != 0.0 or math.copysign(1.0, x) == math.copysign(1.0, y)
    return math.isnan(x) and math.isnan(y)


def _short(s: str) -> str:
    return repr(s if len(s) <= 40 else s[:37] + "...")


# --------------------------------------------------------------------------- lexer

_KEYWORDS = frozenset(
    ["NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"] + ["CONTAINS", "STARTSWITH", "ENDSWITH"]
)
_WHITESPACE = frozenset(" \t\n\r\f")
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_DIGITS = frozenset("0123456789")
_ID_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_FLOAT_RE = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?")
_DECIMAL_RE = re.compile(r"0|[1-9][0-9]*[lL]?")

# token kinds: "ID", "STRING", "DECIMAL", "FLOAT", "EOF", a keyword, or the operator text
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")


class _Token:
    __slots__ = ("kind", "pos", "text", "value")

    def __init__(self, kind: str, text: str, pos: int, value: Any = None) -> None:
        self.kind = kind
        self.text = text
        self.pos = pos
        self.value = value

    def describe(self) -> str:
        k = self.kind
        if k == "EOF":
            return "end of input"
        if k == "ID":
            return f"identifier {self.text!r}"
        if k == "STRING":
            text = self.text if len(self.text) <= 30 else self.text[:27] + "..."
            return f"string literal {text}"
        if k in ("DECIMAL", "FLOAT"):
            return f"number {self.text[:30]}"
        if k in _KEYWORDS:
            return k
        return f"'{k}'"


class _Lexer:
    """RocketMQ's token set: longest match, keywords win over identifiers of equal
    length, whitespace " \\t\\n\\r\\f", ``--`` line and ``/* */`` block comments."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def error(self, message: str, pos: int) -> Sql92SyntaxError:
        return Sql92SyntaxError(message, self.text, pos)

    def next(self) -> _Token:
        text, n = self.text, len(self.text)
        i = self.i
        while True:  # skip whitespace and comments
            while i < n and text[i] in _WHITESPACE:
                i += 1
            if text.startswith("--", i):
                j = i + 2
                while j < n and text[j] not in "\r\n":
                    j += 1
                i = j
            elif text.startswith("/*", i):
                j = text.find("*/", i + 2)
                if j < 0:
                    raise self.error("unterminated comment (missing '*/')", i)
                i = j + 2
            else:
                break
        if i >= n:
            self.i = i
            return _Token("EOF", "", i)
        c = text[i]
        if c in _ID_START:
            m = _ID_RE.match(text, i)
            assert m is not None
            word = m.group()
            self.i = m.end()
            upper = word.upper()
            if upper in _KEYWORDS:
                return _Token(upper, word, i)
            return _Token("ID", word, i)
        if c == "'":
            parts = []
            j = i + 1
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise self.error("unterminated string literal: no closing quote", i)
                parts.append(text[j:k])
                if text.startswith("''", k):
                    parts.append("'")
                    j = k + 2
                    continue
                self.i = k + 1
                return _Token("STRING", text[i : k + 1], i, "".join(parts))
        if c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            fm = _FLOAT_RE.match(text, i)
            dm = _DECIMAL_RE.match(text, i)
            ftext = fm.group() if fm else ""
            is_float = bool(ftext) and any(ch in ftext for ch in ".eE")
            dlen = dm.end() - i if dm else 0
            if is_float and len(ftext) > dlen:
                self.i = i + len(ftext)
                return _Token("FLOAT", ftext, i)
            assert dm is not None
            self.i = dm.end()
            return _Token("DECIMAL", dm.group(), i)
        for op in _OPERATORS:
            if text.startswith(op, i):
                self.i = i + len(op)
                return _Token(op, op, i)
        raise self.error(f"unexpected character {c!r}", i)


# --------------------------------------------------------------------------- tree

STR, INT, LONG, DOUBLE, BOOL, NULL = "str", "int", "long", "double", "bool", "null"
_NUMERIC = (INT, LONG, DOUBLE)


class _Node:
    __slots__ = ("depth", "paren", "pos")
    jt = BOOL  # static Java type of the value: str/int/long/double/bool/null
    boolean = True  # a RocketMQ BooleanExpression

    def __init__(self, pos: int, *children: _Node) -> None:
        self.pos = pos
        self.paren = False
        self.depth = 1 + max((c.depth for c in children), default=0)


class _Const(_Node):
    __slots__ = ("jt", "text", "value")

    def __init__(self, pos: int, value: Any, jt: str, text: str) -> None:
        super().__init__(pos)
        self.value, self.jt, self.text = value, jt, text

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.jt in (BOOL, NULL)


class _Prop(_Node):
    __slots__ = ("name",)
    jt = STR
    boolean = False

    def __init__(self, pos: int, name: str) -> None:
        super().__init__(pos)
        self.name = name


class _Cast(_Node):  # a property used where a boolean is needed
    __slots__ = ("prop",)

    def __init__(self, prop: _Prop) -> None:
        super().__init__(prop.pos, prop)
        self.prop = prop


class _Not(_Node):
    __slots__ = ("operand",)

    def __init__(self, pos: int, operand: _Node) -> None:
        super().__init__(pos, operand)
        self.operand = operand


class _Logic(_Node):
    __slots__ = ("children", "op")

    def __init__(self, pos: int, op: str, children: list[_Node]) -> None:
        super().__init__(pos, *children)
        self.op, self.children = op, children


class _Cmp(_Node):
    __slots__ = ("left", "op", "right")

    def __init__(self, pos: int, op: str, left: _Node, right: _Node) -> None:
        super().__init__(pos, left, right)
        self.op, self.left, self.right = op, left, right


class _Between(_Node):
    __slots__ = ("high", "low", "negated", "value")

    def __init__(self, pos: int, value: _Node, low: _Node, high: _Node, negated: bool) -> None:
        super().__init__(pos, value, low, high)
        self.depth += 1  # compiled as AND/OR of two comparisons
        self.value, self.low, self.high, self.negated = value, low, high, negated


class _In(_Node):
    __slots__ = ("negated", "prop", "values")

    def __init__(self, pos: int, prop: _Prop, values: list[str], negated: bool) -> None:
        super().__init__(pos, prop)
        self.prop, self.values, self.negated = prop, values, negated


class _StrOp(_Node):
    __slots__ = ("left", "negated", "op", "search")

    def __init__(self, pos: int, op: str, left: _Node, search: str, negated: bool) -> None:
        super().__init__(pos, left)
        self.op, self.left, self.search, self.negated = op, left, search, negated


class _IsNull(_Node):
    __slots__ = ("negated", "operand")

    def __init__(self, pos: int, operand: _Node, negated: bool) -> None:
        super().__init__(pos, operand)
        self.operand, self.negated = operand, negated


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _canon(n: _Node) -> str:
    """Fully parenthesised form of the parsed tree (shows precedence)."""
    if isinstance(n, _Const):
        return n.text
    if isinstance(n, _Prop):
        return n.name
    if isinstance(n, _Cast):
        return n.prop.name
    if isinstance(n, _Not):
        return f"(NOT {_canon(n.operand)})"
    if isinstance(n, _Logic):
        return "(" + f" {n.op} ".join(_canon(c) for c in n.children) + ")"
    if isinstance(n, _Cmp):
        return f"({_canon(n.left)} {n.op} {_canon(n.right)})"
    if isinstance(n, _Between):
        kw = "NOT BETWEEN" if n.negated else "BETWEEN"
        return f"({_canon(n.value)} {kw} {_canon(n.low)} AND {_canon(n.high)})"
    if isinstance(n, _In):
        kw = "NOT IN" if n.negated else "IN"
        return f"({n.prop.name} {kw} ({', '.join(map(_quote, n.values))}))"
    if isinstance(n, _StrOp):
        kw = f"NOT {n.op}" if n.negated else n.op
        return f"({_canon(n.left)} {kw} {_quote(n.search)})"
    if isinstance(n, _IsNull):
        return f"({_canon(n.operand)} IS {'NOT ' if n.negated else ''}NULL)"
    raise AssertionError(n)


# --------------------------------------------------------------------------- parser

_OPERAND_START = "a property name, a literal, '(', NOT, '+' or '-'"


class _Parser:
    """Recursive descent over RocketMQ's SelectorParser.jj grammar:

    or       := and (OR and)*
    and      := equality (AND equality)*
    equality := comparison ( ('=' | '<>') comparison | IS [NOT] NULL )*
    comparison := unary ( ('>' | '>=' | '<' | '<=') unary
                        | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' string (',' string)* ')' )*
    unary    := '+' unary | '-' unary | NOT unary | primary
    primary  := literal | identifier | '(' or ')'
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.lexer = _Lexer(text)
        self.buf: list[_Token] = []
        self.nesting = 0
        self.props: set[str] = set()
        self.tokens = 0  # tokens lexed, EOF included (what the compiled filter's weight counts)

    # -- token stream
    def peek(self, k: int = 0) -> _Token:
        while len(self.buf) <= k:
            if self.buf and self.buf[-1].kind == "EOF":
                return self.buf[-1]
            self.buf.append(self.lexer.next())
            self.tokens += 1
        return self.buf[k]

    def take(self) -> _Token:
        tok = self.peek()
        if tok.kind != "EOF":
            self.buf.pop(0)
        return tok

    def error(self, message: str, pos: int) -> Sql92SyntaxError:
        return Sql92SyntaxError(message, self.text, pos)

    def expect(self, kind: str, what: str) -> _Token:
        tok = self.peek()
        if tok.kind != kind:
            raise self.error(f"expected {what} but found {tok.describe()}", tok.pos)
        return self.take()

    def check_depth(self, node: _Node, pos: int) -> _Node:
        if node.depth > MAX_DEPTH:
            raise self.error(f"expression nested too deeply (limit {MAX_DEPTH})", pos)
        return node

    # -- entry
    def parse(self) -> _Node:
        if self.peek().kind == "EOF":
            raise self.error(f"empty expression: expected {_OPERAND_START}", self.peek().pos)
        node = self.parse_or()
        tok = self.peek()
        if tok.kind != "EOF":
            raise self.error(
                f"expected end of input but found {tok.describe()} "
                "(the expression before it is complete; join conditions with AND/OR)",
                tok.pos,
            )
        return self.as_boolean(node)

    def as_boolean(self, node: _Node) -> _Node:
        if node.boolean:
            return node
        if isinstance(node, _Prop):
            return _Cast(node)
        raise self.error(f"expected a condition but {_canon(node)} is not a boolean expression", node.pos)

    def parse_logic(self, op: str, sub: Callable[[], _Node]) -> _Node:
        first = sub()
        if self.peek().kind != op:
            return first
        children: list[_Node] = []
        pos = first.pos
        op_pos = self.peek().pos
        node = first
        while True:
            node = self.as_boolean(node)
            if isinstance(node, _Logic) and node.op == op:
                children.extend(node.children)  # same operator: flatten (associative)
            else:
                children.append(node)
            if self.peek().kind != op:
                break
            self.take()
            node = sub()
        return self.check_depth(_Logic(pos, op, children), op_pos)

    def parse_or(self) -> _Node:
        return self.parse_logic("OR", self.parse_and)

    def parse_and(self) -> _Node:
        return self.parse_logic("AND", self.parse_equality)

    def reject_bare_not(self, left: _Node, op: _Token) -> None:
        if isinstance(left, _Not) and not left.paren:
            op_text = op.kind if op.kind in _KEYWORDS else op.text
            raise self.error(
                f"ambiguous NOT before {op_text}: RocketMQ's grammar applies NOT to the "
                f"operand only, i.e. (NOT x) {op_text} ...; write NOT (x {op_text} ...) "
                "or parenthesise (NOT x) explicitly",
                left.pos,
            )

    def parse_equality(self) -> _Node:
        left = self.parse_comparison()
        while True:
            tok = self.peek()
            if tok.kind in ("=", "<>"):
                self.reject_bare_not(left, tok)
                self.take()
                right = self.parse_comparison()
                for operand in (left, right):
                    if isinstance(operand, _Const) and operand.jt == NULL:
                        raise self.error(
                            f"NULL cannot be compared with '{tok.kind}'; use IS [NOT] NULL",
                            operand.pos,
                        )
                if isinstance(left, _Const) and isinstance(right, _Const) and left.jt == BOOL and right.jt != BOOL:
                    raise self.error(f"{left.text} cannot be compared with {right.text}", right.pos)
                left = self.check_depth(_Cmp(left.pos, tok.kind, left, right), tok.pos)
            elif tok.kind == "IS":
                self.reject_bare_not(left, tok)
                self.take()
                negated = self.peek().kind == "NOT"
                if negated:
                    self.take()
                self.expect("NULL", "NULL or NOT NULL after IS")
                left = self.check_depth(_IsNull(left.pos, left, negated), tok.pos)
            else:
                return left

    def check_ordered(self, operand: _Node, op: str) -> None:
        """RocketMQ: only numbers and properties can be ordered (> >= < <= BETWEEN)."""
        if isinstance(operand, _Const):
            if operand.jt in _NUMERIC:
                return
        elif not operand.boolean:
            return
        raise self.error(
            f"{_canon(operand)} cannot be compared with {op} (only numbers and properties can)",
            operand.pos,
        )

    def parse_comparison(self) -> _Node:
        left = self.parse_unary()
        while True:
            tok = self.peek()
            k = tok.kind
            negated = False
            if k == "NOT":
                nxt = self.peek(1)
                if nxt.kind not in ("CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN"):
                    raise self.error(
                        f"expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT but found {nxt.describe()}",
                        nxt.pos,
                    )
                negated = True
                self.take()
                k = nxt.kind
            elif k not in (">", ">=", "<", "<=", "CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN"):
                return left
            self.reject_bare_not(left, self.peek())
            op_tok = self.take()
            if k in (">", ">=", "<", "<="):
                right = self.parse_unary()
                self.check_ordered(left, k)
                self.check_ordered(right, k)
                node: _Node = _Cmp(left.pos, k, left, right)
            elif k in ("CONTAINS", "STARTSWITH", "ENDSWITH"):
                s = self.expect("STRING", f"a string literal after {k}")
                node = _StrOp(left.pos, k, left, s.value, negated)
            elif k == "BETWEEN":
                low = self.parse_unary()
                self.expect("AND", "AND between the BETWEEN bounds")
                high = self.parse_unary()
                for operand in (left, low, high):
                    self.check_ordered(operand, "BETWEEN")
                if isinstance(low, _Const) and isinstance(high, _Const):
                    lo, hi = low.value, high.value
                    if DOUBLE in (low.jt, high.jt):
                        bad = _dcmp(float(hi), float(lo)) < 0
                    else:
                        bad = hi < lo
                    if bad:
                        raise self.error(
                            f"BETWEEN bounds out of order: {low.text} is greater than {high.text}",
                            low.pos,
                        )
                node = _Between(left.pos, left, low, high, negated)
            else:  # IN
                if not isinstance(left, _Prop):
                    raise self.error(f"IN needs a property on its left, not {_canon(left)}", left.pos)
                self.expect("(", "'(' after IN")
                values = [self.expect("STRING", "a string literal in the IN list").value]
                while self.peek().kind == ",":
                    self.take()
                    values.append(self.expect("STRING", "a string literal after ','").value)
                self.expect(")", "',' or ')' in the IN list")
                node = _In(left.pos, left, values, negated)
            left = self.check_depth(node, op_tok.pos)

    def parse_unary(self) -> _Node:
        tok = self.peek()
        if tok.kind in ("+", "-", "NOT"):
            self.take()
            self.nesting += 1
            if self.nesting > MAX_NESTING:
                raise self.error(f"expression nested too deeply (limit {MAX_NESTING})", tok.pos)
            operand = self.parse_unary()
            self.nesting -= 1
            if tok.kind == "+":
                return operand
            if tok.kind == "-":
                if not (isinstance(operand, _Const) and operand.jt in _NUMERIC):
                    raise self.error(
                        f"unary '-' applies to numeric literals only, not {_canon(operand)}",
                        tok.pos,
                    )
                value = -operand.value
                text = operand.text[1:] if operand.text.startswith("-") else "-" + operand.text
                return _Const(tok.pos, value, operand.jt, text)
            return self.check_depth(_Not(tok.pos, self.as_boolean(operand)), tok.pos)
        return self.parse_primary()

    def parse_primary(self) -> _Node:
        tok = self.peek()
        k = tok.kind
        if k == "ID":
            self.take()
            self.props.add(tok.text)
            return _Prop(tok.pos, tok.text)
        if k == "STRING":
            self.take()
            return _Const(tok.pos, tok.value, STR, _quote(tok.value))
        if k == "DECIMAL":
            self.take()
            return self.decimal(tok)
        if k == "FLOAT":
            self.take()
            return self.floating(tok)
        if k == "TRUE" or k == "FALSE":
            self.take()
            return _Const(tok.pos, k == "TRUE", BOOL, k)
        if k == "NULL":
            self.take()
            return _Const(tok.pos, None, NULL, "NULL")
        if k == "(":
            self.take()
            self.nesting += 1
            if self.nesting > MAX_NESTING:
                raise self.error(f"expression nested too deeply (limit {MAX_NESTING})", tok.pos)
            node = self.parse_or()
            self.nesting -= 1
            close = self.peek()
            if close.kind != ")":
                col = tok.pos - (self.text.rfind("\n", 0, tok.pos) + 1) + 1
                raise self.error(
                    f"expected ')' to close the '(' at column {col} but found {close.describe()}",
                    close.pos,
                )
            self.take()
            node.paren = True
            node.pos = tok.pos  # errors about a parenthesised operand point at its '('
            return node
        raise self.error(f"expected {_OPERAND_START} but found {tok.describe()}", tok.pos)

    def decimal(self, tok: _Token) -> _Const:
        digits = tok.text.rstrip("lL")
        n = int(digits) if len(digits) <= 19 else _LONG_MAX + 1
        if n > _LONG_MAX:
            raise self.error(f"integer literal {tok.text[:30]} is out of range (max {_LONG_MAX})", tok.pos)
        return _Const(tok.pos, n, INT if n <= _INT_MAX else LONG, str(n))

    def floating(self, tok: _Token) -> _Const:
        value = float(tok.text)
        if value > _DOUBLE_MAX:
            raise self.error(f"number {tok.text[:30]} is out of the double range", tok.pos)
        mantissa = re.split("[eE]", tok.text)[0]
        if value == 0.0 and mantissa.strip("0.") != "":
            raise self.error(f"number {tok.text[:30]} underflows to zero", tok.pos)
        return _Const(tok.pos, value, DOUBLE, repr(value))


# --------------------------------------------------------------------------- compiler
#
# Every node compiles to a _Code. Operands (_Prop/_Const) have ``v`` (value). Boolean
# nodes have ``v`` (True/False/None, RocketMQ's three-valued result), ``t`` ("is exactly
# TRUE") and ``f`` ("is exactly FALSE"); all three raise Sql92EvaluationError in exactly
# the cases RocketMQ's evaluation throws. ``may_raise`` is static: when no later operand
# can raise, AND/OR short-circuit freely, otherwise they keep RocketMQ's evaluation order.

Props = Mapping[str, str]
Fn = Callable[[Props], Any]
BoolFn = Callable[[Props], bool]


class _Code:
    __slots__ = ("const", "f", "jt", "may_raise", "prop", "t", "v", "value")

    def __init__(
        self,
        jt: str,
        v: Fn,
        t: BoolFn | None = None,
        f: BoolFn | None = None,
        may_raise: bool = False,
        prop: str | None = None,
        const: bool = False,
        value: Any = None,
    ) -> None:
        self.jt, self.v, self.may_raise = jt, v, may_raise
        self.prop, self.const, self.value = prop, const, value
        if jt == BOOL or jt == NULL:
            self.t = t if t is not None else (lambda p: v(p) is True)
            self.f = f if f is not None else (lambda p: v(p) is False)


def _constant(value: Any, jt: str) -> _Code:
    if jt == NULL:
        return _Code(NULL, lambda p: None, lambda p: False, lambda p: False, const=True)
    if jt == BOOL:
        truth = bool(value)
        return _Code(BOOL, lambda p: truth, lambda p: truth, lambda p: not truth, const=True, value=truth)
    return _Code(jt, lambda p: value, const=True, value=value)


def _all(fns: list[BoolFn]) -> BoolFn:
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        a, b = fns
        return lambda p: a(p) and b(p)
    if len(fns) == 3:
        a, b, c = fns
        return lambda p: a(p) and b(p) and c(p)

    def all_(p: Props) -> bool:
        for fn in fns:
            if not fn(p):
                return False
        return True

    return all_


def _any(fns: list[BoolFn]) -> BoolFn:
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        a, b = fns
        return lambda p: a(p) or b(p)
    if len(fns) == 3:
        a, b, c = fns
        return lambda p: a(p) or b(p) or c(p)

    def any_(p: Props) -> bool:
        for fn in fns:
            if fn(p):
                return True
        return False

    return any_


def _compile_logic(op: str, kids: list[_Code]) -> _Code:
    """n-ary AND/OR with RocketMQ's left-to-right evaluation: AND stops at the first
    FALSE, OR at the first TRUE; otherwise NULL wins over the neutral value."""
    stop = op == "OR"  # the value that decides the result
    may_raise = any(k.may_raise for k in kids)
    vs = [k.v for k in kids]

    def v(p: Props) -> bool | None:
        unknown = False
        for fn in vs:
            r = fn(p)
            if r is stop:
                return stop
            if r is None:
                unknown = True
        return None if unknown else not stop

    # AND.t and OR.f must look past a NULL operand while a later operand may still throw
    # (RocketMQ keeps evaluating); AND.f and OR.t stop exactly where RocketMQ stops.
    last = max((i for i, k in enumerate(kids) if i > 0 and k.may_raise), default=0)

    def exact(head: list[Fn], tail: BoolFn) -> BoolFn:
        if not head:
            return tail
        if len(head) == 1:
            h = head[0]

            def one(p: Props) -> bool:
                r = h(p)
                if r is stop:
                    return False
                return tail(p) and r is not None

            return one

        def many(p: Props) -> bool:
            definite = True
            for fn in head:
                r = fn(p)
                if r is stop:
                    return False
                if r is None:
                    definite = False
            return tail(p) and definite

        return many

    head = vs[:last]
    if op == "AND":
        t = exact(head, _all([k.t for k in kids[last:]]))
        f = _any([k.f for k in kids])
    else:
        t = _any([k.t for k in kids])
        f = exact(head, _all([k.f for k in kids[last:]]))
    return _Code(BOOL, v, t, f, may_raise)


def _not(code: _Code) -> _Code:
    inner = code.v

    def v(p: Props) -> bool | None:
        r = inner(p)
        return None if r is None else not r

    return _Code(BOOL, v, code.f, code.t, code.may_raise)


def _class_cast(lv: Any, rv: Any) -> bool:
    raise Sql92EvaluationError("cannot compare a boolean with a string")


def _never(lv: Any, rv: Any) -> bool:
    return False


def _equality(lt: str, rt: str) -> tuple[Callable[[Any, Any], bool], bool]:
    """RocketMQ's ``=`` on two non-null values of static types (lt, rt): returns
    (equals, may_raise). Mixed types convert like ComparisonExpression.__compare."""
    ints = (INT, LONG)
    if lt == rt:
        return (_deq if lt == DOUBLE else operator.eq), False
    if lt in ints and rt in ints:
        return operator.eq, False
    if lt in ints and rt == DOUBLE:
        return (lambda x, y: _deq(float(x), y)), False
    if lt == DOUBLE and rt in ints:
        return (lambda x, y: _deq(x, float(y))), False
    if lt == STR:
        if rt == BOOL:
            return (lambda x, y: _java_bool(x) is y), False
        if rt == INT:
            return (lambda x, y: _java_int(x) == y), True
        if rt == LONG:
            return (lambda x, y: _java_long(x) == y), True
        if rt == DOUBLE:
            return (lambda x, y: _deq(_java_double(x), y)), True
    if rt == STR:
        if lt == INT:
            return (lambda x, y: x == _java_int(y)), True
        if lt == LONG:
            return (lambda x, y: x == _java_long(y)), True
        if lt == DOUBLE:
            return (lambda x, y: _deq(x, _java_double(y))), True
        if lt == BOOL:  # Java casts the Boolean to String: ClassCastException
            return _class_cast, True
    return _never, False  # boolean vs number: __compare answers -1


_TESTS = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def _ordering(lt: str, rt: str, op: str) -> tuple[Callable[[Any, Any], bool], bool]:
    """RocketMQ's > >= < <= on two non-null values: two strings are both read as doubles;
    otherwise the string side converts to the number literal's type."""
    test = _TESTS[op]
    conv = {INT: _java_int, LONG: _java_long, DOUBLE: _java_double}
    if lt == STR and rt == STR:
        return (lambda x, y: test(_dcmp(_java_double(x), _java_double(y)), 0)), True
    if lt == STR:
        c = conv[rt]
        if rt == DOUBLE:
            return (lambda x, y: test(_dcmp(c(x), y), 0)), True
        return (lambda x, y: test(c(x), y)), True
    if rt == STR:
        c = conv[lt]
        if lt == DOUBLE:
            return (lambda x, y: test(_dcmp(x, c(y)), 0)), True
        return (lambda x, y: test(x, c(y))), True
    if lt == DOUBLE or rt == DOUBLE:
        return (lambda x, y: test(_dcmp(float(x), float(y)), 0)), False
    return test, False


def _compare(op: str, left: _Code, right: _Code) -> _Code:
    if op in ("=", "<>"):
        code = _equals(left, right)
        return _not(code) if op == "<>" else code
    fn, raises = _ordering(left.jt, right.jt, op)
    may_raise = raises or left.may_raise or right.may_raise
    if left.prop is not None and right.const:
        name, c = left.prop, right.value
        if right.jt in (INT, LONG):  # the common `prop > 5`: inline the conversion
            conv, test = (_java_int if right.jt == INT else _java_long), _TESTS[op]

            def t(p: Props) -> bool:
                lv = p.get(name)
                return lv is not None and test(conv(lv), c)
        else:

            def t(p: Props) -> bool:
                lv = p.get(name)
                return lv is not None and fn(lv, c)

        def v(p: Props) -> bool | None:
            lv = p.get(name)
            return None if lv is None else fn(lv, c)

        def f(p: Props) -> bool:
            lv = p.get(name)
            return lv is not None and not fn(lv, c)

        return _Code(BOOL, v, t, f, may_raise)
    lf, rf = left.v, right.v

    def gv(p: Props) -> bool | None:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        return fn(lv, rv)

    return _Code(BOOL, gv, may_raise=may_raise)


def _equals(left: _Code, right: _Code) -> _Code:
    """RocketMQ's ``=``: NULL = x is NULL, x = NULL is FALSE, NULL = NULL is TRUE."""
    fn, raises = _equality(left.jt, right.jt)
    may_raise = raises or left.may_raise or right.may_raise
    if left.prop is not None and right.const:
        name, c = left.prop, right.value
        if fn is operator.eq:

            def t(p: Props) -> bool:
                return p.get(name) == c

            def f(p: Props) -> bool:
                lv = p.get(name)
                return lv is not None and lv != c
        else:

            def t(p: Props) -> bool:
                lv = p.get(name)
                return lv is not None and fn(lv, c)

            def f(p: Props) -> bool:
                lv = p.get(name)
                return lv is not None and not fn(lv, c)

        def v(p: Props) -> bool | None:
            lv = p.get(name)
            return None if lv is None else fn(lv, c)

        return _Code(BOOL, v, t, f, may_raise)
    lf, rf = left.v, right.v

    def gv(p: Props) -> bool | None:
        lv = lf(p)
        rv = rf(p)
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return fn(lv, rv)

    return _Code(BOOL, gv, may_raise=may_raise)


def _compile(n: _Node) -> _Code:
    if isinstance(n, _Const):
        return _constant(n.value, n.jt)
    if isinstance(n, _Prop):
        name = n.name
        return _Code(STR, lambda p: p.get(name), prop=name)
    if isinstance(n, _Cast):  # a string property is never a Boolean: FALSE, or NULL
        name = n.prop.name
        return _Code(
            BOOL,
            lambda p: None if p.get(name) is None else False,
            lambda p: False,
            lambda p: p.get(name) is not None,
        )
    if isinstance(n, _Not):
        return _not(_compile(n.operand))
    if isinstance(n, _Logic):
        return _compile_logic(n.op, [_compile(c) for c in n.children])
    if isinstance(n, _Cmp):
        return _compare(n.op, _compile(n.left), _compile(n.right))
    if isinstance(n, _Between):
        value, low, high = _compile(n.value), _compile(n.low), _compile(n.high)
        if value.prop is not None and low.const and high.const and low.jt == high.jt == INT:
            return _compile_int_between(value.prop, low.value, high.value, n.negated)
        if value.prop is not None and low.const and high.const and low.jt == high.jt == LONG:
            return _compile_int_between(value.prop, low.value, high.value, n.negated, _java_long)
        if n.negated:
            return _compile_logic("OR", [_compare("<", value, low), _compare(">", value, high)])
        return _compile_logic("AND", [_compare(">=", value, low), _compare("<=", value, high)])
    if isinstance(n, _In):
        return _compile_in(n.prop.name, frozenset(n.values), n.negated)
    if isinstance(n, _StrOp):
        return _compile_strop(n)
    if isinstance(n, _IsNull):
        return _compile_is_null(_compile(n.operand), n.negated)
    raise AssertionError(n)


def _compile_int_between(name: str, lo: int, hi: int, negated: bool, conv: Callable[[str], int] = _java_int) -> _Code:
    """``prop [NOT] BETWEEN lo AND hi`` with integral bounds of one type: RocketMQ converts
    the property twice (``>= lo`` then ``<= hi``), same conversion, same outcome."""

    def inside(p: Props) -> bool:
        lv = p.get(name)
        return lv is not None and lo <= conv(lv) <= hi

    def outside(p: Props) -> bool:
        lv = p.get(name)
        return lv is not None and not lo <= conv(lv) <= hi

    def v(p: Props) -> bool | None:
        lv = p.get(name)
        return None if lv is None else (lo <= conv(lv) <= hi) is not negated

    if negated:
        return _Code(BOOL, v, outside, inside, True)
    return _Code(BOOL, v, inside, outside, True)


def _compile_in(name: str, values: frozenset[str], negated: bool) -> _Code:
    def v(p: Props) -> bool | None:
        lv = p.get(name)
        return None if lv is None else (lv in values) is not negated

    def hit(p: Props) -> bool:
        return p.get(name) in values

    def miss(p: Props) -> bool:
        lv = p.get(name)
        return lv is not None and lv not in values

    return _Code(BOOL, v, miss, hit) if negated else _Code(BOOL, v, hit, miss)


def _compile_strop(n: _StrOp) -> _Code:
    """CONTAINS/STARTSWITH/ENDSWITH and their NOT forms are never NULL: an empty search
    string, a NULL or a non-string operand all give FALSE (the NOT forms too)."""
    if n.search == "":
        return _constant(False, BOOL)
    left = _compile(n.left)
    s, negated = n.search, n.negated
    if left.jt != STR:
        if not left.may_raise:
            return _constant(False, BOOL)
        lf = left.v

        def evaluated_false(p: Props) -> bool:
            lf(p)
            return False

        return _Code(BOOL, evaluated_false, evaluated_false, lambda p: not evaluated_false(p), True)
    test: Callable[[str], bool]
    if n.op == "CONTAINS":
        test = (lambda x: s in x) if not negated else (lambda x: s not in x)
    elif n.op == "STARTSWITH":
        test = (lambda x: x.startswith(s)) if not negated else (lambda x: not x.startswith(s))
    else:
        test = (lambda x: x.endswith(s)) if not negated else (lambda x: not x.endswith(s))
    if left.const:
        result = left.value is not None and test(left.value)
        return _constant(result, BOOL)
    name = left.prop
    assert name is not None

    def t(p: Props) -> bool:
        lv = p.get(name)
        return lv is not None and test(lv)

    return _Code(BOOL, t, t, lambda p: not t(p))


def _compile_is_null(operand: _Code, negated: bool) -> _Code:
    if operand.const:
        return _constant((operand.value is None) is not negated, BOOL)
    if operand.prop is not None:
        name = operand.prop

        def null(p: Props) -> bool:
            return p.get(name) is None

        def present(p: Props) -> bool:
            return p.get(name) is not None
    else:
        of = operand.v

        def null(p: Props) -> bool:
            return of(p) is None

        def present(p: Props) -> bool:
            return of(p) is not None

    yes, no = (present, null) if negated else (null, present)
    return _Code(BOOL, yes, yes, no, operand.may_raise)


# --------------------------------------------------------------------------- public API

_EMPTY: Mapping[str, str] = {}


class Sql92Filter:
    """A compiled SQL92 expression. Immutable and thread-safe."""

    __slots__ = ("_truth", "_value", "canonical", "expression", "property_names", "weight")

    def __init__(self, expression: str, root: _Node, property_names: frozenset[str], *, tokens: int = 0) -> None:
        code = _compile(root)
        self.expression = expression
        #: the parsed tree, fully parenthesised (shows how precedence was applied)
        self.canonical = _canon(root)
        #: the property names the expression reads
        self.property_names = property_names
        #: what this filter holds in memory, estimated from above (bytes): its texts and
        #: ``_TOKEN_WEIGHT`` per token of the expression
        self.weight = 4 * (len(expression) + len(self.canonical)) + _TOKEN_WEIGHT * max(tokens, 1)
        self._truth: BoolFn = code.t
        self._value: Fn = code.v

    def matches(self, properties: Mapping[str, str] | None) -> bool:
        """True iff the expression is TRUE for these message properties (str -> str).
        NULL (absent properties) and evaluation errors (a value that does not convert to
        the literal's number type) mean no match, as in RocketMQ's broker."""
        try:
            return self._truth(_EMPTY if properties is None else properties)
        except Sql92EvaluationError:
            return False

    __call__ = matches

    def evaluate(self, properties: Mapping[str, str] | None) -> bool | None:
        """RocketMQ's three-valued result: True, False or None (NULL). Raises
        ``Sql92EvaluationError`` where RocketMQ's evaluation throws."""
        return self._value(_EMPTY if properties is None else properties)

    def __repr__(self) -> str:
        shown = self.expression if len(self.expression) <= 80 else self.expression[:77] + "..."
        return f"Sql92Filter({shown!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sql92Filter) and other.expression == self.expression

    def __hash__(self) -> int:
        return hash(self.expression)


def compile_sql92_uncached(expression: str) -> Sql92Filter:
    """Parse and compile an SQL92 filter expression, every time (``compile_sql92``
    caches). Raises ``Sql92SyntaxError`` (a ValueError) naming the line/column and what
    was expected, ``TypeError`` for a non-str."""
    if not isinstance(expression, str):
        raise TypeError(f"SQL92 expression must be str, not {type(expression).__name__}")
    parser = _Parser(expression)
    try:
        root = parser.parse()
    except RecursionError:  # belt and braces: MAX_NESTING should prevent this
        raise Sql92SyntaxError("expression nested too deeply", expression, len(expression)) from None
    return Sql92Filter(expression, root, frozenset(parser.props), tokens=parser.tokens)


class Sql92CacheStats(NamedTuple):
    entries: int
    bytes: int  # the sum of the cached filters' weights
    max_entries: int
    max_bytes: int


class Sql92Cache:
    """Compiled filters by expression text, least recently used first out, bounded by
    count and by bytes (each filter's ``weight``: an estimate from above of what it
    holds, its closures included -- the text alone understates it a hundredfold). A
    filter heavier than the whole budget is returned but not kept; failures are never
    kept. Thread-safe: compiles run outside the lock (two threads may compile the same
    text at once; one result is kept)."""

    def __init__(self, max_entries: int = SQL92_CACHE_SIZE, max_bytes: int = SQL92_CACHE_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Sql92Filter] = OrderedDict()
        self._bytes = 0

    def get(self, expression: str) -> Sql92Filter | None:
        """The cached filter of ``expression`` (now the most recently used), or None."""
        with self._lock:
            hit = self._entries.get(expression)
            if hit is not None:
                self._entries.move_to_end(expression)
            return hit

    def compile(self, expression: str) -> Sql92Filter:
        """The cached filter of ``expression``, compiled (and kept) if needed."""
        hit = self.get(expression)
        if hit is not None:
            return hit
        compiled = compile_sql92_uncached(expression)
        self._put(compiled)
        return compiled

    def _put(self, compiled: Sql92Filter) -> None:
        if compiled.weight > self.max_bytes or self.max_entries <= 0:
            return
        with self._lock:
            old = self._entries.pop(compiled.expression, None)
            if old is not None:
                self._bytes -= old.weight
            self._entries[compiled.expression] = compiled
            self._bytes += compiled.weight
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.weight

    def stats(self) -> Sql92CacheStats:
        with self._lock:
            return Sql92CacheStats(len(self._entries), self._bytes, self.max_entries, self.max_bytes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


#: The process's compiled-filter cache (``compile_sql92``, ``compile_sql92_async``).
SQL92_CACHE = Sql92Cache()


def compile_sql92(expression: str) -> Sql92Filter:
    """Parse and compile an SQL92 filter expression, cached by expression text in
    ``SQL92_CACHE`` (LRU, bounded by count and bytes).

    Raises ``Sql92SyntaxError`` (a ValueError) naming the line/column and what was
    expected; failures are not cached."""
    return SQL92_CACHE.compile(expression)


_compile_pool: concurrent.futures.ThreadPoolExecutor | None = None
_compile_pool_lock = threading.Lock()
#: Worker threads compiling long expressions: few, so that a flood of long new
#: expressions queues here instead of taking the default executor's threads.
_COMPILE_THREADS = 2


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _compile_pool
    with _compile_pool_lock:
        if _compile_pool is None:
            _compile_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=_COMPILE_THREADS, thread_name_prefix="sql92-compile"
            )
        return _compile_pool


async def compile_sql92_async(expression: str) -> Sql92Filter:
    """``compile_sql92`` for a coroutine on an event loop: a cached filter is returned at
    once, a short expression (``SQL92_INLINE_COMPILE_CHARS``) is compiled in place, a
    longer one on a worker thread, so that the loop keeps serving other calls meanwhile
    (parsing takes time in the expression's length)."""
    if not isinstance(expression, str):
        raise TypeError(f"SQL92 expression must be str, not {type(expression).__name__}")
    hit = SQL92_CACHE.get(expression)
    if hit is not None:
        return hit
    if len(expression) <= SQL92_INLINE_COMPILE_CHARS:
        return SQL92_CACHE.compile(expression)
    return await asyncio.get_running_loop().run_in_executor(_pool(), SQL92_CACHE.compile, expression)
