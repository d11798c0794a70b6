"""Python scalar UDFs: registered on a connection, vectorized over pyarrow Arrays, usable in
SELECT / WHERE / GROUP BY / aggregates, checked against DuckDB; their failures are typed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import laminardb
from laminardb.sql.exceptions import (
    UdfDefinitionError,
    UdfError,
    UdfResultError,
    UnsupportedSqlError,
)
from laminardb.sql.udf import UdfRegistry
from tests.engine.oracle import duck
from tests.sql_functions.harness import count_char, run_select


def price_band(price: pa.Array) -> pa.Array:
    return pc.if_else(pc.greater(price, 1000), "high", "low")


def _rows(n: int = 700, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array(["c", "cc", "abc", "", "xyz", "ccc c"])
    extra = [None if i % 37 == 0 else "".join(rng.choice(words, size=rng.integers(0, 5))) for i in range(n)]
    price = rng.integers(0, 2000, size=n)
    return pa.table({"id": pa.array(range(n), pa.int64()), "extra": pa.array(extra, pa.string()),
                     "price": pa.array(price, pa.int64())})


DDL = "CREATE SOURCE t (id BIGINT, extra VARCHAR, price BIGINT)"
DUCK_COUNT = "length(extra) - length(replace(extra, 'c', ''))"


def test_udf_in_select_and_where_equals_duckdb(db):
    db.register_udf("count_char", count_char, "BIGINT")
    rows = _rows()
    got = run_select(db, DDL, "SELECT id, count_char(extra, 'c') AS n FROM t WHERE count_char(extra, 'c') >= 2", rows)
    want = duck(f"SELECT id, {DUCK_COUNT} AS n FROM rows WHERE {DUCK_COUNT} >= 2 ORDER BY id", rows=rows)
    assert got.sort_by("id").to_pylist() == want.to_pylist() and got.num_rows > 0


def test_udf_as_group_key_and_aggregate_argument(db):
    db.register_udf("price_band", price_band, pa.string())
    db.register_udf("count_char", count_char, "BIGINT")
    rows = _rows()
    db.execute(DDL)
    db.execute("CREATE MATERIALIZED VIEW v AS SELECT price_band(price) AS band, count(*) AS n, "
               "sum(count_char(extra, 'c')) AS cs FROM t GROUP BY price_band(price)")
    for start in range(0, rows.num_rows, 128):
        db.insert("t", rows.slice(start, 128))
    got = db.query("SELECT band, n, cs FROM v ORDER BY band").to_arrow()
    want = duck(f"SELECT CASE WHEN price > 1000 THEN 'high' ELSE 'low' END AS band, count(*) AS n, "
                f"CAST(sum({DUCK_COUNT}) AS BIGINT) AS cs FROM rows GROUP BY band ORDER BY band", rows=rows)
    assert got.to_pylist() == want.to_pylist()
    # and in an ad-hoc query over the view
    assert db.query("SELECT price_band(n) AS b FROM v").to_arrow()["b"].to_pylist() == ["low", "low"]


def test_udf_gets_arrays_of_the_batch_length_and_literals_repeated(db):
    seen = []

    def probe(a: pa.Array, b: pa.Array) -> pa.Array:
        seen.append((type(a), type(b), len(a), len(b), b.to_pylist()[:1]))
        return a

    db.register_udf("probe", probe, "BIGINT")
    rows = _rows(50)
    run_select(db, DDL, "SELECT probe(price, 'k') AS p FROM t", rows, batch_rows=20)
    assert [s[2] for s in seen] == [20, 20, 10]
    assert all(s[0] is pa.Int64Array and s[1] is pa.StringArray and s[3] == s[2] and s[4] == ["k"] for s in seen)


def test_error_inside_the_udf_is_typed_and_names_it(db):
    def boom(x: pa.Array) -> pa.Array:
        raise ZeroDivisionError("no")

    db.register_udf("boom", boom, "BIGINT")
    db.execute(DDL)
    db.execute("CREATE STREAM bad AS SELECT boom(price) AS b FROM t")
    db.execute("CREATE STREAM good AS SELECT id FROM t")
    good = db.subscribe_stream("good")
    with pytest.raises(UdfError) as e:
        db.insert("t", _rows(10))
    assert e.value.code == "LDB-1010" and e.value.udf == "boom"
    assert "UDF 'boom' raised ZeroDivisionError: no" in str(e.value) and "BOOM(price)" in str(e.value)
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    assert good.to_arrow().num_rows == 10  # the other query still got every row


@pytest.mark.parametrize("result,fragment", [
    (lambda x: x.slice(1), "returned 9 values for 10 rows"),
    (lambda x: x.cast(pa.int32()), "returned INT values but was registered as returning BIGINT"),
    (lambda x: x.to_pylist(), "returned a list"),
    (lambda x: x.to_numpy(), "returned a ndarray"),
])
def test_wrong_result_is_a_clear_error(db, result, fragment):
    db.register_udf("f", result, "BIGINT")
    db.execute(DDL)
    db.execute("CREATE STREAM s AS SELECT f(price) AS r FROM t")
    with pytest.raises(UdfResultError) as e:
        db.insert("t", _rows(10))
    assert e.value.code == "LDB-1011" and fragment in str(e.value) and "'f'" in str(e.value)


def test_chunked_and_all_null_results_are_accepted(db):
    db.register_udf("chunks", lambda x: pa.chunked_array([x.slice(0, 3), x.slice(3)]), "BIGINT")
    db.register_udf("nothing", lambda x: pa.nulls(len(x)), "VARCHAR")
    got = run_select(db, DDL, "SELECT chunks(price) AS a, nothing(price) AS b FROM t", _rows(10))
    assert got["a"].to_pylist() == _rows(10)["price"].to_pylist()
    assert got.schema.field("b").type == pa.string() and got["b"].null_count == 10


@pytest.mark.parametrize("name,fn,rtype,fragment", [
    ("upper", price_band, "VARCHAR", "built-in SQL function"),
    ("DATE_FORMAT", price_band, "VARCHAR", "built-in SQL function"),
    ("tumble", price_band, "VARCHAR", "built-in SQL function"),
    ("sum", price_band, "VARCHAR", "built-in SQL function"),
    ("select", price_band, "VARCHAR", "built-in SQL function or keyword"),
    ("my-fn", price_band, "VARCHAR", "not a plain SQL identifier"),
    ("ok_name", 42, "VARCHAR", "is not callable"),
    ("ok_name", price_band, "MONEY", "type 'MONEY' is not supported"),
    ("ok_name", price_band, 7, "must be a SQL type name"),
])
def test_bad_registration_is_refused(db, name, fn, rtype, fragment):
    with pytest.raises(UdfDefinitionError) as e:
        db.register_udf(name, fn, rtype)
    assert e.value.code == "LDB-1012" and fragment in str(e.value)


def test_each_connection_has_its_own_udfs():
    a, b = laminardb.open(), laminardb.open()
    try:
        a.register_udf("f", lambda x: pc.multiply(x, 2), "BIGINT")
        b.register_udf("f", lambda x: pc.multiply(x, 3), "BIGINT")
        ra = run_select(a, DDL, "SELECT f(price) AS r FROM t", _rows(5))
        rb = run_select(b, DDL, "SELECT f(price) AS r FROM t", _rows(5))
        assert [x * 3 for x in ra["r"].to_pylist()] == [x * 2 for x in rb["r"].to_pylist()]
        c = laminardb.open()
        with pytest.raises(UnsupportedSqlError, match="function F is not supported"):
            run_select(c, DDL, "SELECT f(price) AS r FROM t", _rows(5))
        c.close()
    finally:
        a.close()
        b.close()


def test_a_stream_keeps_the_function_it_was_planned_with(db):
    db.register_udf("f", lambda x: pc.add(x, 1), "BIGINT")
    db.execute(DDL)
    db.execute("CREATE STREAM s1 AS SELECT f(price) AS r FROM t")
    db.register_udf("f", lambda x: pc.add(x, 100), "BIGINT")
    db.execute("CREATE STREAM s2 AS SELECT f(price) AS r FROM t")
    s1, s2 = db.subscribe_stream("s1"), db.subscribe_stream("s2")
    db.insert("t", [{"id": 1, "extra": "", "price": 5}])
    assert s1.to_arrow()["r"].to_pylist() == [6] and s2.to_arrow()["r"].to_pylist() == [105]


def test_durable_database_replans_with_udfs_given_to_open(tmp_path):
    path = tmp_path / "db"
    udfs = {"count_char": (count_char, "BIGINT")}
    db = laminardb.open(path, config={"udfs": udfs, "checkpoint_interval": "off"})
    db.execute(DDL)
    db.execute("CREATE MATERIALIZED VIEW v AS SELECT id, count_char(extra, 'c') AS n FROM t")
    db.insert("t", [{"id": 1, "extra": "cc", "price": 1}])
    db.close()
    with pytest.raises(laminardb.LaminarError) as e:  # re-planning needs the UDF
        laminardb.open(path, config={"checkpoint_interval": "off"})
    assert "COUNT_CHAR" in str(e.value) and "register_udf" in str(e.value)
    db = laminardb.open(path, config={"udfs": udfs, "checkpoint_interval": "off"})
    db.insert("t", [{"id": 2, "extra": "c", "price": 1}])
    assert sorted(db.query("SELECT id, n FROM v").to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "n": 2}, {"id": 2, "n": 1}]
    db.close()


def test_registry_ships_functions_by_reference_not_by_pickle():
    reg = UdfRegistry()
    reg.register("count_char", count_char, "BIGINT")
    reg.register("anon", lambda x: x, "BIGINT")
    desc = reg.describe()
    assert desc[0] == {"name": "count_char", "function": "tests.sql_functions.harness:count_char",
                       "return_type": "BIGINT"}
    assert desc[1]["function"] is None  # a lambda cannot be imported by name
    again = UdfRegistry.from_description(desc[:1])
    assert again.get("COUNT_CHAR").fn is count_char and again.get("count_char").return_type == pa.int64()
    with pytest.raises(UdfDefinitionError, match="cannot be imported by name"):
        UdfRegistry.from_description(desc[1:])
