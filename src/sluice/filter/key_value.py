"""The contest spec's property filter, ``"key=value"``, as the SQL92 expression it stands for.

``"area=hz"`` selects the messages whose property ``area`` is exactly ``hz``: ``area = 'hz'``. Several pairs
separated by commas must all hold: ``"area=hz,level=gold"`` is ``area = 'hz' AND level = 'gold'``. Blanks around
keys and values are dropped; a value runs to the next comma and may hold ``=`` (not a comma: write SQL92 for that).
A key must be a name SQL92 can refer to (letters, digits, ``_`` and ``$``, not starting with a digit, not a
keyword), since the broker evaluates the SQL92 form.
"""

from __future__ import annotations

import re

from sluice.common.errors import FilterExpressionError
from sluice.filter.expression import java_text

_NAME = re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")
_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH",
                       "ENDSWITH"})


def key_value_to_sql92(text: str) -> str:
    """The SQL92 expression of a ``key=value[,key=value...]`` filter; ``FilterExpressionError`` saying where it
    is malformed."""
    if not isinstance(text, str):
        raise TypeError(f"a filter must be a str, not {type(text).__name__}")
    terms = []
    start = 0
    for pair in text.split(","):
        key, eq, value = pair.partition("=")
        name = key.strip()
        at = start + len(key) - len(key.lstrip())
        if not eq:
            raise FilterExpressionError(f"filter {text!r}: {pair.strip()!r} is not key=value", text, at)
        if not name:
            raise FilterExpressionError(f"filter {text!r}: a key is missing before '='", text, start + len(key))
        if _NAME.fullmatch(name) is None or name.upper() in _KEYWORDS:
            raise FilterExpressionError(
                f"filter {text!r}: {name!r} cannot be a key (letters, digits, '_' and '$', not starting with a "
                "digit, not an SQL92 keyword)", text, at)
        terms.append(f"{name} = {java_text(value.strip())}")
        start += len(pair) + 1
    return " AND ".join(terms)
