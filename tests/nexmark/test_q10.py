"""Nexmark q10 as published: ``CREATE TABLE nexmark_q10 … PARTITIONED BY (dt, hm) WITH
('connector' = 'filesystem', …)`` + ``INSERT INTO``, written as Hive-style ``dt=…/hm=…``
directories and read back with DuckDB's hive partitioning, against DuckDB over the same bids;
exactly once through a crash of a durable database; the partitioned sink's phases."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import laminardb
from laminardb.connectors.exceptions import SinkSchemaError
from laminardb.connectors.partitioned_sink import (
    PartitionedFileSink,
    PartitionedTransactionalFileSink,
    partition_dir,
)
from laminardb.connectors.sinks import make_sink
from laminardb.nexmark import QUERIES, SOURCES_DDL, NexmarkConfig, generate, tables
from laminardb.sql import ddl
from laminardb.sql.exceptions import UnknownObjectError
from tests.engine.oracle import oracle_connection

# 50 events/s of event time: 20,000 events span 400 s, so bids fall into 7 or 8 minutes (hm=…)
SLOW = NexmarkConfig(rate=50.0)
EVENTS = 20_000
_PUBLISHED_PATH = "file:///tmp/nexmark/data/output/bid/"
_READ = {"csv": "read_csv", "json": "read_json", "parquet": "read_parquet"}
_EXT = {"csv": "csv", "json": "jsonl", "parquet": "parquet"}

# DuckDB's q10 over the generated bids: DATE_FORMAT(…, 'yyyy-MM-dd') / 'HH:mm' are strftime's
ORACLE = """SELECT auction, bidder, price, epoch_ms("dateTime") AS t, extra,
                   strftime("dateTime", '%Y-%m-%d') AS dt, strftime("dateTime", '%H:%M') AS hm
            FROM bid ORDER BY ALL"""


@pytest.fixture(scope="module")
def bid() -> pa.Table:
    return tables(EVENTS, seed=11, config=SLOW)["bid"]


def _script(out: Path, fmt: str) -> str:
    text = QUERIES["q10"].published()
    assert _PUBLISHED_PATH in text and "'format' = 'csv'" in text
    return text.replace(_PUBLISHED_PATH, f"file://{out}/").replace("'format' = 'csv'", f"'format' = '{fmt}'")


def _written(out: Path, fmt: str) -> list[tuple]:
    """The committed rows under ``out``, their dt/hm from the directory names (as Hive readers do)."""
    files = list(out.glob(f"dt=*/hm=*/*.{_EXT[fmt]}"))
    if not files:
        return []
    con = duckdb.connect()
    rel = (f"{_READ[fmt]}('{out}/*/*/*.{_EXT[fmt]}', hive_partitioning = true, hive_types_autocast = false)")
    return con.sql(f"""SELECT auction, bidder, price, epoch_ms("dateTime"::TIMESTAMP), extra, dt, hm FROM {rel}
                       ORDER BY ALL""").fetchall()


def _want(bid: pa.Table, upto: int | None = None) -> list[tuple]:
    return oracle_connection(bid=bid if upto is None else bid.slice(0, upto)).sql(ORACLE).fetchall()


def _feed(db) -> None:
    for stream, batch in generate(EVENTS, seed=11, batch_events=2_048, config=SLOW):
        if stream == "bid":
            db.insert(stream, batch)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("durable", [False, True], ids=["memory", "durable"])
def test_published_q10_writes_hive_partitions_that_duckdb_reads_back(tmp_path, bid, fmt, durable):
    out = tmp_path / "out"
    db = laminardb.open(tmp_path / "db", config={"checkpoint_interval": "off"}) if durable else laminardb.open()
    db.execute(SOURCES_DDL)
    db.execute(_script(out, fmt))
    _feed(db)
    db.finish()
    db.close()
    want = _want(bid)
    assert len(want) == bid.num_rows > 0
    assert _written(out, fmt) == want
    # one directory per (day, minute) of the bids, with Hive's escape of ':'; partition columns
    # are in the path only, as Flink writes them
    dirs = {str(p.parent.relative_to(out)) for p in out.glob(f"dt=*/hm=*/*.{_EXT[fmt]}")}
    assert dirs == {partition_dir(["dt", "hm"], [r[5], r[6]]) for r in want}
    assert 6 <= len(dirs) <= 9 and all("%3A" in d for d in dirs)
    some = next(out.glob(f"dt=*/hm=*/*.{_EXT[fmt]}"))
    cols = duckdb.sql(f"SELECT * FROM {_READ[fmt]}('{some}', hive_partitioning = false) LIMIT 0").columns
    assert cols == ["auction", "bidder", "price", "dateTime", "extra"]


def test_durable_q10_is_exactly_once_through_a_crash(tmp_path, bid):
    """Rows become visible per checkpoint; a crash after uncommitted output and a reopen that
    replays the write-ahead log leave every bid exactly once, each in its partition."""
    out = tmp_path / "out"
    cfg = {"checkpoint_interval": "off"}
    db = laminardb.open(tmp_path / "db", config=cfg)
    db.execute(SOURCES_DDL)
    db.execute(_script(out, "parquet"))
    batches = [b for s, b in generate(EVENTS, seed=11, batch_events=2_048, config=SLOW) if s == "bid"]
    half = len(batches) // 2
    for b in batches[:half]:
        db.insert("bid", b)
    assert _written(out, "parquet") == []  # staged, not visible before a checkpoint commits
    assert list((out / "_staging").rglob(".inprogress-*"))
    db.checkpoint()
    first = sum(b.num_rows for b in batches[:half])
    assert _written(out, "parquet") == _want(bid, first)
    for b in batches[half:]:
        db.insert("bid", b)
    db.checkpoint()  # commits the second half: crash afterwards, with nothing of it pending
    # ... and more rows through the WAL only: a crash leaves them in progress, never visible
    extra = tables(EVENTS + 4_000, seed=11, config=SLOW)["bid"].slice(bid.num_rows)
    db.insert("bid", extra)
    db.engine.durable._stop.set()  # abandon the connection as a crash would (no close, no checkpoint)
    db.engine._release_directory()
    db.engine.durable.wal.close()
    assert _written(out, "parquet") == _want(bid)
    db2 = laminardb.open(tmp_path / "db", config=cfg)  # its catalog has the sources and the sink
    db2.finish()
    db2.close()
    assert _written(out, "parquet") == _want(pa.concat_tables([bid, extra]))
    assert not [p for p in (out / "_staging").rglob("*") if p.is_file()]


def test_cluster_and_native_form_build_the_same_sink(tmp_path):
    """``CREATE SINK … INTO FILE (…, partitioned_by = 'dt, hm')`` is what INSERT INTO becomes
    (and what a cluster's coordinator re-plans from)."""
    db = laminardb.open()
    db.execute(SOURCES_DDL)
    db.execute(_script(tmp_path / "o", "csv"))
    sql = db.execute("SHOW ALL").to_arrow().to_pylist()
    assert [r["name"] for r in sql][-1] == "nexmark_q10_insert"
    db.close()
    schema = pa.schema([("k", pa.int64()), ("dt", pa.string()), ("hm", pa.string())])
    stmt = ddl.parse_statement(f"CREATE SINK s INTO FILE (path = '{tmp_path / 'n'}', format = 'csv', "
                               "partitioned_by = 'dt, hm') AS SELECT 1")
    assert isinstance(make_sink(stmt, schema, durable=True, stage_root=None), PartitionedTransactionalFileSink)
    memory = make_sink(stmt, schema, durable=False, stage_root=None)
    assert isinstance(memory, PartitionedFileSink)
    memory.close()


# --------------------------------------------------------------------------- the sink's phases
SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("hm", pa.string())])


def _rows(ids: list[int], dt: list[str | None], hm: list[str]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": ids, "dt": dt, "hm": hm}, schema=SCHEMA)


def _visible(out: Path) -> list[tuple]:
    if not list(out.glob("dt=*/hm=*/*.parquet")):
        return []
    return duckdb.sql(f"SELECT id, dt, hm FROM read_parquet('{out}/*/*/*.parquet', hive_partitioning = true, "
                      "hive_types_autocast = false) ORDER BY ALL").fetchall()


def test_partitions_commit_per_epoch_abort_and_recover(tmp_path):
    out = tmp_path / "o"
    s = PartitionedTransactionalFileSink(out, format="parquet", schema=SCHEMA, partition_by="dt, hm")
    s.write(_rows([1, 2, 3], ["d1", "d1", "d2"], ["a", "b", "a"]))
    info = s.pre_commit(1)
    assert sorted(info["files"]) == ["dt=d1/hm=a/part-000000000001-0-0000.parquet",
                                     "dt=d1/hm=b/part-000000000001-0-0000.parquet",
                                     "dt=d2/hm=a/part-000000000001-0-0000.parquet"]
    assert _visible(out) == [] and not (out / "dt=d1").exists()
    s.write(_rows([4], ["d1"], ["a"]))
    s.pre_commit(2)
    s.commit(1)
    assert _visible(out) == [(1, "d1", "a"), (2, "d1", "b"), (3, "d2", "a")]
    s.abort(2)
    s.commit(2)  # nothing left of epoch 2
    assert [r[0] for r in _visible(out)] == [1, 2, 3]
    assert s.rows_committed == 3 and not s._parts  # idle partitions are forgotten
    # a crash after pre_commit(3) and the manifest of 3: recovery commits it, once
    s.write(_rows([5, 6], ["d3", None], ["x/y", "a"]))
    info3 = s.pre_commit(3)
    s.write(_rows([7], ["d3"], ["z"]))  # open epoch 4, lost in the crash
    again = PartitionedTransactionalFileSink(out, format="parquet", schema=SCHEMA, partition_by=["dt", "hm"])
    again.recover(3, info3)
    again.recover(3, info3)
    assert (out / "dt=d3" / "hm=x%2Fy").is_dir() and (out / "dt=__DEFAULT_PARTITION__").is_dir()
    assert [r[0] for r in _visible(out)] == [1, 2, 3, 5, 6]
    assert not [p for p in (out / "_staging").rglob("*") if p.is_file()]


def test_bad_partition_columns_are_typed_errors(tmp_path):
    with pytest.raises(SinkSchemaError, match="not a column") as e:
        PartitionedFileSink(tmp_path, format="csv", schema=SCHEMA, partition_by="day")
    assert e.value.code.startswith("LDB-")
    with pytest.raises(SinkSchemaError, match="every column"):
        PartitionedFileSink(tmp_path, format="csv", schema=SCHEMA, partition_by="id, dt, hm")
    db = laminardb.open()
    with pytest.raises(UnknownObjectError, match="PARTITIONED BY names 'day'"):
        db.execute("CREATE TABLE t (a BIGINT, dt STRING) PARTITIONED BY (day) WITH ('connector' = 'filesystem', "
                   f"'path' = '{tmp_path}', 'format' = 'csv')")
    db.close()
