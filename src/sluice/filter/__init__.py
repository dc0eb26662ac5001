"""Message filters by property: RocketMQ's SQL92 selectors and the contest spec's ``key=value`` filter.

Used by the broker, which evaluates them as it reads a queue, and by the client, which checks an expression when
it subscribes. Imports nothing of either; lark, the parser, is loaded by the first SQL92 expression compiled.
"""

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

__all__ = ["EXPRESSION_TYPES", "SQL92", "TAG", "CompiledExpression", "UnknownExpressionTypeError",
           "compile_expression", "compile_sql92", "is_tag_type", "key_value_to_sql92", "prepare_sql92"]
