"""Scalar expressions through a non-aggregating stream, against DuckDB over the same rows."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from oracle import assert_same_rows, duck

import laminardb

SCHEMA = pa.schema([("ts", pa.int64()), ("a", pa.int64()), ("b", pa.int64()), ("x", pa.float64()),
                    ("y", pa.float64()), ("s", pa.string()), ("t", pa.string()), ("p", pa.bool_()),
                    ("q", pa.bool_())])
_A = [7, -7, 0, None, 12]
_B = [2, 0, -3, None]
_X = [2.5, -1.25, 0.0, None, 9.0]
_S = ["Hello", "  pad me ", "", None, "ABCabc"]
_P = [True, False, None]


def _rows():
    rows = []
    for i, (a, b) in enumerate(itertools.product(_A, _B)):
        rows.append({"ts": i, "a": a, "b": b, "x": _X[i % len(_X)], "y": _X[(i * 3 + 1) % len(_X)],
                     "s": _S[i % len(_S)], "t": _S[(i + 2) % len(_S)], "p": _P[i % 3], "q": _P[(i // 3) % 3]})
    return rows


ROWS = _rows()
TABLE = pa.Table.from_pylist(ROWS, schema=SCHEMA)

EXPRESSIONS = [
    # arithmetic
    "a + b", "a - b", "a * b", "a / b", "x / y", "a / 0", "x / 0", "-a", "a + x", "x * 2 - y",
    "a % b", "mod(a, b)", "(a + 1) * (b - 2)",
    # comparisons
    "a = b", "a <> b", "a != b", "a < b", "a <= b", "a > x", "a >= 0", "s = 'Hello'", "s < t",
    # boolean logic with NULLs
    "p AND q", "p OR q", "NOT p", "p AND a > 0", "(a > 0) OR (b > 0)", "NOT (a = b)",
    # null tests
    "a IS NULL", "a IS NOT NULL", "s IS NULL", "p IS NOT NULL",
    # IN / BETWEEN
    "a IN (7, 0)", "a IN (7, NULL)", "a NOT IN (7, NULL)", "a NOT IN (7, 12)", "s IN ('Hello', '')",
    "a BETWEEN -1 AND 7", "x BETWEEN y AND 10", "a NOT BETWEEN 0 AND 10",
    # CASE
    "CASE WHEN a > 0 THEN 'pos' WHEN a < 0 THEN 'neg' ELSE 'zero-or-null' END",
    "CASE a WHEN 7 THEN 1 WHEN 0 THEN 2 END",
    "CASE WHEN p THEN x ELSE y END",
    # CAST
    "CAST(a AS DOUBLE)", "CAST(x * 1.1 AS BIGINT)", "CAST(a AS VARCHAR)", "CAST(x AS VARCHAR)",
    "CAST(b AS BOOLEAN)", "CAST(a AS INT)",
    # COALESCE / NULLIF
    "COALESCE(a, b, -1)", "COALESCE(s, t, 'none')", "NULLIF(a, 7)", "NULLIF(s, '')",
    # strings
    "upper(s)", "lower(s)", "length(s)", "substr(s, 2, 3)", "substr(s, 2)", "substring(s, 1, 2)", "trim(s)",
    "ltrim(s)", "rtrim(s)", "replace(s, 'a', 'X')", "concat(s, '-', t)", "s || t", "s || '!'",
    "concat(s, a)",
    # math
    "abs(a)", "abs(x)", "round(x)", "round(x, 1)", "round(a / 3, 2)", "floor(x)", "ceil(x)", "ceiling(y)",
    "sqrt(abs(x))", "power(a, 2)", "power(x, 3)", "pow(b, 2)",
]


# The oracle is the DuckDB installed here: ``/`` is DOUBLE division with IEEE results
# (x / 0 = ±inf, 0 / 0 = NaN), ``%`` by zero is NULL (see oracle.duck).
# Where laminardb follows Flink, DuckDB computes Flink's rule (docs/sql.md, *Functions*):
DUCK_OVERRIDES: dict[str, str] = {
    "CAST(x * 1.1 AS BIGINT)": "CAST(trunc(x * 1.1) AS BIGINT)",  # Flink truncates; DuckDB rounds
    "concat(s, '-', t)": "s || '-' || t",  # Flink's CONCAT is NULL when an argument is; DuckDB's skips it
    "concat(s, a)": "s || CAST(a AS VARCHAR)",
}

KNOWN_BUGS: dict[str, str] = {}  # expression -> "engine bug: …" (strict xfail)


@pytest.fixture(scope="module")
def engine_results():
    """Run every expression as its own stream over the same rows in one connection."""
    db = laminardb.open()
    db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, a BIGINT, b BIGINT, x DOUBLE, y DOUBLE, s VARCHAR, "
               "t VARCHAR, p BOOLEAN, q BOOLEAN, WATERMARK FOR ts AS ts)")
    subs, errors = {}, {}
    for i, e in enumerate(EXPRESSIONS):
        try:
            db.execute(f"CREATE STREAM e{i} AS SELECT ts, {e} AS v FROM t")
            subs[e] = db.subscribe_stream(f"e{i}")
        except laminardb.LaminarError as exc:
            errors[e] = exc
    db.insert("t", TABLE.slice(0, 7))
    db.insert("t", TABLE.slice(7))
    db.finish()
    return {e: s.to_arrow() for e, s in subs.items()}, errors


def _kind(t: pa.DataType) -> str:
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_boolean(t):
        return "bool"
    return str(t)


@pytest.mark.parametrize("expr", [pytest.param(e, marks=pytest.mark.xfail(reason=KNOWN_BUGS[e], strict=True))
                                  if e in KNOWN_BUGS else e for e in EXPRESSIONS])
def test_expression_matches_duckdb(engine_results, expr):
    results, errors = engine_results
    if expr in errors:
        pytest.fail(f"engine refused {expr!r}: {errors[expr]}")
    got = results[expr]
    expected = duck(f"SELECT ts, {DUCK_OVERRIDES.get(expr, expr)} AS v FROM rows", rows=TABLE)
    if pa.types.is_decimal(expected.schema.field("v").type):
        expected = expected.cast(pa.schema([("ts", pa.int64()), ("v", pa.float64())]))
    assert got.num_rows == len(ROWS)
    assert _kind(got.schema.field("v").type) == _kind(expected.schema.field("v").type), \
        f"{expr}: engine type {got.schema.field('v').type}, DuckDB {expected.schema.field('v').type}"
    assert_same_rows(got, expected, context=expr)


def test_division_is_double(engine_results):
    results, _ = engine_results
    for e in ("a / b", "a / 0", "x / y"):
        assert results[e].schema.field("v").type == pa.float64(), e
    seven = [r for r in ROWS if r["a"] == 7 and r["b"] == 2][0]["ts"]
    assert [r["v"] for r in results["a / b"].to_pylist() if r["ts"] == seven] == [3.5]


def test_where_filters_with_three_valued_logic():
    db = laminardb.open()
    db.execute("CREATE SOURCE t (ts BIGINT NOT NULL, a BIGINT, b BIGINT, x DOUBLE, y DOUBLE, s VARCHAR, "
               "t VARCHAR, p BOOLEAN, q BOOLEAN, WATERMARK FOR ts AS ts)")
    where = "NOT (a > 0 AND p) AND s IS NOT NULL OR b IN (2, NULL)"
    db.execute(f"CREATE STREAM f AS SELECT ts, a * 2 AS a2, upper(s) AS us FROM t WHERE {where}")
    sub = db.subscribe_stream("f")
    db.insert("t", TABLE)
    expected = duck(f"SELECT ts, a * 2 AS a2, upper(s) AS us FROM rows WHERE {where}", rows=TABLE)
    assert expected.num_rows > 0
    assert_same_rows(sub.to_arrow(), expected)
