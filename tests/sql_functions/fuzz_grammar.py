"""Random, typed scalar expressions for the differential test: each written twice, once for
laminardb and once for DuckDB computing the same rule (Flink's, where laminardb follows Flink
and DuckDB differs; every such translation is a line of docs/sql.md, *Differences from DuckDB*).

Entry points: ``expressions(type, depth)`` — a hypothesis strategy of ``E`` — and ``rows()``, the
rows both engines read. ``MACROS`` are DuckDB macros the translations call (``wrap64``: Java's
two's-complement overflow; ``fcmp_*``: IEEE comparisons, where DuckDB orders NaN above every
number and equal to itself).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import strategies as st

from tests.sql_functions import fuzz_gen as g

# --------------------------------------------------------------------------- the rows

COLUMNS = {"a": "BIGINT", "b": "BIGINT", "i": "INT", "x": "DOUBLE", "y": "DOUBLE", "s": "VARCHAR",
           "u": "VARCHAR", "p": "BOOLEAN", "q": "BOOLEAN", "ts": "TIMESTAMP", "t6": "TIMESTAMP6", "d": "DATE"}
DDL = ("CREATE SOURCE t (id BIGINT, a BIGINT, b BIGINT, i INT, x DOUBLE, y DOUBLE, s VARCHAR, u VARCHAR, "
       "p BOOLEAN, q BOOLEAN, ts TIMESTAMP(3), t6 TIMESTAMP(6), d DATE)")
CLOCK_MS = 1_709_210_096_789  # 2024-02-29 12:34:56.789: CURRENT_TIMESTAMP, NOW() and PROCTIME() read it
MIN_MS, MAX_MS = -62135596800000, 253402300799999  # 0001-01-01 … 9999-12-31 23:59:59.999

I64 = [0, 1, -1, 2, -2, 3, 7, -7, 10, 60_000, 1_000_000_007, 2**31 - 1, -2**31, 2**31, 2**63 - 1, -2**63, -2**63 + 1,
       1_582_934_400_000, -86_400_001]
I32 = [0, 1, -1, 2, -3, 7, 100, 2**31 - 1, -2**31, -2**31 + 1, 65536]
F64 = [0.0, -0.0, 0.5, -0.5, 1.0, 2.5, -2.5, 3.7, -3.7, 0.285, 1.005, 2.675, -0.125, 0.045, 1e-7, 123456789012.0, 1e16, 1.5e15, 1e300,
       -1e300, 5e-324, 2.0**63, -2.0**63, 2.0**31, math.nan, math.inf, -math.inf, 1 / 3, 100.0, 0.1]
STRINGS = ["", " ", "Hello", "hello", "HELLO", " 12 ", "12", "+7", "-7", "2.5", " -2.5e3 ", "1e400", "NaN", "inf",
           "9223372036854775807", "9223372036854775808", "-9223372036854775808", "2147483648", "0x1A", "007",
           "true", "FALSE", " yes", "n", "t", "1", "0", "ß", "straße", "é", "Ü", "日本語", "😀x", "a%b", "a_b", "a\\b",
           "ab!c", "a\tb", "x,y,,z", "a/b/c", "2020-02-29", "2021-02-29", "2020-13-01", "2020-02-29 23:59:59",
           "2020-02-29 23:59:59.123456", "2020-02-29 24:00:00", "1999-12-31 23:59", "0000-01-01", "9999-12-31",
           " 2020-01-01 ", "2020-01-01T10:00:00", "29/02/2020 10:11:12", "abcabc", "aaa", "Ab", "'q'", "l"]
TS = [0, -1, 1, 999, -999, 1_000, 86_399_999, 951_782_400_000, 951_868_799_999, 1_582_934_400_000,
      1_582_977_599_999, 1_709_210_096_789, 1_612_051_200_000, -2_208_988_800_001, MIN_MS, MAX_MS, 253402300799000,
      1_230_768_000_000, 1_262_217_600_000]


def _ms():
    return st.one_of(st.sampled_from(TS), st.integers(MIN_MS, MAX_MS), st.integers(-4_000_000_000_000, 4_000_000_000_000))


@st.composite
def row(draw) -> dict:
    def maybe(s):
        return draw(st.one_of(st.none(), s, s, s))

    ms = maybe(_ms())
    return {
        "a": maybe(st.one_of(st.sampled_from(I64), st.integers(-2**63, 2**63 - 1), st.integers(-100, 100))),
        "b": maybe(st.one_of(st.sampled_from(I64), st.integers(-100, 100))),
        "i": maybe(st.one_of(st.sampled_from(I32), st.integers(-2**31, 2**31 - 1))),
        "x": maybe(st.one_of(st.sampled_from(F64), st.floats(allow_nan=True, allow_infinity=True),
                             st.floats(-1e6, 1e6).map(lambda v: round(v, 3)))),
        "y": maybe(st.one_of(st.sampled_from(F64), st.integers(-9, 9).map(float))),
        "s": maybe(st.one_of(st.sampled_from(STRINGS), st.text(max_size=6))),
        "u": maybe(st.sampled_from(STRINGS)),
        "p": maybe(st.booleans()),
        "q": maybe(st.booleans()),
        "ts": ms,
        "t6": maybe(st.integers(MIN_MS * 1000, MAX_MS * 1000)),
        "d": maybe(st.integers(-719162, 2932896)),  # days: 0001-01-01 … 9999-12-31
    }


def rows():
    return st.lists(row(), min_size=1, max_size=6)


# --------------------------------------------------------------------------- DuckDB macros

MACROS = [
    # Java's long arithmetic: the exact result (HUGEINT) wrapped to 64 / 32 bits
    "CREATE MACRO wrap64(h) AS CAST(((CAST(h AS HUGEINT) + 9223372036854775808) % 18446744073709551616 "
    "+ 18446744073709551616) % 18446744073709551616 - 9223372036854775808 AS BIGINT)",
    "CREATE MACRO wrap32(h) AS CAST(((CAST(h AS HUGEINT) + 2147483648) % 4294967296 + 4294967296) % 4294967296 "
    "- 2147483648 AS INTEGER)",
    # IEEE comparisons of DOUBLEs: NaN is unordered (DuckDB: NaN = NaN, NaN above everything)
    "CREATE MACRO fnan(x, y) AS isnan(CAST(x AS DOUBLE)) OR isnan(CAST(y AS DOUBLE))",
    "CREATE MACRO fcmp_eq(x, y) AS CASE WHEN fnan(x, y) THEN (x IS NULL OR y IS NULL) AND NULL ELSE x = y END",
    "CREATE MACRO fcmp_ne(x, y) AS CASE WHEN fnan(x, y) THEN NOT ((x IS NULL OR y IS NULL) AND NULL) ELSE x <> y END",
    "CREATE MACRO fcmp_lt(x, y) AS CASE WHEN fnan(x, y) THEN (x IS NULL OR y IS NULL) AND NULL ELSE x < y END",
    "CREATE MACRO fcmp_le(x, y) AS CASE WHEN fnan(x, y) THEN (x IS NULL OR y IS NULL) AND NULL ELSE x <= y END",
    "CREATE MACRO fcmp_gt(x, y) AS CASE WHEN fnan(x, y) THEN (x IS NULL OR y IS NULL) AND NULL ELSE x > y END",
    "CREATE MACRO fcmp_ge(x, y) AS CASE WHEN fnan(x, y) THEN (x IS NULL OR y IS NULL) AND NULL ELSE x >= y END",
    # Flink's CAST: DOUBLE → integer truncates, NULL out of range or NaN
    "CREATE MACRO f2i64(x) AS TRY_CAST(CASE WHEN x >= -9223372036854775808.0 AND x < 9223372036854775808.0 "
    "THEN trunc(x) END AS BIGINT)",
    "CREATE MACRO f2i32(x) AS TRY_CAST(CASE WHEN x >= -2147483648.0 AND x < 2147483648.0 THEN trunc(x) END AS INTEGER)",
    # epoch milliseconds ↔ TIMESTAMP within 0001 … 9999
    f"CREATE MACRO ms2ts(m) AS CASE WHEN m BETWEEN {MIN_MS} AND {MAX_MS} THEN make_timestamp(CAST(m AS BIGINT) * 1000) END",
    "CREATE MACRO floor1000(v) AS (v - ((v % 1000) + 1000) % 1000) // 1000",  # exact, for any BIGINT
    "CREATE MACRO ts2ms(t) AS floor1000(epoch_us(CAST(t AS TIMESTAMP)))",
    # TIMESTAMP(6) → (3) drops the microseconds (Flink); DuckDB's cast to TIMESTAMP_MS rounds
    "CREATE MACRO to_ms(t) AS CAST(make_timestamp(floor1000(epoch_us(CAST(t AS TIMESTAMP))) * 1000) AS TIMESTAMP_MS)",
    # Flink's ROUND of a DOUBLE: its shortest decimal text, half away from zero
    "CREATE MACRO fround(x, n) AS CASE WHEN abs(x) < 1e15 THEN CAST(CAST(round(CAST(CAST(x AS VARCHAR) AS DECIMAL(38, 20)), n) "
    "AS VARCHAR) AS DOUBLE) ELSE round(x, n) END",
    # Flink's text → number / boolean / time
    r"CREATE MACRO s2i(s) AS CASE WHEN regexp_full_match(trim(s), '[+-]?[0-9]+') "
    r"THEN TRY_CAST(ltrim(trim(s), '+') AS HUGEINT) END",
    r"CREATE MACRO s2f(s) AS CASE WHEN regexp_full_match(trim(s), '[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?') "
    r"OR regexp_full_match(lower(trim(s)), '[+-]?(nan|inf|infinity)') THEN TRY_CAST(ltrim(trim(s), '+') AS DOUBLE) END",
    "CREATE MACRO s2b(s) AS CASE WHEN lower(trim(s)) IN ('true', 't', 'yes', 'y', '1') THEN true "
    "WHEN lower(trim(s)) IN ('false', 'f', 'no', 'n', '0') THEN false END",
    r"CREATE MACRO s2ts(s) AS CASE WHEN regexp_full_match(trim(s), "
    r"'[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?)?') AND left(trim(s), 4) <> '0000' "
    r"AND NOT regexp_matches(trim(s), ' 24:') "
    r"THEN TRY_CAST(trim(s) AS TIMESTAMP) END",
    r"CREATE MACRO s2d(s) AS CASE WHEN regexp_full_match(trim(s), '[0-9]{4}-[0-9]{2}-[0-9]{2}') "
    r"AND left(trim(s), 4) <> '0000' THEN TRY_CAST(trim(s) AS DATE) END",
    "CREATE MACRO b2s(v) AS upper(CAST(v AS VARCHAR))",
    # Flink's LPAD/RPAD: NULL for a negative length or an empty pad
    "CREATE MACRO flpad(s, n, p) AS CASE WHEN n < 0 OR p = '' THEN NULL ELSE lpad(s, n, p) END",
    "CREATE MACRO frpad(s, n, p) AS CASE WHEN n < 0 OR p = '' THEN NULL ELSE rpad(s, n, p) END",
]


# --------------------------------------------------------------------------- expressions


REFUSED: set[str] = set()  # the laminardb text of every expression refused by design


@dataclass(frozen=True)
class E:
    lam: str
    duck: str
    type: str
    refused: bool = False  # laminardb must refuse it when planning, with a typed error

    def __post_init__(self) -> None:
        if self.refused:
            REFUSED.add(self.lam)

    def ok(self) -> bool:
        """Neither refused itself nor built on a refused part (whose text it contains)."""
        return not self.refused and not any(r in self.lam for r in REFUSED)


INTS = ("INT", "BIGINT")
NUMS = ("INT", "BIGINT", "DOUBLE")
TIMES = ("TIMESTAMP", "TIMESTAMP6", "DATE")
ALL = ("INT", "BIGINT", "DOUBLE", "VARCHAR", "BOOLEAN", "TIMESTAMP", "TIMESTAMP6", "DATE")
SQL_TYPE = {"INT": "INT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "VARCHAR": "VARCHAR",
            "BOOLEAN": "BOOLEAN", "TIMESTAMP": "TIMESTAMP(3)", "TIMESTAMP6": "TIMESTAMP(6)", "DATE": "DATE"}
DUCK_TYPE = {"INT": "INTEGER", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "VARCHAR": "VARCHAR",
             "BOOLEAN": "BOOLEAN", "TIMESTAMP": "TIMESTAMP_MS", "TIMESTAMP6": "TIMESTAMP", "DATE": "DATE"}


def q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _lit_float(v: float) -> E:
    if math.isnan(v):
        return E("CAST('NaN' AS DOUBLE)", "CAST('nan' AS DOUBLE)", "DOUBLE")
    if math.isinf(v):
        return E(f"CAST('{'-' if v < 0 else ''}Infinity' AS DOUBLE)", f"CAST('{'-' if v < 0 else ''}inf' AS DOUBLE)",
                 "DOUBLE")
    text = repr(abs(v))
    if "e" not in text and "." not in text:
        text += ".0"
    lam = f"-{text}" if math.copysign(1, v) < 0 else text
    return E(f"({lam})", f"CAST('{lam}' AS DOUBLE)", "DOUBLE")  # text: DuckDB reads -0.0 as DECIMAL 0


def leaf(t: str):
    cols = [c for c, ct in COLUMNS.items() if ct == t]
    options = [g.sampled_from([E(c, c, t) for c in cols])] if cols else []
    if t == "BIGINT":
        options.append(g.sampled_from([E(str(v), f"CAST({v} AS BIGINT)", t) if v >= 0 else
                                        E(f"({v})", f"CAST({v} AS BIGINT)", t) for v in I64 if v > -2**63]))
    elif t == "INT":
        options.append(g.sampled_from([E(f"CAST({v} AS INT)", f"CAST({v} AS INTEGER)", t) for v in I32]))
    elif t == "DOUBLE":
        options.append(g.sampled_from(F64).map(_lit_float))
    elif t == "VARCHAR":
        options.append(g.sampled_from(STRINGS).map(lambda s: E(q(s), q(s), t)))
    elif t == "BOOLEAN":
        options.append(g.sampled_from([E("TRUE", "TRUE", t), E("FALSE", "FALSE", t)]))
    elif t == "TIMESTAMP":
        clock = f"make_timestamp({CLOCK_MS * 1000})"
        options.append(g.sampled_from([E("TIMESTAMP '2020-02-29 12:34:56.789'", "TIMESTAMP '2020-02-29 12:34:56.789'", t),
                                        E("CURRENT_TIMESTAMP", clock, t), E("NOW()", clock, t),
                                        E("PROCTIME()", clock, t)]))
    elif t == "DATE":
        options.append(g.sampled_from([E("DATE '2020-02-29'", "DATE '2020-02-29'", t),
                                        E("CURRENT_DATE", "DATE '2024-02-29'", t)]))
    return g.one_of(*options)


def null_of(t: str) -> E:
    return E(f"CAST(NULL AS {SQL_TYPE[t]})", f"CAST(NULL AS {DUCK_TYPE[t]})", t)


def expressions(t: str, depth: int = 3):
    """Expressions of type ``t`` at most ``depth`` levels deep."""
    if depth <= 0:
        return leaf(t)
    from tests.sql_functions import fuzz_rules

    builders = fuzz_rules.RULES.get(t, [])
    inner = g.one_of(*[g.deferred(lambda b=b: b(depth - 1)) for b in builders])
    null = g.just(null_of(t))

    def draw(r):
        x = r.random()
        return (leaf(t) if x < 0.3 else null if x < 0.36 else inner).draw(r)
    return g.S(draw)
