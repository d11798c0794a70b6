"""Flink's ``proc_time AS PROCTIME()`` computed column in CREATE TABLE: never stored, each query
reading the table gets it as the batch's processing time (a processing-time attribute: lookup
joins AS OF it), across a durable restart too; other computed columns stay refused."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

import laminardb
from laminardb.sql.exceptions import SqlParseError, UnsupportedSqlError
from tests._services.procs import wait_until

_ORDERS = ("CREATE TABLE IF NOT EXISTS orders (id BIGINT, cid BIGINT, proc_time AS PROCTIME()) WITH ("
           "'connector' = 'datagen', 'rows-per-second' = '1000', 'fields.id.kind' = 'sequence', "
           "'fields.id.start' = '1', 'fields.id.end' = '{n}', 'fields.cid.min' = '1', 'fields.cid.max' = '4')")


def _rows(sub, got: list) -> int:
    while (b := sub.try_next()) is not None:
        got.extend(pa.Table.from_batches([b]).to_pylist())
    return len(got)


def test_the_column_is_each_batch_processing_time_and_a_lookup_attribute(tmp_path):
    db = laminardb.open(str(tmp_path / "db"))
    db.execute(_ORDERS.format(n=200))
    db.execute("CREATE SOURCE tiers (cid BIGINT, tier VARCHAR)")
    db.execute("CREATE STREAM p AS SELECT id, proc_time FROM orders WHERE id % 2 = 0")
    db.execute("CREATE STREAM j AS SELECT o.id, o.cid, t.tier FROM orders AS o LEFT JOIN tiers FOR SYSTEM_TIME "
               "AS OF o.proc_time AS t ON o.cid = t.cid")
    db.insert("tiers", [{"cid": c, "tier": f"t{c}"} for c in range(1, 4)])
    subs = db.subscribe_stream("p"), db.subscribe_stream("j")
    before = time.time()
    db.start()
    got: tuple[list, list] = ([], [])
    wait_until(lambda: _rows(subs[0], got[0]) >= 100 and _rows(subs[1], got[1]) >= 200, timeout=15,
               what="the generated rows")
    after = time.time()
    db.close()
    assert all(before - 1 <= r["proc_time"].timestamp() <= after + 1 for r in got[0])  # when each batch ran
    assert sorted(r["id"] for r in got[0]) == list(range(2, 201, 2))
    assert sorted(r["id"] for r in got[1]) == list(range(1, 201))
    assert all(r["tier"] == (f"t{r['cid']}" if r["cid"] <= 3 else None) for r in got[1])
    db = laminardb.open(str(tmp_path / "db"))  # the catalog (the Flink DDL text) recovers with the column
    db.execute(_ORDERS.format(n=200))  # IF NOT EXISTS: a no-op
    db.execute("CREATE STREAM p2 AS SELECT id, proc_time FROM orders")
    assert "proc_time" not in [f.name for f in db.engine.reactor.relation("orders").schema]  # never stored
    with pytest.warns(UserWarning, match="never started"):
        db.close()


@pytest.mark.parametrize("ddl,error,fragment", [
    ("CREATE TABLE t (x BIGINT, p AS PROCTIME(), q AS PROCTIME()) WITH ('connector' = 'datagen')",
     UnsupportedSqlError, "computed column"),
    ("CREATE TABLE t (x BIGINT, x AS PROCTIME()) WITH ('connector' = 'datagen')", SqlParseError, "declared twice"),
    ("CREATE TABLE t (x BIGINT, y AS x + 1) WITH ('connector' = 'datagen')", UnsupportedSqlError, "computed column"),
    ("CREATE SOURCE t (x BIGINT, p AS PROCTIME())", UnsupportedSqlError, "computed column"),
])
def test_other_computed_columns_are_refused(ddl, error, fragment):
    db = laminardb.open()
    with pytest.raises(error, match=fragment):
        db.execute(ddl)
    db.close()
