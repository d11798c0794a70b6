"""What the sinks must hold after a run: every committed input row exactly once, read back
by independent readers (DuckDB for the FILE sink's Parquet parts, delta-rs for the table)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.coordinator._fake_head import SCHEMA, sink_rows


def file_rows(path: Path) -> pa.Table:
    import duckdb

    if not list(path.glob("*.parquet")):
        return SCHEMA.empty_table()
    # the glob does not descend into _staging/: committed part files only
    out = duckdb.sql(f"SELECT id, k, v, ts FROM read_parquet('{path}/*.parquet') ORDER BY id").arrow()
    return out.read_all() if isinstance(out, pa.RecordBatchReader) else out


def partitioned_rows(path: Path) -> pa.Table:
    """A partitioned FILE sink's committed rows, the partition column from the directory names."""
    import duckdb

    if not list(path.glob("k=*/*.parquet")):
        return SCHEMA.empty_table()
    out = duckdb.sql(f"SELECT id, k, v, ts FROM read_parquet('{path}/k=*/*.parquet', hive_partitioning = true) "
                     "ORDER BY id").arrow()
    return out.read_all() if isinstance(out, pa.RecordBatchReader) else out


def postgres_rows(url: str) -> pa.Table:
    """A PostgreSQL sink's table ``out_pg``, read with psycopg2."""
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, k, v, ts FROM out_pg ORDER BY id")
            rows = cur.fetchall()
    finally:
        conn.close()
    cols = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    return pa.table({"id": pa.array(cols[0], pa.int64()), "k": pa.array(cols[1], pa.string()),
                     "v": pa.array(cols[2], pa.float64()), "ts": pa.array(cols[3], pa.timestamp("us"))})


def delta_rows(path: Path) -> pa.Table:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return SCHEMA.empty_table()
    t = DeltaTable(str(path)).to_pyarrow_table()
    return t.sort_by("id")


def assert_exactly_once(got: pa.Table, sink: str, committed_upto: int) -> None:
    """``got`` holds the rows of ``sink`` for input ids [0, committed_upto), each once."""
    want = sink_rows(sink, 0, committed_upto)
    ids = got["id"].to_pylist()
    assert len(ids) == len(set(ids)), f"{sink}: {len(ids) - len(set(ids))} duplicated rows"
    assert ids == want["id"].to_pylist(), f"{sink}: {len(ids)} rows, expected {want.num_rows}"
    assert got["v"].to_pylist() == want["v"].to_pylist()
    assert got["k"].to_pylist() == want["k"].to_pylist()
    ts = got["ts"].cast(pa.int64()) if got["ts"].type.unit == "ms" else \
        got["ts"].cast(pa.timestamp("ms", got["ts"].type.tz)).cast(pa.int64())
    assert ts.to_pylist() == want["ts"].cast(pa.int64()).to_pylist()
