"""Message filters by property: RocketMQ's SQL92 selectors and the contest spec's ``key=value`` filter.

Used by the broker, which evaluates them as it reads a queue, and by the client, which checks an expression when
it subscribes. Imports nothing of either; lark, the parser, is loaded by the first SQL92 expression compiled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports

if TYPE_CHECKING:  # the names below are imported on first use (sluice._lazy)
    from sluice.filter.filter_factory import (
        EXPRESSION_TYPES,
        SQL92,
        TAG,
        CompiledExpression,
        UnknownExpressionTypeError,
        compile_expression,
        compile_sql92,
        is_tag_type,
        prepare_sql92,
    )
    from sluice.filter.key_value import key_value_to_sql92

_EXPORTS = {
    "CompiledExpression": "sluice.filter.filter_factory",
    "EXPRESSION_TYPES": "sluice.filter.filter_factory",
    "SQL92": "sluice.filter.filter_factory",
    "TAG": "sluice.filter.filter_factory",
    "UnknownExpressionTypeError": "sluice.filter.filter_factory",
    "compile_expression": "sluice.filter.filter_factory",
    "compile_sql92": "sluice.filter.filter_factory",
    "is_tag_type": "sluice.filter.filter_factory",
    "key_value_to_sql92": "sluice.filter.key_value",
    "prepare_sql92": "sluice.filter.filter_factory",
}
__all__ = [
    "CompiledExpression", "EXPRESSION_TYPES", "SQL92", "TAG", "UnknownExpressionTypeError", "compile_expression",
    "compile_sql92", "is_tag_type", "key_value_to_sql92", "prepare_sql92",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
