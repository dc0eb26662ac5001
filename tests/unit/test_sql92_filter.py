"""SQL92 selectors: RocketMQ's grammar, its null, type and conversion rules, precedence, syntax errors that say
where, and a filter that never raises however odd the expression or the properties."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.common.errors import FilterExpressionError
from sluice.filter import compile_sql92
from sluice.filter.expression import Uncomparable
from sluice.filter.selector_parser import MAX_DEPTH

ERROR = "error"  # RocketMQ throws while evaluating: the message does not match, whatever surrounds the comparison


def result(expression: str, props: dict[str, str]) -> object:
    """TRUE, FALSE, NULL (None) or ERROR, as RocketMQ's broker would evaluate it."""
    try:
        return compile_sql92(expression).evaluate(props)
    except Uncomparable:
        return ERROR


GRAMMAR_TABLE = [
    # -- numbers: a property's string is read as the literal's Java type ------------------------------------------
    ("a > 5", {"a": "7"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-3"}, True),
    ("a <= -3", {"a": "-3"}, True),
    ("a > 5", {}, None),  # a missing property makes the comparison null
    ("a > 5", {"a": "abc"}, ERROR),  # not a number
    ("a > 5", {"a": "7.5"}, ERROR),  # Integer.valueOf("7.5") fails
    ("a > 5.0", {"a": "7.5"}, True),  # a float literal reads it as a double
    ("a > 5", {"a": "3000000000"}, ERROR),  # beyond an int ...
    ("a > 2147483648", {"a": "3000000000"}, True),  # ... fine against a long literal
    ("a > 5", {"a": " 7"}, ERROR),  # Integer.valueOf does not trim
    ("a > 5.0", {"a": " 7 "}, True),  # Double.valueOf does
    ("a > 1.5", {"a": "2d"}, True),  # Java's double syntax, suffix and all
    ("a = 1.0", {"a": "0x1p0"}, True),
    ("a > 1.0", {"a": "NaN"}, True),  # Double.compare puts NaN above everything
    ("a > 1.0", {"a": "Infinity"}, True),
    ("a = 10", {"a": "+10"}, True),
    ("a = 10", {"a": "010"}, True),
    ("a = 1", {"a": "1.0"}, ERROR),
    ("a = 1.0", {"a": "1"}, True),
    ("a = 10L", {"a": "10"}, True),
    ("a > b", {"a": "10", "b": "9"}, True),  # two properties compare as doubles, not as text
    ("a > b", {"a": "x", "b": "9"}, ERROR),
    ("a > b", {"a": "1"}, None),
    ("-a > 5", {"a": "-7"}, None),  # minus on a string is null
    ("1 < 2", {}, True),
    ("2.5 > 2", {}, True),
    ("- -5 = 5", {}, True),
    # -- strings and equality ---------------------------------------------------------------------------------------
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "X"}, False),
    ("a = 'x'", {}, None),
    ("'x' = a", {}, False),  # RocketMQ's = is lopsided about a null on its right
    ("a <> 'x'", {}, None),
    ("'x' <> a", {}, True),
    ("a <> 'x'", {"a": "y"}, True),
    ("a = b", {}, True),  # null = null is TRUE in RocketMQ
    ("a = b", {"a": "1"}, False),
    ("a = b", {"b": "1"}, None),
    ("a = b", {"a": "1", "b": "1"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = ''", {"a": ""}, True),
    ("a = 'ünïcödé'", {"a": "ünïcödé"}, True),
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),  # system properties are properties too
    # -- booleans ---------------------------------------------------------------------------------------------------
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "yes"}, True),  # anything but "true" is FALSE
    ("TRUE = a", {"a": "true"}, ERROR),  # RocketMQ casts the wrong side here (ClassCastException)
    ("a", {"a": "true"}, False),  # a bare property is a string, never TRUE
    ("a", {}, None),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, None),
    ("(a = 'x') = TRUE", {"a": "x"}, True),
    ("(a = 'x') = 1", {"a": "x"}, False),  # a boolean is never equal to a number
    ("(a = 'x') = 'true'", {"a": "x"}, ERROR),
    # -- IS [NOT] NULL ----------------------------------------------------------------------------------------------
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IS NOT NULL", {}, False),
    ("1 IS NULL", {}, False),
    # -- BETWEEN ----------------------------------------------------------------------------------------------------
    ("a BETWEEN 1 AND 3", {"a": "2"}, True),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a BETWEEN 1 AND 3", {}, None),
    ("a BETWEEN 1 AND 3", {"a": "x"}, ERROR),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
    ("a BETWEEN -1 AND 1.5", {"a": "0"}, True),
    ("a BETWEEN 1 AND 3 AND b = 'x'", {"a": "2", "b": "x"}, True),  # BETWEEN's AND is its own
    # -- IN ---------------------------------------------------------------------------------------------------------
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x')", {"a": "z"}, False),
    ("a IN ('x')", {}, None),
    ("a NOT IN ('x')", {"a": "z"}, True),
    ("a NOT IN ('x')", {}, None),
    ("a IN ('1', '2', '3', '4', '5', '6')", {"a": "6"}, True),
    # -- CONTAINS, STARTSWITH, ENDSWITH: false (not null) for a missing property ------------------------------------
    ("a CONTAINS 'ell'", {"a": "hello"}, True),
    ("a STARTSWITH 'he'", {"a": "hello"}, True),
    ("a ENDSWITH 'lo'", {"a": "hello"}, True),
    ("a NOT CONTAINS 'z'", {"a": "hello"}, True),
    ("a NOT ENDSWITH 'lo'", {"a": "hello"}, False),
    ("a CONTAINS 'x'", {}, False),
    ("a NOT CONTAINS 'x'", {}, False),
    ("a CONTAINS ''", {"a": "x"}, False),  # an empty text never matches, negated or not
    ("a NOT STARTSWITH ''", {"a": "x"}, False),
    ("NOT (a CONTAINS 'x')", {}, True),
    # -- three-valued logic ------------------------------------------------------------------------------------------
    ("a = '1' AND b = '2'", {"a": "1"}, None),
    ("a = '1' AND b = '2'", {"a": "0"}, False),
    ("a = '1' OR b = '2'", {"b": "2"}, True),
    ("a = '1' OR b = '2'", {"a": "0"}, None),
    ("NOT (a = '1')", {}, None),
    ("NOT (a = '1')", {"a": "2"}, True),
    # -- a failed conversion fails the whole expression, unless evaluation never reached it -------------------------
    ("a > 5 OR b = '1'", {"a": "x", "b": "1"}, ERROR),
    ("b = '1' OR a > 5", {"a": "x", "b": "1"}, True),
    ("b = '1' AND a > 5", {"a": "x", "b": "0"}, False),
    ("NOT (a > 5)", {"a": "x"}, ERROR),
    # -- precedence: OR < AND < = <> IS < > >= < <= BETWEEN IN CONTAINS < unary NOT - + -------------------------------
    ("a = '1' OR b = '1' AND c = '1'", {"a": "1"}, True),
    ("(a = '1' OR b = '1') AND c = '1'", {"a": "1"}, None),
    ("NOT a IS NULL", {}, True),  # (NOT a) IS NULL: NOT binds tightest
    ("NOT (a IS NULL)", {}, False),
    ("NOT a = 'x'", {"a": "y"}, ERROR),  # (NOT a) = 'x': a boolean against a string
    ("NOT a = 'x'", {}, None),
    ("a > 1 AND a < 3 OR a = 10", {"a": "10"}, True),
    ("a > 1 = TRUE", {"a": "2"}, True),  # (a > 1) = TRUE
    ("+a = 3", {"a": "3"}, True),
    # -- lexical details ---------------------------------------------------------------------------------------------
    ("a = 'x' and b = 'y'", {"a": "x", "b": "y"}, True),
    ("a = 'x' Or b Is Not Null", {"b": ""}, True),
    ("android = 'x' AND $in_ = 'y' AND _1 = 'z'", {"android": "x", "$in_": "y", "_1": "z"}, True),
    ("a = 'x' /* a comment */ -- another\n", {"a": "x"}, True),
    ("a\t=\n'x'", {"a": "x"}, True),
    ("a = 1.5e3 AND b = .5 AND c = 5. AND d = 2E0", {"a": "1500", "b": "0.5", "c": "5", "d": "2"}, True),
]


@pytest.mark.parametrize(("expression", "props", "expected"), GRAMMAR_TABLE,
                         ids=[f"{e} {p}" for e, p, _ in GRAMMAR_TABLE])
def test_expressions_evaluate_as_in_rocketmq(expression, props, expected):
    assert result(expression, props) == expected
    assert compile_sql92(expression).matches(props) is (expected is True)  # only TRUE selects


TOO_LONG = "a = 1 OR " * 1000 + "a = 2"  # over the length limit (RocketMQ has none)
SYNTAX_ERRORS = [
    # expression, words of the reason, column it points at
    ("a >> 1", "unexpected '>'", 4),
    ("a = 'x", "never closed", 5),
    ("", "empty", 1),
    ("   ", "empty", 1),
    ("a = 1 b = 2", "after a complete expression", 7),
    ("a = 1 --no newline", "after a complete expression", 7),
    ("a = 1 AND", "ends too early", 10),
    ("(a = 1", "ends too early", 7),
    ("a == 1", "unexpected '='", 4),
    ("a + 1", "after a complete expression", 3),
    ("a.b = 1", "unexpected character '.'", 2),
    ("a = #", "unexpected character '#'", 5),
    ("a IS 1", "expected one of NOT, NULL", 6),
    ("a IN ()", "unexpected ')'", 7),
    ("a IN (1)", "unexpected number 1", 7),
    ("a > 'x'", "cannot be compared", 5),
    ("a > TRUE", "cannot be compared", 5),
    ("(a = 1) > 2", "is a condition", 4),
    ("a BETWEEN 'a' AND 'b'", "cannot be compared", 11),
    ("a BETWEEN 3 AND 1", "lower bound must come first", 11),
    ("a BETWEEN NULL AND 1", "cannot be NULL", 11),
    ("a = NULL", "IS NULL", 5),
    ("NULL <> a", "IS NULL", 1),
    ("TRUE = 1", "cannot be compared with 1", 8),
    ("1", "not a condition", 1),
    ("'x'", "not a condition", 1),
    ("-a", "not a condition", 1),
    ("NOT 'x'", "not a condition", 5),
    ("a = 1 OR 2", "not a condition", 10),
    ("'x' IN ('x')", "IN needs a property", 1),
    ("a = 0.0", "not a usable float", 5),
    ("a = 1e999", "not a usable float", 5),
    ("a = 9223372036854775808", "out of range", 5),
    ("a = 1 AND\nb >> 2", "unexpected '>'", 4),
    ("NOT " * (MAX_DEPTH + 1) + "a", "nests more than", None),
    (TOO_LONG, "at most 8,192 are allowed", None),
]


@pytest.mark.parametrize(("expression", "reason", "column"), SYNTAX_ERRORS, ids=[e[:40] for e, _, _ in SYNTAX_ERRORS])
def test_a_malformed_expression_is_refused_saying_where(expression, reason, column):
    with pytest.raises(FilterExpressionError) as info:
        compile_sql92(expression)
    err = info.value
    assert reason in err.reason
    if column is not None:
        assert err.column == column
        assert str(err).endswith("\n  " + " " * (column - 1) + "^")  # the caret sits under it


def test_an_error_on_a_later_line_gives_the_line_and_column():
    with pytest.raises(FilterExpressionError) as info:
        compile_sql92("a = 1 AND\nb >> 2")
    assert (info.value.line, info.value.column, info.value.position) == (2, 4, 13)
    assert "(at line 2, column 4)" in str(info.value)


def test_long_chains_of_and_or_are_not_nesting():
    chain = " OR ".join(f"a = '{i}'" for i in range(5 * MAX_DEPTH))
    assert compile_sql92(chain).matches({"a": str(5 * MAX_DEPTH - 1)})


def test_a_long_chain_compiles_in_time_proportional_to_its_length():
    """Each operand joins the chain in place: 900 of them (the longest the length limit lets through) compile
    like 100 do, nine times over, not 81 times (measured as the work of building the chain, not as time)."""
    from sluice.filter.selector_parser import _Builder, _parser

    for n in (100, 900):
        text = " OR ".join(f"a = {i}" for i in range(n))
        builder = _Builder(text)
        builder.transform(_parser().parse(text))
        (chain,) = builder.open_chains.values()
        assert len(chain.operands) == n and len(builder.open_chains) == 1


@pytest.mark.parametrize(("expression", "value"), [("a = 5", "0" * 5000 + "5"), ("a > 1.5", "0x1p5000"),
                                                 ("a < -1.5", "-0x1p5000")])
def test_values_java_reads_match_as_in_java(expression, value):
    """Leading zeros beyond Python's int() length limit, a hexadecimal double beyond the range (infinite in Java)."""
    assert compile_sql92(expression).matches({"a": value})


def test_comments_are_blanks_and_an_unclosed_one_is_no_comment():
    assert compile_sql92("a = 1 -- the first\nOR /* or\n the second */ b = 'x--y'").matches({"b": "x--y"})
    with pytest.raises(FilterExpressionError):
        compile_sql92("a = 1 -- no line break ends this")


def test_an_expression_is_compiled_once():
    assert compile_sql92("a = 'once'") is compile_sql92("a = 'once'")


# == never an error at delivery ===================================================================================
NAMES = ("a", "b", "TAGS")
VALUES = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "7", "7.5", " 7", "+3", "010", "3000000000", "9223372036854775808", "1e3",
                     "NaN", "-Infinity", "0x1p3", "2d", "true", "TRUE", "false", "x", "it's", "-0.0", "4.9e-324",
                     "1" * 30, "٣"]),
    st.text(max_size=8),
)
PROPS = st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=3)
LITERALS = st.one_of(
    st.integers(min_value=0, max_value=2**64).map(str),
    st.sampled_from(["0.5", "1.5e3", ".5", "5.", "1e-300", "10L", "TRUE", "FALSE", "NULL", "2147483648"]),
    st.text(alphabet="ab' 1", max_size=4).map(lambda s: "'" + s.replace("'", "''") + "'"),
)


def _expressions() -> st.SearchStrategy[str]:
    atom = st.one_of(st.sampled_from(NAMES), LITERALS)

    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.tuples(inner, st.sampled_from(["=", "<>", ">", ">=", "<", "<=", "AND", "OR"]), inner)
        strings = st.text(alphabet="ab1", max_size=2).map(lambda s: f"'{s}'")
        return st.one_of(
            binary.map(" ".join),
            inner.map(lambda e: f"({e})"),
            inner.map(lambda e: f"NOT {e}"),
            inner.map(lambda e: f"-{e}"),
            inner.map(lambda e: f"{e} IS NULL"),
            inner.map(lambda e: f"{e} IS NOT NULL"),
            st.tuples(inner, st.booleans(), inner, inner).map(
                lambda t: f"{t[0]} {'NOT ' if t[1] else ''}BETWEEN {t[2]} AND {t[3]}"),
            st.tuples(inner, st.booleans(), st.lists(strings, min_size=1, max_size=3)).map(
                lambda t: f"{t[0]} {'NOT ' if t[1] else ''}IN ({', '.join(t[2])})"),
            st.tuples(inner, st.sampled_from(["CONTAINS", "NOT CONTAINS", "STARTSWITH", "ENDSWITH"]), strings).map(
                " ".join),
        )

    return st.recursive(atom, grow, max_leaves=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=_expressions(), props=st.lists(PROPS, min_size=1, max_size=4))
def test_a_random_expression_never_raises_at_delivery(expression, props):
    try:
        compiled = compile_sql92(expression)
    except FilterExpressionError:
        return  # refused at subscribe: what RocketMQ also refuses (or text after a complete expression)
    for p in props:
        assert compiled.matches(p) in (True, False)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.ascii_letters[:6] + string.digits[:3] + " '()=<>-.,*/\n", max_size=30))
def test_any_text_compiles_or_is_refused_with_a_filter_expression_error(text):
    try:
        compile_sql92(text)
    except FilterExpressionError as exc:
        assert 0 <= exc.position <= len(text)
