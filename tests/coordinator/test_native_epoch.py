"""The coordinator's executor path for FILE and Delta Lake sinks (``native_epoch``): real Spark
reads the staged Parquet on its executors and writes the sink's files; the driver only
renames or commits. Oracles: DuckDB and pyarrow over the staged files themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from laminardb.checkpoint import epoch_tasks
from laminardb.checkpoint.epoch_tasks import plan_chunks
from laminardb.checkpoint.native_epoch import SparkDeltaLakeSink, native_kind, write_epoch
from laminardb.connectors.file_sink import TransactionalFileSink
from tests._services.fixtures import postgres_server  # noqa: F401

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string()), ("ts", pa.timestamp("ms")),
                    ("payload", pa.string())])
_ROOT = Path(__file__).resolve().parents[2]


def _chunk(lo: int, hi: int, width: int) -> pa.Table:
    ids = np.arange(lo, hi, dtype=np.int64)
    text = pc.cast(pa.array(ids), pa.string())
    return pa.table({"id": ids, "k": pc.binary_join_element_wise("k", pc.cast(pa.array(ids % 5), pa.string()), ""),
                     "ts": pa.array(1_700_000_000_000 + ids, pa.timestamp("ms")),
                     "payload": pc.utf8_lpad(text, width, "x")}, schema=SCHEMA)


def _stage(path: Path, lo: int, hi: int, *, width: int = 8, group: int = 100) -> str:
    """A head's staged epoch file: ids [lo, hi), shuffled within the file so that file order,
    not id order, is what the output must keep; row groups of ``group`` rows."""
    with pq.ParquetWriter(path, SCHEMA) as w:
        for start in range(lo, hi, group):
            t = _chunk(start, min(start + group, hi), width)
            w.write_table(t.take(np.random.default_rng(start).permutation(t.num_rows)))
    return str(path)


def _committed(sink: TransactionalFileSink) -> pa.Table:
    """The sink's committed part files in name order (the order a reader of the directory sees)."""
    files = sorted(p for p in sink.path.glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p) for p in files]) if files else SCHEMA.empty_table()


def test_chunks_are_whole_row_groups_in_staged_order(tmp_path) -> None:
    a = _stage(tmp_path / "a.parquet", 0, 1000, group=100)
    b = _stage(tmp_path / "b.parquet", 1000, 1050, group=100)
    # no floor: 1,050 rows over 3 → 350 a chunk, in whole groups; the last runs on into file b
    assert plan_chunks([a, b], 3, min_rows=0) == [
        (0, 0, ((a, 0, 4),)), (0, 400, ((a, 4, 4),)), (0, 800, ((a, 8, 2), (b, 0, 1)))]
    # a small epoch is one chunk (one Spark task, one output file) whatever its files
    assert plan_chunks([a, b], 3) == [(0, 0, ((a, 0, 10), (b, 0, 1)))]
    assert len(plan_chunks([a], 1, max_rows=250)) == 4  # at most max_rows (whole groups)
    assert plan_chunks([a, b], 3, min_rows=1050) == plan_chunks([a, b], 3)


@pytest.mark.parametrize("min_rows", [0, None], ids=["a-task-per-chunk", "a-small-epoch-in-one-task"])
def test_file_epoch_keeps_staged_order_and_a_redrive_is_identical(spark, tmp_path, monkeypatch, min_rows) -> None:
    if min_rows is not None:
        monkeypatch.setattr(epoch_tasks, "MIN_CHUNK_ROWS", min_rows)
    staged = [_stage(tmp_path / "a.parquet", 0, 3000), _stage(tmp_path / "b.parquet", 3000, 4000)]
    want = pa.concat_tables([pq.read_table(p) for p in staged])
    outputs = []
    for run in ("first", "redriven"):
        sink = TransactionalFileSink(tmp_path / run, format="parquet", schema=SCHEMA)
        assert native_kind(sink) == "file"
        info, rows = write_epoch(spark, "file", sink, staged, 7, SCHEMA)
        # a task per chunk, each a file; 4,000 rows are one chunk unless the floor is lowered
        assert rows == want.num_rows and (len(info["files"]) >= 2 if min_rows == 0 else len(info["files"]) == 1)
        assert _committed(sink).num_rows == 0  # staged, not visible before the commit
        if run == "redriven":  # a failed try first: aborted, then the epoch written again
            sink.abort(7)
            info, rows = write_epoch(spark, "file", sink, staged, 7, SCHEMA)
        sink.commit(7)
        sink.commit(7)  # re-driven commit (recovery after the manifest): nothing twice
        sink.recover(7, info)
        got = _committed(sink)
        assert got.equals(want), "committed rows differ from the staged rows, or their order"
        outputs.append((sorted(p.name for p in sink.path.glob("part-*")), got))
    assert outputs[0][0] == outputs[1][0] and outputs[0][1].equals(outputs[1][1])


def test_every_sink_has_an_executor_path(tmp_path) -> None:
    """The kind follows the sink alone: the executors read Parquet and an older head's Arrow
    IPC stage files alike (``test_spark_job``)."""
    sink = TransactionalFileSink(tmp_path / "out", format="jsonl", schema=SCHEMA)
    assert native_kind(sink) == "file"
    from laminardb.connectors.partitioned_sink import PartitionedTransactionalFileSink

    partitioned = PartitionedTransactionalFileSink(tmp_path / "parts", format="parquet", schema=SCHEMA,
                                                   partition_by="k", default_name="none")
    assert native_kind(partitioned) == "partitioned"
    from laminardb.checkpoint.native_epoch import commits_on_executor
    from laminardb.connectors.kafka_sink import ExactlyOnceKafkaSink

    kafka = ExactlyOnceKafkaSink(name="k", schema=SCHEMA, stage_dir=tmp_path / "kstage",
                                 options={"brokers": "127.0.0.1:9", "topic": "t"})  # no broker: never used
    assert native_kind(kafka) == "stage" and commits_on_executor(kafka)
    assert not commits_on_executor(sink) and not commits_on_executor(partitioned)


def test_jsonl_file_epoch_matches_the_embedded_writer(spark, tmp_path) -> None:
    staged = [_stage(tmp_path / "a.parquet", 0, 500)]
    sink = TransactionalFileSink(tmp_path / "spark", format="jsonl", schema=SCHEMA)
    write_epoch(spark, "file", sink, staged, 1, SCHEMA)
    sink.commit(1)
    embedded = TransactionalFileSink(tmp_path / "embedded", format="jsonl", schema=SCHEMA)
    embedded.write(pq.read_table(staged[0]))
    embedded.pre_commit(1)
    embedded.commit(1)
    spark_text = b"".join(p.read_bytes() for p in sorted(sink.path.glob("part-*")))
    assert spark_text == (embedded.path / "part-000000000001-0-0000.jsonl").read_bytes()


def test_delta_epochs_carry_their_epoch_and_a_redrive_adds_nothing(spark, tmp_path) -> None:
    from deltalake import DeltaTable

    lake = tmp_path / "lake"
    opts = {"path": str(lake)}
    sink = SparkDeltaLakeSink(name="d", schema=SCHEMA, options=opts, stage_dir=tmp_path / "stage")
    epochs = {3: (0, 700), 5: (700, 1500)}
    for e, (lo, hi) in epochs.items():
        staged = [_stage(tmp_path / f"e{e}.parquet", lo, hi)]
        assert native_kind(sink) == "delta"
        info, rows = write_epoch(spark, "delta", sink, staged, e, SCHEMA)
        assert rows == hi - lo and info["rows"] == rows
        versions = DeltaTable(str(lake)).version() + 1 if DeltaTable.is_deltatable(str(lake)) else 0
        assert versions == (0 if e == 3 else 1)  # the epoch is not in the table before its commit
        sink.commit(e)
    log = sorted((lake / "_delta_log").glob("*.json"))
    txns = [next(a["txn"] for a in map(json.loads, p.read_text().splitlines()) if "txn" in a) for p in log]
    assert [(t["appId"], t["version"]) for t in txns] == [(sink.app_id, 3), (sink.app_id, 5)]
    # re-drive epoch 5: the executors write it again and the commit runs again (a crash after
    # the Delta commit, before the staged actions were dropped): no new version, no duplicate
    write_epoch(spark, "delta", sink, [str(tmp_path / "e5.parquet")], 5, SCHEMA)
    sink.commit(5)
    sink.recover(5, None)
    table = DeltaTable(str(lake))
    assert table.version() == 1 and table.transaction_version(sink.app_id) == 5
    got = table.to_pyarrow_table().sort_by("id")
    want = pa.concat_tables([pq.read_table(tmp_path / f"e{e}.parquet") for e in epochs]).sort_by("id")
    assert got["id"].equals(want["id"]) and got["payload"].equals(want["payload"])
    assert got["ts"].cast(pa.int64()).equals(pc.multiply(want["ts"].cast(pa.int64()), 1000))


def test_an_epoch_larger_than_the_spark_heap_commits_exactly(tmp_path, postgres_server) -> None:  # noqa: F811
    """3M rows of ~230 bytes (~690 MB as Arrow) through a 512 MB JVM whose driver accepts at
    most 1 MB of results, into a FILE, a partitioned FILE and a PostgreSQL sink: passes only if
    no row is collected into the driver."""
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("pyspark")
    staged = [_stage(tmp_path / "a.parquet", 0, 1_800_000, width=200, group=100_000),
              _stage(tmp_path / "b.parquet", 1_800_000, 3_000_000, width=200, group=100_000)]
    decoded = sum(pq.ParquetFile(p).metadata.row_group(i).total_byte_size
                  for p in staged for i in range(pq.ParquetFile(p).metadata.num_row_groups))
    assert decoded > 512 << 20, f"the epoch ({decoded >> 20} MB) must exceed the 512 MB heap"
    out, parts = tmp_path / "out", tmp_path / "parts"
    db = postgres_server.create_database("big")
    url = f"postgresql://postgres@{postgres_server.host}:{postgres_server.port}/{db}"
    proc = subprocess.run([sys.executable, "-m", "tests.coordinator._big_epoch", str(out), str(parts), url, *staged],
                          cwd=_ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for kind in ("file", "partitioned", "stage"):
        assert f"{kind}: rows=3000000 committed=3000000 heap=512m" in proc.stdout, proc.stdout
    source = f"read_parquet([{', '.join(repr(p) for p in staged)}])"
    committed = f"read_parquet('{out}/part-*.parquet')"
    partitioned = f"(SELECT id, k, ts, payload FROM read_parquet('{parts}/k=*/*.parquet', hive_partitioning = true))"
    for target in (committed, partitioned):
        for a, b in ((target, source), (source, target)):
            assert duckdb.sql(f"SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})").fetchall() == [(0,)]
    # the order: the committed files in name order hold the staged files' ids in file order
    got = pa.concat_tables([pq.read_table(p, columns=["id"]) for p in sorted(out.glob("part-*"))])
    want = pa.concat_tables([pq.read_table(p, columns=["id", "k"]) for p in staged])
    assert got["id"].equals(want["id"])
    for d in sorted(parts.glob("k=*")):  # each partition: its staged rows, in staged order
        ids = pa.concat_tables([pq.read_table(p, columns=["id"]) for p in sorted(d.glob("part-*"))])["id"]
        assert ids.equals(want.filter(pc.equal(want["k"], d.name[2:]))["id"]), d.name
    # PostgreSQL: every id once, none missing, the same payloads
    conn = postgres_server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*), count(DISTINCT id), min(id), max(id), sum(length(payload)) FROM big")
            pg = cur.fetchone()
    finally:
        conn.close()
    lengths = duckdb.sql(f"SELECT sum(length(payload)) FROM {source}").fetchall()[0][0]
    assert pg == (3_000_000, 3_000_000, 0, 2_999_999, lengths)
