"""RocketMQ's SQL92 message selector grammar (``SelectorParser.jj``), parsed with lark into ``expression`` nodes.

Precedence, loosest first: ``OR``; ``AND``; ``=``, ``<>``, ``IS [NOT] NULL``; ``> >= < <=``, ``[NOT] BETWEEN``,
``[NOT] IN``, ``[NOT] CONTAINS / STARTSWITH / ENDSWITH``; unary ``+``, ``-`` and ``NOT``, which binds tightest
(``NOT a = 1`` is ``(NOT a) = 1``, as in RocketMQ). Keywords are case-insensitive; property names are
``[a-zA-Z_$][a-zA-Z0-9_$]*``; strings are single-quoted with ``''`` for a quote; ``--`` comments run to a line end,
``/* */`` comments anywhere.

The checks RocketMQ makes while it builds the tree are made here, at subscribe time: ``> >= < <=`` take numbers or
properties, not strings, booleans or conditions; ``=`` and ``<>`` refuse a NULL literal; ``IN`` needs a property on
its left; ``BETWEEN`` of two literals needs them in order; a float literal must be a normal non-zero double
(RocketMQ refuses ``0.0``); ``AND``, ``OR``, ``NOT`` and the whole expression must be conditions (a bare property
counts as one). Unlike RocketMQ, which stops reading at the first token that cannot continue the expression and
ignores the rest (``a = 1 b = 2`` selects ``a = 1``), text after a complete expression is an error here.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from lark import Lark, Token, Transformer_NonRecursive, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

from sluice.common.errors import FilterExpressionError
from sluice.filter.expression import (
    INT_MAX,
    LONG_MAX,
    And,
    BooleanCast,
    Constant,
    Equal,
    Expression,
    InList,
    JavaLong,
    Negate,
    Not,
    Or,
    Ordering,
    Property,
    StringTest,
    Uncomparable,
    java_compare,
    java_text,
)

# Nesting deeper than this is refused: evaluation recurses once per level (chains of AND / OR do not nest).
MAX_DEPTH = 100
MAX_LENGTH = 8192
DOUBLE_MIN = 5e-324  # Java's Double.MIN_VALUE: RocketMQ refuses float literals below it, 0.0 included

GRAMMAR = r"""
start: or_expr

?or_expr: and_expr
    | or_expr OR and_expr                                   -> logic
?and_expr: eq_expr
    | and_expr AND eq_expr                                  -> logic
?eq_expr: cmp_expr
    | eq_expr (EQ | NE) cmp_expr                            -> equal
    | eq_expr IS [NOT] NULL                                 -> is_null
?cmp_expr: unary
    | cmp_expr (GT | GE | LT | LE) unary                    -> ordering
    | cmp_expr [NOT] (CONTAINS | STARTSWITH | ENDSWITH) STRING -> string_test
    | cmp_expr [NOT] BETWEEN unary AND unary                -> between
    | cmp_expr [NOT] IN "(" STRING ("," STRING)* ")"        -> in_list
?unary: "+" unary
    | MINUS unary                                           -> negate
    | NOT unary                                             -> not_
    | primary
?primary: literal
    | ID                                                    -> prop
    | "(" or_expr ")"
literal: NUMBER | STRING | TRUE | FALSE | NULL

NOT: "NOT"i
AND: "AND"i
OR: "OR"i
BETWEEN: "BETWEEN"i
IN: "IN"i
TRUE: "TRUE"i
FALSE: "FALSE"i
NULL: "NULL"i
IS: "IS"i
CONTAINS: "CONTAINS"i
STARTSWITH: "STARTSWITH"i
ENDSWITH: "ENDSWITH"i
EQ: "="
NE: "<>"
GT: ">"
GE: ">="
LT: "<"
LE: "<="
MINUS: "-"
NUMBER: /([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|0|[1-9][0-9]*[lL]?/
STRING: /'([^']|'')*'/
ID: /[a-zA-Z_$][a-zA-Z0-9_$]*/

%ignore /[ \t\n\r\f]+/
"""
# Comments (RocketMQ's ``-- ... end of line`` and ``/* ... */``) are blanked by ``_blank_comments`` before the
# lexer runs: as lexer patterns they are tried at every '-' or '/' and scan on to the end when unclosed, which is
# quadratic in a run of dashes.

# How the parser's terminals are named in an error.
_TERMINAL_NAMES = {
    "NUMBER": "a number", "STRING": "a string", "ID": "a property name", "LPAR": "'('", "RPAR": "')'",
    "COMMA": "','", "PLUS": "'+'", "MINUS": "'-'", "EQ": "'='", "NE": "'<>'", "GT": "'>'", "GE": "'>='",
    "LT": "'<'", "LE": "'<='", "$END": "the end"}


@cache
def _parser() -> Lark:
    # The basic lexer reads a keyword as a keyword wherever it is, as JavaCC's does.
    return Lark(GRAMMAR, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


def parse(text: str) -> Expression:
    """The expression ``text`` means, checked as RocketMQ checks it; ``FilterExpressionError`` saying where not."""
    if not isinstance(text, str):
        raise TypeError(f"an SQL92 expression must be a str, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:  # (compiled in the broker's request handlers: the work is bounded)
        raise FilterExpressionError(f"the expression is {len(text):,} characters long; at most {MAX_LENGTH:,} are "
                                    f"allowed", text, MAX_LENGTH)
    try:
        tree = _parser().parse(_blank_comments(text))
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text) from None
    builder = _Builder(text)
    try:
        expr = builder.transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, FilterExpressionError):
            raise exc.orig_exc from None
        raise
    builder.close_chains()
    return expr


def _blank_comments(text: str) -> str:
    """``text`` with its comments turned to blanks (line breaks kept, so positions stay), outside string
    literals; in one pass. A ``--`` comment needs a line break to end it, a ``/*`` one its ``*/`` (JavaCC's
    tokens): without one it is no comment, and none can follow."""
    if "--" not in text and "/*" not in text:
        return text
    out: list[str] = []
    last = i = 0
    n = len(text)
    line_comments = block_comments = True  # (False once one had no end: no later one has)
    while i < n:
        c = text[i]
        if c == "'":  # a string literal ('' inside is a quote): skipped whole
            end = text.find("'", i + 1)
            while end >= 0 and text.startswith("''", end):
                end = text.find("'", end + 2)
            if end < 0:
                break  # never closed: the lexer says so
            i = end + 1
        elif c == "-" and line_comments and text.startswith("--", i):
            ends = [e for e in (text.find("\n", i), text.find("\r", i)) if e >= 0]
            if not ends:
                line_comments = False
                i += 1
                continue
            end = min(ends)
            out += (text[last:i], " " * (end - i))
            last = i = end
        elif c == "/" and block_comments and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                block_comments = False
                i += 1
                continue
            end += 2
            out += (text[last:i], "".join(ch if ch in "\r\n" else " " for ch in text[i:end]))
            last = i = end
        else:
            i += 1
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _describe(token: Token) -> str:
    if token.type in ("NUMBER", "STRING", "ID"):
        return f"{_TERMINAL_NAMES[token.type].split(' ', 1)[1]} {token.value!s}"
    return f"'{token.value}'"


def _syntax_error(exc: UnexpectedInput, text: str) -> FilterExpressionError:
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream
        assert pos is not None  # lark sets it for every character the lexer refuses
        what = "a string that is never closed" if text[pos] == "'" else f"character {text[pos]!r}"
        return FilterExpressionError(f"unexpected {what}", text, pos)
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        if "$END" in exc.expected:  # RocketMQ would stop reading here and ignore the rest
            reason = f"unexpected {_describe(exc.token)} after a complete expression; expected an operator or the end"
        else:
            expected = sorted({_TERMINAL_NAMES.get(t, t) for t in exc.expected})
            reason = f"unexpected {_describe(exc.token)}; expected {_one_of(expected)}"
        return FilterExpressionError(reason, text, exc.token.start_pos or 0)
    if not text.strip():
        return FilterExpressionError("the expression is empty", text, 0)
    return FilterExpressionError("the expression ends too early", text, len(text))


def _one_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else "one of " + ", ".join(names)


def _unquote(token: Token) -> str:
    value: str = token.value
    return value[1:-1].replace("''", "'")


class _Builder(Transformer_NonRecursive[Token, Expression]):
    """Parse tree → expression nodes, with RocketMQ's checks (its ``ComparisonExpression.createXxx``)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.depth: dict[int, int] = {}  # id(node) → nesting depth
        self.where: dict[int, int] = {}  # id(node) → where it starts (its operator, for an operation)
        self.open_chains: dict[int, And | Or] = {}  # id → AND / OR chains being built (operands a list)

    # -- helpers -------------------------------------------------------------------------------------
    def _error(self, reason: str, where: Token | Expression) -> FilterExpressionError:
        if isinstance(where, Token):
            pos = where.start_pos or 0
        else:
            pos = self.where.get(id(where), 0)
        return FilterExpressionError(reason, self.text, pos)

    def _made(self, node: Expression, token: Token, *children: Expression) -> Expression:
        depth = 1 + max((self.depth.get(id(c), 1) for c in children), default=0)
        if depth > MAX_DEPTH:
            raise self._error(f"the expression nests more than {MAX_DEPTH} levels deep", token)
        self.depth[id(node)] = depth
        self.where[id(node)] = token.start_pos or 0
        return node

    def _condition(self, expr: Expression, token: Token) -> Expression:
        """RocketMQ's asBooleanExpression: a condition as it is, a property cast, anything else refused."""
        if isinstance(expr, Property):
            cast = self._made(BooleanCast(expr), token, expr)
            self.where[id(cast)] = self.where.get(id(expr), 0)
            return cast
        if not expr.boolean:
            raise self._error(f"{expr} is not a condition (it does not give TRUE or FALSE)", expr)
        return expr

    def _comparable(self, expr: Expression, op: str) -> None:
        """Only numbers, properties and their negations go either side of > >= < <=."""
        if isinstance(expr, Constant):
            v = expr.value
            if v is None or type(v) in (bool, str):
                raise self._error(f"{expr} cannot be compared with {op!r}: only numbers can", expr)
        elif expr.boolean:
            raise self._error(f"{expr} is a condition and cannot be compared with {op!r}", expr)

    def _ordering(self, op: str, left: Expression, right: Expression, token: Token) -> Expression:
        self._comparable(left, op)
        self._comparable(right, op)
        return self._made(Ordering(op, left, right), token, left, right)

    # -- rules ---------------------------------------------------------------------------------------
    def start(self, children: list[Any]) -> Expression:
        (expr,) = children
        return self._condition(expr, Token("START", "", start_pos=0))

    def logic(self, children: list[Any]) -> Expression:
        left, op, right = children
        cls: type[And | Or] = Or if op.type == "OR" else And
        lhs, rhs = self._condition(left, op), self._condition(right, op)
        # Chains become one n-ary node: the same results, evaluated left to right, without nesting. The node's
        # operands grow in place (a list until ``parse`` ends), so that a chain of n costs n, not n squared.
        added = list(rhs.operands) if isinstance(rhs, cls) else [rhs]
        if isinstance(lhs, cls) and id(lhs) in self.open_chains:
            lhs.operands.extend(added)  # type: ignore[attr-defined]
            depth = max(self.depth[id(lhs)], 1 + max(self.depth.get(id(c), 1) for c in added))
            if depth > MAX_DEPTH:
                raise self._error(f"the expression nests more than {MAX_DEPTH} levels deep", op)
            self.depth[id(lhs)] = depth
            return lhs
        node = cls([*(lhs.operands if isinstance(lhs, cls) else (lhs,)), *added])  # type: ignore[arg-type]
        self.open_chains[id(node)] = node
        return self._made(node, op, *node.operands)

    def close_chains(self) -> None:
        """The chains' operands as the tuples the nodes hold."""
        for node in self.open_chains.values():
            object.__setattr__(node, "operands", tuple(node.operands))
        self.open_chains.clear()

    def equal(self, children: list[Any]) -> Expression:
        left, op, right = children
        for side in (left, right):
            if isinstance(side, Constant) and side.value is None:
                raise self._error("NULL cannot be compared with '=' or '<>': write IS NULL or IS NOT NULL", side)
        if isinstance(left, Constant) and isinstance(right, Constant) and left.boolean and not right.boolean:
            raise self._error(f"{left} cannot be compared with {right}", right)
        eq = self._made(Equal(left, right), op, left, right)
        return eq if op.type == "EQ" else self._made(Not(eq), op, eq)

    def is_null(self, children: list[Any]) -> Expression:
        left, is_, negated, _null = children
        null = Constant(None)
        eq = self._made(Equal(left, null), is_, left)
        return self._made(Not(eq), is_, eq) if negated is not None else eq

    def ordering(self, children: list[Any]) -> Expression:
        left, op, right = children
        return self._ordering(op.value, left, right, op)

    def string_test(self, children: list[Any]) -> Expression:
        operand, negated, op, search = children
        return self._made(StringTest(op.type, operand, _unquote(search), negated is not None), op, operand)

    def between(self, children: list[Any]) -> Expression:
        value, negated, op, low, _and, high = children
        if negated is not None:  # RocketMQ checks no order here
            outside = (self._ordering("<", value, low, op), self._ordering(">", value, high, op))
            return self._made(Or(outside), op, *outside)
        if isinstance(low, Constant) and isinstance(high, Constant):
            if low.value is None or high.value is None:
                raise self._error("the bounds of BETWEEN cannot be NULL", low if low.value is None else high)
            try:
                in_order = java_compare(high.value, low.value) >= 0
            except Uncomparable:
                in_order = False
            if not in_order:
                raise self._error(f"BETWEEN {low} AND {high}: the lower bound must come first", low)
        inside = (self._ordering(">=", value, low, op), self._ordering("<=", value, high, op))
        return self._made(And(inside), op, *inside)

    def in_list(self, children: list[Any]) -> Expression:
        operand, negated, op, *items = children
        if not isinstance(operand, Property):
            raise self._error(f"IN needs a property on its left, not {operand}", operand)
        return self._made(InList(operand, frozenset(_unquote(t) for t in items), negated is not None), op, operand)

    def negate(self, children: list[Any]) -> Expression:
        op, operand = children
        return self._made(Negate(operand), op, operand)

    def not_(self, children: list[Any]) -> Expression:
        op, operand = children
        cond = self._condition(operand, op)
        return self._made(Not(cond), op, cond)

    def prop(self, children: list[Any]) -> Expression:
        (name,) = children
        return self._made(Property(str(name)), name)

    def literal(self, children: list[Any]) -> Expression:
        (tok,) = children
        kind = tok.type
        if kind == "STRING":
            return self._made(Constant(_unquote(tok)), tok)
        if kind in ("TRUE", "FALSE"):
            return self._made(Constant(kind == "TRUE"), tok)
        if kind == "NULL":
            return self._made(Constant(None), tok)
        text = str(tok)
        if any(c in text for c in ".eE"):
            value = float(text)
            if math.isinf(value) or value < DOUBLE_MIN:
                raise self._error(f"{text} is not a usable float: RocketMQ takes {DOUBLE_MIN!r} to "
                                  f"1.7976931348623157e308 (write 0, not 0.0)", tok)
            return self._made(Constant(value), tok)
        n = int(text.rstrip("lL"))
        if n > LONG_MAX:
            raise self._error(f"{text} is out of range: integers go up to {LONG_MAX}", tok)
        return self._made(Constant(n if n <= INT_MAX else JavaLong(n)), tok)

    def __default__(self, data: Any, children: list[Any], meta: Any) -> Any:
        return Tree(data, children, meta)


__all__ = ["GRAMMAR", "MAX_DEPTH", "MAX_LENGTH", "java_text", "parse"]
