"""SQL92 filter expressions and how they evaluate (RocketMQ's ``org.apache.rocketmq.filter.expression``).

An expression is a tree of small value classes, built by ``selector_parser``; ``evaluator()`` turns it into a
chain of closures, made once per subscription, that take a message's properties (``name -> str``).

Values follow Java's types, since RocketMQ's rules depend on them: ``None`` (null), ``bool``, ``str``, ``int`` (a
Java Integer), ``JavaLong`` (a Java Long: a literal beyond the int range) and ``float`` (a Java Double). A
property's value is always a string. Three-valued logic as in SQL: a comparison with a missing property is null,
and only a true result selects a message. RocketMQ's conversions, quirks included, decide the rest:

* a string compared with a number is parsed as that number's Java type (``a = 5`` reads ``a`` with
  ``Integer.valueOf``, so ``'5.0'`` and ``'3000000000'`` fail), a string with a boolean is ``'true'`` or not;
* ``> >= < <=`` between two strings parse both as doubles;
* a conversion that fails is an error (``Uncomparable``), which makes the whole expression false for that
  message, whatever the ``OR`` or ``NOT`` around it: RocketMQ's broker catches the exception at the top;
* ``=`` and ``<>`` are lopsided about nulls: ``a = 'x'`` is null when ``a`` is missing, ``'x' = a`` is false.
"""

from __future__ import annotations

import abc
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

Properties = Mapping[str, str]
Evaluator = Callable[[Properties], Any]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class JavaLong(int):
    """An integer that is a Java Long, not an Integer (RocketMQ converts strings by the other side's type)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}L"


class Uncomparable(Exception):
    """A comparison RocketMQ cannot make (a non-numeric string against a number, ...): the message does not match."""


# == Java's conversions of a string ================================================================================
_JAVA_INTEGER = re.compile(r"[+-]?\d+")  # Integer.valueOf / Long.valueOf: Unicode digits, no blanks
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)", re.ASCII)
_JAVA_HEX_DOUBLE = re.compile(r"([+-]?)(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+)[fFdD]?",
                              re.ASCII)
_JAVA_TRIMMED = "".join(map(chr, range(33)))  # String.trim() drops every char <= ' '


def _parse_integral(s: str, low: int, high: int) -> int:
    if _JAVA_INTEGER.fullmatch(s) is None:
        raise Uncomparable
    digits = s.lstrip("+-").lstrip("0")
    if len(digits) > 20:  # far out of range; also spares int() a huge string
        raise Uncomparable
    v = (-1 if s.startswith("-") else 1) * int(digits or "0")  # (leading zeros gone: int() limits the length)
    if not low <= v <= high:
        raise Uncomparable
    return v


def parse_java_int(s: str) -> int:
    return _parse_integral(s, INT_MIN, INT_MAX)


def parse_java_long(s: str) -> JavaLong:
    return JavaLong(_parse_integral(s, LONG_MIN, LONG_MAX))


def parse_java_double(s: str) -> float:
    """``Double.valueOf(s)``: blanks trimmed, a sign, ``NaN``, ``Infinity``, decimal or hexadecimal, a type suffix."""
    t = s.strip(_JAVA_TRIMMED)
    if _JAVA_DOUBLE.fullmatch(t) is not None:
        return float(t.rstrip("fFdD"))
    m = _JAVA_HEX_DOUBLE.fullmatch(t)
    if m is not None:
        try:
            return float.fromhex(m.group(1) + m.group(2))
        except OverflowError:  # Java's is infinite
            return float("-inf") if m.group(1) == "-" else float("inf")
    raise Uncomparable


def parse_java_boolean(s: str) -> bool:
    return s.isascii() and s.lower() == "true"


# == Java's compareTo, after RocketMQ's conversions (ComparisonExpression.__compare) ==============================
def _double_compare(a: float, b: float) -> int:
    """``Double.compare``: NaN is above everything and equal to itself, -0.0 is below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = a != a, b != b
    if a_nan or b_nan:
        return a_nan - b_nan
    if a == 0.0:
        return int(math.copysign(1, a) > 0) - int(math.copysign(1, b) > 0)
    return 0


def _same_type_compare(lv: Any, rv: Any) -> int:
    if type(lv) is float:
        return _double_compare(lv, rv)
    order: int = (lv > rv) - (lv < rv)
    return order


def java_compare(lv: Any, rv: Any) -> int:
    """RocketMQ's ``__compare(lv, rv, convertStringExpressions=true)``; ``Uncomparable`` where Java throws."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is bool:
            if rt is str:  # RocketMQ casts the Boolean to String here: a ClassCastException
                raise Uncomparable
            return -1
        if lt is int:
            if rt is JavaLong:
                lv = JavaLong(lv)
            elif rt is float:
                lv = float(lv)
            elif rt is str:
                rv = parse_java_int(rv)
            else:
                return -1
        elif lt is JavaLong:
            if rt is int:
                rv = JavaLong(rv)
            elif rt is float:
                lv = float(lv)
            elif rt is str:
                rv = parse_java_long(rv)
            else:
                return -1
        elif lt is float:
            if rt is int or rt is JavaLong:
                rv = float(rv)
            elif rt is str:
                rv = parse_java_double(rv)
            else:
                return -1
        elif lt is str:
            if rt is bool:
                lv = parse_java_boolean(lv)
            elif rt is int:
                lv = parse_java_int(lv)
            elif rt is JavaLong:
                lv = parse_java_long(lv)
            elif rt is float:
                lv = parse_java_double(lv)
            else:
                return -1
        else:
            return -1
    return _same_type_compare(lv, rv)


# == the expression tree ===========================================================================================
class Expression(abc.ABC):
    """A node. ``boolean`` marks RocketMQ's ``BooleanExpression``s, which the grammar's checks look at."""

    __slots__ = ()
    boolean: ClassVar[bool] = False

    @abc.abstractmethod
    def evaluator(self) -> Evaluator:
        """The node compiled to a function of a message's properties."""


def java_text(value: Any) -> str:
    """A value as RocketMQ prints it in an expression (``'it''s'``, ``TRUE``, ``NULL``, ``5``)."""
    if value is None:
        return "NULL"
    if value is True or value is False:
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(float(value)) if isinstance(value, float) else str(int(value))


@dataclass(frozen=True, slots=True, eq=False)
class Constant(Expression):
    value: Any

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        """TRUE, FALSE and NULL are RocketMQ's BooleanConstantExpressions."""
        return self.value is None or type(self.value) is bool

    def __str__(self) -> str:
        return java_text(self.value)

    def evaluator(self) -> Evaluator:
        value = self.value
        return lambda props: value


@dataclass(frozen=True, slots=True, eq=False)
class Property(Expression):
    name: str

    def __str__(self) -> str:
        return self.name

    def evaluator(self) -> Evaluator:
        name = self.name
        return lambda props: props.get(name)


@dataclass(frozen=True, slots=True, eq=False)
class Negate(Expression):
    """Unary minus: a number negated, anything else (a property's string) null."""

    operand: Expression

    def __str__(self) -> str:
        return f"(- {self.operand})"

    def evaluator(self) -> Evaluator:
        of = self.operand.evaluator()

        def negate(props: Properties) -> Any:
            v = of(props)
            t = type(v)
            if t is int:
                return -v if v != INT_MIN else v  # Java's int negation wraps
            if t is JavaLong:
                return JavaLong(-v if v != LONG_MIN else v)
            if t is float:
                return -v
            return None

        return negate


@dataclass(frozen=True, slots=True, eq=False)
class BooleanCast(Expression):
    """A bare property where a condition is expected (``a AND b``): its value is a string, so never true."""

    boolean: ClassVar[bool] = True
    operand: Expression

    def __str__(self) -> str:
        return str(self.operand)

    def evaluator(self) -> Evaluator:
        of = self.operand.evaluator()

        def cast(props: Properties) -> Any:
            v = of(props)
            if v is None:
                return None
            return v if type(v) is bool else False

        return cast


@dataclass(frozen=True, slots=True, eq=False)
class Not(Expression):
    boolean: ClassVar[bool] = True
    operand: Expression

    def __str__(self) -> str:
        return f"(NOT {self.operand})"

    def evaluator(self) -> Evaluator:
        of = self.operand.evaluator()

        def negation(props: Properties) -> Any:
            v = of(props)
            return None if v is None else not v

        return negation


@dataclass(frozen=True, slots=True, eq=False)
class And(Expression):
    """``a AND b AND c``: a chain is one node, evaluated left to right until an operand is false."""

    boolean: ClassVar[bool] = True
    operands: tuple[Expression, ...]

    def __str__(self) -> str:
        return "(" + " AND ".join(map(str, self.operands)) + ")"

    def evaluator(self) -> Evaluator:
        fs = tuple(op.evaluator() for op in self.operands)

        def conjunction(props: Properties) -> Any:
            unknown = False
            for f in fs:
                v = f(props)
                if v is False:
                    return False
                if v is None:
                    unknown = True
            return None if unknown else True

        return conjunction


@dataclass(frozen=True, slots=True, eq=False)
class Or(Expression):
    """``a OR b OR c``: a chain is one node, evaluated left to right until an operand is true."""

    boolean: ClassVar[bool] = True
    operands: tuple[Expression, ...]

    def __str__(self) -> str:
        return "(" + " OR ".join(map(str, self.operands)) + ")"

    def evaluator(self) -> Evaluator:
        fs = tuple(op.evaluator() for op in self.operands)

        def disjunction(props: Properties) -> Any:
            unknown = False
            for f in fs:
                v = f(props)
                if v is True:
                    return True
                if v is None:
                    unknown = True
            return None if unknown else False

        return disjunction


@dataclass(frozen=True, slots=True, eq=False)
class Equal(Expression):
    """``=`` (and, under a Not, ``<>``; with a NULL constant on the right, ``IS NULL``)."""

    boolean: ClassVar[bool] = True
    left: Expression
    right: Expression

    def __str__(self) -> str:
        return f"({self.left} = {self.right})"

    def evaluator(self) -> Evaluator:
        left, right = self.left, self.right
        if isinstance(right, Constant) and right.value is None:  # IS NULL
            lf = left.evaluator()
            return lambda props: lf(props) is None
        if isinstance(left, Property) and isinstance(right, Constant) and type(right.value) is str:
            name, text = left.name, right.value  # the common case, spared the general path

            def property_equals_string(props: Properties) -> Any:
                v = props.get(name)
                return None if v is None else v == text

            return property_equals_string
        lf, rf = left.evaluator(), right.evaluator()

        def equal(props: Properties) -> Any:
            lv = lf(props)
            rv = rf(props)
            if lv is None:
                return True if rv is None else None
            if rv is None:
                return False
            if type(lv) is type(rv) and type(lv) is not float:
                return lv == rv
            return java_compare(lv, rv) == 0

        return equal


_ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


@dataclass(frozen=True, slots=True, eq=False)
class Ordering(Expression):
    """``> >= < <=``: two strings compare as doubles; a null side makes it null."""

    boolean: ClassVar[bool] = True
    op: str
    left: Expression
    right: Expression

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"

    def evaluator(self) -> Evaluator:
        lf, rf = self.left.evaluator(), self.right.evaluator()
        holds = _ORDERINGS[self.op]

        def ordering(props: Properties) -> Any:
            lv = lf(props)
            if lv is None:
                return None
            rv = rf(props)
            if rv is None:
                return None
            if type(lv) is str and type(rv) is str:
                lv, rv = parse_java_double(lv), parse_java_double(rv)
            return holds(java_compare(lv, rv))

        return ordering


@dataclass(frozen=True, slots=True, eq=False)
class InList(Expression):
    """``prop [NOT] IN ('a', 'b')``: null when the property is missing."""

    boolean: ClassVar[bool] = True
    operand: Property
    values: frozenset[str]
    negated: bool

    def __str__(self) -> str:
        items = ", ".join(java_text(v) for v in sorted(self.values))
        return f"{self.operand} {'NOT IN' if self.negated else 'IN'} ( {items} )"

    def evaluator(self) -> Evaluator:
        name, values, negated = self.operand.name, self.values, self.negated

        def in_list(props: Properties) -> Any:
            v = props.get(name)
            if v is None:
                return None
            return (v in values) is not negated

        return in_list


_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": lambda v, s: s in v, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}


@dataclass(frozen=True, slots=True, eq=False)
class StringTest(Expression):
    """``[NOT] CONTAINS / STARTSWITH / ENDSWITH 'text'``: false (not null) for a missing or non-string value, and
    false whatever the value for an empty text, negated or not."""

    boolean: ClassVar[bool] = True
    op: str
    operand: Expression
    search: str
    negated: bool

    def __str__(self) -> str:
        return f"({self.operand} {'NOT ' if self.negated else ''}{self.op} {java_text(self.search)})"

    def evaluator(self) -> Evaluator:
        if not self.search:
            return lambda props: False
        of, search, negated, test = self.operand.evaluator(), self.search, self.negated, _STRING_TESTS[self.op]

        def string_test(props: Properties) -> Any:
            v = of(props)
            if type(v) is not str:
                return False
            return test(v, search) is not negated

        return string_test


def property_names(expr: Expression) -> frozenset[str]:
    """The properties ``expr`` reads."""
    names: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Property):
            names.add(node.name)
        elif isinstance(node, (And, Or)):
            stack.extend(node.operands)
        elif isinstance(node, (Equal, Ordering)):
            stack += (node.left, node.right)
        elif isinstance(node, (Negate, BooleanCast, Not, InList, StringTest)):
            stack.append(node.operand)
    return frozenset(names)
