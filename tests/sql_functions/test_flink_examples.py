"""Flink's documented examples of the scalar functions laminardb added or changed to follow Flink
(CONCAT_WS, LPAD/RPAD, REGEXP_REPLACE, EXTRACT, DATE_TRUNC, TIMESTAMPDIFF, TO_TIMESTAMP,
CURRENT_TIMESTAMP, CAST to INT and DATE, ``//``, IS DISTINCT FROM, LIKE … ESCAPE), run through
a materialized view; and the typed errors of their misuse. ``test_differential.py`` checks the
same functions against DuckDB over random rows."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import laminardb
from laminardb.sql.exceptions import SqlParseError, SqlTypeError, UnsupportedSqlError

CLOCK_MS = 1_709_210_096_789  # 2024-02-29 12:34:56.789 UTC


def values(exprs: list[str], row: dict | None = None) -> list:
    """Each expression's value over one row of ``t`` (s, n, x, ts, d)."""
    db = laminardb.open(config={"clock": lambda: CLOCK_MS})
    try:
        db.execute("CREATE SOURCE t (s VARCHAR, n BIGINT, x DOUBLE, ts TIMESTAMP(3), d DATE)")
        cols = ", ".join(f"{e} AS c{i}" for i, e in enumerate(exprs))
        db.execute(f"CREATE MATERIALIZED VIEW v AS SELECT {cols} FROM t")
        base = {"s": "Hello", "n": 7, "x": 2.5, "ts": dt.datetime(2020, 2, 29, 13, 14, 15, 678000),
                "d": dt.date(2020, 2, 29)}
        db.insert("t", [{**base, **(row or {})}])
        out = db.query("SELECT * FROM v").to_arrow().to_pylist()[0]
        return [out[f"c{i}"] for i in range(len(exprs))]
    finally:
        db.close()


def check(cases: list[tuple[str, object]], row: dict | None = None) -> None:
    got = values([e for e, _ in cases], row)
    assert got == [want for _, want in cases], [(e, g) for (e, w), g in zip(cases, got, strict=True) if g != w]


def test_issue_bugs_concat_ws_cast_and_integer_division():
    check([
        ("CONCAT_WS('-', s, 'x')", "Hello-x"),                       # was '-Hellox'
        ("CONCAT_WS('~', 'AA', NULL, 'BB', '', 'CC')", "AA~BB~~CC"),  # Flink's example: NULL skipped, '' kept
        ("CONCAT_WS(NULL, 'a', 'b')", None),
        ("CAST(2.5 AS INT)", 2),                                    # Flink truncates; DuckDB gives 3
        ("CAST(-2.5 AS INT)", -2),
        ("CAST(x AS BIGINT)", 2),
        ("7 // 2", 3), ("-7 // 2", -3), ("n // -2", -3), ("n // 0", None),
    ])


def test_strings():
    check([
        ("CONCAT('AA', 'BB', 'CC')", "AABBCC"), ("CONCAT(s, NULL)", None), ("s || n", "Hello7"),
        ("LPAD('hi', 4, '??')", "??hi"), ("LPAD('hi', 1, '??')", "h"), ("RPAD('hi', 4, '??')", "hi??"),
        ("RPAD('hi', 1, '??')", "h"), ("LPAD(s, -1, 'x')", None), ("LPAD(s, 8, '')", None), ("RPAD(s, 9, 'ab')", "Helloabab"),
        ("REGEXP_REPLACE('foobar', 'oo|ar', '')", "fb"), ("REGEXP_REPLACE(s, '(l+)', '[$1]')", "He[ll]o"),
        ("REGEXP_REPLACE('a.b', '\\.', '$')", "a$b"),
        ("SUBSTRING(s, 0, 2)", "He"), ("SUBSTRING(s, -3, 2)", "ll"), ("SUBSTRING(s, -9)", ""), ("SUBSTRING(s, 2, -1)", None),
        ("'a%b' LIKE 'a!%b' ESCAPE '!'", True), ("'axb' LIKE 'a!%b' ESCAPE '!'", False),
        ("'a_b' NOT LIKE 'a!_b' ESCAPE '!'", False), ("'a!b' LIKE 'a!!b' ESCAPE '!'", True),
        ("'a\\b' LIKE 'a\\b'", True), ("'a%' LIKE 'a\\%'", False),  # without ESCAPE a backslash is itself
        ("GREATEST(1, NULL)", None), ("LEAST(x, 1)", 1.0),
        ("ROUND(0.285, 2)", 0.29), ("ROUND(2.675, 2)", 2.68), ("ROUND(-2.5)", -3.0), ("ROUND(x)", 3.0), ("ROUND(n, -1)", 10),
        ("ROUND(-15, -1)", -20), ("ROUND(1e308, 2)", 1e308), ("CONCAT_WS(',', CAST(NULL AS VARCHAR))", ""), ("MOD(NULL, -1)", None),
        ("LOG(2.718281828459045)", 1.0), ("LOG(2, 8)", 3.0), ("SIN(0)", 0.0), ("TRUNC(-2.7)", -2.0), ("7.5 % 2", 1.5),
    ])


def test_comparisons_and_null_safety():
    check([
        ("NULL IS DISTINCT FROM NULL", False), ("n IS DISTINCT FROM NULL", True), ("n IS NOT DISTINCT FROM 7", True),
        ("CAST(NULL AS INT) IS NOT DISTINCT FROM NULL", True), ("s IS DISTINCT FROM 'Hello'", False),
        ("CAST('NaN' AS DOUBLE) = CAST('NaN' AS DOUBLE)", False),  # IEEE, as Java (DuckDB: true)
    ])


def test_dates_and_times():
    check([
        ("EXTRACT(DAY FROM DATE '2006-06-05')", 5), ("EXTRACT(YEAR FROM ts)", 2020), ("EXTRACT(DOW FROM ts)", 7),
        ("EXTRACT(ISODOW FROM ts)", 6), ("EXTRACT(DOY FROM d)", 60), ("EXTRACT(MILLISECOND FROM ts)", 15678),
        ("EXTRACT(QUARTER FROM ts)", 1), ("EXTRACT(WEEK FROM ts)", 9), ("EXTRACT(EPOCH FROM ts)", 1582982055),
        ("TIMESTAMPDIFF(DAY, TIMESTAMP '2003-01-02 10:00:00', TIMESTAMP '2003-01-03 10:00:00')", 1),
        ("TIMESTAMPDIFF(MONTH, TIMESTAMP '2020-01-31 00:00:00', d)", 1),  # Feb 29 is January 31's month-end
        ("TIMESTAMPDIFF(MONTH, TIMESTAMP '2020-01-31 10:00:00', TIMESTAMP '2020-02-29 09:00:00')", 0),
        ("TIMESTAMPDIFF(YEAR, ts, TIMESTAMP '2019-02-28 00:00:00')", -1),
        ("TIMESTAMPDIFF(SECOND, ts, TIMESTAMP '2020-02-29 13:14:14')", -1),
        ("DATE_TRUNC('week', TIMESTAMP '2020-01-01 10:00:00')", dt.datetime(2019, 12, 30)),
        ("DATE_TRUNC('month', ts)", dt.datetime(2020, 2, 1)), ("DATE_TRUNC('quarter', d)", dt.datetime(2020, 1, 1)),
        ("FLOOR(ts TO HOUR)", dt.datetime(2020, 2, 29, 13)), ("CEIL(ts TO DAY)", dt.datetime(2020, 3, 1)),
        ("TO_TIMESTAMP('2020-01-02 03:04:05')", dt.datetime(2020, 1, 2, 3, 4, 5)),
        ("TO_TIMESTAMP('2020-01-02 03:04:05.123456')", dt.datetime(2020, 1, 2, 3, 4, 5, 123000)),
        ("TO_TIMESTAMP('02/01/2020', 'dd/MM/yyyy')", dt.datetime(2020, 1, 2)),
        ("TO_TIMESTAMP('30/02/2020', 'dd/MM/yyyy')", None), ("TO_TIMESTAMP('garbage')", None),
        ("CURRENT_TIMESTAMP", dt.datetime(2024, 2, 29, 12, 34, 56, 789000)), ("NOW()", dt.datetime(2024, 2, 29, 12, 34, 56, 789000)),
        ("CURRENT_DATE", dt.date(2024, 2, 29)), ("PROCTIME() = NOW()", True),
        ("CAST('2020-02-29' AS DATE)", dt.date(2020, 2, 29)), ("CAST('2021-02-29' AS DATE)", None),
        ("CAST(ts AS DATE)", dt.date(2020, 2, 29)), ("CAST(d AS TIMESTAMP(3))", dt.datetime(2020, 2, 29)),
        ("CAST(d AS VARCHAR)", "2020-02-29"), ("d > DATE '2020-01-01'", True), ("d = '2020-02-29'", True),
        ("d < ts", True), ("YEAR(d)", 2020), ("DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm:ss.SSS')", "2020-02-29 13:14:15.678"),
        ("CAST(ts AS VARCHAR)", "2020-02-29 13:14:15.678"), ("CAST(ts AS BIGINT)", 1582982055678),
    ])


def test_casts_follow_flink():
    check([
        ("CAST(' 12 ' AS INT)", 12), ("CAST('+7' AS BIGINT)", 7), ("CAST('2.5' AS INT)", None), ("CAST('abc' AS INT)", None),
        ("CAST('2147483648' AS INT)", None), ("CAST(1e20 AS BIGINT)", None), ("CAST(CAST('NaN' AS DOUBLE) AS INT)", None),
        ("CAST(TRUE AS VARCHAR)", "TRUE"), ("CAST(' yes ' AS BOOLEAN)", True), ("CAST('0' AS BOOLEAN)", False),
        ("CAST(123456789012.0 AS VARCHAR)", "123456789012.0"), ("CAST(1e16 AS VARCHAR)", "1e+16"),
        ("CAST(0.00001 AS VARCHAR)", "1e-05"), ("CAST(x AS VARCHAR)", "2.5"), ("TRY_CAST('x' AS DOUBLE)", None),
        ("CAST(n AS TIMESTAMP(3))", dt.datetime(1970, 1, 1, 0, 0, 0, 7000)),
    ])


def test_date_column_in_a_source():
    db = laminardb.open()
    try:
        db.execute("CREATE SOURCE e (id BIGINT, day DATE)")
        assert db.execute("DESCRIBE e").to_arrow().to_pylist()[1]["type"] == "DATE"
        db.execute("CREATE MATERIALIZED VIEW recent AS SELECT id, day, CAST(day AS VARCHAR) AS txt FROM e "
                   "WHERE day >= DATE '2020-01-01'")
        db.insert("e", pa.table({"id": [1, 2, 3], "day": pa.array([18000, 18300, None], pa.date32())}))
        db.insert("e", [{"id": 4, "day": "2021-06-01"}])
        rows = db.query("SELECT * FROM recent").to_arrow().sort_by("id").to_pylist()
        assert rows == [{"id": 2, "day": dt.date(2020, 2, 8), "txt": "2020-02-08"},
                        {"id": 4, "day": dt.date(2021, 6, 1), "txt": "2021-06-01"}]
    finally:
        db.close()


@pytest.mark.parametrize("expr,error,fragment", [
    ("x // 2", SqlTypeError, "// divides integers"),
    ("CAST(d AS INT)", SqlTypeError, "CAST from DATE to INT is not supported"),
    ("CAST(n AS DATE)", SqlTypeError, "CAST from BIGINT to DATE is not supported"),
    ("s LIKE 'a!b' ESCAPE '!'", UnsupportedSqlError, "must be followed by"),
    ("s LIKE 'a' ESCAPE '!!'", UnsupportedSqlError, "one character"),
    ("LPAD(s, n, 'x')", UnsupportedSqlError, "integer literal"),
    ("REGEXP_REPLACE(s, s, 'x')", UnsupportedSqlError, "literal pattern"),
    ("REGEXP_REPLACE(s, '(?=a)', 'x')", UnsupportedSqlError, "not valid RE2"),
    ("DATE_TRUNC('fortnight', ts)", UnsupportedSqlError, "unit must be one of"),
    ("EXTRACT(CENTURY FROM ts)", UnsupportedSqlError, "unit must be one of"),
    ("TIMESTAMPDIFF(DAY, s, ts)", SqlTypeError, "expected TIMESTAMP, DATE or BIGINT"),
    ("TO_TIMESTAMP(s, 'yyyy-MM-dd SSS')", UnsupportedSqlError, "zero-padded fields only"),
    ("TO_TIMESTAMP(n)", SqlTypeError, "reads VARCHAR"),
    ("SUBSTRING(s, n)", UnsupportedSqlError, "integer literals"),
    ("UPPER(n)", SqlTypeError, "cannot evaluate"),
])
def test_misuse_is_a_typed_error_when_planned(expr, error, fragment):
    db = laminardb.open()
    try:
        db.execute("CREATE SOURCE t (s VARCHAR, n BIGINT, x DOUBLE, ts TIMESTAMP(3), d DATE)")
        with pytest.raises(error) as e:
            db.execute(f"CREATE STREAM out AS SELECT {expr} AS v FROM t")
        assert fragment in str(e.value) and e.value.code.startswith("LDB-1")
    finally:
        db.close()


def test_integer_division_operator_parses():
    """``//`` was documented and did not parse (sqlglot's default dialect); a lone ``/`` still errs."""
    assert values(["n // 2", "(n + 1) // 3 * 2"]) == [3, 4]
    db = laminardb.open()
    try:
        db.execute("CREATE SOURCE t (n BIGINT)")
        with pytest.raises(SqlParseError):
            db.execute("CREATE STREAM o AS SELECT n / FROM t")
    finally:
        db.close()
