"""The one-row path (issue 23) gives what the batch path gives: same types, values and order.

Three layers, each against an independent result: ``one_row_batch`` against Arrow's own
``RecordBatch.from_pylist``; every row-evaluated expression (``Expr.row``) against the same
expression evaluated by ``pyarrow.compute`` over the whole batch; and the engine fed one
``insert(dict)`` per row against the same rows inserted as one batch — and, for an EMIT CHANGES
aggregate, the consolidated changelog against DuckDB.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from oracle import assert_same_rows, consolidate, duck
from sqlglot import exp, parse_one

from laminardb.errors import ConversionError
from laminardb.sql.expressions import Scope, compile_expr
from laminardb.sql.one_row import one_row_batch

SCHEMA = pa.schema([pa.field("ts", pa.int64(), nullable=False), ("sym", pa.string()), ("price", pa.float64()),
                    ("qty", pa.int64()), ("small", pa.int32()), ("flag", pa.bool_())])
DDL = ("CREATE SOURCE trades (ts BIGINT NOT NULL, sym VARCHAR, price DOUBLE, qty BIGINT, small INT, "
       "flag BOOLEAN, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)")
BIG = 2**63 - 1


def _rows() -> list[dict]:
    """Values where Python and Arrow could part ways: NULLs, NaN, ±0.0, ±inf, int64 limits,
    integers beyond 2^53 against DOUBLEs, non-ASCII text, the empty string."""
    syms = ["A", "b", "é", "日本", "", None, "A\u0301", "z"]
    prices = [1.5, -0.0, 0.0, None, float("nan"), float("inf"), -2.25, 9007199254740993.0, 3.0]
    qtys = [1, 0, -1, None, BIG, -BIG - 1, 3, 2**53 + 1, 42]  # beside prices: -0.0 = 0, 2^53 = 2^53 + 1
    smalls = [0, 7, None, -(2**31), 2**31 - 1, 3]
    flags = [True, False, None]
    return [{"ts": 1_000 + i, "sym": syms[i % len(syms)], "price": prices[i % len(prices)],
             "qty": qtys[i % len(qtys)], "small": smalls[i % len(smalls)], "flag": flags[i % len(flags)]}
            for i in range(72)]


WHERES = [
    "price > 0", "price >= 0 AND sym IS NOT NULL", "NOT (qty < 3)", "qty = 3 OR price < 0",
    "sym > 'b'", "sym = ''", "qty BETWEEN -1 AND 42", "price = qty", "qty > 9007199254740992.5",
    "small < qty", "small >= 7", "flag", "flag = FALSE", "NOT flag OR price IS NULL", "qty = NULL",
    "qty * 2 > 0", "-qty < 0", "price + qty > 1", "price IS NULL", "(price > 1) AND (qty > 1 OR flag)",
]
SELECTS = [
    "qty + 1 AS a, qty * 3 AS b, -qty AS c, qty - 5 AS d",  # BIGINT: wraps around at 2^63
    "price * 2 AS p2, price - qty AS pq, -price AS np, qty + 0.5 AS half",
    "ts, sym, price > 1 AS gt, sym = 'A' AS is_a, NULL AS nothing, flag AND price > 0 AS both",
    "small, small < 7 AS lt, 1 + 2 AS three, 'x' AS x, qty + NULL AS n",
]


def _canon(v):
    """NaN is NaN (equal here), -0.0 keeps its sign."""
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else v.hex())
    return v


def _table_rows(t: pa.Table) -> list[tuple]:
    return [tuple(_canon(v) for v in r.values()) for r in t.to_pylist()]


@pytest.mark.parametrize("row", _rows()[:9] + [{"ts": 5, "sym": None, "price": None, "qty": None, "small": None,
                                                 "flag": None}])
def test_one_row_batch_is_arrows(row):
    mine, arrows = one_row_batch(row, SCHEMA), pa.RecordBatch.from_pylist([row], schema=SCHEMA)
    assert mine is not None
    mine.validate(full=True)
    assert mine.schema.equals(arrows.schema)
    assert _table_rows(pa.Table.from_batches([mine])) == _table_rows(pa.Table.from_batches([arrows]))


@pytest.mark.parametrize("row", [{"ts": 1, "sym": "a", "price": 1, "qty": 1, "small": 1, "flag": True},
                                 {"ts": 1, "sym": "a", "price": 1.0, "qty": 1, "small": 2**31, "flag": True},
                                 {"ts": 1, "sym": "\ud800", "price": 1.0, "qty": 1, "small": 1, "flag": True}])
def test_one_row_batch_leaves_what_it_cannot_pack_to_arrow(row):
    """An int into DOUBLE, a value out of INT's range, a lone surrogate: Arrow's converter decides."""
    assert one_row_batch(row, SCHEMA) is None


def test_insert_refuses_what_the_batch_path_refuses(db):
    db.execute(DDL)
    with pytest.raises(ConversionError) as one:
        db.insert("trades", {"ts": 1, "sym": "a", "price": 1.0, "qty": 1, "small": 2**31, "flag": True})
    with pytest.raises(ConversionError) as two:
        db.insert("trades", [{"ts": 1, "sym": "a", "price": 1.0, "qty": 1, "small": 2**31, "flag": True}] * 2)
    assert one.value.code == two.value.code


@pytest.mark.parametrize("sql", WHERES + [s.split(" AS ")[0] for s in ", ".join(SELECTS).split(", ")])
def test_row_evaluation_equals_arrow(sql):
    node = parse_one(sql) if sql != "flag" else exp.column("flag")
    expr = compile_expr(node, Scope(SCHEMA))
    batch = pa.RecordBatch.from_pylist(_rows(), schema=SCHEMA)
    whole = expr.evaluate(batch).to_pylist()
    if expr.row is None:
        pytest.skip(f"{sql}: no row form (the batch path runs)")
    got = [expr.row.fn(batch.slice(i, 1)) for i in range(batch.num_rows)]
    assert [_canon(v) for v in got] == [_canon(v) for v in whole], sql


def test_the_queries_here_take_the_row_path():
    """Otherwise the differential tests below would compare the batch path with itself."""
    scope = Scope(SCHEMA)
    for sql in WHERES[:-1]:
        assert compile_expr(parse_one(sql), scope).row is not None, sql


def _run(db, query: str, rows: list[dict], *, one_by_one: bool) -> pa.Table:
    db.execute(DDL)
    db.execute(f"CREATE STREAM q AS {query}")
    sub = db.subscribe_stream("q")
    if one_by_one:
        for r in rows:
            db.insert("trades", r)
    else:
        db.insert("trades", rows)
    return sub.to_arrow()


@pytest.mark.parametrize("query", [f"SELECT * FROM trades WHERE {w}" for w in WHERES]
                         + [f"SELECT {s} FROM trades" for s in SELECTS]
                         + [f"SELECT {s} FROM trades WHERE {w}" for s, w in zip(SELECTS, WHERES[::5], strict=True)])
def test_one_row_inserts_deliver_what_one_batch_delivers(query):
    import laminardb

    rows = _rows()
    with laminardb.open() as a, laminardb.open() as b:
        one = _run(a, query, rows, one_by_one=True)
        whole = _run(b, query, rows, one_by_one=False)  # 72 rows: the checked conversion
        with a.writer("trades") as wa, b.writer("trades") as wb:
            assert wa.current_watermark == wb.current_watermark == max(r["ts"] for r in rows) - 1000
    assert one.schema.equals(whole.schema), (one.schema, whole.schema)
    assert _table_rows(one) == _table_rows(whole)
    assert one.num_rows > 0 or query.endswith("qty = NULL")


def test_emit_changes_aggregate_one_row_at_a_time_matches_duckdb(db):
    rows = [r for r in _rows() if r["price"] is not None and not math.isnan(r["price"])
            and r["qty"] not in (BIG, -BIG - 1)]  # sums that fit: DuckDB raises where Java wraps
    got = _run(db, "SELECT sym, count(*) AS n, sum(qty) AS s FROM trades WHERE price > -1 GROUP BY sym "
               "EMIT CHANGES", rows, one_by_one=True)
    assert got.num_rows > len({r["sym"] for r in rows})  # retractions: one change per row
    want = duck("SELECT sym, count(*) AS n, sum(qty)::BIGINT AS s FROM t WHERE price > -1 GROUP BY sym",
                t=pa.Table.from_pylist(rows, schema=SCHEMA))
    assert_same_rows(consolidate(got), want)


def test_a_one_row_insert_runs_no_arrow_kernel(db, monkeypatch):
    """The row path is taken: with the Arrow evaluators made to fail, one-row inserts still
    deliver (a batch of two rows would not)."""
    import laminardb.operators.query_operator as query_operator
    from laminardb.sql.expressions import Expr

    db.execute(DDL)
    db.execute("CREATE STREAM q AS SELECT qty * 3 AS b, sym, price - 1 AS p FROM trades WHERE price > 1 AND flag")
    sub = db.subscribe_stream("q")

    def no_kernels(*args, **kwargs):
        raise AssertionError("a one-row insert went through pyarrow.compute")

    monkeypatch.setattr(query_operator, "evaluate_mask", no_kernels)
    monkeypatch.setattr(Expr, "evaluate", no_kernels)
    row = {"ts": 1, "sym": "A", "price": 2.5, "qty": 5, "small": 1, "flag": True}
    db.insert("trades", row)
    db.insert("trades", {**row, "ts": 2, "price": 0.5})
    db.insert("trades", {**row, "ts": 3, "flag": None})
    assert sub.to_arrow().to_pylist() == [{"b": 15, "sym": "A", "p": 1.5}]
    with pytest.raises(AssertionError, match="pyarrow.compute"):
        db.insert("trades", [row, row])
