"""The cross-node merge of a local-global aggregate in the coordinator's epoch job
(``spark_merge``): the partials of three "actors" (each aggregated a contiguous third of the
rows, so every key is on every actor) are merged by real Spark, finished on its executors and
written as the sink's files. Oracle: DuckDB's GROUP BY over the raw rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminardb.checkpoint.native_epoch import SparkDeltaLakeSink, native_kind
from laminardb.checkpoint.spark_merge import SparkMergeError, merge_epoch
from laminardb.connectors.file_sink import TransactionalFileSink

SOURCE = ("CREATE SOURCE t (k VARCHAR, g BIGINT, v DOUBLE, i BIGINT, ts TIMESTAMP(3), "
          "WATERMARK FOR ts AS ts - INTERVAL '0' SECOND)")
QUERY = ("SELECT k, g, window_start, count(*) AS c, sum(v) AS s, avg(i) AS a, min(v) AS mn, "
         "max(i) AS mx, count(v) AS cv FROM t GROUP BY k, g, tumble(ts, INTERVAL '1' SECOND) "
         "HAVING avg(i) > 0 EMIT ON WINDOW CLOSE")
ORACLE = ("SELECT k, g, time_bucket(INTERVAL '1 second', ts) AS window_start, count(*) AS c, sum(v) AS s, "
          "avg(i) AS a, min(v) AS mn, max(i) AS mx, count(v) AS cv FROM raw "
          "GROUP BY k, g, time_bucket(INTERVAL '1 second', ts) HAVING avg(i) > 0")
ACTORS = 3


def _raw(n: int = 6000) -> pa.Table:
    """Keys with NULLs, a key whose values are all NULL (sum/min/max NULL), NULL arguments."""
    rng = np.random.default_rng(7)
    keys = np.array(["a", "b", "c", "z", None], dtype=object)[rng.integers(0, 5, n)]
    v = rng.normal(size=n)
    v_null = (rng.random(n) < 0.1) | (keys == "z")
    i = rng.integers(-50, 50, n)
    return pa.table({"k": pa.array(keys, pa.string()), "g": rng.integers(0, 3, n),
                     "v": pa.array(v, mask=v_null), "i": pa.array(i, mask=rng.random(n) < 0.1),
                     "ts": pa.array(np.sort(rng.integers(0, 4000, n)), pa.timestamp("ms"))})


def _partials(raw: pa.Table, tmp: Path) -> tuple[dict, pa.Schema]:
    """What a head stages: every actor's partials of the closed windows, one file."""
    import laminardb
    from laminardb.cluster.partial import PartialState, local_global_eligible
    from laminardb.sql.arrays import numeric_view

    with laminardb.open() as db:
        db.execute(f"{SOURCE}; CREATE STREAM q AS {QUERY}")
        reactor = db.engine.reactor
        node = reactor.nodes["q"]
        plan, relation, schema = node.plan, reactor.relation("t"), node.schema
    assert local_global_eligible(plan)
    idx = plan.aggregate.time_index
    parts = []
    for rows in np.array_split(np.arange(raw.num_rows), ACTORS):  # row ranges: keys on every actor
        state = PartialState(plan)
        for batch in raw.take(rows).to_batches(max_chunksize=500):
            state.run(batch, -(2**62), lambda b: numeric_view(b.column(idx)))
        parts.append(state.close(2**62))
    path = tmp / "epoch-000000000007.parquet"
    pq.write_table(pa.Table.from_batches(parts), path)
    merge = {"sql": node.sql, "input": relation, "stage": str(path),
             "rows": sum(p.num_rows for p in parts)}
    return merge, schema


def _sorted(table: pa.Table) -> list[tuple]:
    cols = ["k", "g", "window_start", "c", "s", "a", "mn", "mx", "cv"]
    table = table.set_column(2, "window_start", table["window_start"].cast(pa.timestamp("us")))  # Delta: UTC
    out = [tuple(r[c] for c in cols) for r in table.select(cols).to_pylist()]
    return sorted(out, key=lambda t: tuple((v is None, v if v is not None else 0) for v in t))


def _assert_same(got: pa.Table, want: pa.Table) -> None:
    g, w = _sorted(got), _sorted(want)
    assert len(g) == len(w) > 0
    for a, b in zip(g, w, strict=True):
        assert a[:5] == b[:5] or (a[:4] == b[:4] and a[4] == pytest.approx(b[4])), (a, b)
        assert a[5] == pytest.approx(b[5]) and a[6:] == b[6:], (a, b)


def _groups(raw: pa.Table) -> int:
    """Groups before HAVING: the test checks HAVING dropped some (it is exercised)."""
    import duckdb

    con = duckdb.connect()
    con.register("raw", raw)
    return con.sql("SELECT count(DISTINCT (k, g, time_bucket(INTERVAL '1 second', ts))) FROM raw").fetchall()[0][0]


def _oracle(raw: pa.Table) -> pa.Table:
    import duckdb

    con = duckdb.connect()
    con.register("raw", raw)
    return con.sql(ORACLE).to_arrow_table()


def test_file_epoch_of_partials_equals_duckdb_and_a_redrive_is_identical(spark, tmp_path) -> None:
    raw = _raw()
    merge, schema = _partials(raw, tmp_path)
    assert merge["rows"] > len(_sorted(_oracle(raw)))  # several actors' partials per group
    outputs = []
    for run in ("first", "redriven"):
        sink = TransactionalFileSink(tmp_path / run, format="parquet", schema=schema)
        kind = native_kind(sink)
        assert kind == "file"
        info, rows = merge_epoch(spark, kind, sink, merge, 7, schema)
        if run == "redriven":  # a failed try first: aborted, then the epoch written again
            sink.abort(7)
            info, rows = merge_epoch(spark, kind, sink, merge, 7, schema)
        sink.commit(7)
        files = sorted(sink.path.glob("part-*.parquet"))
        got = pa.concat_tables([pq.read_table(p) for p in files])
        assert rows == got.num_rows and got.schema.equals(schema)
        outputs.append(([p.name for p in files], [p.read_bytes() for p in files]))
        _assert_same(got, _oracle(raw))
        assert 0 < got.num_rows < _groups(raw)
    assert outputs[0] == outputs[1], "a re-driven epoch must write the same files"


def test_delta_epoch_of_partials_equals_duckdb(spark, tmp_path) -> None:
    pytest.importorskip("deltalake")
    import deltalake

    raw = _raw(3000)
    merge, schema = _partials(raw, tmp_path)
    table = str(tmp_path / "table")
    sink = SparkDeltaLakeSink(name="out", schema=schema, options={"path": table},
                              stage_dir=str(tmp_path / "stage"))
    kind = native_kind(sink)
    assert kind == "delta"
    info, rows = merge_epoch(spark, kind, sink, merge, 3, schema)
    sink.commit(3)
    got = deltalake.DeltaTable(table).to_pyarrow_table()
    assert rows == got.num_rows == info["rows"]
    _assert_same(got, _oracle(raw))


def test_a_query_the_job_cannot_plan_is_a_typed_error(spark, tmp_path) -> None:
    raw = _raw(600)
    merge, schema = _partials(raw, tmp_path)
    sink = TransactionalFileSink(tmp_path / "out", format="parquet", schema=schema)
    with pytest.raises(SparkMergeError) as err:
        merge_epoch(spark, "file", sink, {**merge, "sql": "SELECT nope FROM"}, 1, schema)
    assert err.value.code == "LDB-6040" and "spark_merge" in str(err.value)


def test_a_sink_the_executors_cannot_write_is_merged_on_the_driver(tmp_path) -> None:
    """``kind`` None (the head expected executors, the coordinator's sink says otherwise):
    the partials are merged with Arrow on the driver and go through the sink's own two phases."""
    raw = _raw(2000)
    merge, schema = _partials(raw, tmp_path)
    sink = TransactionalFileSink(tmp_path / "out", format="parquet", schema=schema)
    info, rows = merge_epoch(None, None, sink, merge, 2, schema)
    sink.commit(2)
    got = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("part-*.parquet"))])
    assert rows == got.num_rows
    _assert_same(got, _oracle(raw))
