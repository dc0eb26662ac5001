"""What a consumer selects of a topic (RocketMQ's ``MessageSelector``): a tag expression or an SQL92 expression."""

from __future__ import annotations

from dataclasses import dataclass

from sluice.common.errors import InvalidSubscriptionError
from sluice.filter import SQL92, TAG, compile_sql92, key_value_to_sql92


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """``MessageSelector.by_sql("region = 'hz' AND price > 10")``, ``MessageSelector.by_tag("TagA || TagB")`` or
    ``MessageSelector.by_key_value("region=hz")``. An SQL92 expression is checked when the selector is made:
    ``FilterExpressionError`` (an ``InvalidSubscriptionError``) says what is wrong and where."""

    expression_type: str
    expression: str

    def __post_init__(self) -> None:
        if self.expression_type not in (TAG, SQL92):
            raise InvalidSubscriptionError(f"unknown expression type {self.expression_type!r}: use TAG or SQL92")
        if not isinstance(self.expression, str):
            raise InvalidSubscriptionError(f"an expression must be a str, not {type(self.expression).__name__}")
        if self.expression_type == SQL92:
            compile_sql92(self.expression)

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        """Messages whose properties satisfy ``sql`` (RocketMQ's SQL92 grammar; the broker must have
        ``enable_property_filter``)."""
        return cls(SQL92, sql)

    @classmethod
    def by_tag(cls, tags: str | None) -> MessageSelector:
        """Messages whose tag is one of ``"TagA || TagB"``; ``"*"`` (or None) for every message."""
        return cls(TAG, "*" if tags is None else tags)

    @classmethod
    def by_key_value(cls, pairs: str) -> MessageSelector:
        """The contest spec's filter: ``"k=v"`` is ``k = 'v'``, ``"k1=v1,k2=v2"`` both at once."""
        return cls(SQL92, key_value_to_sql92(pairs))
