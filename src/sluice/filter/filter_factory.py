"""Expression types and their compilation (RocketMQ's ``FilterFactory`` / ``SqlFilter``).

``compile_expression("SQL92", text)`` parses ``text`` once (answers are remembered, refusals too) and gives a
``CompiledExpression`` whose ``matches(properties)`` never raises: a message the expression cannot be evaluated on
(a non-numeric property compared with a number, say) does not match, as on RocketMQ's broker.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from sluice.common.errors import FilterExpressionError, InvalidSubscriptionError
from sluice.filter.expression import Evaluator, Expression, Uncomparable, property_names

TAG = "TAG"
SQL92 = "SQL92"
EXPRESSION_TYPES = (TAG, SQL92)
_CACHE_SIZE = 1024


def is_tag_type(expression_type: str | None) -> bool:
    """RocketMQ's ``ExpressionType.isTagType``: no type, an empty one and ``TAG`` mean a tag expression."""
    return not expression_type or expression_type == TAG


class UnknownExpressionTypeError(InvalidSubscriptionError):
    """An expression type other than TAG and SQL92."""

    def __init__(self, expression_type: str) -> None:
        self.expression_type = expression_type
        super().__init__(f"unknown expression type {expression_type!r}: use TAG or SQL92")


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    """An SQL92 expression ready to run on messages' properties."""

    text: str
    tree: Expression
    evaluate: Evaluator
    properties: frozenset[str]  # the property names it reads

    def matches(self, properties: Mapping[str, str]) -> bool:
        """True when the expression is TRUE for a message with these properties (not FALSE, NULL or an error)."""
        try:
            return self.evaluate(properties) is True
        except (Uncomparable, ArithmeticError, ValueError):  # (a value Java reads and Python will not: no match)
            return False


_cache: dict[str, CompiledExpression | FilterExpressionError] = {}
_cache_lock = threading.Lock()  # the client compiles on its callers' threads, the broker on its loop


def prepare_sql92() -> None:
    """Load the parser now (lark and its tables, some tens of milliseconds) rather than at the first expression."""
    from sluice.filter.selector_parser import parse

    parse("TRUE")


def compile_sql92(text: str) -> CompiledExpression:
    """``text`` compiled; ``FilterExpressionError`` (with the position) when it is not a valid SQL92 selector."""
    found = _cache.get(text)
    if found is None:
        from sluice.filter.selector_parser import parse  # lark is loaded by the first SQL92 expression only

        try:
            tree = parse(text)
            found = CompiledExpression(text, tree, tree.evaluator(), property_names(tree))
        except FilterExpressionError as exc:
            found = exc
        with _cache_lock:
            while len(_cache) >= _CACHE_SIZE:  # the least recently used goes (dicts keep insertion order)
                del _cache[next(iter(_cache))]
            _cache[text] = found
    else:
        with _cache_lock:  # now the most recently used
            _cache.pop(text, None)
            _cache[text] = found
    if isinstance(found, FilterExpressionError):
        raise found
    return found


def compile_expression(expression_type: str | None, text: str) -> CompiledExpression | None:
    """A filter of ``expression_type``: None for a tag expression (the consume queue's tag codes filter those),
    the compiled expression for SQL92; ``InvalidSubscriptionError`` for an unknown type or a bad expression."""
    if is_tag_type(expression_type):
        return None
    if expression_type != SQL92:
        raise UnknownExpressionTypeError(str(expression_type))
    return compile_sql92(text)
